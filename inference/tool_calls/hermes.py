"""Hermes-style calls, used by Qwen 2.5, Qwen 3 and NousResearch Hermes 2 Pro / Hermes 3.

The model writes each call as one JSON object between tags, anywhere in its reply, several in a row::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Documented by the templates themselves ("For each function call, return a json object with function name
and arguments within <tool_call></tool_call> XML tags", Qwen2.5-7B-Instruct and Qwen3 chat templates;
NousResearch/Hermes-Function-Calling), and parsed the same way by llama.cpp (common/chat.cpp, the Hermes
2 Pro handler; tests/test-chat.cpp). `"parameters"` is read as a synonym of `"arguments"`, and a call
whose end tag never came (the model stopped after the JSON) still counts when its JSON is whole. A
JSON array of such objects in one tag (Apriel 1.5's template asks for that) is read as several calls.
"""

from __future__ import annotations

import functools

from inference.tool_calls._json import CallError, array_items, call_from_object
from inference.tool_calls._machine import BodyScanner, Machine

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class HermesParser(Machine):
    def __init__(self) -> None:
        super().__init__()
        self._body: BodyScanner | None = None

    def step(self, final: bool) -> bool:
        if self._body is None:
            if self.text_until((OPEN,), final) is None:
                return False
            self._body = BodyScanner((CLOSE,))
            return True
        found = self._body.scan(self.buf, final)
        if found is None and not final:
            return False
        body_end, call_end = found if found is not None else (len(self.buf), len(self.buf))
        body, raw = self.buf[:body_end], OPEN + self.buf[:call_end]
        cut_off = CLOSE if found is None else None
        if body.lstrip().startswith("["):
            self._array(body, raw, cut_off)
        else:
            self.call_or_malformed(raw, functools.partial(call_from_object, body), cut_off)
        self.buf = self.buf[call_end:]
        self._body = None
        return True

    def _array(self, body: str, raw: str, cut_off: str | None) -> None:
        try:
            items = array_items(body)
        except CallError as e:
            self.malformed(raw, f"{e} (the reply ended before {cut_off})" if cut_off else str(e))
            return
        for _value, item in items:
            self.call_or_malformed(item, functools.partial(call_from_object, item))
