"""The Linux installers, end to end: build the CPU bundle, unpack the .deb into a temporary root and the
tarball into a folder, and run the frozen app from each — with a fresh --home every time, without the venv,
and inside a new network namespace where one can be made (it can as root), so nothing can be downloaded.

Builds with packaging/build_linux.sh (1–3 minutes), or reuses the .deb and .tar.gz of an earlier step of the
same CI run when HEARTH_PACKAGING_DIST names their folder. Runs only with HEARTH_PACKAGING_TESTS=1
(conftest.py).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.library.installed import STARTER_NAME, STARTER_SHA256
from tests.helpers.document_files import pdf_bytes
from tests.helpers.hubserver import starter_model_file
from tests.helpers.tiny_vision import TINY_IMAGE_TOKENS, write_tiny_projector

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
RUN_TIMEOUT_S = 180

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or shutil.which("dpkg-deb") is None,
        reason="the Linux installers need Linux with dpkg-deb",
    ),
]


@pytest.fixture(scope="session")
def artifacts() -> tuple[Path, Path]:
    """(.deb, .tar.gz) of the CPU build."""
    reuse = os.environ.get("HEARTH_PACKAGING_DIST")
    dist = Path(reuse) if reuse else ROOT / "dist"
    if not reuse:
        # The CPU build of the venv running these tests, with the starter model.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
        env |= {"HEARTH_VENV": sys.prefix, "HEARTH_BACKEND": "cpu", "HEARTH_BUNDLE_STARTER": "1"}
        subprocess.run([str(ROOT / "packaging" / "build_linux.sh")], cwd=ROOT, env=env, check=True)
    deb = dist / f"hearth_{VERSION}_amd64.deb"
    tarball = dist / f"Hearth-{VERSION}-linux-x86_64.tar.gz"
    assert deb.is_file(), f"{deb} was not built"
    assert tarball.is_file(), f"{tarball} was not built"
    return deb, tarball


@pytest.fixture(scope="session")
def deb_root(artifacts: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deb-root")
    subprocess.run(["dpkg-deb", "-x", str(artifacts[0]), str(root)], check=True)
    return root


@pytest.fixture(scope="session")
def tar_root(artifacts: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tar-root")
    with tarfile.open(artifacts[1]) as tar:
        tar.extractall(root, filter="tar")
    return root / f"Hearth-{VERSION}-linux-x86_64"


@pytest.fixture(params=["deb", "tarball"])
def hearth(request: pytest.FixtureRequest) -> Path:
    """The frozen executable, as installed by the .deb (/opt/hearth) or unpacked from the tarball."""
    if request.param == "deb":
        exe: Path = request.getfixturevalue("deb_root") / "opt" / "hearth" / "hearth"
    else:
        exe = request.getfixturevalue("tar_root") / "hearth"
    assert exe.is_file() and os.access(exe, os.X_OK)
    return exe


@functools.cache
def _network_namespace() -> list[str]:
    """A command prefix that runs its command with no network at all, or [] where none can be made."""
    for prefix in (["unshare", "--net"], ["unshare", "--user", "--map-root-user", "--net"]):
        try:
            probe = subprocess.run(
                [*prefix, "cat", "/proc/net/dev"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        interfaces = {line.split(":")[0].strip() for line in probe.stdout.splitlines() if ":" in line}
        if probe.returncode == 0 and interfaces == {"lo"}:
            return prefix
    return []


def _env(tmp_path: Path) -> dict[str, str]:
    """What a desktop session gives the app, minus the venv, proxies and any Python or library paths."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path / "user-home"),
        "LANG": "C.UTF-8",
        "QT_QPA_PLATFORM": "offscreen",
        "HF_HUB_OFFLINE": "1",
        "TMPDIR": str(tmp_path),
    }


def run(
    exe: Path, *args: str, tmp_path: Path, offline: bool = True, close_std: bool = False
) -> subprocess.CompletedProcess[str]:
    command = [str(exe), *args]
    if close_std:
        # What a windowed build gets: no stdout and no stderr at all (sys.stdout is None).
        command = ["sh", "-c", 'exec "$0" "$@" >&- 2>&-', *command]
    return subprocess.run(
        [*(_network_namespace() if offline else []), *command],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def test_deb_metadata_and_layout(artifacts: tuple[Path, Path], deb_root: Path) -> None:
    fields = subprocess.run(
        ["dpkg-deb", "-f", str(artifacts[0]), "Package", "Version", "Architecture", "Depends"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Package: hearth\n" in fields
    assert f"Version: {VERSION}\n" in fields
    assert "Architecture: amd64\n" in fields
    assert "libxcb-cursor0" in fields and "libc6 (>= 2." in fields
    assert (deb_root / "usr" / "bin" / "hearth").readlink() == Path("/opt/hearth/hearth")
    desktop = (deb_root / "usr" / "share" / "applications" / "hearth.desktop").read_text()
    assert "Exec=/opt/hearth/hearth\n" in desktop and "Icon=hearth\n" in desktop
    assert (deb_root / "usr" / "share" / "icons" / "hicolor" / "256x256" / "apps" / "hearth.png").is_file()
    internal = deb_root / "opt" / "hearth" / "_internal"
    assert (internal / "llama_cpp" / "lib" / "libllama.so").exists()
    # Every CPU variant rides along (the best is chosen on the user's machine), with sound AMX code.
    check = subprocess.run(
        [
            sys.executable,
            str(ROOT / "packaging" / "llama_build.py"),
            "check",
            str(internal / "llama_cpp" / "lib"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert "sapphirerapids" in check.stdout and "x64" in check.stdout
    assert (internal / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    assert (internal / "app" / "storage" / "migrations" / "env.py").is_file()
    # Only the Qt that Hearth uses.
    qt_libs = {p.name for p in (internal / "PySide6" / "Qt" / "lib").iterdir()}
    unused = ("libQt6Qml", "libQt6Quick", "libQt6WebEngine", "libQt6Svg")
    assert not {n for n in qt_libs if n.startswith(unused)}
    # The second start hands over to the running window through QLocalServer.
    assert "libQt6Network.so.6" in qt_libs


def test_help(hearth: Path, tmp_path: Path) -> None:
    result = run(hearth, "--help", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: hearth")


def test_gui_smoke_test_offscreen(hearth: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run(hearth, "gui", "--smoke-test", "--home", str(home), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "smoke test passed" in (home / "logs" / "hearth.log").read_text()


def test_gui_smoke_test_without_stdout_or_stderr(hearth: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run(hearth, "gui", "--smoke-test", "--home", str(home), tmp_path=tmp_path, close_std=True)
    assert result.returncode == 0
    assert "smoke test passed" in (home / "logs" / "hearth.log").read_text()


def test_doctor_json(hearth: Path, tmp_path: Path) -> None:
    result = run(hearth, "doctor", "--json", "--home", str(tmp_path / "home"), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["version"] == VERSION
    assert report["llama_cpp_python"] == "0.3.36"
    assert report["backend"]["name"] == "CPU"
    assert report["backend"]["detail"]
    assert report["gpus"] == []
    assert report["gpu_reason"]
    assert report["database"]["ok"]
    kernels = report["cpu_kernels"]
    assert kernels["variant"] == kernels["available"][0] and kernels["available"][-1] == "x64"
    assert kernels["reason"] == "best for this CPU"


def test_offline_chat_with_the_bundled_starter_model(hearth: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run(
        hearth,
        "chat", "--home", str(home), "--model", STARTER_NAME, "--max-tokens", "16", "--seed", "1",
        "--temperature", "0", "hi",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "conversation 1" in result.stderr

    shown = run(hearth, "conversations", "show", "1", "--json", "--home", str(home), tmp_path=tmp_path)
    assert shown.returncode == 0, shown.stderr
    messages = json.loads(shown.stdout)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    reply = messages[1]
    assert reply["status"] == "complete"
    assert reply["model_sha256"] == STARTER_SHA256
    assert 0 < reply["completion_tokens"] <= 16
    assert result.stdout.strip() == reply["content"].strip()

    listed = run(hearth, "models", "list", "--json", "--home", str(home), tmp_path=tmp_path)
    assert [m["sha256"] for m in json.loads(listed.stdout)["models"]] == [STARTER_SHA256]


def test_frozen_app_sees_pdf_pages_through_a_vision_projector(hearth: Path, tmp_path: Path) -> None:
    """mtmd, pypdfium2 (libpdfium through ctypes) and Pillow, frozen: the bundled starter model is given a
    generated projector (its own bytes imported again with one), and a PDF's pages go to it as pictures."""
    home = tmp_path / "home"
    folder = tmp_path / "vision"
    folder.mkdir()
    shutil.copy(starter_model_file(), folder / "vision.gguf")
    write_tiny_projector(folder / "mmproj-F16.gguf")
    report = tmp_path / "report.pdf"
    report.write_bytes(pdf_bytes([["Harbour lights"], ["Tide tables"]]))
    imported = run(
        hearth, "models", "import", str(folder / "vision.gguf"), "--home", str(home), tmp_path=tmp_path
    )
    assert imported.returncode == 0 and "vision projector mmproj-F16.gguf" in imported.stdout, imported.stderr
    result = run(
        hearth,
        "chat", "--home", str(home), "--model", STARTER_NAME, "--attach", str(report),
        "--pdf-pages-as-images", "--max-tokens", "4", "--temperature", "0", "What do the pages show?",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    shown = run(hearth, "conversations", "show", "1", "--json", "--home", str(home), tmp_path=tmp_path)
    prompt, reply = json.loads(shown.stdout)["messages"]
    assert reply["status"] == "complete"
    # Two pages of TINY_IMAGE_TOKENS each, beside the text layer.
    assert reply["prompt_tokens"] > 2 * TINY_IMAGE_TOKENS
    assert prompt["attachments"][0]["name"] == "report.pdf"


def test_frozen_app_answers_a_long_prompt(hearth: Path, tmp_path: Path) -> None:
    """Over 500 prompt tokens: the batched kernels (AMX on a Xeon that has it) run, not only the
    single-token ones a short chat uses."""
    prompt = (
        " ".join(f"Fact {i}: lamp {i} is {'red' if i % 2 else 'green'}." for i in range(110)) + " Lamp 7?"
    )
    home = tmp_path / "home"
    result = run(
        hearth, "chat", "--home", str(home), "--model", STARTER_NAME, "--max-tokens", "8", prompt,
        tmp_path=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    shown = run(hearth, "conversations", "show", "1", "--json", "--home", str(home), tmp_path=tmp_path)
    reply = json.loads(shown.stdout)["messages"][1]
    assert reply["status"] == "complete" and reply["prompt_tokens"] >= 500


def test_chat_without_stdout_or_stderr_does_not_crash(hearth: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run(
        hearth, "chat", "--home", str(home), "--model", STARTER_NAME, "--max-tokens", "4", "hi",
        tmp_path=tmp_path, close_std=True,
    )  # fmt: skip
    assert result.returncode == 0
    shown = run(hearth, "conversations", "show", "1", "--json", "--home", str(home), tmp_path=tmp_path)
    assert json.loads(shown.stdout)["messages"][1]["status"] == "complete"


def _runner_stderr(process: psutil.Process) -> Iterator[str]:
    """Where each multiprocessing child's fd 2 points, while the parent runs."""
    for child in process.children(recursive=True):
        try:
            if "--multiprocessing-fork" in child.cmdline():
                yield str(Path(f"/proc/{child.pid}/fd/2").readlink())
        except (psutil.Error, OSError):
            continue


def test_runner_child_writes_native_stderr_to_the_runner_log(deb_root: Path, tmp_path: Path) -> None:
    """The runner is the frozen exe re-executed by multiprocessing (spawn); from its start on, llama.cpp's
    fd 2 must be the log file, or a windowed build loses the reason for a crash. (While a model loads,
    llama-cpp-python's verbose=False points fd 2 at /dev/null for a moment and then restores it.)"""
    hearth = deb_root / "opt" / "hearth" / "hearth"
    home = tmp_path / "home"
    process = psutil.Popen(
        [str(hearth), "chat", "--home", str(home), "--model", STARTER_NAME, "--max-tokens", "200",
         "Tell me a long story about a lighthouse."],
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    seen: list[str] = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        seen.extend(target for target in _runner_stderr(process) if not seen or seen[-1] != target)
        time.sleep(0.01)
    _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode == 0, stderr
    runner_log = str(home / "logs" / "runner.log")
    # Before the redirect the child still has the parent's stderr (a pipe here); after it, only the log.
    assert seen and seen[-1] == runner_log, seen
    assert set(seen[seen.index(runner_log) :]) <= {runner_log, "/dev/null"}, seen


def test_frozen_app_runs_without_a_network(hearth: Path, tmp_path: Path) -> None:
    """As root (CI here) the frozen app runs in a network namespace holding only loopback; elsewhere the
    tests fall back to HF_HUB_OFFLINE and no proxy. Inside it, nothing outside the machine is reachable."""
    prefix = _network_namespace()
    if os.geteuid() == 0:
        assert prefix, "unshare --net should work as root"
    if not prefix:
        pytest.skip("no network namespace can be made here")
    # A documentation address (RFC 5737): in the namespace there is no route, so nothing is ever sent.
    connect = "import socket; socket.create_connection(('192.0.2.1', 443), timeout=3)"
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", connect],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode != 0 and "Network is unreachable" in probe.stderr
    result = run(hearth, "doctor", "--json", "--home", str(tmp_path / "home"), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
