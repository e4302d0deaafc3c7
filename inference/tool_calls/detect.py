"""Which call format a chat template's model uses, from the template's own text.

A template takes tools when its code reads a `tools` variable: that is how the caller's tool list
reaches the prompt (the same test as llama.cpp's minja capabilities probe, made on the source rather
than by rendering). The format is then told by the markers the template writes, which are the ones
the model was trained to emit; the checks follow llama.cpp's template detection (common/chat.cpp),
most specific first. Templates whose call format is not one of ToolCallFormat (Qwen3-Coder's XML
calls, DeepSeek V3.2's DSML, Command R, FireFunction, Functionary, ...) give None, as do templates
that never read `tools` — DeepSeek's own R1 and V3.1 templates among them: they show past calls but
never list the tools, so the model cannot be told what it may call.
"""

from __future__ import annotations

import re

from inference.tool_calls.events import ToolCallFormat

# `tools` read as a variable: not an attribute (`message.tools`), not part of a longer name
# (`custom_tools`, `tools_in_user_message`), not assigned or passed as a keyword (`tools = ...`).
_READS_TOOLS = re.compile(r"(?<![\w.])tools\b(?!\s*=(?!=))")

# Call formats this package cannot read, which would otherwise pass for one it can.
_OTHER_FORMATS = (
    "<function=",  # Qwen3-Coder, Nemotron 3, Functionary v3.1: XML-like calls
    "<arg_key>",  # GLM 4.5+, Ling 3, Laguna, Spark: <tool_call>name<arg_key>...
    "<invoke name=",  # MiniMax
    "DSML",  # DeepSeek V3.2 / V4
    "<TOOLCALL>",  # Nemotron Nano v2, Llama 3.3 Nemotron
    "functools[",  # FireFunction v2
    "<|START_ACTION|>",  # Command R7B
    ">>>",  # Functionary v3.2
    "<|tool_call_start|>",  # LFM2
    "<|tool_calls_section_begin|>",  # Kimi K2
)


def _code(template: str) -> str:
    """The template's expressions and statements, string literals and comments left out."""
    parts: list[str] = []
    i = 0
    while True:
        start = template.find("{", i)
        if start < 0 or start + 1 >= len(template):
            return " ".join(parts)
        kind = template[start + 1]
        if kind == "#":
            end = template.find("#}", start + 2)
            i = len(template) if end < 0 else end + 2
            continue
        if kind not in "{%":
            i = start + 1
            continue
        close = "}}" if kind == "{" else "%}"
        j = start + 2
        code: list[str] = []
        quote = ""
        while j < len(template):
            c = template[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = ""
                    code.append('""')
            elif c in "'\"":
                quote = c
            elif template.startswith(close, j):
                break
            else:
                code.append(c)
            j += 1
        parts.append("".join(code))
        i = j + 2


def reads_tools(chat_template: str) -> bool:
    return _READS_TOOLS.search(_code(chat_template)) is not None


def tool_call_format(chat_template: str | None) -> ToolCallFormat | None:
    """The call format a template's model uses, from the template's own text; None when the template
    takes no tools (it never reads a `tools` variable) or takes them in a format not parsed here."""
    if not chat_template or not reads_tools(chat_template):
        return None
    t = chat_template
    if "<|channel|>" in t and "<|message|>" in t:
        return ToolCallFormat.GPT_OSS
    if any(marker in t for marker in _OTHER_FORMATS):
        return None
    if "[TOOL_CALLS]" in t:
        return ToolCallFormat.MISTRAL
    if "tool▁calls▁begin" in t or "tool▁call▁begin" in t:
        return ToolCallFormat.DEEPSEEK
    if "<tool_call>" in t:
        return ToolCallFormat.HERMES
    if "<|python_tag|>" in t or ("<|start_header_id|>" in t and '"parameters"' in t):
        return ToolCallFormat.LLAMA3
    return None
