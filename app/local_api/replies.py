"""What every API of the local server (OpenAI's, Anthropic's, Ollama's) checks and gathers alike; each then
says it in its own shape."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from inference.protocol import Failed, Finished, GenerationStats, StopReason, TokenDelta

log = logging.getLogger("hearth.local_server")

MAX_STOP_STRINGS = 16


def stop_strings(value: object, *, one_string_too: bool) -> tuple[str, ...] | None:
    """A request's stop strings: () when it has none, None when they are not a list of up to
    MAX_STOP_STRINGS non-empty strings (or, with `one_string_too`, one such string)."""
    if value is None:
        return ()
    stops = [value] if one_string_too and isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP_STRINGS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        return None
    return tuple(stops)


def whole_reply(
    events: Iterator[TokenDelta | Finished | Failed],
    failure: Callable[[Failed], Exception],
    cancelled: Callable[[], Exception],
) -> tuple[str, GenerationStats] | None:
    """The text of a reply not streamed and how it ended; None when the events end without a finish.
    Raises `failure(event)` for a failed generation and `cancelled()` for a cancelled one."""
    parts: list[str] = []
    for event in events:
        if isinstance(event, TokenDelta):
            parts.append(event.text)
        elif isinstance(event, Failed):
            raise failure(event)
        elif event.stats.stop_reason is StopReason.CANCELLED:
            log.info("a request was cancelled after %d tokens", event.stats.completion_tokens)
            raise cancelled()
        else:
            return "".join(parts), event.stats
    return None
