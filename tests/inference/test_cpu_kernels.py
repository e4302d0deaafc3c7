"""llama.cpp's CPU kernels: every variant built, the best one chosen, and a CPU fault survived.

The runner tests here use real runner processes and the real starter model; the fault is a real SIGILL
delivered to the runner while it evaluates the prompt, which is where an unsupported instruction (or AMX
without its tile configuration) kills it on a real machine.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from app.chat.engine import ChatEngine, ModelStatus, TurnCallbacks
from app.core import Core
from inference.client import RunnerClient
from inference.ggml_backends import (
    BEST_REASON,
    CpuKernelMemory,
    llama_lib_dir,
    ranked_variants,
    safer_than,
)
from inference.protocol import (
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    LoadPlan,
    PromptReady,
    SamplingParams,
    TokenDelta,
)
from tests.app.cli.test_cli import run
from tests.conftest import starter_name

pytestmark = pytest.mark.model

REPLY = SamplingParams(temperature=0.0, max_tokens=16, seed=1)
# About 1,100 tokens with SmolLM2's tokenizer: far past the batch size at which ggml's batched kernels (AMX
# among them) take over from the single-token ones, and slow enough to evaluate that a signal sent when the
# prompt is ready arrives before the first token.
LONG_PROMPT = " ".join(f"Fact {i}: the lamp number {i} is {'red' if i % 2 else 'green'}." for i in range(110))


def _llama_build() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "packaging" / "llama_build.py"
    spec = importlib.util.spec_from_file_location("llama_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("llama_build", module)
    spec.loader.exec_module(module)
    return module


def _plan(model: Path) -> LoadPlan:
    return LoadPlan(
        model_path=str(model), n_ctx=2048, n_gpu_layers=0, n_layers=30, flash_attn=False, n_threads=2
    )


def _request(text: str = LONG_PROMPT, sampling: SamplingParams = REPLY) -> GenerateRequest:
    return GenerateRequest("r1", (ChatMessage("user", text + "\nWhich lamp is number 7?"),), sampling)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RunnerClient]:
    made = RunnerClient(tmp_path / "runner.log", kernel_memory=CpuKernelMemory(tmp_path / "cpu-kernels.json"))
    yield made
    made.close()


def test_installed_llama_cpp_has_every_cpu_variant_and_sound_amx_code() -> None:
    lib_dir = llama_lib_dir()
    assert lib_dir is not None
    llama_build = _llama_build()
    assert llama_build.check_libraries(lib_dir) == []
    assert not (lib_dir / "libggml-cpu.so").exists(), "a single-variant CPU backend is installed"
    names = [v.name for v in ranked_variants()]
    # The baseline runs on every x86-64 CPU, so there is always something safer to fall back to.
    assert len(names) >= 2 and names[-1] == "x64", names
    assert llama_build.installed_flavour() == llama_build.flavour("cpu")


def test_amx_check_tells_a_stack_built_tile_config_from_one_in_rodata(tmp_path: Path) -> None:
    """The check that guards every build fails on the code GCC makes of ggml's unpatched tile config."""
    llama_build = _llama_build()
    common = """
        #include <immintrin.h>
        #include <cstdint>
        struct tile_config_t { uint8_t palette_id = 0; uint8_t start_row = 0; uint8_t reserved_0[14] = {0};
                               uint16_t colsb[16] = {0}; uint8_t rows[16] = {0}; };
    """
    unpatched = (
        common
        + """
        extern "C" void configure() {
            alignas(64) tile_config_t tc = {};
            tc.palette_id = 1;
            for (int i = 0; i < 8; i++) { tc.rows[i] = 16; tc.colsb[i] = 64; }
            _tile_loadconfig(&tc);
        }
    """
    )
    patched = (
        common
        + """
        static constexpr tile_config_t make() {
            tile_config_t tc = {};
            tc.palette_id = 1;
            for (int i = 0; i < 8; i++) { tc.rows[i] = 16; tc.colsb[i] = 64; }
            return tc;
        }
        extern "C" void configure() {
            alignas(64) static constexpr tile_config_t tc = make();
            _tile_loadconfig(&tc);
        }
    """
    )
    problems = {}
    for name, source in (("unpatched", unpatched), ("patched", patched)):
        (tmp_path / f"{name}.cpp").write_text(source, encoding="utf-8")
        library = tmp_path / f"lib{name}.so"
        subprocess.run(
            ["g++", "-std=c++17", "-O3", "-mamx-tile", "-mamx-int8", "-shared", "-fPIC", "-o", str(library),
             str(tmp_path / f"{name}.cpp")],
            check=True,
        )  # fmt: skip
        loads = llama_build.tile_config_loads(library)
        assert len(loads) == 1
        problems[name] = loads[0].problem()
    assert problems["patched"] is None
    assert problems["unpatched"] is not None and "built at run time" in problems["unpatched"]


def test_runner_runs_on_the_best_variant_and_survives_a_long_prompt(
    client: RunnerClient, starter_model: Path
) -> None:
    loaded = client.load(_plan(starter_model))
    assert loaded.cpu_kernels == ranked_variants()[0].name
    assert loaded.cpu_kernels_reason == BEST_REASON
    events = list(client.generate(_request()))
    ready = next(e for e in events if isinstance(e, PromptReady))
    assert ready.prompt_tokens >= 500
    assert isinstance(events[-1], Finished), events[-1]
    assert "".join(e.text for e in events if isinstance(e, TokenDelta)).strip()


def _kill_when_prompt_ready(client: RunnerClient, events: Iterator[object]) -> list[object]:
    seen: list[object] = []
    for event in events:
        seen.append(event)
        if isinstance(event, PromptReady):
            assert client.pid is not None
            os.kill(client.pid, signal.SIGILL)
    return seen


def test_a_runner_killed_by_sigill_is_restarted_on_safer_kernels_and_the_reply_arrives(
    client: RunnerClient, starter_model: Path, tmp_path: Path
) -> None:
    best = ranked_variants()[0].name
    safer = safer_than(best)
    assert safer is not None
    client.load(_plan(starter_model))
    first_pid = client.pid

    events = _kill_when_prompt_ready(client, client.generate(_request()))

    assert client.pid != first_pid, "the runner that received SIGILL was replaced"
    assert isinstance(events[-1], Finished), events[-1]
    assert sum(isinstance(e, PromptReady) for e in events) == 1
    assert "".join(e.text for e in events if isinstance(e, TokenDelta)).strip()
    loaded = client.loaded
    assert loaded is not None and loaded.cpu_kernels == safer
    assert f"{best} crashed with SIGILL" in loaded.cpu_kernels_reason
    assert (
        f"{best} CPU kernels crashed" in client.kernel_note and f"safer {safer} kernels" in client.kernel_note
    )
    remembered = json.loads((tmp_path / "cpu-kernels.json").read_text(encoding="utf-8"))
    assert (remembered["variant"], remembered["crashed"], remembered["signal"]) == (safer, best, "SIGILL")

    # The next start on this machine begins on the safer kernels: no second crash to learn it again.
    again = RunnerClient(
        tmp_path / "runner2.log", kernel_memory=CpuKernelMemory(tmp_path / "cpu-kernels.json")
    )
    try:
        reloaded = again.load(_plan(starter_model))
        assert reloaded.cpu_kernels == safer
        assert "fallback" in reloaded.cpu_kernels_reason
    finally:
        again.close()


def test_a_second_sigill_ends_the_reply_with_one_message_instead_of_a_crash_loop(
    client: RunnerClient, starter_model: Path
) -> None:
    client.load(_plan(starter_model))
    first_pid = client.pid
    killed: list[int] = []

    def kill_the_replacement() -> None:
        # The retry's runner gets the same fault once it has loaded the model again.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pid = client.pid
            if pid is not None and pid != first_pid and client.loaded is not None:
                time.sleep(0.05)
                os.kill(pid, signal.SIGILL)
                killed.append(pid)
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=kill_the_replacement)
    watcher.start()
    events = _kill_when_prompt_ready(client, client.generate(_request()))
    watcher.join()

    assert killed, "the retry never started"
    failures = [e for e in events if isinstance(e, Failed)]
    assert len(failures) == 1 and events[-1] is failures[0]
    assert failures[0].kind is ErrorKind.RUNNER_CRASHED
    assert "SIGILL" in failures[0].message and "again, on the safer" in failures[0].message
    assert not client.alive, "no third runner was started for this request"


def test_sigill_after_text_was_shown_ends_that_reply_and_the_next_runs_on_safer_kernels(
    client: RunnerClient, starter_model: Path
) -> None:
    best = ranked_variants()[0].name
    client.load(_plan(starter_model))
    events: list[object] = []
    # Long enough that the runner is still writing when the signal arrives.
    for event in client.generate(
        _request("Tell a long story.", SamplingParams(temperature=0.0, max_tokens=400))
    ):
        events.append(event)
        if isinstance(event, TokenDelta) and client.pid is not None and client.alive:
            os.kill(client.pid, signal.SIGILL)
    failure = events[-1]
    assert isinstance(failure, Failed) and "SIGILL" in failure.message
    assert f"{best} CPU kernels crashed" in failure.message

    loaded = client.load(_plan(starter_model))
    assert loaded.cpu_kernels == safer_than(best)
    assert isinstance(list(client.generate(_request("Say hello.")))[-1], Finished)


def test_a_remembered_fallback_is_ignored_on_another_cpu(tmp_path: Path) -> None:
    memory = CpuKernelMemory(tmp_path / "cpu-kernels.json")
    remembered = memory.remember("x64", "haswell", "SIGILL")
    assert memory.recall() == remembered
    moved = json.loads(memory.path.read_text(encoding="utf-8")) | {"cpu": "Some Other CPU @ 3.0GHz"}  # type: ignore[union-attr]
    memory.path.write_text(json.dumps(moved), encoding="utf-8")  # type: ignore[union-attr]
    assert memory.recall() is None
    memory.path.write_text("{not json", encoding="utf-8")  # type: ignore[union-attr]
    assert memory.recall() is None


def test_doctor_names_the_cpu_kernels_and_why(hermetic_home: Path) -> None:
    names = [v.name for v in ranked_variants()]
    code, out, _ = run("doctor", "--json")
    assert code == 0
    kernels = json.loads(out)["cpu_kernels"]
    assert kernels == {"variant": names[0], "reason": BEST_REASON, "available": names}

    CpuKernelMemory(hermetic_home / "cpu-kernels.json").remember(names[1], names[0], "SIGILL")
    code, out, _ = run("doctor", "--json")
    kernels = json.loads(out)["cpu_kernels"]
    assert kernels["variant"] == names[1]
    assert kernels["reason"].startswith(f"fallback: {names[0]} crashed with SIGILL")
    code, text, _ = run("doctor")
    assert f"CPU:       {names[1]} kernels (fallback: {names[0]} crashed with SIGILL" in text


class KillOnStart(TurnCallbacks):
    """Delivers SIGILL to the runner the moment the reply row exists, before the prompt reaches llama.cpp."""

    def __init__(self, engine: ChatEngine) -> None:
        self._engine = engine
        self.statuses: list[ModelStatus] = []

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        pid = self._engine.client.pid
        assert pid is not None
        os.kill(pid, signal.SIGILL)

    def model_status(self, status: ModelStatus) -> None:
        self.statuses.append(status)


def test_a_turn_survives_sigill_and_the_status_says_why(
    make_engine: Callable[..., ChatEngine], core: Core
) -> None:
    engine = make_engine(max_tokens=16, temperature=0.0)
    name = starter_name(core)
    engine.ensure_loaded(name)
    before = engine.status()
    assert before.kernels == f"CPU kernels: {ranked_variants()[0].name} ({BEST_REASON})"
    callbacks = KillOnStart(engine)

    result = engine.run_turn(LONG_PROMPT, name, callbacks=callbacks)

    assert result.status == "complete" and result.text.strip()
    status = callbacks.statuses[-1]
    safer = safer_than(ranked_variants()[0].name)
    assert status.kernels.startswith(f"CPU kernels: {safer} (fallback: ")
    assert f"Hearth now uses its safer {safer} kernels here." in status.detail
    assert json.loads(core.paths.cpu_kernels_file.read_text(encoding="utf-8"))["variant"] == safer


def test_the_recorded_flavour_stops_vouching_once_pip_reinstalls_the_package(tmp_path: Path) -> None:
    # A .dist-info as pip leaves it; reinstalling the same version (pip install --force-reinstall, which
    # builds the sdist natively) rewrites RECORD with the new files' hashes but leaves a file it did not
    # install, such as the flavour record, where it was.
    info = tmp_path / "llama_cpp_python-0.3.36.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.3.36\n")
    (info / "RECORD").write_text("llama_cpp/lib/libggml-cpu-haswell.so,sha256=all-variants,1296280\n")
    distribution = importlib.metadata.PathDistribution(info)
    llama_build = _llama_build()

    assert llama_build.installed_flavour(distribution=distribution) is None
    assert llama_build.installed_flavour("cpu-dl-0123456789ab", distribution) == "cpu-dl-0123456789ab"
    assert llama_build.installed_flavour(distribution=distribution) == "cpu-dl-0123456789ab"

    (info / "RECORD").write_text("llama_cpp/lib/libggml-cpu.so,sha256=native,1300376\n")
    assert (info / llama_build.FLAVOUR_FILE).exists()
    assert llama_build.installed_flavour(distribution=distribution) is None
