"""ToolCallParser: one model reply's text, as it streams, split into text for the user and tool calls."""

from __future__ import annotations

from inference.tool_calls._machine import Machine
from inference.tool_calls.deepseek import DeepSeekParser
from inference.tool_calls.events import Event, ToolCallFormat
from inference.tool_calls.gpt_oss import GptOssParser
from inference.tool_calls.hermes import HermesParser
from inference.tool_calls.llama3 import Llama3Parser
from inference.tool_calls.mistral import MistralParser

_PARSERS: dict[ToolCallFormat, type[Machine]] = {
    ToolCallFormat.HERMES: HermesParser,
    ToolCallFormat.LLAMA3: Llama3Parser,
    ToolCallFormat.MISTRAL: MistralParser,
    ToolCallFormat.DEEPSEEK: DeepSeekParser,
    ToolCallFormat.GPT_OSS: GptOssParser,
}


class ToolCallParser:
    """Reads one reply. Deltas may be split anywhere, even inside a marker; text is released as soon as
    it cannot be the start of a call (Llama 3's bare JSON excepted: that is held while the reply may
    still be a call). Events concatenate to the same result however the reply was split, though the
    text may come in different pieces. Reasoning (`<think>...</think>`) is text here."""

    def __init__(self, fmt: ToolCallFormat) -> None:
        self.format = fmt
        self._machine = _PARSERS[fmt]()
        self._finished = False

    def feed(self, delta: str) -> list[Event]:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        return self._machine.feed(delta)

    def finish(self) -> list[Event]:
        """The end of the reply: releases held text; a call cut off mid-way is a call if its JSON is
        whole, else a MalformedToolCall."""
        if self._finished:
            return []
        self._finished = True
        return self._machine.finish()
