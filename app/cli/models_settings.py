"""`hearth models set NAME KEY=VALUE…` and `hearth models show NAME`: a model's load settings, and the plan
a load would use with them now."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from app.cli.arguments import Subcommands
from app.cli.errors import EXIT_OK
from app.cli.output import print_json
from app.core import Core
from app.errors import HearthError
from app.library.installed import InstalledModel
from app.library.load_settings import (
    FLASH_ATTENTION_CHOICES,
    KV_CACHE_CHOICES,
    SETTING_NAMES,
    ModelLoadSettings,
    format_value,
    load_settings_problems,
    parse_value,
    predicted_total_bytes,
    with_values,
)
from inference.hardware import HardwareReport, probe_hardware
from inference.protocol import LoadPlan

SET_DESCRIPTION = f"""\
Settings (KEY= or --reset KEY puts one back to automatic):
  kv_cache_type    {", ".join(KV_CACHE_CHOICES)} (automatic: f16, or q8_0 when that makes the model fit);
                   a quantized cache needs flash attention
  flash_attention  {", ".join(FLASH_ATTENTION_CHOICES)} (auto: on with a GPU or a quantized cache)
  gpu_layers       auto (the global setting) or a number of layers, 0 for the CPU only
  main_gpu         the GPU that holds the whole model (0 for the first)
  tensor_split     each GPU's share of the layers, e.g. 3,1
  threads          CPU threads (automatic: the global setting, else the physical cores)
  mlock            true keeps the weights in RAM, never paged out
  context_length   tokens (a conversation's own setting still wins)
  prompt_lookup    true guesses the next tokens from the conversation (speculative decoding): faster
                   replies that repeat it, where a batch costs little more than one token; turns flash
                   attention on when it is auto
  draft_model      an installed model of the same vocabulary, much smaller (e.g. a 0.5B beside a 7B of
                   its family), that guesses the next tokens for this one to check in one batch
                   (speculative decoding; not with prompt_lookup); the reply stays the model's own
The model is loaded with them at its next turn.
"""


def add_parsers(models_sub: Subcommands, common: argparse.ArgumentParser) -> None:
    set_parser = models_sub.add_parser(
        "set",
        parents=[common],
        help="change how an installed model is loaded (KV cache, flash attention, GPU layers, …)",
        description=SET_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    set_parser.add_argument("name", metavar="NAME")
    set_parser.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    set_parser.add_argument(
        "--reset",
        action="append",
        default=[],
        metavar="KEY",
        help="back to automatic (repeatable; all: every one)",
    )
    show = models_sub.add_parser(
        "show", parents=[common], help="an installed model, its load settings and the plan it would load with"
    )
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true")


def run_set(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    model = core.library.get(args.name)
    if not args.assignments and not args.reset:
        raise HearthError("Nothing to set: give KEY=VALUE or --reset KEY (see `hearth models set --help`).")
    values: dict[str, object] = {}
    for key in args.reset:
        if key == "all":
            values.update(ModelLoadSettings().as_dict())
        else:
            values[key] = parse_value(key, "")
    for assignment in args.assignments:
        key, equals, text = assignment.partition("=")
        if not equals:
            raise HearthError(
                f"{assignment!r} is not KEY=VALUE; the settings are {', '.join(SETTING_NAMES)}."
            )
        values[key.strip()] = parse_value(key.strip(), text)
    settings = with_values(model.load_settings, values)
    hardware = probe_hardware()
    model = core.library.set_load_settings(model.name, settings, hardware)
    out.write(f"{model.name}: {settings.describe()}\n")
    out.write(f"Next load: {_plan_line(_plan(core, model, hardware))}\n")
    return EXIT_OK


def run_show(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    from app.cli.models import _model_json

    model = core.library.get(args.name)
    hardware = probe_hardware()
    plan = _plan(core, model, hardware)
    problems = load_settings_problems(model.load_settings, n_layers=model.n_layers, hardware=hardware)
    if args.json:
        print_json(
            {
                "model": _model_json(model, bool(model.missing_files())),
                "load_settings": model.load_settings.as_dict(),
                "problems": list(problems),
                "plan": _plan_json(plan),
            },
            out,
        )
        return EXIT_OK
    out.write(f"{model.name}\t{model.quantization or '?'}\t{model.n_layers or '?'} layers\t{model.path}\n")
    out.write("Load settings:\n")
    changed = model.load_settings.changed()
    for key, value in model.load_settings.as_dict().items():
        out.write(f"  {key}\t{format_value(value) if key in changed else 'automatic'}\n")
    for problem in problems:
        out.write(f"Problem: {problem}\n")
    out.write(f"Plan now: {_plan_line(plan)}\n")
    out.write(f"Why: {plan.reason}\n")
    return EXIT_OK


def _plan(core: Core, model: InstalledModel, hardware: HardwareReport) -> LoadPlan:
    from app.library.model_ops import installed_load_plan

    return installed_load_plan(model, model.load_settings, core.settings, hardware, library=core.library)


def _plan_json(plan: LoadPlan) -> dict[str, Any]:
    return {
        "n_ctx": plan.n_ctx,
        "n_gpu_layers": plan.n_gpu_layers,
        "n_layers": plan.n_layers,
        "flash_attn": plan.flash_attn,
        "kv_type": plan.kv_type,
        "threads": plan.n_threads,
        "main_gpu": plan.main_gpu,
        "tensor_split": list(plan.tensor_split) if plan.tensor_split is not None else None,
        "mlock": plan.use_mlock,
        "draft_tokens": plan.draft_tokens,
        "draft_model_path": plan.draft_model_path,
        "predicted_bytes": plan.predicted_bytes,
        "predicted_total_bytes": predicted_total_bytes(plan),
        "reason": plan.reason,
    }


def _plan_line(plan: LoadPlan) -> str:
    flash = "on" if plan.flash_attn else "off"
    layers = f"{min(plan.n_gpu_layers, plan.n_layers)}/{plan.n_layers} layers on the GPU"
    return (
        f"{plan.n_ctx:,}-token context, {layers}, KV cache {plan.kv_type}, flash attention {flash}, "
        f"{plan.n_threads} threads, predicted {predicted_total_bytes(plan) / (1 << 20):,.0f} MiB"
        f" (KV cache {plan.predicted_bytes.get('kv', 0) / (1 << 20):,.0f} MiB)" + _guesses(plan)
    )


def _guesses(plan: LoadPlan) -> str:
    if not plan.draft_tokens:
        return ""
    if plan.draft_model_path is not None:
        return f", draft model {Path(plan.draft_model_path).name} guessing up to {plan.draft_tokens} tokens"
    return f", prompt lookup up to {plan.draft_tokens} tokens"
