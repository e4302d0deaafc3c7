"""Mistral calls: Mistral 7B v0.3, Nemo, Small 3.x, Devstral, Ministral/Magistral.

Older tokenizers (v3, Nemo "tekken" v7 and Small 3.0/3.1) write every call of a reply as one JSON
array after a control token, each call with a nine-character id::

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]

Tokenizer v11 and later (Small 3.2, Devstral, Magistral) write each call as its own marker, name and
arguments, optionally with an id (v13)::

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}
    [TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}

Documented in mistral-common (its tokenizer versions' instruct formats) and the model cards; the
templates (mistralai-Mistral-Nemo-Instruct-2407, Mistral-Small-3.2-24B-Instruct-2506) render past calls
this way, and llama.cpp parses both (common/chat.cpp; tests/test-chat.cpp). The model's id is kept.
"""

from __future__ import annotations

import re

from inference.tool_calls._json import CallError, array_items, call_from_members, object_members, object_text
from inference.tool_calls._machine import BodyScanner, Machine, find_first, held_length
from inference.tool_calls.events import ToolCall, new_call_id

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_WHITESPACE = " \t\r\n"
_NAME = re.compile(r"[\w.\-]+")
# Longest name or id awaited before the text after [TOOL_CALLS] is judged not to be one.
_MAX_NAME = 256


def _array_calls(raw: str) -> list[ToolCall | tuple[str, str]]:
    """The calls of a [TOOL_CALLS] array, or (raw item, reason) for each item that is not one."""
    results: list[ToolCall | tuple[str, str]] = []
    for _value, item in array_items(raw):
        try:
            results.append(call_from_members(object_members(item)))
        except CallError as e:
            results.append((item, str(e)))
    if not results:
        raise CallError("the [TOOL_CALLS] array is empty")
    return results


class MistralParser(Machine):
    def __init__(self) -> None:
        super().__init__()
        # "text"; "marker": after [TOOL_CALLS]; "array": in the JSON array; "name" / "id": reading a v11
        # call's name / id; "args": after [ARGS]; "object": in the arguments' JSON.
        self._state = "text"
        self._raw = ""  # the call's text so far, for MalformedToolCall
        self._name = ""
        self._id: str | None = None
        self._json = BodyScanner(json_end=True)

    def step(self, final: bool) -> bool:
        match self._state:
            case "text":
                if self.text_until((TOOL_CALLS,), final) is None:
                    return False
                self._raw, self._name, self._id = TOOL_CALLS, "", None
                self._state = "marker"
                return True
            case "marker":
                rest = self.buf.lstrip(_WHITESPACE)
                if not rest and not final:
                    return False
                self._consume(len(self.buf) - len(rest))
                if rest.startswith("["):
                    self._state = "array"
                    self._json = BodyScanner(json_end=True)
                else:
                    self._state = "name"
                return True
            case "array":
                return self._array(final)
            case "name" | "id":
                return self._label(final)
            case "args":
                rest = self.buf.lstrip(_WHITESPACE)
                if not rest and not final:
                    return False
                self._consume(len(self.buf) - len(rest))
                if rest.startswith("{"):
                    self._state = "object"
                    self._json = BodyScanner(json_end=True)
                else:
                    self._fail("the arguments after [ARGS] must be a JSON object")
                return True
            case _:
                return self._arguments(final)

    def _consume(self, n: int) -> str:
        taken, self.buf = self.buf[:n], self.buf[n:]
        self._raw += taken
        return taken

    def _fail(self, reason: str) -> None:
        self.malformed(self._raw, reason)
        self._state = "text"

    def _array(self, final: bool) -> bool:
        found = self._json.scan(self.buf, final)
        if found is None:
            if not final:
                return False
            self._consume(len(self.buf))
            self._fail("the [TOOL_CALLS] array is incomplete")
            return True
        raw = self._consume(found[0])
        try:
            results = _array_calls(raw)
        except CallError as e:
            self._fail(str(e))
            return True
        for result in results:
            if isinstance(result, ToolCall):
                self.call(result)
            else:
                self.malformed(result[0], result[1])
        self._state = "text"
        return True

    def _label(self, final: bool) -> bool:
        ends = (ARGS, CALL_ID) if self._state == "name" else (ARGS,)
        found = find_first(self.buf, ends)
        # The name (id) is what precedes its marker; a character that cannot be in one means this is
        # not a v11 call, and what follows it is text again.
        decided = found[0] if found else len(self.buf) - (0 if final else held_length(self.buf, ends))
        label = _NAME.match(self.buf, 0, decided)
        length = label.end() if label else 0
        if length < decided or length > _MAX_NAME or (found is None and final):
            self._consume(min(length, _MAX_NAME))
            what = "tool name" if self._state == "name" else "call id"
            self._fail(f"expected a {what} and {ARGS} after {TOOL_CALLS}")
            return True
        if found is None:
            return False
        label_text = self._consume(found[0])
        self._consume(len(found[1]))
        if not label_text:
            what = "tool name" if self._state == "name" else "call id"
            self._fail(f"expected a {what} before {found[1]}")
            return True
        if self._state == "name":
            self._name = label_text
        else:
            self._id = label_text
        self._state = "id" if found[1] == CALL_ID else "args"
        return True

    def _arguments(self, final: bool) -> bool:
        found = self._json.scan(self.buf, final)
        if found is None and not final:
            return False
        raw = self._consume(found[0] if found else len(self.buf))
        try:
            arguments = object_text(raw)
        except CallError as e:
            self._fail(f"{e} (the reply ended inside the arguments)" if found is None else str(e))
            return True
        self.call(ToolCall(self._id or new_call_id(), self._name, arguments))
        self._state = "text"
        return True
