"""Messages exchanged between the GUI process and the runner process.

Everything here is a frozen dataclass of plain values so it pickles across the
runner pipe and can never be mutated by the GUI while the runner works on it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Final


class ErrorKind(enum.StrEnum):
    MODEL_MISSING = "model_missing"
    MODEL_INVALID = "model_invalid"
    OUT_OF_MEMORY = "out_of_memory"
    CONTEXT_OVERFLOW = "context_overflow"
    RUNNER_CRASHED = "runner_crashed"
    NOT_LOADED = "not_loaded"
    INTERNAL = "internal"
    # GenerateRequest.json_schema cannot be made a grammar (inference.grammar), or llama.cpp refused it.
    BAD_SCHEMA = "bad_schema"
    # An OpenAI-compatible server (app.remote.openai_client): not reached, key refused, rate-limited, failed,
    # silent for too long, or the connection lost mid-reply.
    SERVER_UNREACHABLE = "server_unreachable"
    SERVER_CERTIFICATE = "server_certificate"  # its TLS certificate could not be verified
    SERVER_AUTH = "server_auth"
    SERVER_BUSY = "server_busy"
    SERVER_ERROR = "server_error"
    SERVER_TIMEOUT = "server_timeout"
    STREAM_CUT = "stream_cut"


class StopReason(enum.StrEnum):
    END_OF_TURN = "end_of_turn"
    STOP_STRING = "stop_string"
    MAX_TOKENS = "max_tokens"
    CONTEXT_FULL = "context_full"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class ImageInput:
    """An image as a vision model is given it (app.images.prepare): upright RGB, PNG or JPEG bytes."""

    mime_type: str  # "image/png" | "image/jpeg"
    data: bytes


@dataclass(frozen=True)
class ToolCallRecord:
    """A call a model made: its id (the model's or Hearth's), the tool's name, the arguments' JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a chat template and OpenAI's API take it: a function with a JSON Schema for its arguments."""

    name: str
    description: str
    parameters_json: str  # the JSON Schema object's text: frozen, and pickled as it is


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str
    images: tuple[ImageInput, ...] = ()  # a user message's pictures, after its text
    tool_calls: tuple[ToolCallRecord, ...] = ()  # an assistant message's calls, after its text
    tool_call_id: str | None = None  # a tool message: the call whose result it is
    tool_name: str | None = None  # a tool message: the tool that gave it (some templates print it)


@dataclass(frozen=True)
class SamplingSetting:
    """A sampling parameter the user can set: what it may be, how the chat settings offer it, and whether
    OpenAI-compatible servers are sent it. Settings, presets, the chat settings panel, provenance and the
    remote client all read the list from SamplingParams' fields (SAMPLING_SETTINGS)."""

    expected: str  # an allowed value, as an error message describes it
    low: float
    high: float | None = None  # None: no upper limit
    low_open: bool = False  # `low` itself is not allowed
    high_open: bool = False
    integer: bool = False
    nullable: bool = False  # null (None) is allowed: SamplingParams' default then decides
    spin: tuple[float, float, float] = (0.0, 1.0, 0.01)  # the chat settings' control: least, most, step
    openai: bool = False  # OpenAI's chat completions API has it, under the same name

    def allows(self, value: object) -> bool:
        if value is None:
            return self.nullable
        # JSON's true and false arrive as bool, which Python counts as int.
        if isinstance(value, bool) or not isinstance(value, int if self.integer else int | float):
            return False
        if not math.isfinite(value):
            return False
        if value < self.low or (self.low_open and value == self.low):
            return False
        return self.high is None or value < self.high or (value == self.high and not self.high_open)


# The key of a SamplingParams field's SamplingSetting in its metadata.
_SETTING: Final = "hearth.sampling_setting"


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = field(
        default=0.7,
        metadata={_SETTING: SamplingSetting("a number ≥ 0", 0.0, spin=(0.0, 2.0, 0.05), openai=True)},
    )
    top_p: float = field(
        default=0.95,
        metadata={
            _SETTING: SamplingSetting(
                "a number in (0, 1]", 0.0, 1.0, low_open=True, spin=(0.01, 1.0, 0.01), openai=True
            )
        },
    )
    top_k: int = field(
        default=40,
        metadata={_SETTING: SamplingSetting("a non-negative integer", 0, integer=True, spin=(0, 1000, 1))},
    )
    min_p: float = field(
        default=0.05,
        metadata={_SETTING: SamplingSetting("a number in [0, 1]", 0.0, 1.0, spin=(0.0, 1.0, 0.01))},
    )
    repeat_penalty: float = field(
        default=1.1,
        metadata={_SETTING: SamplingSetting("a positive number", 0.0, low_open=True, spin=(0.5, 2.0, 0.05))},
    )
    # llama.cpp seeds are 32-bit; None: a new random seed for every reply.
    seed: int | None = field(
        default=None,
        metadata={
            _SETTING: SamplingSetting(
                "an integer from 0 to 2^32-1 or null",
                0,
                2**32,
                high_open=True,
                integer=True,
                nullable=True,
                # A spin box holds 31 bits; the chat settings show "Random" one below its least value.
                spin=(0, 2**31 - 1, 1),
                openai=True,
            )
        },
    )
    max_tokens: int = field(
        default=1024,
        metadata={
            _SETTING: SamplingSetting(
                "a positive integer", 0, low_open=True, integer=True, spin=(1, 131_072, 64), openai=True
            )
        },
    )
    # Keep generating past end-of-turn tokens: benchmarks need replies of a fixed length. Not a setting.
    ignore_eos: bool = False


# The sampling parameters a user can set, by name, in SamplingParams' order.
SAMPLING_SETTINGS: Final[Mapping[str, SamplingSetting]] = MappingProxyType(
    {f.name: f.metadata[_SETTING] for f in fields(SamplingParams) if _SETTING in f.metadata}
)


@dataclass(frozen=True)
class LoadPlan:
    """How the runner should load a model; produced by inference.planner."""

    model_path: str
    n_ctx: int
    n_gpu_layers: int
    n_layers: int
    flash_attn: bool
    n_threads: int
    n_batch: int = 512
    reason: str = ""
    kv_type: str = "f16"  # a key of inference.estimator.KV_CACHE_TYPES; quantized types need flash_attn
    # llama.cpp's default: sliding-window layers keep the whole context, so KV prefix reuse stays valid.
    swa_full: bool = True
    # Offload every layer but keep the routed-expert tensors of a mixture-of-experts model in system memory
    # (llama.cpp's --cpu-moe; inference.tensor_overrides).
    experts_on_cpu: bool = False
    # The CPU side runs ggml's AMX kernels (inference.hardware.HardwareReport.cpu_amx), as predicted_bytes
    # assumes.
    cpu_amx: bool = False
    # What the estimator predicts llama.cpp will allocate, keyed like Loaded.memory_bytes.
    predicted_bytes: dict[str, int] = field(default_factory=dict)
    # A vision model's multimodal projector (inference.vision), loaded beside the model.
    mmproj_path: str | None = None
    # A model's load settings (app.library.load_settings): the whole model on this GPU (llama.cpp's
    # LLAMA_SPLIT_MODE_NONE), or its layers spread over every GPU in these proportions; None: llama.cpp's
    # default, layers over every GPU by free memory.
    main_gpu: int | None = None
    tensor_split: tuple[float, ...] | None = None
    use_mlock: bool = False  # keep the weights in RAM (mlock), never paged out
    # Prompt-lookup speculative decoding (inference.prompt_lookup): up to this many tokens guessed per step;
    # 0: plain decoding.
    draft_tokens: int = 0
    # Draft-model speculative decoding (inference.draft_model): a small model of the same vocabulary guesses
    # the next tokens (up to draft_tokens) instead of prompt lookup, with this many of its layers on the GPU.
    draft_model_path: str | None = None
    draft_gpu_layers: int = 0
    # The most replies generated at once, each in its own sequence of one KV cache of n_ctx cells
    # (inference.decoding); more wait their turn.
    n_parallel: int = 1


@dataclass(frozen=True)
class LoadRequest:
    plan: LoadPlan


@dataclass(frozen=True)
class GenerateRequest:
    request_id: str
    messages: tuple[ChatMessage, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    extra_stop: tuple[str, ...] = ()
    # Given to the model's template (its `tools`); their calls come back as text, special tokens spelled.
    tools: tuple[ToolSpec, ...] = ()
    # A JSON Schema's text: the reply is held to JSON valid against it, token by token, by a grammar made
    # from it in the runner (inference.grammar). None: free text.
    json_schema: str | None = None


@dataclass(frozen=True)
class CancelRequest:
    """Stop the reply to GenerateRequest `request_id` at its next token (or before it starts): it ends with
    Finished, StopReason.CANCELLED. A reply that has ended already is left alone."""

    request_id: str


@dataclass(frozen=True)
class CountTokensRequest:
    """How many tokens these messages take as a prompt: rendered with the model's template and tokenized,
    nothing decoded. For the context meter and the overflow policy."""

    request_id: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()  # their descriptions take room in the prompt too


@dataclass(frozen=True)
class TokenCount:
    request_id: str
    n_tokens: int  # the prompt, including the assistant header that starts the reply
    n_ctx: int
    template_source: str  # the template that rendered it: "gguf" or "fallback:<format>"


@dataclass(frozen=True)
class Loaded:
    model_path: str
    n_ctx: int
    n_ctx_train: int
    n_gpu_layers: int
    n_layers: int
    backend: str  # "CPU" or "CUDA" (from the llama.cpp build and the plan)
    template_source: str  # "gguf" or "fallback:<format>"
    template_note: str  # shown to the user when the model's template could not be used
    load_seconds: float
    # What llama.cpp allocated ("weights", "kv", "compute", "gpu", "ram"; "gpu_used" from NVML), and what
    # the plan predicted under the same keys: inference.estimator.describe_prediction compares the two.
    memory_bytes: dict[str, int] = field(default_factory=dict)
    predicted_bytes: dict[str, int] = field(default_factory=dict)
    # How many expert tensors llama.cpp reports having placed in system memory for plan.experts_on_cpu.
    host_expert_tensors: int = 0
    # The ggml CPU variant the runner loaded ("haswell", "sapphirerapids", ...) and why
    # (inference.ggml_backends).
    cpu_kernels: str = ""
    cpu_kernels_reason: str = ""
    # The longest guess speculative decoding makes with this model here (LoadPlan.draft_tokens; 0, plain
    # decoding: none was asked for, a model whose cache cannot take a wrong guess back out, a draft model
    # that could not be used).
    draft_tokens: int = 0
    n_parallel: int = 1  # LoadPlan.n_parallel: replies generated at once
    # The draft model that guesses (LoadPlan.draft_model_path) when it loaded and shares the model's
    # vocabulary; else None, and draft_note says why it is not used, as a sentence.
    draft_model_path: str | None = None
    draft_note: str = ""


@dataclass(frozen=True)
class CheckingTemplate:
    """Sent during a load once llama.cpp has loaded the model, just before the runner first renders its chat
    template: from here the client waits only as long as for a prompt, not as long as for a load."""


@dataclass(frozen=True)
class PromptReady:
    """The prompt is rendered and tokenized: template code from the model file is done running."""

    request_id: str
    prompt_tokens: int
    # The rendered prompt's last characters, trailing whitespace left out: a template may have started the
    # reply already (R1's pre-fills "<think>\n"), which tells the app it begins inside the model's reasoning.
    prompt_end: str = ""


@dataclass(frozen=True)
class TokenDelta:
    request_id: str
    text: str
    n_tokens: int


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int | None  # None: a remote server did not say
    cached_prompt_tokens: int
    completion_tokens: int
    time_to_first_token_s: float
    tokens_per_second: float
    stop_reason: StopReason
    seed: int | None  # None: a remote server chose its own and did not say
    # Speculative decoding (LoadPlan.draft_tokens): tokens guessed, and how many of them the
    # model's own sampling confirmed.
    drafted_tokens: int = 0
    accepted_draft_tokens: int = 0
    # The stop string that ended the reply (STOP_STRING): Anthropic's API names the stop sequence it met.
    stop_string: str | None = None


@dataclass(frozen=True)
class Finished:
    request_id: str
    stats: GenerationStats


@dataclass(frozen=True)
class Failed:
    request_id: str
    kind: ErrorKind
    message: str


# The embedding runner (inference.embedding, inference.embedder): a runner process of its own, so that an
# embedding model's crash never takes the chat model down, and the other way round.


@dataclass(frozen=True)
class EmbeddingLoadRequest:
    model_path: str
    n_threads: int


@dataclass(frozen=True)
class EmbeddingLoaded:
    model_path: str
    dim: int
    # The most tokens one text is given (longer ones are cut to it), and one llama.cpp call embeds
    # (several texts together).
    n_ctx: int
    pooling: str  # from the model file: "mean", "cls" or "last"
    load_seconds: float
    cpu_kernels: str = ""


@dataclass(frozen=True)
class EmbedRequest:
    request_id: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Embeddings:
    request_id: str
    vectors: bytes  # float32, row-major (len(texts), dim), each row of length 1
    n_tokens: int  # what was embedded, after cutting
    truncated: int  # how many texts were cut to n_ctx


@dataclass(frozen=True)
class CountEmbeddingTokensRequest:
    request_id: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class EmbeddingTokenCounts:
    request_id: str
    counts: tuple[int, ...]  # each text's tokens as the model would see them, before any cut
