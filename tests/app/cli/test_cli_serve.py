"""`hearth serve`: a real process, answered by the official openai client, stopped with Ctrl+C."""

from __future__ import annotations

import io
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import openai
import psutil
import pytest

from app.cli.main import main
from app.paths import bundled_embedding_model

REPO = Path(__file__).resolve().parents[3]
LINE_TIMEOUT_S = 120


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.model
def test_serve_answers_the_openai_client_until_ctrl_c(starter_model: Path, hermetic_home: Path) -> None:
    # No keyring in the child: the key lives for this run only, and the command says so.
    env = {**os.environ, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    child = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", "0", "--home", str(hermetic_home)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read_stderr() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            lines.put(line)

    reader = threading.Thread(target=read_stderr)
    reader.start()
    try:
        said: list[str] = []
        while not said or not said[-1].startswith("API key: "):
            said.append(lines.get(timeout=LINE_TIMEOUT_S))
        serving = next(line for line in said if line.startswith("Serving "))
        found = re.match(r"Serving (\S+) at (http://127\.0\.0\.1:\d+/v1) ", serving)
        assert found is not None, serving
        name, url = found.groups()
        key = said[-1].removeprefix("API key: ").strip()
        assert "keyring could not keep the key" in lines.get(timeout=LINE_TIMEOUT_S)

        embedding = bundled_embedding_model()
        with openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120) as api:
            assert [m.id for m in api.models.list()] == [name] + ([embedding.stem] if embedding else [])
            answer = api.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "Say hello."}], max_tokens=4
            )
            assert answer.choices[0].message.content
            if embedding is not None:
                vectors = api.embeddings.create(model=embedding.stem, input=["hello", "world"])
                assert len(vectors.data) == 2
        with (
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0) as api,
            pytest.raises(openai.AuthenticationError),
        ):
            api.models.list()

        # Spawned by multiprocessing; its resource tracker, another child, exits on its own once its
        # parent is gone, so it is not what this checks.
        runners = [
            process
            for process in psutil.Process(child.pid).children(recursive=True)
            if "spawn_main" in " ".join(process.cmdline())
        ]
        # The chat model's runner, and the embedding model's once an embeddings request started it.
        assert len(runners) == (2 if embedding else 1), "the runners should be children of `hearth serve`"
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        reader.join(10)
        assert child.stdout is not None
        child.stdout.close()
        assert child.stderr is not None
        child.stderr.close()
    assert child.returncode == 130
    assert "hearth: interrupted" in "".join(list(lines.queue))
    # The runner was shut down with the server, not left behind.
    for runner in runners:
        assert not runner.is_running() or runner.status() == psutil.STATUS_ZOMBIE
    # The key is shown once, on stderr, and never written to the log.
    logs = "".join(p.read_text(errors="replace") for p in (hermetic_home / "logs").glob("*.log*"))
    assert key not in logs


def test_serve_rejects_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--port", "70000"])
    assert info.value.code == 2
    assert "must be from 0 to 65535" in capsys.readouterr().err


@pytest.mark.model
def test_serve_reports_an_unknown_model_or_a_busy_port_in_one_line(starter_model: Path) -> None:
    code, _, err = run("serve", "--model", "no-such-model")
    assert code == 3 and err.count("\n") == 1 and "No installed model is named 'no-such-model'" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, _, err = run("serve", "--port", str(taken.getsockname()[1]))
    assert code == 3
    assert err.splitlines()[-1].startswith("hearth: Port ") and "already in use" in err
