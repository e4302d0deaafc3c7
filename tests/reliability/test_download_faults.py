"""Downloads from a real local hub that misbehaves on purpose. Every scenario ends in a verified file or a
clear error; after each one no installed model is corrupt and the token is in no file, log or message.

The client is huggingface_hub's HTTP session plus Hearth's transfer loop, with no mocked HTTP layer. The
full disk is a real size-limited tmpfs in a user and mount namespace where the kernel allows one without
root; the in-process variant injects ENOSPC at the one write call every downloaded byte goes through.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

import pytest

import app.library.downloads as downloads_module
from app.errors import HearthError
from app.library.downloads import (
    FREE_SPACE_MARGIN,
    DownloadControl,
    Downloader,
    DownloadIntegrityError,
    RetryPolicy,
    local_path,
    pending_downloads,
)
from app.library.hub import HubAuthError, HubClient, HubGatedError, HubRateLimited
from app.library.installed import ModelLibrary
from tests.app.library.test_downloads import FAST, GIVE_UP_AT_ONCE
from tests.helpers.hubserver import HubServer, ServedFile, starter_file
from tests.reliability.conftest import RecordFault

CATEGORY = "Downloads"
AGAIN = "bytes downloaded again"
REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
NAME = "SmolLM2-135M-Instruct.Q4_1"
TOKEN = "hf_ReliabilitySuiteTokenThatMustNeverLeak42"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def starter(hub: HubServer) -> ServedFile:
    """The starter model in a private repo: every request must carry the token, so a leak has one to leak."""
    file = starter_file()
    hub.add_repo(REPO, [file], private=True)
    hub.valid_tokens.add(TOKEN)
    return file


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def fetch(
    hub: HubServer,
    library: ModelLibrary,
    *,
    policy: RetryPolicy = FAST,
    control: DownloadControl | None = None,
    token: str | None = TOKEN,
) -> None:
    client = HubClient(hub.url, token)
    listing = client.list_files(REPO)
    Downloader(client, library, policy=policy).download(listing, listing.models[0], control=control)


def file_gets(hub: HubServer) -> list[str | None]:
    return [r.headers.get("range") for r in hub.requests_to("/resolve/")]


def downloaded_again(*servers: HubServer) -> int:
    """Bytes of each file the servers sent more than once so far: what the faults cost in downloading again.

    Every request for a file starts at or before the furthest byte sent of it (a resume, or a restart
    from zero), so what was sent of a file is always one run from its first byte."""
    bodies = sorted((b for server in servers for b in server.bodies), key=lambda b: b.at)
    again, furthest = 0, dict.fromkeys((b.sha256 for b in bodies), 0)
    for body in bodies:
        end = body.start + body.sent
        again += max(0, min(end, furthest[body.sha256]) - body.start)
        furthest[body.sha256] = max(furthest[body.sha256], end)
    return again


def check_nothing_lost_or_leaked(
    library: ModelLibrary,
    home: Path,
    logs: pytest.LogCaptureFixture,
    served: ServedFile,
    *messages: str,
) -> None:
    """The invariants after any scenario: installed means verified, partial means a true prefix, no token."""
    for model in library.list_models():
        assert library.verify(model.name), f"{model.name} is installed but its bytes are wrong"
        assert model.sha256 == served.sha256
    assert served.path is not None
    expected = served.path.read_bytes()
    for pending in pending_downloads(library.models_dir):
        assert expected.startswith(pending.part_path.read_bytes()), "a partial download is not a prefix"
    secret = TOKEN.encode()
    leaked = [p for p in home.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert leaked == [], f"the token was written to {leaked}"
    assert TOKEN not in logs.text
    for message in messages:
        assert TOKEN not in message


def error_message(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and len(message) < 400, "one clear line"
    return message


def test_a_download_dropped_25_times_resumes_each_time_to_a_verified_file(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    step = 3_500_000
    hub.faults.drop_after, hub.faults.drops = step, 25
    fetch(hub, library)
    again = downloaded_again(hub)
    fault(
        CATEGORY,
        "connection dropped mid-transfer",
        trials=25,
        outcome="resumed with Range each time; verified file",
        lost={AGAIN: again},
    )
    assert again == 0
    assert file_gets(hub) == [None, *(f"bytes={step * i}-" for i in range(1, 26))]
    assert [m.name for m in library.list_models()] == [NAME]
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)


def test_a_connection_that_keeps_failing_gives_up_keeping_the_partial(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    hub.faults.statuses = [503] * 10
    with pytest.raises(HearthError, match="server error") as failed:
        fetch(hub, library)
    assert len(hub.requests_to("/resolve/")) == FAST.max_failures_without_progress + 1
    assert pending_downloads(library.models_dir) == []
    first = error_message(failed)
    refused_again = downloaded_again(hub)

    hub.faults.statuses = []
    hub.faults.drop_after, hub.faults.drops = 6_000_000, 1
    with pytest.raises(
        HearthError, match=re.escape("5.7 MiB downloaded so far are kept: run the same command to resume")
    ) as lost:
        fetch(hub, library, policy=GIVE_UP_AT_ONCE)
    [pending] = pending_downloads(library.models_dir)
    assert (pending.repo_id, pending.filename, pending.done) == (REPO, starter.filename, 6_000_000)
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter, first, error_message(lost))

    fetch(hub, library)
    again = downloaded_again(hub) - refused_again
    fault(
        CATEGORY,
        "server errors (HTTP 503) past the retry budget",
        trials=4,
        outcome="clear error; nothing kept or installed",
        lost={AGAIN: refused_again},
    )
    fault(
        CATEGORY,
        "connection lost with retries exhausted",
        trials=1,
        outcome="clear error; partial kept, resumed later to a verified file",
        lost={AGAIN: again},
    )
    assert refused_again == 0 and again == 0
    assert file_gets(hub)[-1] == "bytes=6000000-"
    assert pending_downloads(library.models_dir) == []
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)


def test_a_server_that_ignores_range_restarts_the_file_cleanly(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    hub.faults.drop_after, hub.faults.drops = 7_000_000, 1
    hub.faults.ignore_range = True
    fetch(hub, library)
    again = downloaded_again(hub)
    fault(
        CATEGORY,
        "server ignores Range (200 with the whole file on resume)",
        trials=1,
        outcome="restarted from zero; verified file",
        lost={AGAIN: again},
    )
    # The cost of such a server: what had arrived before the drop comes again, and no more.
    assert again == 7_000_000
    assert file_gets(hub) == [None, "bytes=7000000-"]
    assert [m.name for m in library.list_models()] == [NAME]
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)


def test_right_size_wrong_bytes_are_deleted_and_never_installed(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    hub.faults.flip_byte_at = starter.size // 2
    with pytest.raises(DownloadIntegrityError, match=f"lists {starter.sha256}") as caught:
        fetch(hub, library)
    message = error_message(caught)
    assert "deleted" in message
    assert library.list_models() == []
    assert [p for p in (library.models_dir / "hub").rglob("*") if p.is_file()] == []
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter, message)

    hub.faults.flip_byte_at = None
    fetch(hub, library)
    again = downloaded_again(hub)
    fault(
        CATEGORY,
        "right size, wrong bytes (one byte flipped)",
        trials=1,
        outcome="SHA-256 mismatch: deleted, clear error, nothing installed; the whole file downloaded again",
        lost={AGAIN: again},
    )
    # Which byte is wrong cannot be known: the whole file comes again, once.
    assert again == starter.size
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)


def test_stalls_are_retried_and_a_dead_server_is_a_clear_error(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    hub.faults.stall_after, hub.faults.stalls, hub.faults.stall_seconds = 3_000_000, 2, 5
    fetch(hub, library)
    stalled_again = downloaded_again(hub)
    assert file_gets(hub) == [None, "bytes=3000000-", "bytes=6000000-"]
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)
    library.remove(NAME, delete_file=True)
    hub.bodies.clear()  # removed on purpose: downloading it again is not the next fault's doing

    # A server that accepts the request, sends headers and then nothing, every time.
    hub.faults.stall_after, hub.faults.stalls = 0, 10
    with pytest.raises(HearthError, match=r"failed \(no data for 0\.5 s\); the 0\.0 MiB downloaded") as dead:
        fetch(hub, library)
    dead_again = downloaded_again(hub)
    fault(
        CATEGORY,
        "stalled transfer (no byte for the read timeout)",
        trials=2,
        outcome="retried and resumed; verified file",
        lost={AGAIN: stalled_again},
    )
    fault(
        CATEGORY,
        "server that stalls every time",
        trials=FAST.max_failures_without_progress + 1,
        outcome="clear error after the retry budget; nothing installed",
        lost={AGAIN: dead_again},
    )
    assert stalled_again == 0 and dead_again == 0
    assert len(file_gets(hub)) == 3 + FAST.max_failures_without_progress + 1
    assert library.list_models() == []
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter, error_message(dead))


def test_a_redirect_to_another_host_never_carries_the_token(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    cdn = hub.start_cdn()
    cdn.host_name = "localhost"  # another host name, not just another port of 127.0.0.1
    hub.faults.redirect_files = True
    hub.faults.drop_after, hub.faults.drops = 20_000_000, 1  # and a resume through the redirect
    client = HubClient(hub.url, TOKEN)
    listing = client.list_files(REPO)
    client.read_header(listing, listing.models[0])
    header_reads = len(cdn.bodies)
    Downloader(client, library, policy=FAST).download(listing, listing.models[0])
    # The header read fetched the file's first bytes; the download fetching them again is by design.
    del cdn.bodies[:header_reads]
    again = downloaded_again(hub, cdn)
    fault(
        CATEGORY,
        "redirect to another host (127.0.0.1 → localhost)",
        trials=len(cdn.requests),
        outcome="followed without the Authorization header; verified file",
        lost={AGAIN: again},
    )
    assert again == 0
    assert hub.requests and all(r.authorization == f"Bearer {TOKEN}" for r in hub.requests)
    assert len(cdn.requests) >= 3, "the header read and the download went to the CDN"
    assert all(r.authorization is None for r in cdn.requests)
    assert {r.headers["host"].split(":")[0] for r in cdn.requests} == {"localhost"}
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)


def test_401_and_403_say_what_to_do(
    hub: HubServer,
    library: ModelLibrary,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    served = starter_file()
    hub.valid_tokens.add(TOKEN)
    hub.add_repo(REPO, [served], gated="manual")
    with pytest.raises(HubAuthError, match="token is missing or invalid") as unauthorized:
        fetch(hub, library, token=None)
    with pytest.raises(HubAuthError, match="token is missing or invalid") as invalid:
        fetch(hub, library, token=TOKEN[:-1] + "x")
    with pytest.raises(
        HubGatedError, match=f"Accept the licence on the model page {hub.url}/{REPO}"
    ) as gated:
        fetch(hub, library)
    assert [p for p in library.models_dir.rglob("*") if p.is_file()] == []
    check_nothing_lost_or_leaked(
        library, hermetic_home, logs, served, *(error_message(e) for e in (unauthorized, invalid, gated))
    )
    refused_again = downloaded_again(hub)
    hub.granted[REPO] = {TOKEN}
    fetch(hub, library)
    again = downloaded_again(hub)
    fault(
        CATEGORY,
        "HTTP 401 (no token, wrong token)",
        trials=2,
        outcome='"token missing or invalid"; nothing written',
        lost={AGAIN: refused_again},
    )
    fault(
        CATEGORY,
        "HTTP 403 (licence not accepted)",
        trials=1,
        outcome='"accept the licence on the model page"; nothing written',
        lost={AGAIN: again},
    )
    assert refused_again == 0 and again == 0
    check_nothing_lost_or_leaked(library, hermetic_home, logs, served)


class RecordingControl(DownloadControl):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return super().wait(seconds)


def test_429_waits_as_long_as_retry_after_says_then_explains(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    fault: RecordFault,
) -> None:
    hub.faults.statuses, hub.faults.retry_after = [429, 429], 1
    control = RecordingControl()
    fetch(hub, library, control=control)
    waited_again = downloaded_again(hub)
    assert control.waits == [1.0, 1.0]
    assert len(hub.requests_to("/resolve/")) == 3
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)
    library.remove(NAME, delete_file=True)
    hub.bodies.clear()  # removed on purpose: downloading it again is not the next fault's doing

    hub.faults.statuses, hub.faults.retry_after = [429] * 10, 0
    with pytest.raises(HubRateLimited, match="rate-limiting") as limited:
        fetch(hub, library)
    limited_again = downloaded_again(hub)
    fault(
        CATEGORY,
        "HTTP 429 with Retry-After",
        trials=2,
        outcome="waited exactly as asked, then downloaded; verified file",
        lost={AGAIN: waited_again},
    )
    fault(
        CATEGORY,
        "HTTP 429 past the retry budget",
        trials=FAST.max_failures_without_progress + 1,
        outcome='"rate-limiting, try again"; nothing installed',
        lost={AGAIN: limited_again},
    )
    assert waited_again == 0 and limited_again == 0
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter, error_message(limited))


def test_a_full_disk_keeps_the_partial_file_for_a_resume(
    hub: HubServer,
    library: ModelLibrary,
    starter: ServedFile,
    hermetic_home: Path,
    logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    fault: RecordFault,
) -> None:
    real_write = downloads_module._write_chunk
    written = 0

    def fills_up(target: BinaryIO, data: bytes | bytearray) -> None:
        nonlocal written
        if written > 20_000_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(target, data)
        written += len(data)

    monkeypatch.setattr(downloads_module, "_write_chunk", fills_up)
    with pytest.raises(HearthError, match=r"Not enough disk space.*kept") as full:
        fetch(hub, library)
    [pending] = pending_downloads(library.models_dir)
    assert pending.done == written
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter, error_message(full))

    monkeypatch.setattr(downloads_module, "_write_chunk", real_write)
    fetch(hub, library)
    # What was on its way when the write failed comes again; everything written is kept.
    fault(
        CATEGORY,
        "disk full mid-download (ENOSPC injected at the write call)",
        trials=1,
        outcome="clear error; partial kept; resumed to a verified file; only what was in flight came again",
        lost={AGAIN: downloaded_again(hub)},
    )
    assert file_gets(hub)[-1] == f"bytes={written}-"
    check_nothing_lost_or_leaked(library, hermetic_home, logs, starter)


# --- whole processes: a real full disk, a real kill ------------------------------------------------------


def hearth_command(hub: HubServer, home: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "app",
        "models",
        "download",
        REPO,
        "--endpoint",
        hub.url,
        "--home",
        str(home),
    ]


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}


class TinyDisk:
    """A tmpfs of `size` bytes over `target`, visible only inside a user and mount namespace held by a child
    process; commands run in it with nsenter and the test reaches its files through /proc/PID/root."""

    def __init__(self, target: Path, size: int) -> None:
        self.target = target
        script = 'mount -t tmpfs -o "size=$1" tmpfs "$0" && echo mounted && exec sleep 600'
        self._holder = subprocess.Popen(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(target), str(size)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._holder.stdout is not None
        if self._holder.stdout.readline().strip() != "mounted":
            self.close()
            pytest.skip("no size-limited filesystem: unprivileged user namespaces are not allowed here")

    def outside(self, path: Path) -> Path:
        """Where this process sees `path` of the namespace."""
        return Path(f"/proc/{self._holder.pid}/root") / path.relative_to("/")

    def command(self, argv: list[str]) -> list[str]:
        return [
            "nsenter",
            "--user",
            "--mount",
            "--preserve-credentials",
            "-t",
            str(self._holder.pid),
            "--",
            *argv,
        ]

    def close(self) -> None:
        self._holder.kill()
        self._holder.wait(10)
        self._holder.communicate()


def fill(directory: Path) -> int:
    """Write zeros until the disk is full; returns how many bytes fitted."""
    written = 0
    with (directory / "filler").open("wb", buffering=0) as filler:
        try:
            while True:
                written += filler.write(bytes(1 << 20))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return written


@pytest.mark.timeout(180)
@pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("nsenter")), reason="needs util-linux")
def test_a_really_full_disk_stops_the_download_clearly_and_it_resumes_when_space_returns(
    hub: HubServer, hermetic_home: Path, fault: RecordFault
) -> None:
    # A public repo: the command has no token (the keyring is this process's, in memory).
    starter = starter_file()
    hub.add_repo(REPO, [starter])
    models = hermetic_home / "models"
    models.mkdir(parents=True)
    # Room for the download and the margin Hearth keeps free, so it starts; the filler takes the rest later.
    disk = TinyDisk(models, starter.size + FREE_SPACE_MARGIN + (8 << 20))
    try:
        hub.faults.rate_bps = 25_000_000
        part = disk.outside(local_path(models, REPO, starter.filename).with_name(starter.filename + ".part"))
        child = subprocess.Popen(
            disk.command(hearth_command(hub, hermetic_home)),
            cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (part.exists() and part.stat().st_size > 20_000_000):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        filled = fill(disk.outside(models))
        assert filled > 0
        _, stderr = child.communicate(timeout=60)
        assert child.returncode == 3, stderr
        # stderr also has the progress lines (and a warning where no keyring exists): the error is the last.
        [line] = [ln for ln in stderr.splitlines() if ln.startswith("hearth: ")]
        assert stderr.strip().endswith(line)
        assert re.fullmatch(
            r"hearth: Not enough disk space in .* to download .*: "
            r"the [\d.]+ MiB downloaded so far are kept\. "
            r"Free up [\d.]+ MiB and run the same command to resume\.",
            line,
        ), line
        kept = part.read_bytes()
        assert len(kept) > 20_000_000 and starter.path is not None
        assert starter.path.read_bytes().startswith(kept), "what was kept is a true prefix of the file"

        (disk.outside(models) / "filler").unlink()
        hub.faults.rate_bps = None
        resumed = subprocess.run(
            disk.command(hearth_command(hub, hermetic_home)),
            cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        assert int(file_gets(hub)[-1].removeprefix("bytes=").rstrip("-")) >= len(kept)  # type: ignore[union-attr]
        final = disk.outside(local_path(models, REPO, starter.filename))
        assert hashlib.sha256(final.read_bytes()).hexdigest() == starter.sha256
        assert not part.exists()
    finally:
        disk.close()
    fault(
        CATEGORY,
        "disk full mid-download (a real, full tmpfs)",
        trials=1,
        outcome="clear one-line error, exit 3; partial kept; resumed to a verified file once space returned",
        lost={AGAIN: downloaded_again(hub)},
    )


@pytest.mark.timeout(120)
def test_a_download_killed_mid_way_resumes_in_a_new_process(
    hub: HubServer, hermetic_home: Path, fault: RecordFault
) -> None:
    served = starter_file()
    hub.add_repo(REPO, [served])
    hub.faults.rate_bps = 25_000_000
    part = local_path(hermetic_home / "models", REPO, served.filename).with_name(served.filename + ".part")
    command = hearth_command(hub, hermetic_home)
    child = subprocess.Popen(
        command, cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not (part.exists() and part.stat().st_size > 20_000_000):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(10)
        child.communicate()
    killed_at = part.stat().st_size
    assert 20_000_000 < killed_at < served.size

    hub.faults.rate_bps = None
    resumed = subprocess.run(
        command, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    ranges = file_gets(hub)
    assert ranges[0] is None and ranges[-1] is not None
    assert int(ranges[-1].removeprefix("bytes=").rstrip("-")) >= killed_at
    final = local_path(hermetic_home / "models", REPO, served.filename)
    assert hashlib.sha256(final.read_bytes()).hexdigest() == served.sha256
    assert not part.exists()
    fault(
        CATEGORY,
        "app killed (SIGKILL) mid-download, then run again",
        trials=1,
        outcome="resumed from the partial file; verified file; only what was in flight came again",
        lost={AGAIN: downloaded_again(hub)},
    )
