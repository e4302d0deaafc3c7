"""A normal offline session (start, load the model, chat, search, export) makes no network connection, in
the window's process or in the model runner it starts.

The session (tests/reliability/offline_session.py) runs in a process of its own, without HF_HUB_OFFLINE,
under `strace -f`, which records every connect() and every datagram sent to an address by it and by every
process it starts, whatever the language of the code making it; and, where one can be made, in a network
namespace holding only a loopback interface that is down, so that nothing could reach another machine
even if it tried. The test passes only if no attempt was made at all. Where strace cannot trace, the
namespace alone shows that the session works with no network, but not that it never tried.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.reliability.conftest import RecordFault, characters_missing
from tests.reliability.offline_session import PROBE

pytestmark = [pytest.mark.gui, pytest.mark.model]

CATEGORY = "Privacy"
ROOT = Path(__file__).resolve().parents[2]
TRACED = "connect,sendto,sendmsg,sendmmsg,execve"
# Local IPC (D-Bus, the single-instance socket) and the kernel's own interface queries.
LOCAL_FAMILIES = frozenset({"AF_UNIX", "AF_NETLINK"})
SESSION_TIMEOUT_S = 600
_CALL = re.compile(r"^(\d+)\s+(connect|sendto|sendmsg|sendmmsg)\((.*)$")
_FAMILY = re.compile(r"sa_family=(AF_\w+)")


@functools.cache
def network_namespace() -> tuple[str, ...]:
    """A command prefix that runs its command in a network namespace holding only `lo`, or ()."""
    for prefix in (("unshare", "--net"), ("unshare", "--user", "--map-root-user", "--net")):
        try:
            probe = subprocess.run(
                [*prefix, "cat", "/proc/net/dev"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        interfaces = {line.split(":")[0].strip() for line in probe.stdout.splitlines() if ":" in line}
        if probe.returncode == 0 and interfaces == {"lo"}:
            return prefix
    return ()


def tracer(log: Path) -> tuple[str, ...]:
    """`strace -f` recording the calls that reach for an address, or () where strace cannot trace here."""
    if shutil.which("strace") is None:
        return ()
    command = ("strace", "-f", "-qq", "-e", f"trace={TRACED}", "-e", "signal=none", "-o", str(log))
    for options in (("--seccomp-bpf",), ()):
        # Filtered in the kernel where it can be: the traced processes stop only at these calls.
        try:
            probe = subprocess.run([*command, *options, "true"], capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ()
        if probe.returncode == 0:
            return (*command, *options)
    return ()


def attempts(log: Path) -> list[str]:
    """Every traced call that gave an address outside local IPC: a connection or datagram attempt."""
    found = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        call = _CALL.match(line)
        family = _FAMILY.search(line) if call else None
        if family is not None and family.group(1) not in LOCAL_FAMILIES:
            found.append(line)
    return found


@pytest.mark.timeout(SESSION_TIMEOUT_S + 60)
def test_an_offline_session_makes_no_connection(
    hermetic_home: Path, starter_model: Path, tmp_path: Path, fault: RecordFault
) -> None:
    log = tmp_path / "strace.log"
    trace = tracer(log)
    namespace = network_namespace()
    if not trace and not namespace:
        pytest.skip(
            "neither strace (not installed, or ptrace not allowed) nor a network namespace works here"
        )
    paths = HearthPaths(hermetic_home).ensure()
    save_settings(paths.settings_path, Settings(max_tokens=16, temperature=0.0))
    result, export = tmp_path / "session.json", tmp_path / "exported.md"
    # As a user starts it: no HF_HUB_OFFLINE (the tests set it for themselves), and no keyring to talk to.
    env = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
    env |= {"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring", "QT_QPA_PLATFORM": "offscreen"}
    session = subprocess.run(
        [
            *namespace,
            *trace,
            sys.executable,
            "-m",
            "tests.reliability.offline_session",
            str(result),
            str(export),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SESSION_TIMEOUT_S,
        check=False,
    )
    assert session.returncode == 0, session.stderr[-4000:]
    summary = json.loads(result.read_text(encoding="utf-8"))
    if trace:
        outcome = "no connection attempted, in the app or the model runner (strace -f"
        outcome += ", in a network namespace holding only lo)" if namespace else ")"
    else:
        outcome = (
            "ran in a network namespace holding only lo; attempts not recorded (strace cannot trace here)"
        )
    fault(
        CATEGORY,
        "connections during an offline session (start, load, chat, search, export), HF_HUB_OFFLINE unset",
        trials=1,
        outcome=outcome,
        lost={"characters": characters_missing(summary["shown"], summary["stored"])},
    )
    assert summary["shown"] and summary["shown"] == summary["stored"]
    assert "river" in export.read_text(encoding="utf-8").lower()
    if trace:
        found = attempts(log)
        probe = f'sin_port=htons({PROBE[1]}), sin_addr=inet_addr("{PROBE[0]}")'
        # The trace is not blind: it saw the probe, and it followed the model runner.
        assert any(probe in line for line in found), found
        runner = rf"^{summary['runner_pid']}\s+execve\("
        assert re.search(runner, log.read_text(encoding="utf-8"), re.MULTILINE), "the runner was not traced"
        assert [line for line in found if probe not in line] == []
