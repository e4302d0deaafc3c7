"""app.library.recommended: the shipped list of recommended models, and each entry's fit read from the real
GGUF headers on the local hub server (repos named like the curated ones)."""

from __future__ import annotations

import json
import logging
import re
from importlib.resources import files
from pathlib import Path

import pytest

from app.library.hub import HubClient, check_repo_id, quant_label
from app.library.model_ops import assess_listing
from app.library.recommended import (
    MAX_DESCRIPTION_CHARS,
    SCHEMA_VERSION,
    FitGroup,
    RecommendedFits,
    RecommendedModel,
    load_recommended,
)
from inference.estimator import Fit
from tests.helpers.hubserver import HubServer, ServedFile
from tests.helpers.model_shapes import llama3_8b_file

ROOT = Path(__file__).resolve().parents[3]
SMOL = RecommendedModel("HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF", "Q4_K_M", "Small and fast.", "apache-2.0")
LLAMA = RecommendedModel("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "Q4_K_M", "An all-rounder.", "llama3.1")
CONTEXT = 4096


def shipped() -> dict[str, object]:
    data = json.loads(files("resources").joinpath("library").joinpath("recommended.json").read_bytes())
    assert isinstance(data, dict)
    return data


def write_list(path: Path, models: list[object], *, schema: object = SCHEMA_VERSION) -> Path:
    path.write_text(json.dumps({"schema_version": schema, "models": models}), encoding="utf-8")
    return path


def good(repo: str = "Qwen/Qwen2.5-0.5B-Instruct-GGUF", **changes: object) -> dict[str, object]:
    return {
        "repo": repo,
        "quantization": "Q4_K_M",
        "description": "Tiny.",
        "license": "apache-2.0",
        **changes,
    }


@pytest.fixture
def served(hub: HubServer, variants: dict[str, Path], tmp_path: Path) -> dict[str, ServedFile]:
    """SMOL with two real quantizations of the starter model; LLAMA with an 8B-shaped header (sparse)."""
    q4 = ServedFile.from_path("SmolLM2-1.7B-Instruct-Q4_K_M.gguf", variants["Q4_K_M"])
    q8 = ServedFile.from_path("SmolLM2-1.7B-Instruct-Q8_0.gguf", variants["Q8_0"])
    hub.add_repo(SMOL.repo_id, [q8, q4])
    path = llama3_8b_file(tmp_path, "Q4_K_M")
    llama = ServedFile("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", path.stat().st_size, "0" * 64, path=path)
    hub.add_repo(LLAMA.repo_id, [llama])
    return {"smol_q4": q4, "smol_q8": q8, "llama": llama}


# -- the list shipped with Hearth ----------------------------------------------------------------


def test_the_shipped_list_loads_whole_and_every_entry_is_valid(caplog: pytest.LogCaptureFixture) -> None:
    raw = shipped()
    with caplog.at_level(logging.WARNING, logger="hearth.library"):
        entries = load_recommended()
    assert not caplog.records
    assert raw["schema_version"] == SCHEMA_VERSION
    models = raw["models"]
    assert isinstance(models, list) and len(entries) == len(models)
    assert 8 <= len(entries) <= 12
    # Sizes come from the Hub when asked for, never from the data.
    assert all(set(m) == {"repo", "quantization", "description", "license"} for m in models)
    assert len({e.repo_id for e in entries}) == len(entries)
    for entry in entries:
        assert check_repo_id(entry.repo_id) == entry.repo_id and "/" in entry.repo_id
        assert entry.repo_id.endswith("-GGUF")
        assert quant_label(f"x-{entry.quantization}.gguf") == entry.quantization
        assert entry.description.strip() and "\n" not in entry.description
        assert len(entry.description) <= MAX_DESCRIPTION_CHARS
        assert entry.license.strip()
    # From under a billion parameters to about thirty: the grouping means something on any machine.
    billions = [float(m.group(1)) for e in entries if (m := re.search(r"-(\d+(?:\.\d+)?)B\b", e.repo_id))]
    assert min(billions) <= 1 and max(billions) >= 24


def test_the_bundle_and_the_wheel_ship_the_list() -> None:
    spec = (ROOT / "packaging" / "hearth.spec").read_text(encoding="utf-8")
    assert '(str(ROOT / "resources" / "library"), "resources/library")' in spec
    assert 'resources = ["**/*"]' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_bad_entries_are_skipped_each_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_list(
        tmp_path / "list.json",
        [
            good(quantization="q4_k_m"),
            "just a name",
            {"repo": "a/b-GGUF", "quantization": "Q4_K_M", "license": "mit"},
            good("../../etc/passwd"),
            good("gpt2"),
            good("a/c-GGUF", quantization="best"),
            good("a/d-GGUF", size=4_000_000_000),
            good("a/e-GGUF", description="two\nlines"),
            good("a/f-GGUF", description="x" * (MAX_DESCRIPTION_CHARS + 1)),
            good(license=""),
            good(),
        ],
    )
    with caplog.at_level(logging.WARNING, logger="hearth.library"):
        entries = load_recommended(path)
    assert entries == (RecommendedModel("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "Q4_K_M", "Tiny.", "apache-2.0"),)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 10
    expected = [
        "recommended model 1 in",
        "it is not an object",
        "missing or empty field(s) description",
        "is not a Hub repository id",
        "'gpt2' has no owner",
        "'best' is not a GGUF quantization name",
        "unknown field(s) 'size'",
        "is not one line",
        "is not one line",
        "missing or empty field(s) license",
        "Qwen/Qwen2.5-0.5B-Instruct-GGUF is listed twice",
    ]
    assert expected[0] in messages[0]
    for message, reason in zip(messages, expected[1:], strict=True):
        assert reason in message and "is skipped" in message


@pytest.mark.parametrize(
    ("content", "logged"),
    [
        (None, "cannot be read"),
        ("{not json", "cannot be read"),
        ('{"schema_version": 1, "models": {}}', "has no list of models"),
        ('{"schema_version": 2, "models": []}', "has schema version 2; this Hearth reads version 1"),
    ],
)
def test_an_unusable_file_gives_an_empty_list_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str | None, logged: str
) -> None:
    path = tmp_path / "list.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="hearth.library"):
        assert load_recommended(path) == ()
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert logged in caplog.records[0].getMessage()


# -- fits from the remote headers ----------------------------------------------------------------


def test_each_fit_is_read_from_the_suggested_files_remote_header_and_grouped(
    hub: HubServer, served: dict[str, ServedFile]
) -> None:
    client = HubClient(hub.url)
    fits = RecommendedFits().check(client, [SMOL, LLAMA], context=CONTEXT, vram_mib=0, ram_mib=2000)

    smol, llama = fits
    assert (smol.entry, llama.entry) == (SMOL, LLAMA)
    assert smol.error is None and llama.error is None
    assert smol.fit is not None and llama.fit is not None
    assert smol.fit.model.filename == "SmolLM2-1.7B-Instruct-Q4_K_M.gguf"
    assert smol.fit.model.size == served["smol_q4"].size
    assert smol.fit.header is not None and smol.fit.header.quantization == "Q4_K_M"
    assert smol.fit.quantization == "Q4_K_M"
    assert llama.fit.model.size == served["llama"].size
    assert (smol.group, llama.group) == (FitGroup.CPU, FitGroup.TOO_LARGE)
    assert not smol.fit.recommended

    # Headers only, by range request, and only the suggested file's.
    reads = hub.requests_to("/resolve/")
    assert reads and all(r.headers.get("range") for r in reads)
    assert not [r for r in reads if "Q8_0" in r.path]
    llama_sent = sum(b.sent for b in hub.bodies if b.sha256 == served["llama"].sha256)
    assert 0 < llama_sent < served["llama"].size // 100

    # Another machine: the same files regroup.
    gpu = RecommendedFits().check(client, [SMOL, LLAMA], context=CONTEXT, vram_mib=24_000, ram_mib=32_000)
    assert [f.group for f in gpu] == [FitGroup.GPU, FitGroup.GPU]
    partial = RecommendedFits().check(client, [LLAMA], context=CONTEXT, vram_mib=3000, ram_mib=32_000)
    assert partial[0].fit is not None and partial[0].fit.estimate is not None
    assert partial[0].fit.estimate.verdict is Fit.PARTIAL and partial[0].group is FitGroup.PARTIAL


def test_the_session_cache_answers_the_same_plan_without_a_request(
    hub: HubServer, served: dict[str, ServedFile]
) -> None:
    client = HubClient(hub.url)
    cache = RecommendedFits()
    first = cache.check(client, [SMOL, LLAMA], context=CONTEXT, vram_mib=0, ram_mib=2000)
    asked = len(hub.requests)
    assert cache.check(client, [SMOL, LLAMA], context=CONTEXT, vram_mib=0, ram_mib=2000) == first
    assert len(hub.requests) == asked
    # Another plan is another question.
    cache.check(client, [SMOL], context=CONTEXT, vram_mib=0, ram_mib=64_000)
    assert len(hub.requests) > asked


def test_opening_a_recommended_repo_answers_for_its_entry(
    hub: HubServer, served: dict[str, ServedFile]
) -> None:
    client = HubClient(hub.url)
    cache = RecommendedFits()
    assessment = assess_listing(
        client, client.list_files(SMOL.repo_id), context=CONTEXT, vram_mib=0, ram_mib=2000
    )
    assert len(assessment.fits) == 2
    found = cache.remember(client.endpoint, [LLAMA, SMOL], assessment, vram_mib=0, ram_mib=2000)
    assert found is not None and found.entry == SMOL and found.fit is not None
    assert found.fit.model.filename == "SmolLM2-1.7B-Instruct-Q4_K_M.gguf" and found.group is FitGroup.CPU
    asked = len(hub.requests)
    (again,) = cache.check(client, [SMOL], context=CONTEXT, vram_mib=0, ram_mib=2000)
    assert again == found and len(hub.requests) == asked
    assert cache.remember(client.endpoint, [LLAMA], assessment) is None


def test_an_entry_the_hub_cannot_answer_for_has_its_error_and_is_retried_next_time(
    hub: HubServer, served: dict[str, ServedFile], variants: dict[str, Path]
) -> None:
    client = HubClient(hub.url)
    cache = RecommendedFits()
    missing_quant = RecommendedModel(SMOL.repo_id, "Q5_K_M", "Not there.", "apache-2.0")
    absent = RecommendedModel("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "Q4_K_M", "Not served yet.", "apache-2.0")
    fits = cache.check(client, [missing_quant, absent, SMOL], context=CONTEXT, vram_mib=0, ram_mib=2000)
    assert fits[0].fit is None and fits[0].error == f"{SMOL.repo_id} has no Q5_K_M file on main."
    # The Hub does not tell a stranger whether a repo exists: 401 without a token, as for a private one.
    assert fits[1].fit is None and fits[1].error is not None
    assert fits[1].error.startswith(f"The Hub refused access to {absent.repo_id} (HTTP 401)")
    assert fits[2].group is FitGroup.CPU
    assert [f.group for f in fits[:2]] == [FitGroup.UNKNOWN, FitGroup.UNKNOWN]

    hub.add_repo(
        absent.repo_id, [ServedFile.from_path("qwen2.5-0.5b-instruct-q4_k_m.gguf", variants["Q4_K_M"])]
    )
    (retried,) = cache.check(client, [absent], context=CONTEXT, vram_mib=0, ram_mib=2000)
    assert retried.error is None and retried.group is FitGroup.CPU


def test_a_hub_that_is_down_gives_every_entry_the_reason(
    hub: HubServer, served: dict[str, ServedFile]
) -> None:
    client = HubClient(hub.url)
    hub.stop()
    fits = RecommendedFits().check(client, [SMOL, LLAMA], context=CONTEXT, vram_mib=0, ram_mib=2000)
    assert [f.group for f in fits] == [FitGroup.UNKNOWN, FitGroup.UNKNOWN]
    assert all(f.error == f"Could not reach the Hub at {hub.url}: could not connect." for f in fits)
