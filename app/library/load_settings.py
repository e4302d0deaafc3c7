"""How one installed model is loaded: its KV cache type, flash attention, GPU layers and split, threads,
memory lock and context length. No Qt.

Every setting's empty value (None, "auto", False) keeps the automatic choice of inference.planner, so a model
without settings loads exactly as before. Context length: a conversation's own setting wins over the
model's, which wins over the model defaults of the chat settings and the global setting.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Final

from app.errors import HearthError
from inference.draft_model import VOCAB_SIZE_TOLERANCE
from inference.estimator import DEFAULT_UBATCH, KV_CACHE_TYPES, predict_memory, vocab_size
from inference.gguf import GGUFHeader
from inference.hardware import HardwareReport
from inference.planner import plan_load
from inference.protocol import LoadPlan

FLASH_ATTENTION_CHOICES: Final = ("auto", "on", "off")
KV_CACHE_CHOICES: Final = tuple(KV_CACHE_TYPES)
# Beyond any context a GGUF model is trained for today; the estimator's own upper bound (1 << 20).
MAX_CONTEXT_LENGTH: Final = 1 << 20
MAX_THREADS: Final = 1024
# The longest guess prompt lookup makes; the runner shortens its guesses to what its measured decode times
# make worth it (inference.runner._Drafts), so this only bounds the batch it allocates.
PROMPT_LOOKUP_TOKENS: Final = 12
# The longest guess a draft model makes (inference.draft_model): each guessed token costs a step of the
# draft, so guesses are shorter than prompt lookup's, which cost nothing to make; the draft stops earlier
# on a token it is unsure of, and the runner at the length its measured costs make worth it.
DRAFT_MODEL_TOKENS: Final = 8
MAX_MODEL_NAME: Final = 256


@dataclass(frozen=True)
class ModelLoadSettings:
    kv_cache_type: str | None = None  # a key of KV_CACHE_TYPES; None: f16, or q8_0 when that makes it fit
    flash_attention: str = "auto"  # FLASH_ATTENTION_CHOICES; auto: on with a GPU or a quantized cache
    gpu_layers: str | int = "auto"  # "auto": the global setting (the estimator, unless it names a number)
    main_gpu: int | None = None  # the whole model on this GPU (NVML's index)
    tensor_split: tuple[float, ...] | None = None  # the share of layers of each GPU, in NVML's order
    threads: int | None = None  # None: the global setting, else the physical cores
    mlock: bool = False
    context_length: int | None = None  # None: the conversation's, or the global setting
    # Prompt-lookup speculative decoding (inference.prompt_lookup): faster replies that repeat the
    # conversation, such as code given back with a change.
    prompt_lookup: bool = False
    # Draft-model speculative decoding (inference.draft_model): the name of an installed model with the
    # same vocabulary, much smaller, that guesses the next tokens for this one to check in one batch.
    draft_model: str | None = None

    @property
    def automatic(self) -> bool:
        return self == ModelLoadSettings()

    def to_json(self) -> str | None:
        """The `models.load_settings_json` text; None when every setting is automatic."""
        if self.automatic:
            return None
        return json.dumps(self.as_dict(), sort_keys=True)

    def as_dict(self) -> dict[str, object]:
        values = asdict(self)
        values["tensor_split"] = list(self.tensor_split) if self.tensor_split is not None else None
        return values

    def changed(self) -> dict[str, object]:
        """The settings that are not automatic, by name."""
        default = ModelLoadSettings().as_dict()
        return {key: value for key, value in self.as_dict().items() if value != default[key]}

    def describe(self) -> str:
        """`kv_cache_type=q8_0, flash_attention=on`, or "automatic"."""
        changed = self.changed()
        if not changed:
            return "automatic"
        return ", ".join(f"{key}={format_value(value)}" for key, value in changed.items())


SETTING_NAMES: Final = tuple(f.name for f in fields(ModelLoadSettings))


def format_value(value: object) -> str:
    """A setting's value as `hearth models set` takes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(f"{share:g}" for share in value)
    return "" if value is None else str(value)


def from_json(text: str | None) -> ModelLoadSettings:
    """The settings stored for a model. Values written by another version that this one cannot use fall
    back to automatic rather than making the model unloadable."""
    if not text:
        return ModelLoadSettings()
    data = json.loads(text)
    settings = ModelLoadSettings()
    for key in SETTING_NAMES:
        if key in data:
            try:
                settings = with_values(settings, {key: data[key]})
            except HearthError:
                continue
    return settings


def with_values(settings: ModelLoadSettings, values: Mapping[str, object]) -> ModelLoadSettings:
    """`settings` with `values` (JSON's types) set; raises HearthError for an unknown key or a value of the
    wrong kind. Whether the result makes sense for a model and a machine is load_settings_problems'."""
    changes: dict[str, object] = {}
    for key, value in values.items():
        if key not in SETTING_NAMES:
            raise HearthError(f"Unknown load setting {key!r}; the settings are {', '.join(SETTING_NAMES)}.")
        changes[key] = _checked(key, value)
    return replace(settings, **changes)  # type: ignore[arg-type]


def parse_value(key: str, text: str) -> object:
    """A value as the command line gives it (`kv_cache_type=q8_0`, `tensor_split=3,1`); empty: automatic."""
    if key not in SETTING_NAMES:
        raise HearthError(f"Unknown load setting {key!r}; the settings are {', '.join(SETTING_NAMES)}.")
    text = text.strip()
    if not text:
        return asdict(ModelLoadSettings())[key]
    if key in ("kv_cache_type", "flash_attention", "draft_model"):
        return text
    if key == "gpu_layers" and text == "auto":
        return text
    if key in ("mlock", "prompt_lookup"):
        if text.lower() in ("true", "on", "yes", "1"):
            return True
        if text.lower() in ("false", "off", "no", "0"):
            return False
        raise HearthError(f"{key} must be true or false, not {text!r}.")
    if key == "tensor_split":
        try:
            return [float(share) for share in text.split(",")]
        except ValueError:
            raise HearthError(
                f"tensor_split must be numbers separated by commas, one per GPU (e.g. 3,1), not {text!r}."
            ) from None
    try:
        return int(text)
    except ValueError:
        raise HearthError(f"{key} must be a whole number, not {text!r}.") from None


def _is_int(value: object) -> bool:
    # JSON's true and false arrive as bool, which Python counts as int.
    return isinstance(value, int) and not isinstance(value, bool)


def _checked(key: str, value: object) -> object:
    """The value in the type the dataclass holds, or HearthError saying what the setting takes."""
    if key == "kv_cache_type":
        if value is None or value in KV_CACHE_TYPES:
            return value
        raise HearthError(
            f"kv_cache_type must be one of {', '.join(KV_CACHE_CHOICES)} (or empty for automatic)."
        )
    if key == "flash_attention":
        if value in FLASH_ATTENTION_CHOICES:
            return value
        raise HearthError(f"flash_attention must be one of {', '.join(FLASH_ATTENTION_CHOICES)}.")
    if key == "gpu_layers":
        if value == "auto" or (_is_int(value) and value >= 0):  # type: ignore[operator]
            return value
        raise HearthError('gpu_layers must be "auto" or a number of layers (0: CPU only).')
    if key == "main_gpu":
        if value is None or (_is_int(value) and value >= 0):  # type: ignore[operator]
            return value
        raise HearthError("main_gpu must be a GPU's number (0 for the first one).")
    if key == "tensor_split":
        return _tensor_split(value)
    if key == "threads":
        if value is None or (_is_int(value) and 1 <= value <= MAX_THREADS):  # type: ignore[operator]
            return value
        raise HearthError(f"threads must be a number from 1 to {MAX_THREADS}.")
    if key in ("mlock", "prompt_lookup"):
        if isinstance(value, bool):
            return value
        raise HearthError(f"{key} must be true or false.")
    if key == "draft_model":
        if value is None or (isinstance(value, str) and 0 < len(value.strip()) <= MAX_MODEL_NAME):
            return value.strip() if isinstance(value, str) else None
        raise HearthError("draft_model must be the name of an installed model (or empty for none).")
    if value is None or (_is_int(value) and 1 <= value <= MAX_CONTEXT_LENGTH):  # type: ignore[operator]
        return value
    raise HearthError(f"context_length must be a number of tokens from 1 to {MAX_CONTEXT_LENGTH:,}.")


def _tensor_split(value: object) -> tuple[float, ...] | None:
    if value is None:
        return None
    if isinstance(value, list | tuple) and value:
        shares = tuple(
            float(share) for share in value if isinstance(share, int | float) and share is not True
        )
        if (
            len(shares) == len(value)
            and all(math.isfinite(share) and share >= 0 for share in shares)
            and sum(shares) > 0
        ):
            return shares
    raise HearthError("tensor_split must be one share per GPU, none negative and not all zero (e.g. 3,1).")


def load_settings_problems(
    settings: ModelLoadSettings, *, n_layers: int | None, hardware: HardwareReport
) -> tuple[str, ...]:
    """Why these settings cannot be used for a model of `n_layers` layers (None: unknown) on this machine,
    one sentence each; empty when they can."""
    problems: list[str] = []
    if settings.prompt_lookup and settings.draft_model is not None:
        problems.append(
            "prompt_lookup and draft_model both guess the next tokens, and one guesser is used at a time: "
            "set one of them."
        )
    quantized = settings.kv_cache_type not in (None, "f16")
    if quantized and settings.flash_attention == "off":
        problems.append(
            f"A quantized V cache ({settings.kv_cache_type}) needs flash attention: "
            "set flash_attention=on or auto."
        )
    layers = settings.gpu_layers
    if isinstance(layers, int) and n_layers and layers > n_layers:
        problems.append(
            f"gpu_layers={layers} is more than the model's {n_layers} layers: "
            f"use {n_layers} to put all of them on the GPU, or auto."
        )
    gpus = hardware.gpus
    found = _gpus_found(hardware)
    if settings.main_gpu is not None and settings.tensor_split is not None:
        problems.append(
            "main_gpu and tensor_split exclude each other: main_gpu puts the whole model on one GPU, "
            "tensor_split spreads it over several."
        )
    if settings.main_gpu is not None and all(g.index != settings.main_gpu for g in gpus):
        problems.append(f"main_gpu={settings.main_gpu} names no GPU: {found}.")
    if settings.tensor_split is not None:
        if len(gpus) < 2:
            problems.append(f"tensor_split spreads a model over several GPUs, but {found}.")
        elif len(settings.tensor_split) != len(gpus):
            problems.append(
                f"tensor_split has {len(settings.tensor_split)} shares, but {found}: give one share per GPU."
            )
    if (
        settings.threads is not None
        and hardware.cpu_count_logical
        and settings.threads > hardware.cpu_count_logical
    ):
        problems.append(
            f"threads={settings.threads} is more than this machine's "
            f"{hardware.cpu_count_logical} logical CPUs."
        )
    return tuple(problems)


def _gpus_found(hardware: HardwareReport) -> str:
    gpus = hardware.gpus
    if not gpus:
        # The reason is a sentence of its own (hardware.probe_hardware): after a dash, not in brackets.
        return f"no GPU was found — {hardware.gpu_reason}" if hardware.gpu_reason else "no GPU was found"
    listed = ", ".join(f"{g.index}: {g.name}" for g in gpus)
    return f"this machine has {len(gpus)} GPU{'s' if len(gpus) > 1 else ''} ({listed})"


def check_load_settings(
    settings: ModelLoadSettings, *, n_layers: int | None, hardware: HardwareReport
) -> ModelLoadSettings:
    """`settings`, or HearthError with every reason they cannot be used."""
    problems = load_settings_problems(settings, n_layers=n_layers, hardware=hardware)
    if problems:
        raise HearthError(" ".join(problems))
    return settings


def plan_model_load(
    model_path: str,
    header: GGUFHeader,
    hardware: HardwareReport,
    settings: ModelLoadSettings,
    *,
    context_length: int,
    global_gpu_layers: str | int,
    global_threads: int | None,
    gpu_offload_supported: bool,
    parallel_replies: int = 1,
    mmproj_path: str | None = None,
    projector_bytes: int = 0,
    draft: DraftFile | None = None,
) -> LoadPlan:
    """The plan a load of this model uses now: its settings win over the global ones, and each automatic
    one leaves the choice to inference.planner as before. The plan's reason says which were set.
    `draft`: the file of the model settings.draft_model names, None when the library has none by that
    name (the model then loads without it, and the reason says so)."""
    flash = {"auto": None, "on": True, "off": False}[settings.flash_attention]
    if (settings.prompt_lookup or settings.draft_model is not None) and flash is None:
        # With flash attention (and Hearth's patch, inference.decoding.rows_alone) ggml's CPU kernels
        # give a guessed batch the logits each token gets alone; without it, never: its attention multiplies
        # a batch's keys with another kernel than a single token's.
        flash = True
    draft_bytes = draft.memory_bytes(context_length) if draft is not None else 0
    if parallel_replies > 1 and flash is None:
        # The replies share one KV cache (inference.decoding): without flash attention each token's
        # attention is computed over every cell in use, other replies' and idle slots' cached
        # conversations included, and masked afterwards; ggml's flash attention skips the masked cells.
        # Measured through the local API (bench.concurrent_streams' model, CPU): without it, each of four
        # requests one after another was slower than the last, by 8-10%.
        flash = True
    plan = plan_load(
        model_path,
        header,
        hardware,
        context_length=context_length,
        gpu_layers=global_gpu_layers if settings.gpu_layers == "auto" else settings.gpu_layers,
        n_threads=settings.threads or global_threads,
        gpu_offload_supported=gpu_offload_supported,
        mmproj_path=mmproj_path,
        # The fit counts the draft model where the projector's bytes go: beside the model's weights.
        projector_bytes=projector_bytes + draft_bytes,
        kv_type=settings.kv_cache_type,
        flash_attn=flash,
        main_gpu=settings.main_gpu,
        tensor_split=settings.tensor_split,
        use_mlock=settings.mlock,
    )
    plan = replace(plan, n_parallel=parallel_replies)
    if settings.prompt_lookup:
        plan = replace(plan, draft_tokens=PROMPT_LOOKUP_TOKENS)
    if draft is not None:
        plan = replace(
            plan,
            draft_tokens=DRAFT_MODEL_TOKENS,
            draft_model_path=str(draft.path),
            # Where the model runs: a draft on the CPU beside a model on the GPU would cost more per guess
            # than the model's own step.
            draft_gpu_layers=draft.n_layers + 1 if plan.n_gpu_layers > plan.n_layers else 0,
            predicted_bytes={**plan.predicted_bytes, "draft": draft_bytes},
        )
    elif settings.draft_model is not None:
        plan = replace(
            plan, reason=f"{plan.reason}; draft model {settings.draft_model} not in the library, not used"
        )
    if settings.automatic:
        return plan
    return replace(plan, reason=f"{plan.reason}; set for this model: {settings.describe()}")


def predicted_total_bytes(plan: LoadPlan) -> int:
    """What the plan predicts the load takes in all: weights, KV cache, compute buffers and a draft model's
    share; what `hearth models show` and the load settings window report."""
    return sum(plan.predicted_bytes.get(key, 0) for key in ("weights", "kv", "compute", "draft"))


@dataclass(frozen=True)
class DraftFile:
    """A draft model's file and header, as plan_model_load counts it. No header: the file cannot be read
    now (gone, say); the runner then says why it is not used, and nothing is counted for it."""

    path: str
    header: GGUFHeader | None

    @property
    def n_layers(self) -> int:
        return (self.header.block_count or 0) if self.header is not None else 0

    def memory_bytes(self, context_length: int) -> int:
        """Its weights, KV cache and compute buffers with a context of `context_length` (one sequence: it
        guesses only for a reply that has the runner to itself)."""
        if self.header is None:
            return 0
        predicted = predict_memory(
            self.header, context=context_length, n_gpu_layers=0, flash_attn=True, n_ubatch=DEFAULT_UBATCH
        )
        return predicted.weights + predicted.kv + predicted.compute


def draft_problem(model: GGUFHeader, draft: GGUFHeader) -> str | None:
    """Why `draft` cannot guess for `model`, read from their headers (the runner checks every token's
    text at load), as the end of a sentence; or None."""
    kinds = (model.metadata.get("tokenizer.ggml.model"), draft.metadata.get("tokenizer.ggml.model"))
    if kinds[0] != kinds[1]:
        return f"its tokenizer is {kinds[1] or 'unknown'}, the model's {kinds[0] or 'unknown'}"
    sizes = (vocab_size(model), vocab_size(draft))
    if all(sizes) and abs(sizes[0] - sizes[1]) > VOCAB_SIZE_TOLERANCE:
        return f"its vocabulary has {sizes[1]:,} tokens, the model's {sizes[0]:,}"
    if (model.bos_token_id, model.eos_token_id) != (draft.bos_token_id, draft.eos_token_id):
        return "its start and end tokens differ from the model's"
    return None
