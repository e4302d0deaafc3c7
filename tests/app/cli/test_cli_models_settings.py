"""`hearth models set` and `hearth models show` through the real CLI entry point, on the starter model."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import main
from app.library.installed import STARTER_NAME


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def shown() -> dict[str, Any]:
    code, out, err = run("models", "show", STARTER_NAME, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.mark.usefixtures("starter_model")
def test_set_then_show_the_plan() -> None:
    before = shown()
    assert before["load_settings"]["kv_cache_type"] is None and before["plan"]["kv_type"] == "f16"
    code, out, err = run(
        "models",
        "set",
        STARTER_NAME,
        "kv_cache_type=q8_0",
        "flash_attention=on",
        "threads=2",
        "context_length=2048",
    )
    assert (code, err.count("hearth:")) == (0, 0), err
    assert out.startswith(
        f"{STARTER_NAME}: kv_cache_type=q8_0, flash_attention=on, threads=2, context_length=2048"
    )
    assert "Next load: 2,048-token context" in out and "KV cache q8_0, flash attention on, 2 threads" in out
    after = shown()
    assert after["model"]["name"] == STARTER_NAME and after["problems"] == []
    plan = after["plan"]
    assert (plan["n_ctx"], plan["kv_type"], plan["flash_attn"], plan["threads"]) == (2048, "q8_0", True, 2)
    assert "set for this model: kv_cache_type=q8_0" in str(plan["reason"])
    before_kv = before["plan"]["predicted_bytes"]
    after_kv = plan["predicted_bytes"]
    assert isinstance(before_kv, dict) and isinstance(after_kv, dict) and after_kv["kv"] < before_kv["kv"]

    code, out, _ = run("models", "set", STARTER_NAME, "kv_cache_type=", "--reset", "threads")
    assert code == 0
    assert shown()["load_settings"] == {
        "kv_cache_type": None,
        "flash_attention": "on",
        "gpu_layers": "auto",
        "main_gpu": None,
        "tensor_split": None,
        "threads": None,
        "mlock": False,
        "context_length": 2048,
        "prompt_lookup": False,
        "draft_model": None,
    }
    code, out, _ = run("models", "show", STARTER_NAME)
    assert code == 0 and "  kv_cache_type\tautomatic\n" in out and "  context_length\t2048\n" in out
    assert "Plan now: 2,048-token context" in out and "\nWhy: " in out
    code, out, _ = run("models", "set", STARTER_NAME, "prompt_lookup=on")
    assert code == 0 and "prompt lookup up to 12 tokens" in out
    assert shown()["plan"]["draft_tokens"] == 12
    assert run("models", "set", STARTER_NAME, "--reset", "all")[0] == 0
    assert shown()["plan"]["reason"] == before["plan"]["reason"]
    assert shown()["plan"]["draft_tokens"] == 0


@pytest.mark.usefixtures("starter_model")
def test_impossible_settings_are_refused_with_the_reason() -> None:
    code, out, err = run("models", "set", STARTER_NAME, "kv_cache_type=q4_0", "flash_attention=off")
    assert (code, out) == (3, "")
    assert "A quantized V cache (q4_0) needs flash attention: set flash_attention=on or auto." in err
    code, _, err = run("models", "set", STARTER_NAME, "gpu_layers=99")
    assert code == 3 and "gpu_layers=99 is more than the model's 30 layers" in err
    # One share more than any machine here has GPUs: the sentence says how many there are.
    code, _, err = run("models", "set", STARTER_NAME, "tensor_split=" + ",".join(["1"] * 17))
    assert code == 3 and (
        "tensor_split spreads a model over several GPUs, but" in err or "has 17 shares" in err
    )
    code, _, err = run("models", "set", STARTER_NAME, "threads")
    assert code == 3 and "'threads' is not KEY=VALUE" in err
    code, _, err = run("models", "set", STARTER_NAME, "speed=11")
    assert code == 3 and "Unknown load setting 'speed'" in err
    code, _, err = run("models", "set", "nope", "threads=2")
    assert code == 3 and "No installed model is named 'nope'" in err
    assert shown()["load_settings"]["kv_cache_type"] is None  # nothing was stored


@pytest.mark.usefixtures("starter_model")
def test_a_draft_model_is_set_by_name_and_shown_in_the_plan(variants: dict[str, Path]) -> None:
    """The starter's weights as Q8_0 share its vocabulary; the starter itself and a name the library does not
    hold are refused, saying why."""
    code, _, err = run("models", "import", str(variants["Q8_0"]), "--name", "smollm2-q8")
    assert code == 0, err
    code, out, err = run("models", "set", STARTER_NAME, "draft_model=smollm2-q8")
    assert (code, err) == (0, ""), err
    assert f"{STARTER_NAME}: draft_model=smollm2-q8" in out and "guessing up to 8 tokens" in out
    plan = shown()["plan"]
    assert plan["draft_tokens"] == 8 and str(plan["draft_model_path"]).endswith(".gguf")
    assert plan["flash_attn"] is True and plan["predicted_bytes"]["draft"] > 100 * 1024 * 1024

    code, _, err = run("models", "set", STARTER_NAME, "draft_model=" + STARTER_NAME)
    assert code == 3 and "cannot be its own draft model" in err
    code, _, err = run("models", "set", STARTER_NAME, "draft_model=nope")
    assert code == 3 and "No installed model is named 'nope'" in err
    code, _, err = run("models", "set", STARTER_NAME, "prompt_lookup=on")
    assert code == 3 and "prompt_lookup and draft_model both guess the next tokens" in err
    assert shown()["load_settings"]["draft_model"] == "smollm2-q8"  # nothing else was stored

    # Forgetting the draft leaves the setting, which the plan then says it cannot use.
    assert run("models", "remove", "smollm2-q8")[0] == 0
    plan = shown()["plan"]
    assert plan["draft_tokens"] == 0 and plan["draft_model_path"] is None
    assert "draft model smollm2-q8 not in the library, not used" in plan["reason"]
