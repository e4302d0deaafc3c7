"""DeepSeek V3, R1 (and its distills) and V3.1 calls.

All calls of a reply sit in one block; each call is a header and a body split by a separator. V3 and
R1 put the call's type in the header and the name on the body's first line, the arguments fenced as
JSON; V3.1 puts the name in the header and bare JSON in the body (the block is one line, cut here)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>
    <｜tool▁calls▁end｜>

The markers use FULLWIDTH VERTICAL LINE (U+FF5C) and LOWER ONE EIGHTH BLOCK (U+2581). Documented by
DeepSeek's chat templates (deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja, deepseek-ai-DeepSeek-V3.1.jinja)
and parsed so by llama.cpp (common/chat.cpp: common_chat_parse_deepseek_r1 / _v3_1, including the
variant opening markers the R1 distills write and a missing <｜tool▁call▁begin｜>; tests/test-chat.cpp).
V3.2's "DSML" markup is a different format and is not read here.
"""

from __future__ import annotations

from inference.tool_calls._json import CallError, object_text
from inference.tool_calls._machine import BodyScanner, Machine, find_first
from inference.tool_calls.events import ToolCall, new_call_id

CALLS_BEGIN = (
    "<｜tool▁calls▁begin｜>",
    # Written by the R1 distills in place of the real token (llama.cpp accepts the same ones).
    "<｜tool_calls_begin｜>",
    "<｜tool calls begin｜>",
    "<｜tool\\_calls\\_begin｜>",
    "<｜tool▁calls｜>",
)
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_WHITESPACE = " \t\r\n"
# Longest header awaited for its <｜tool▁sep｜>: names are short, and what the model writes instead of
# one should not be held (and searched again) to the end of the reply.
_MAX_HEADER = 256


def _strip_fence(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
    if text.rstrip().endswith("```"):
        text = text.rstrip()[:-3]
    return text


def read_call(header: str, body: str) -> ToolCall:
    header = header.strip()
    # V3 / R1: the header is the call's type; V3.1: it is the name, and the body starts with the JSON.
    if header == "function" and not body.lstrip().startswith(("{", "```")):
        name, _, arguments = body.partition("\n")
    else:
        name, arguments = header, body
    name = name.strip()
    if not name:
        raise CallError("the call has no tool name")
    return ToolCall(new_call_id(), name, object_text(_strip_fence(arguments)))


class DeepSeekParser(Machine):
    def __init__(self) -> None:
        super().__init__()
        # "text"; "block": inside the calls block, between calls; "header": before <｜tool▁sep｜>;
        # "body": after it.
        self._state = "text"
        self._raw = ""
        self._header = ""
        self._body = BodyScanner()

    def step(self, final: bool) -> bool:
        match self._state:
            case "text":
                if self.text_until(CALLS_BEGIN, final) is None:
                    return False
                self._state = "block"
                return True
            case "block":
                return self._block(final)
            case "header":
                return self._read_header(final)
            case _:
                return self._read_body(final)

    def _block(self, final: bool) -> bool:
        rest = self.buf.lstrip(_WHITESPACE)
        if not rest:
            self.buf = ""
            return False
        if rest.startswith(CALLS_END):
            self.buf = rest[len(CALLS_END) :]
            self._state = "text"
        elif rest.startswith(CALL_BEGIN):
            self.buf = rest[len(CALL_BEGIN) :]
            self._raw = CALL_BEGIN
            self._state = "header"
        elif not final and (CALLS_END.startswith(rest) or CALL_BEGIN.startswith(rest)):
            return False
        else:
            self.buf = rest
            self._raw = ""
            self._state = "header"
        return True

    def _read_header(self, final: bool) -> bool:
        found = find_first(self.buf, (SEP, CALL_END, CALLS_END))
        if found is not None and found[0] > _MAX_HEADER:
            found = None
        if found is None and not final and len(self.buf) < _MAX_HEADER + len(CALLS_END):
            return False
        end, marker = found if found else (min(len(self.buf), _MAX_HEADER), "")
        marker_end = end + len(marker)
        raw = self._raw + self.buf[:marker_end]
        header, self.buf = self.buf[:end], self.buf[marker_end:]
        if marker == SEP:
            self._raw, self._header = raw, header
            self._body = BodyScanner((CALL_END, CALLS_END))
            self._state = "body"
        else:
            self.malformed(raw, f"expected {SEP} between the tool name and its arguments")
            self._state = "text" if marker in ("", CALLS_END) else "block"
        return True

    def _read_body(self, final: bool) -> bool:
        found = self._body.scan(self.buf, final)
        if found is None and not final:
            return False
        end, marker_end = found if found else (len(self.buf), len(self.buf))
        marker = self.buf[end:marker_end]
        body, header = self.buf[:end], self._header
        self.call_or_malformed(
            self._raw + self.buf[:marker_end],
            lambda: read_call(header, body),
            cut_off=CALL_END if not marker else None,
        )
        self.buf = self.buf[marker_end:]
        self._state = "text" if marker in ("", CALLS_END) else "block"
        return True
