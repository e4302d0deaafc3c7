"""Ollama's API (`/api/...`) for the local server: requests read into the messages and sampling the runner
takes, and the replies, their NDJSON lines, the model's description and every error in Ollama's shapes.

The local server (app.local_api.server) reads the request, checks the key (a bearer token, which the official
`ollama` client sends when given `headers={"Authorization": "Bearer KEY"}`), and runs the generation on the
path it shares with `/v1/chat/completions` (the runner queue, hang-up cancellation, the limits). Apart from
reading a model's GGUF header for its description (cached), this module does no I/O and keeps no state.

Only the model loaded in Hearth is listed and answered: the engine serves what is loaded and never switches
models for a request, so a name Ollama would look up among installed models is a 404 here unless it is the
loaded one. Text only: images, tools and thinking are refused with a 400 naming them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from app.library.installed import InstalledModel
from app.local_api.replies import MAX_STOP_STRINGS, stop_strings, whole_reply
from app.local_api.structured import ANY_OBJECT, ResponseFormatError, schema_text
from inference.gguf import ArraySummary, GGUFError, GGUFHeader, StringSummary, read_header
from inference.protocol import (
    SAMPLING_SETTINGS,
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerationStats,
    SamplingParams,
    StopReason,
    TokenDelta,
)

log = logging.getLogger("hearth.local_server")

PREFIX = "/api/"
VERSION_PATH = "/api/version"
TAGS_PATH = "/api/tags"
SHOW_PATH = "/api/show"
CHAT_PATH = "/api/chat"
GENERATE_PATH = "/api/generate"
# What GET /api/version says: the Ollama release whose API this one answers like, for clients that check
# the version before using a feature. JSON Schema in `format`, the newest feature used here, came with
# Ollama 0.5.0. It says nothing of Hearth's own version; what a model can do is in /api/show's
# `capabilities` ("completion" only: no tools, images or thinking here).
VERSION: Final = "0.5.0"
NDJSON: Final = "application/x-ndjson"
# num_predict -1 (no limit) and -2 (fill the context): the runner stops when the context is full anyway.
UNLIMITED_TOKENS: Final = 2**31 - 1
# Ollama's name for a model without a tag: clients add it to a name they were given without one.
_DEFAULT_TAG: Final = ":latest"
_ROLES: Final = ("system", "user", "assistant", "tool")
# Ollama's options that Hearth's sampling has under the same names (num_predict and stop are read apart).
_SAMPLING_OPTIONS: Final = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "seed")
# The rest of Ollama's options are ignored, as Ollama ignores options it does not know: the load-time ones
# (num_ctx, num_gpu, num_thread, ...) because the model is already loaded as Hearth loaded it, and sampling
# methods Hearth's runner does not have (mirostat, typical_p, presence_penalty, ...), as
# /v1/chat/completions ignores presence_penalty.
_DONE_REASONS: Final = {
    StopReason.END_OF_TURN: "stop",
    StopReason.STOP_STRING: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTEXT_FULL: "length",
}
# model_info leaves out what /api/show gives under its own field, as Ollama does.
_NOT_MODEL_INFO: Final = frozenset({"tokenizer.chat_template"})


class OllamaError(Exception):
    """An error response in Ollama's shape: `{"error": message}` with the status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error": self.message}


def speaks_ollama(path: str) -> bool:
    """Whether a request's path (without its query) is Ollama's API, whose clients read errors in its
    shape: every path under /api/, unknown ones included."""
    return path.startswith(PREFIX)


@dataclass(frozen=True)
class OllamaRequest:
    endpoint: Literal["chat", "generate"]
    model: str
    # Empty: the request only asks for the model to be loaded (no messages, or no prompt).
    messages: tuple[ChatMessage, ...]
    sampling: SamplingParams
    stop: tuple[str, ...]
    stream: bool
    json_schema: str | None  # `format`'s schema text (app.local_api.structured)


def _bad(where: str, expected: str) -> OllamaError:
    return OllamaError(400, f"{where} must be {expected}")


def _unsupported(what: str, instead: str = "") -> OllamaError:
    return OllamaError(400, f"{what} not supported by this server{instead}")


def _is_number(value: object) -> bool:
    # JSON true/false arrive as bool, which Python counts as a number.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve_model(name: str, loaded: str | None) -> str:
    """The loaded model's own name for `name` when it is that name with Ollama's default tag added."""
    if loaded is not None and name.endswith(_DEFAULT_TAG) and name[: -len(_DEFAULT_TAG)] == loaded:
        return loaded
    return name


def model_name(body: object) -> str:
    """A request's `model` (/api/show also takes the older `name`). Raises OllamaError (400)."""
    if not isinstance(body, dict):
        raise OllamaError(400, "the request body must be a JSON object")
    model = body.get("model", body.get("name"))
    if not isinstance(model, str) or not model:
        raise _bad("model", "the name of the loaded model (see GET /api/tags)")
    return model


def _stop(value: object) -> tuple[str, ...]:
    stops = stop_strings(value, one_string_too=True)
    if stops is None:
        raise _bad("options.stop", f"a list of up to {MAX_STOP_STRINGS} non-empty strings")
    return stops


def _options(value: object, sampling: SamplingParams) -> tuple[SamplingParams, tuple[str, ...]]:
    """`options` over Hearth's settings for the model: the sampling, and the stop strings."""
    if value is None:
        return sampling, ()
    if not isinstance(value, dict):
        raise _bad("options", "an object")
    changes: dict[str, Any] = {}
    for name in _SAMPLING_OPTIONS:
        option = value.get(name)
        if option is None:
            continue
        if name == "seed" and _is_int(option) and option < 0:
            changes["seed"] = None  # Ollama's -1: a new random seed for every reply
            continue
        setting = SAMPLING_SETTINGS[name]
        if not setting.allows(option):
            raise _bad(f"options.{name}", setting.expected)
        changes[name] = option if setting.integer else float(option)
    predict = value.get("num_predict")
    if predict is not None:
        if not _is_int(predict) or predict == 0 or predict < -2:
            raise _bad(
                "options.num_predict", "a positive integer, or -1 or -2 for as long as the context holds"
            )
        changes["max_tokens"] = UNLIMITED_TOKENS if predict < 0 else predict
    return dataclasses.replace(sampling, **changes), _stop(value.get("stop"))


def _format(value: object) -> str | None:
    """`format`: "json" for any JSON object, or a JSON Schema; the grammar holds the reply to it."""
    if value is None or value == "":
        return None
    if value == "json":
        return ANY_OBJECT
    if not isinstance(value, dict):
        raise _bad("format", '"json" or a JSON Schema object')
    try:
        return schema_text(value, "'format'")
    except ResponseFormatError as exc:
        raise OllamaError(400, str(exc)) from exc


def _common(
    body: dict[str, Any], endpoint: Literal["chat", "generate"], defaults: Callable[[str], SamplingParams]
) -> tuple[str, SamplingParams, tuple[str, ...], bool, str | None]:
    """What /api/chat and /api/generate share: the model, the sampling, the stop strings, whether to stream
    and the schema; and the refusals of what this server cannot do."""
    model = model_name(body)
    stream = body.get("stream", True)  # Ollama streams unless told not to
    if not isinstance(stream, bool):
        raise _bad("stream", "true or false")
    think = body.get("think")
    if think not in (None, False):
        raise _unsupported("think is", ": a model's reasoning is not given apart from its reply")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise _unsupported("logprobs are")
    if endpoint == "chat" and body.get("tools"):
        raise _unsupported("tools are", " on /api/chat; /v1/chat/completions takes them")
    keep_alive = body.get("keep_alive")
    if keep_alive is not None and not (_is_number(keep_alive) or isinstance(keep_alive, str)):
        raise _bad("keep_alive", 'a duration (a number of seconds, or a string such as "5m")')
    json_schema = _format(body.get("format"))
    sampling, stop = _options(body.get("options"), defaults(model))
    return model, sampling, stop, stream, json_schema


def _images(value: object, where: str = "") -> None:
    if value:
        raise _unsupported(f"{where}images are", " (text only)")


def _chat_messages(value: object) -> tuple[ChatMessage, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad("messages", "a list of messages")
    messages = []
    for index, item in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(item, dict):
            raise _bad(where, "an object with 'role' and 'content'")
        role = item.get("role")
        if role not in _ROLES:
            raise _bad(f"{where}.role", "system, user, assistant or tool")
        if role == "tool" or item.get("tool_calls"):
            raise _unsupported(f"{where}: tool calls and their results are", " on /api/chat")
        _images(item.get("images"), f"{where}: ")
        content = item.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise _bad(f"{where}.content", "a string")
        # An earlier reply's `thinking` is the model's own reasoning: the template is not given it back.
        messages.append(ChatMessage(role, content))
    return tuple(messages)


def parse_chat_request(body: object, defaults: Callable[[str], SamplingParams]) -> OllamaRequest:
    """Check an /api/chat request; `defaults(model)` gives the sampling used for what it leaves out.

    Raises OllamaError (400) naming the first field that is wrong.
    """
    if not isinstance(body, dict):
        raise OllamaError(400, "the request body must be a JSON object")
    model, sampling, stop, stream, json_schema = _common(body, "chat", defaults)
    return OllamaRequest(
        "chat", model, _chat_messages(body.get("messages")), sampling, stop, stream, json_schema
    )


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad(key, "a string")
    return value


def parse_generate_request(body: object, defaults: Callable[[str], SamplingParams]) -> OllamaRequest:
    """Check an /api/generate request: `prompt` (and `system`) in the model's chat template.

    Raises OllamaError (400) naming the first field that is wrong.
    """
    if not isinstance(body, dict):
        raise OllamaError(400, "the request body must be a JSON object")
    model, sampling, stop, stream, json_schema = _common(body, "generate", defaults)
    prompt = _text(body, "prompt")
    system = _text(body, "system")
    if body.get("raw"):
        # The runner renders every prompt with the model's chat template.
        raise _unsupported("raw prompts are", ": the prompt always goes through the model's chat template")
    if _text(body, "template"):
        raise _unsupported("template is", ": the model's own chat template is used")
    if _text(body, "suffix"):
        raise _unsupported("suffix (fill-in-the-middle) is")
    if body.get("context"):
        # Refused rather than ignored: dropping the earlier exchange would answer a different question. The
        # replies never include a `context`, so a client only sends one it had from elsewhere.
        raise _unsupported("context is", ": send the conversation to /api/chat instead")
    _images(body.get("images"))
    messages: list[ChatMessage] = []
    if prompt:
        if system:
            messages.append(ChatMessage("system", system))
        messages.append(ChatMessage("user", prompt))
    return OllamaRequest("generate", model, tuple(messages), sampling, stop, stream, json_schema)


def failure(event: Failed) -> OllamaError:
    if event.kind in (ErrorKind.CONTEXT_OVERFLOW, ErrorKind.BAD_SCHEMA):
        return OllamaError(400, event.message)
    if event.kind is ErrorKind.NOT_LOADED:
        return OllamaError(503, event.message)
    return OllamaError(500, event.message)


def _cancelled() -> OllamaError:
    return OllamaError(503, "the request was cancelled")


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC, as Ollama's `created_at` and `modified_at` are written."""
    moment = moment or datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the library stores UTC without saying so
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _nanoseconds(seconds: float) -> int:
    return max(0, round(seconds * 1e9))


class Reply:
    """One reply to /api/chat or /api/generate: its lines (or its one body) from the engine's events."""

    def __init__(self, request: OllamaRequest, started: float) -> None:
        self.request = request
        self._started = started  # time.perf_counter() when the request came: total_duration counts from it

    def _line(self, text: str, done: bool) -> dict[str, Any]:
        line: dict[str, Any] = {"model": self.request.model, "created_at": timestamp()}
        if self.request.endpoint == "chat":
            line["message"] = {"role": "assistant", "content": text}
        else:
            line["response"] = text
        line["done"] = done
        return line

    def loaded(self) -> dict[str, Any]:
        """The answer to a request with nothing to generate: Ollama's "the model is loaded"."""
        return {**self._line("", True), "done_reason": "load"}

    def _final(self, text: str, stats: GenerationStats) -> dict[str, Any]:
        # The runner times the prompt up to the first token, and the tokens after it: Ollama's two evals.
        decode_s = (stats.completion_tokens - 1) / stats.tokens_per_second if stats.tokens_per_second else 0.0
        return {
            **self._line(text, True),
            "done_reason": _DONE_REASONS[stats.stop_reason],
            "total_duration": _nanoseconds(time.perf_counter() - self._started),
            "load_duration": 0,  # the model was loaded before the request came
            "prompt_eval_count": stats.prompt_tokens or 0,
            "prompt_eval_duration": _nanoseconds(stats.time_to_first_token_s),
            "eval_count": stats.completion_tokens,
            "eval_duration": _nanoseconds(decode_s),
        }

    def whole(self, events: Iterator[TokenDelta | Finished | Failed]) -> dict[str, Any]:
        """The body of a reply not streamed. Raises OllamaError when the generation fails."""
        reply = whole_reply(events, failure, _cancelled)
        if reply is None:
            raise OllamaError(500, "the generation ended without finishing")
        return self._final(*reply)

    def lines(self, events: Iterator[TokenDelta | Finished | Failed]) -> Iterator[dict[str, Any]]:
        """A streamed reply's lines: one per piece of text, then the last with `done` and the counts; an
        error line (which the official client raises) instead of the last when the generation fails."""
        for event in events:
            if isinstance(event, TokenDelta):
                if event.text:
                    yield self._line(event.text, False)
            elif isinstance(event, Failed):
                yield failure(event).body()
                return
            elif event.stats.stop_reason is StopReason.CANCELLED:
                log.info("a streamed request was cancelled after %d tokens", event.stats.completion_tokens)
                yield _cancelled().body()
                return
            else:
                yield self._final("", event.stats)
                return


# -- the model's description (/api/tags, /api/show) --------------------------------------------------------


@dataclass(frozen=True)
class _Header:
    header: GGUFHeader
    parameters: int  # over every part of a split model


@functools.lru_cache(maxsize=8)
def _read(files: tuple[Path, ...], stamps: tuple[tuple[int, int], ...]) -> _Header | None:
    # Keyed on the files' sizes and times as well, so that a file replaced in place is read again.
    del stamps
    try:
        headers = [read_header(path) for path in files]
    except (OSError, GGUFError) as exc:
        log.info("could not read the loaded model's header for the Ollama API: %s", exc)
        return None
    parameters = sum(math.prod(tensor.shape) for header in headers for tensor in header.tensors)
    return _Header(headers[0], parameters)


def _header(model: InstalledModel) -> _Header | None:
    """The model's header (its first part's) and parameter count; None when its files cannot be read.
    Blocking the first time for a file (a few tens of milliseconds for a small model's header)."""
    try:
        stats = [path.stat() for path in model.files]
    except OSError:
        return None
    stamps = tuple((stat.st_size, stat.st_mtime_ns) for stat in stats)
    return _read(model.files, stamps)


def parameter_size(count: int) -> str:
    """Ollama's way of writing a parameter count: "8.0B", "134.52M"."""
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f}B"
    if count >= 1_000_000:
        return f"{count / 1e6:.2f}M"
    return f"{count / 1e3:.2f}K" if count >= 1_000 else str(count)


def _details(model: InstalledModel, header: _Header | None) -> dict[str, Any]:
    family = model.architecture or (header.header.architecture if header is not None else None) or ""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family] if family else None,
        "parameter_size": parameter_size(header.parameters) if header is not None else "",
        "quantization_level": model.quantization or "",
    }


def tags_entry(model: InstalledModel) -> dict[str, Any]:
    """The model as /api/tags lists it. `digest` is the GGUF file's SHA-256 (its first part's), which
    Hearth verified; Ollama's is that of its manifest, which a GGUF file here does not have."""
    return {
        "name": model.name,
        "model": model.name,
        "modified_at": timestamp(model.added_at),
        "size": model.total_size_bytes,
        "digest": model.sha256,
        "details": _details(model, _header(model)),
    }


def _metadata_value(value: object) -> object:
    # Arrays too large to keep (the vocabulary, the merges) are left empty, as Ollama leaves them without
    # `verbose`; a string too long to keep is left out.
    if isinstance(value, ArraySummary):
        return []
    if isinstance(value, StringSummary):
        return None
    if isinstance(value, list):
        return [_metadata_value(item) for item in value]
    return value


def _parameters(sampling: SamplingParams, context_length: int | None) -> list[tuple[str, str]]:
    """Hearth's settings for the model, under Ollama's names: what a request's options change."""
    lines = [] if context_length is None else [("num_ctx", str(context_length))]
    lines += [
        ("temperature", f"{sampling.temperature:g}"),
        ("top_k", str(sampling.top_k)),
        ("top_p", f"{sampling.top_p:g}"),
        ("min_p", f"{sampling.min_p:g}"),
        ("repeat_penalty", f"{sampling.repeat_penalty:g}"),
        ("num_predict", str(sampling.max_tokens)),
    ]
    if sampling.seed is not None:
        lines.append(("seed", str(sampling.seed)))
    return lines


def show(model: InstalledModel, sampling: SamplingParams, context_length: int | None) -> dict[str, Any]:
    """The model as /api/show describes it, from the library and its GGUF header. `template` is the chat
    template the file holds (Jinja, as llama.cpp reads it, not an Ollama Go template); `parameters` and the
    modelfile's PARAMETER lines are Hearth's settings for the model, and the context it is loaded with."""
    header = _header(model)
    parameters = _parameters(sampling, context_length)
    modelfile = [
        "# Modelfile generated by Hearth: the model loaded in Hearth, with its settings there.",
        f"FROM {model.name}",
        *(f"PARAMETER {name} {value}" for name, value in parameters),
    ]
    answer: dict[str, Any] = {
        "modelfile": "\n".join(modelfile) + "\n",
        "parameters": "\n".join(f"{name:<30} {value}" for name, value in parameters),
        "template": "",
        "details": _details(model, header),
        "model_info": {},
        "capabilities": ["completion"],
        "modified_at": timestamp(model.added_at),
    }
    if header is not None:
        metadata: Mapping[str, object] = header.header.metadata
        info = {k: _metadata_value(v) for k, v in metadata.items() if k not in _NOT_MODEL_INFO}
        info.setdefault("general.parameter_count", header.parameters)
        answer["model_info"] = info
        answer["template"] = header.header.chat_template or ""
        licence = metadata.get("general.license")
        if isinstance(licence, str):
            answer["license"] = licence
    return answer
