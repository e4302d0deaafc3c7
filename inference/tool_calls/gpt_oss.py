"""gpt-oss calls, in OpenAI's harmony format.

A reply is a run of messages, each a header and a body: `<|start|>assistant` (left out of the first,
which the prompt opened), an optional recipient, a channel, an optional content type, `<|message|>`,
the body, and an end token. A call is a message addressed to `functions.NAME` (the recipient may come
before or after the channel), its body the arguments as JSON, ended by `<|call|>`::

    <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>

Documented in OpenAI's "OpenAI Harmony Response Format" guide (cookbook.openai.com, openai/harmony);
the forms accepted are llama.cpp's (common/chat.cpp, the GPT-OSS handler; tests/test-chat.cpp). Every
other message (analysis, commentary, final) passes through as text, headers and end tokens included,
for the caller's harmony handling; a call is reported without its header. A message to a built-in
tool (`to=browser.search`, `to=python`, `to=container.exec`) is reported as malformed, since only
`functions.*` are the caller's tools.
"""

from __future__ import annotations

import re

from inference.tool_calls._json import object_text
from inference.tool_calls._machine import BodyScanner, Machine, find_first
from inference.tool_calls.events import ToolCall, new_call_id

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
BODY_ENDS = ("<|call|>", "<|end|>", "<|return|>", START)
# Within one header: any of these means the text held as one was not.
_NOT_HEADER = ("<|call|>", "<|end|>", "<|return|>", START)
# The first message's header may begin with its recipient, the prompt having written `<|start|>assistant`.
_FIRST_HEADER = " to="
_MAX_HEADER = 512
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_NOT_TOOLS = frozenset({"assistant", "user", "all", "system", "developer"})


class GptOssParser(Machine):
    def __init__(self) -> None:
        super().__init__()
        # "first": the reply's start; "text"; "header": from a header's first marker to <|message|>;
        # "call": a call's body.
        self._state = "first"
        self._opening = ""  # the marker the header being read began with
        self._raw = ""
        self._recipient = ""
        self._body = BodyScanner()

    def step(self, final: bool) -> bool:
        match self._state:
            case "first":
                if _FIRST_HEADER.startswith(self.buf) and not final:
                    return False
                if self.buf.startswith(_FIRST_HEADER):
                    self._opening = ""
                    self._state = "header"
                else:
                    self._state = "text"
                return True
            case "text":
                marker = self.text_until((START, CHANNEL), final)
                if marker is None:
                    return False
                self._opening = marker
                self._state = "header"
                return True
            case "header":
                return self._header(final)
            case _:
                return self._call(final)

    def _header(self, final: bool) -> bool:
        # <|message|> is looked for within _MAX_HEADER characters only, however the text was split.
        end = self.buf.find(MESSAGE, 0, _MAX_HEADER + len(MESSAGE))
        region = self.buf[:end] if end >= 0 else self.buf[: _MAX_HEADER + len(MESSAGE)]
        broken = find_first(region, _NOT_HEADER) is not None
        if end < 0 and not broken and not final and len(self.buf) < _MAX_HEADER + len(MESSAGE):
            return False
        recipient = _RECIPIENT.search(region)
        if end < 0 or broken or recipient is None:
            return self._not_a_call()
        name = recipient[1]
        if name in _NOT_TOOLS:
            return self._not_a_call()
        self._raw = self._opening + self.buf[: end + len(MESSAGE)]
        self.buf = self.buf[end + len(MESSAGE) :]
        self._recipient = name
        self._body = BodyScanner(BODY_ENDS)
        self._state = "call"
        return True

    def _not_a_call(self) -> bool:
        # Only the opening marker is settled as text: the rest may hold the next header.
        self.text(self._opening)
        self._state = "text"
        return True

    def _call(self, final: bool) -> bool:
        found = self._body.scan(self.buf, final)
        if found is None and not final:
            return False
        end, marker_end = found if found else (len(self.buf), len(self.buf))
        if self.buf[end:marker_end] == START:
            marker_end = end  # the next message's header
        body, raw = self.buf[:end], self._raw + self.buf[:marker_end]
        self.buf = self.buf[marker_end:]
        self._state = "text"
        if not self._recipient.startswith("functions."):
            self.malformed(
                raw, f"{self._recipient!r} is a built-in tool; only functions.* tools can be called"
            )
            return True
        name = self._recipient.removeprefix("functions.")
        self.call_or_malformed(raw, lambda: ToolCall(new_call_id(), name, object_text(body)))
        return True
