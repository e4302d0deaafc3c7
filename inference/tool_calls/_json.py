"""Reading a call's JSON: the values of an object's members together with the exact text of each."""

from __future__ import annotations

import json

from inference.tool_calls.events import ToolCall, new_call_id

_WHITESPACE = " \t\r\n"
_DECODER = json.JSONDecoder()


class CallError(ValueError):
    """Why a call's text is not a usable call; the message is sent back to the model."""


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _value_at(text: str, i: int) -> tuple[object, int]:
    try:
        return _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as e:
        raise CallError(f"invalid JSON: {e.msg} at character {e.pos}") from None
    except RecursionError:
        raise CallError("invalid JSON: nested too deeply") from None


def object_members(text: str) -> dict[str, tuple[object, str]]:
    """The members of the JSON object that `text` holds (whitespace around it allowed): key -> (value,
    the value's own text). json.loads alone would lose the text, and `arguments` must be kept as written."""
    i = _skip_ws(text, 0)
    if i == len(text) or text[i] != "{":
        raise CallError("expected a JSON object")
    members: dict[str, tuple[object, str]] = {}
    i = _skip_ws(text, i + 1)
    if i < len(text) and text[i] == "}":
        i += 1
    else:
        while True:
            if i == len(text) or text[i] != '"':
                raise CallError(f"invalid JSON: expected a member name at character {i}")
            key, i = _value_at(text, i)
            i = _skip_ws(text, i)
            if i == len(text) or text[i] != ":":
                raise CallError(f"invalid JSON: expected ':' at character {i}")
            i = _skip_ws(text, i + 1)
            start = i
            value, i = _value_at(text, i)
            assert isinstance(key, str)
            members[key] = (value, text[start:i])
            i = _skip_ws(text, i)
            if i < len(text) and text[i] == ",":
                i = _skip_ws(text, i + 1)
                continue
            if i < len(text) and text[i] == "}":
                i += 1
                break
            raise CallError(f"invalid JSON: expected ',' or '}}' at character {i}")
    if _skip_ws(text, i) != len(text):
        raise CallError(f"unexpected text after the JSON object at character {i}")
    return members


def array_items(text: str) -> list[tuple[object, str]]:
    """The items of the JSON array that `text` holds, each with its own text."""
    i = _skip_ws(text, 0)
    if i == len(text) or text[i] != "[":
        raise CallError("expected a JSON array")
    items: list[tuple[object, str]] = []
    i = _skip_ws(text, i + 1)
    if i < len(text) and text[i] == "]":
        i += 1
    else:
        while True:
            start = i
            value, i = _value_at(text, i)
            items.append((value, text[start:i]))
            i = _skip_ws(text, i)
            if i < len(text) and text[i] == ",":
                i = _skip_ws(text, i + 1)
                continue
            if i < len(text) and text[i] == "]":
                i += 1
                break
            raise CallError(f"invalid JSON: expected ',' or ']' at character {i}")
    if _skip_ws(text, i) != len(text):
        raise CallError(f"unexpected text after the JSON array at character {i}")
    return items


def arguments_text(value: object, raw: str) -> str:
    """The arguments as JSON object text. Some models encode the object as a JSON string (as the OpenAI
    API does); that string is unwrapped when it holds an object."""
    if isinstance(value, dict):
        return raw
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            inner = None
        if isinstance(inner, dict):
            return value.strip()
    raise CallError("the arguments must be a JSON object")


def object_text(text: str) -> str:
    """`text` stripped, when it is one JSON object (a call's arguments written on their own)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        raise CallError("the arguments must be a JSON object")
    value, end = _value_at(stripped, 0)
    if end != len(stripped):
        raise CallError(f"unexpected text after the arguments at character {end}")
    assert isinstance(value, dict)
    return stripped


ARGUMENT_KEYS = ("arguments", "parameters")


def looks_like_call(members: dict[str, tuple[object, str]]) -> bool:
    return "name" in members and any(key in members for key in ARGUMENT_KEYS)


def call_from_members(members: dict[str, tuple[object, str]]) -> ToolCall:
    """A call from a {"name": ..., "arguments" | "parameters": {...}} object. No arguments at all means
    none: small models drop the member for functions that take nothing."""
    name_value = members.get("name", (None, ""))[0]
    if not isinstance(name_value, str) or not name_value.strip():
        raise CallError('the call needs a "name" string')
    arguments = "{}"
    for key in ARGUMENT_KEYS:
        if key in members:
            arguments = arguments_text(*members[key])
            break
    id_value = members.get("id", (None, ""))[0]
    call_id = id_value if isinstance(id_value, str) and id_value else new_call_id()
    return ToolCall(id=call_id, name=name_value.strip(), arguments=arguments)


def call_from_object(text: str) -> ToolCall:
    """A call from the text of a {"name": ..., "arguments": {...}} object."""
    return call_from_members(object_members(text))
