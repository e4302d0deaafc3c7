"""What a ToolCallParser reports: text for the user, a tool call, or a call that could not be read."""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass


class ToolCallFormat(enum.Enum):
    """The text form in which a model family writes its tool calls (see each format's module)."""

    HERMES = "hermes"  # Qwen 2.5 / Qwen 3, Hermes 2 Pro / Hermes 3: <tool_call>{json}</tool_call>
    LLAMA3 = "llama3"  # Llama 3.1 / 3.2 / 3.3: a bare JSON reply, or <|python_tag|>
    MISTRAL = "mistral"  # Mistral Nemo / Small: [TOOL_CALLS][...] or [TOOL_CALLS]name[ARGS]{...}
    DEEPSEEK = "deepseek"  # DeepSeek V3 / R1 / V3.1: <｜tool▁calls▁begin｜>...
    GPT_OSS = "gpt_oss"  # gpt-oss (harmony): <|channel|>commentary to=functions.NAME<|message|>{...}


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for.

    `arguments` is the JSON object text as the model wrote it (a string-encoded object is unwrapped once);
    only arguments the model wrote as Python keyword arguments are re-serialised, compactly.
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class TextDelta:
    """Reply text to show the user; a reply's deltas concatenate to its text, calls excluded."""

    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    call: ToolCall


@dataclass(frozen=True)
class MalformedToolCall:
    """The model started a call that could not be read; `raw_text` is what it wrote, markers included,
    so that it can be quoted back to the model with `reason`."""

    raw_text: str
    reason: str


Event = TextDelta | ToolCallEvent | MalformedToolCall


def new_call_id() -> str:
    """An id in the form OpenAI-style clients expect, for models that do not number their calls."""
    return "call_" + secrets.token_hex(12)
