"""Llama 3.1 / 3.2 / 3.3 calls (Meta's "JSON based tool calling" and built-in tools).

A custom-tool call is the whole reply, a JSON object, several possibly separated by `;`::

    {"name": "get_weather", "parameters": {"city": "Paris"}}

Documented in Meta's Llama 3.1 / 3.2 model cards and the templates' own instruction ('Respond in the
format {"name": function name, "parameters": dictionary of argument name and its value}'); llama.cpp
accepts `{"type": "function", "name": ...}` and `"arguments"` too (earlier common/chat.cpp,
common_chat_parse_llama_3_1). The JSON may follow `<|python_tag|>`, which also introduces Llama 3.1's
built-in tools, written as a Python call or, for the code interpreter, as bare code::

    <|python_tag|>brave_search.call(query="weather in Paris")
    <|python_tag|>import math; print(math.pi)

Bare JSON is only a call when the reply starts with it, so such a reply is held while it may still
become one and released as text when it does not (`{"result": 1}`, `{braces}`). Built-in calls
become calls named for the tool (`brave_search`, `wolfram_alpha`, `code_interpreter`, ...) with the
keyword arguments as a JSON object; bare code becomes a `python` call with `{"code": ...}`.
"""

from __future__ import annotations

import ast
import json
import re

from inference.tool_calls._json import CallError, call_from_members, looks_like_call, object_members
from inference.tool_calls._machine import BodyScanner, Machine
from inference.tool_calls.events import ToolCall, new_call_id

PYTHON_TAG = "<|python_tag|>"
_WHITESPACE = " \t\r\n"
# How a call's JSON can begin (whitespace allowed between tokens): llama.cpp's trigger
# `{"name": "` / `{"type": "function", "name": "`, and argument-first objects.
_CALL_OPENINGS = (
    ("{", '"name"', ":", '"'),
    ("{", '"type"', ":", '"function"', ",", '"name"', ":", '"'),
    ("{", '"parameters"', ":"),
    ("{", '"arguments"', ":"),
)
_BUILTIN_CALL = re.compile(r"\s*([A-Za-z_]\w*)\s*\.\s*call\s*\((.*)\)\s*", re.DOTALL)


def _opening(text: str, tokens: tuple[str, ...]) -> bool | None:
    i = 0
    for k, token in enumerate(tokens):
        if k:
            while i < len(text) and text[i] in _WHITESPACE:
                i += 1
        chunk = text[i : i + len(token)]
        if not token.startswith(chunk):
            return False
        if len(chunk) < len(token):
            return None
        i += len(token)
    return True


def call_opening(text: str) -> bool | None:
    """Whether `text` (no leading whitespace) begins like a call's JSON: True, False, or None while
    too little of it has arrived to tell."""
    verdicts = [_opening(text, tokens) for tokens in _CALL_OPENINGS]
    if True in verdicts:
        return True
    return None if None in verdicts else False


def builtin_call(code: str) -> ToolCall:
    """A `<|python_tag|>` call that is not JSON: `tool.call(key=value, ...)`, else code to run."""
    match = _BUILTIN_CALL.fullmatch(code)
    if match is None:
        if not code.strip():
            raise CallError("nothing follows <|python_tag|>")
        return ToolCall(new_call_id(), "python", _compact({"code": code.strip()}))
    try:
        expression = ast.parse(f"f({match[2]})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise CallError(f"the built-in tool call is not a Python call: {e}") from None
    if not isinstance(expression, ast.Call) or expression.args:
        raise CallError("a built-in tool call takes keyword arguments only")
    arguments: dict[str, object] = {}
    for keyword in expression.keywords:
        if keyword.arg is None:
            raise CallError("a built-in tool call takes keyword arguments only")
        try:
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise CallError(f"the value of {keyword.arg!r} is not a Python literal") from None
    try:
        return ToolCall(new_call_id(), match[1], _compact(arguments))
    except (TypeError, ValueError):
        raise CallError("the built-in tool call's values have no JSON form") from None


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class Llama3Parser(Machine):
    def __init__(self) -> None:
        super().__init__()
        # "start": a call may begin here (the reply's start, after `;`); "json": inside a call's JSON;
        # "after": just after a call; "text": plain text, where only <|python_tag|> begins a call;
        # "tag": after <|python_tag|>; "code": a built-in call, which runs to the end of the reply.
        self._state = "start"
        self._committed = False  # the JSON followed <|python_tag|>, so it must be a call
        self._tag = ""  # <|python_tag|> and the whitespace after it, for a committed call's raw text
        self._json = BodyScanner(json_end=True)

    def step(self, final: bool) -> bool:
        match self._state:
            case "start":
                return self._start(final)
            case "json":
                return self._in_json(final)
            case "after":
                return self._after(final)
            case "tag":
                return self._after_tag(final)
            case "code":
                if not final:
                    return False
                code, self.buf = self.buf, ""
                self.call_or_malformed(PYTHON_TAG + code, lambda: builtin_call(code))
                self._state = "text"
                return True
            case _:
                if self.text_until((PYTHON_TAG,), final) is None:
                    return False
                self._state = "tag"
                return True

    def _start(self, final: bool) -> bool:
        rest = self.buf.lstrip(_WHITESPACE)
        if not rest:
            return False
        if rest[0] == "{":
            verdict = call_opening(rest)
            if verdict is None and not final:
                return False
            if verdict:
                self.text(self.buf[: len(self.buf) - len(rest)])
                self.buf = rest
                self._begin_json(committed=False)
                return True
        elif PYTHON_TAG.startswith(rest) and not final:
            return False
        self._state = "text"
        return True

    def _begin_json(self, committed: bool) -> None:
        self._state = "json"
        self._committed = committed
        self._json = BodyScanner(json_end=True)

    def _in_json(self, final: bool) -> bool:
        prefix = self._tag if self._committed else ""
        found = self._json.scan(self.buf, final)
        if found is None:
            if not final:
                return False
            self.malformed(prefix + self.buf, "the call's JSON is incomplete")
            self.buf = ""
            self._state = "text"
            return True
        raw, self.buf = self.buf[: found[0]], self.buf[found[0] :]
        try:
            members = object_members(raw)
        except CallError as e:
            # A JSON-looking reply that is not JSON is text, unless it was written as a call.
            if self._committed or call_opening(raw):
                self.malformed(prefix + raw, str(e))
                self._state = "after"
            else:
                self.text(raw)
                self._state = "text"
            return True
        if not self._committed and not looks_like_call(members):
            self.text(raw)
            self._state = "text"
            return True
        self.call_or_malformed(prefix + raw, lambda: call_from_members(members))
        self._state = "after"
        return True

    def _after(self, final: bool) -> bool:
        rest = self.buf.lstrip(_WHITESPACE)
        if not rest:
            return False
        if rest[0] == ";":
            self.text(self.buf[: len(self.buf) - len(rest)])
            self.buf = rest[1:]
            self._state = "start"
        elif rest[0] == "{":
            self._state = "start"
        else:
            self._state = "text"
        return True

    def _after_tag(self, final: bool) -> bool:
        rest = self.buf.lstrip(_WHITESPACE)
        if not rest and not final:
            return False
        if rest.startswith("{"):
            self._tag = PYTHON_TAG + self.buf[: len(self.buf) - len(rest)]
            self.buf = rest
            self._begin_json(committed=True)
        else:
            self._state = "code"
        return True
