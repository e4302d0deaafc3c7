"""Downloads against a real local hub server; the client is huggingface_hub's HTTP session plus Hearth's
transfer loop, with no mocked HTTP layer. The server's faults (drops, stalls, ignored Range, wrong bytes,
redirects, 401/403/429, a full disk, a killed process) are in tests/reliability/test_download_faults.py."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import sys
from pathlib import Path

import filelock
import pytest

import app.library.downloads as downloads_module
from app.errors import HearthError
from app.library.downloads import (
    DownloadCancelled,
    DownloadControl,
    Downloader,
    DownloadPaused,
    DownloadProgress,
    RetryPolicy,
    local_path,
    pending_downloads,
)
from app.library.hub import HubClient, RepoListing
from app.library.installed import ModelLibrary
from tests.helpers.gguf_factory import TensorSpec, gguf_bytes
from tests.helpers.hubserver import HubServer, ServedFile, starter_file
from tests.helpers.model_files import with_chat_template

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
TOKEN = "hf_TestTokenThatMustNeverLeakAnywhere0123"
FAST = RetryPolicy(
    stall_timeout_s=0.5,
    connect_timeout_s=2,
    base_delay_s=0.01,
    max_delay_s=0.05,
    max_failures_without_progress=3,
)
GIVE_UP_AT_ONCE = RetryPolicy(stall_timeout_s=0.5, base_delay_s=0.01, max_failures_without_progress=0)


@pytest.fixture
def starter(hub: HubServer) -> ServedFile:
    file = starter_file()
    hub.add_repo(REPO, [file])
    return file


def fetch(
    hub: HubServer,
    library: ModelLibrary,
    *,
    token: str | None = None,
    control: DownloadControl | None = None,
    progress: list[DownloadProgress] | None = None,
    policy: RetryPolicy = FAST,
) -> tuple[RepoListing, object]:
    client = HubClient(hub.url, token)
    listing = client.list_files(REPO)
    installed = Downloader(client, library, policy=policy).download(
        listing,
        listing.models[0],
        control=control,
        progress=progress.append if progress is not None else None,
    )
    return listing, installed


def file_gets(hub: HubServer) -> list[str | None]:
    return [r.headers.get("range") for r in hub.requests_to("/resolve/")]


def leftovers(library: ModelLibrary) -> list[str]:
    hub_dir = library.models_dir / "hub"
    return sorted(p.name for p in hub_dir.rglob("*") if p.is_file()) if hub_dir.exists() else []


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_download_is_verified_installed_and_pinned(
    hub: HubServer, library: ModelLibrary, starter: ServedFile
) -> None:
    seen: list[DownloadProgress] = []
    listing, _ = fetch(hub, library, progress=seen)

    [model] = [m for m in library.list_models() if m.repo_id == REPO]
    assert model.path == local_path(library.models_dir, REPO, starter.filename).resolve()
    assert model.source == f"hub:{REPO}@{listing.commit}/{starter.filename}"
    assert (model.revision, model.filename, model.sha256) == (
        listing.commit,
        starter.filename,
        starter.sha256,
    )
    assert (model.quantization, model.architecture, model.size_bytes) == ("Q4_1", "llama", starter.size)
    assert sha256(model.path) == starter.sha256
    assert leftovers(library) == [starter.filename]
    assert file_gets(hub) == [None]
    assert seen[-1].done == seen[-1].total == starter.size
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    # The file URL names the pinned commit, never the branch.
    assert all(f"/resolve/{listing.commit}/" in r.path for r in hub.requests_to("/resolve/"))


def test_an_installed_file_is_not_downloaded_again(
    hub: HubServer, library: ModelLibrary, starter: ServedFile
) -> None:
    _, first = fetch(hub, library)
    _, second = fetch(hub, library)
    assert first == second
    assert len(hub.requests_to("/resolve/")) == 1


def test_free_space_is_checked_before_anything_is_fetched(
    hub: HubServer, library: ModelLibrary, starter: ServedFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(downloads_module, "_free_bytes", lambda _directory: 10 << 20)
    with pytest.raises(HearthError, match=re.escape("needs 93.8 MiB more but only 10.0 MiB is free")):
        fetch(hub, library)
    assert hub.requests_to("/resolve/") == []


def test_pause_keeps_the_partial_and_the_next_call_resumes(
    hub: HubServer, library: ModelLibrary, starter: ServedFile
) -> None:
    hub.faults.rate_bps = 200_000_000
    control = DownloadControl()

    def pause_midway(progress: DownloadProgress) -> None:
        if progress.done > 30_000_000:
            control.pause()

    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    downloader = Downloader(client, library, policy=FAST)
    with pytest.raises(DownloadPaused, match="paused"):
        downloader.download(listing, listing.models[0], control=control, progress=pause_midway)
    [pending] = pending_downloads(library.models_dir)
    assert 30_000_000 < pending.done < starter.size

    downloader.download(listing, listing.models[0])
    assert file_gets(hub)[-1] == f"bytes={pending.done}-"
    assert library.verify("SmolLM2-135M-Instruct.Q4_1")


def test_cancel_deletes_the_partial(hub: HubServer, library: ModelLibrary, starter: ServedFile) -> None:
    # Throttled so the transfer outlasts the progress interval; over loopback it would finish in one report.
    hub.faults.rate_bps = 40_000_000
    control = DownloadControl()

    def cancel_midway(progress: DownloadProgress) -> None:
        if progress.done > 10_000_000:
            control.cancel()

    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    with pytest.raises(DownloadCancelled):
        Downloader(client, library, policy=FAST).download(
            listing, listing.models[0], progress=cancel_midway, control=control
        )
    assert leftovers(library) == []
    assert pending_downloads(library.models_dir) == []


def test_discard_removes_a_paused_download(
    hub: HubServer, library: ModelLibrary, starter: ServedFile
) -> None:
    hub.faults.drop_after, hub.faults.drops = 1_000_000, 1
    with pytest.raises(HearthError):
        fetch(hub, library, policy=GIVE_UP_AT_ONCE)
    assert pending_downloads(library.models_dir)
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    Downloader(client, library).discard(REPO, listing.models[0])
    assert leftovers(library) == []


def test_one_file_is_never_downloaded_twice_at_once(
    hub: HubServer, library: ModelLibrary, starter: ServedFile
) -> None:
    target = local_path(library.models_dir, REPO, starter.filename)
    target.parent.mkdir(parents=True)
    with (
        filelock.FileLock(f"{target}.lock", timeout=0),
        pytest.raises(HearthError, match="already being downloaded"),
    ):
        fetch(hub, library)


def split_files() -> list[ServedFile]:
    """A small split GGUF; part 2 is the largest so a test can cut it and not the others."""
    parts = [
        gguf_bytes(
            {"general.architecture": "llama", "llama.block_count": 3, "split.no": i, "split.count": 3},
            [TensorSpec(f"blk.{i}.attn_q.weight", (256, rows), 0, data=os.urandom(1024))],
        )
        for i, rows in enumerate((128, 1024, 256))
    ]
    return [
        ServedFile.from_bytes(f"Q8_0/tiny-Q8_0-0000{i + 1}-of-00003.gguf", p) for i, p in enumerate(parts)
    ]


def test_a_split_model_downloads_every_part_and_registers_the_first(
    hub: HubServer, library: ModelLibrary
) -> None:
    files = split_files()
    hub.add_repo(REPO, [*files, starter_file()])
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    split = next(m for m in listing.models if len(m.parts) == 3)
    hub.faults.drop_after, hub.faults.drops = 100_000, 2

    installed = Downloader(client, library, policy=FAST).download(listing, split)

    assert installed.name == "tiny-Q8_0"
    assert installed.filename == files[0].filename and installed.path.name == "tiny-Q8_0-00001-of-00003.gguf"
    assert [p.path.name for p in installed.parts] == [Path(f.filename).name for f in files]
    assert [sha256(p.path) for p in installed.parts] == [f.sha256 for f in files]
    assert installed.total_size_bytes == sum(f.size for f in files)
    assert library.verify(installed.name)

    installed.parts[2].path.write_bytes(b"damaged")
    assert not library.verify(installed.name)
    assert library.remove(installed.name, delete_file=True)
    assert not any(p.path.exists() for p in installed.parts)


def test_a_finished_part_survives_a_failure_of_the_next(hub: HubServer, library: ModelLibrary) -> None:
    files = split_files()
    hub.add_repo(REPO, files)
    hub.faults.drop_after, hub.faults.drops = 600_000, 1
    with pytest.raises(HearthError, match="kept"):
        fetch(hub, library, policy=GIVE_UP_AT_ONCE)
    assert file_gets(hub) == [None, None]

    fetch(hub, library)
    # Part 1 is not fetched again, part 2 resumes, part 3 starts.
    assert file_gets(hub)[2:] == ["bytes=600000-", None]
    assert library.verify("tiny-Q8_0")


def test_upstream_replacement_is_noticed(
    hub: HubServer, library: ModelLibrary, starter: ServedFile, tmp_path: Path
) -> None:
    listing, _ = fetch(hub, library)
    installed = library.find_hub_file(REPO, starter.filename)
    assert installed is not None
    client = HubClient(hub.url)
    assert client.check_update(installed).changed is False

    repo = hub.repos[REPO]
    assert starter.path is not None
    changed = with_chat_template(starter.path, tmp_path / "changed.gguf", "{{ messages }}")
    repo.commit([ServedFile.from_path(starter.filename, changed)])
    check = client.check_update(installed)
    assert check.changed is True and check.commit == repo.head
    assert listing.commit[:12] in check.detail
    with pytest.raises(HearthError, match="has changed since"):
        fetch(hub, library)

    repo.commit([])
    assert client.check_update(installed).changed is None


def test_the_token_never_reaches_a_file_or_a_log(
    hub: HubServer,
    hermetic_home: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.cli.main import main

    caplog.set_level(logging.DEBUG)
    hub.valid_tokens.add(TOKEN)
    hub.add_repo(REPO, [starter_file()], gated="manual")
    hub.granted[REPO] = {TOKEN}
    cdn = hub.start_cdn()
    hub.faults.redirect_files = True
    hub.faults.drop_after, hub.faults.drops = 20_000_000, 1
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO(TOKEN + "\n"))
    assert main(["token", "set"], out=out, err=err) == 0
    code = main(["-v", "models", "download", REPO, "--endpoint", hub.url], out=out, err=err)
    assert code == 0, err.getvalue()
    main(["models", "files", REPO, "--endpoint", hub.url, "--json"], out=out, err=err)

    assert any(r.authorization == f"Bearer {TOKEN}" for r in hub.requests)
    assert all(r.authorization is None for r in cdn.requests)
    secret = TOKEN.encode()
    files = [p for p in hermetic_home.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files)
    assert [p for p in files if secret in p.read_bytes()] == []
    assert TOKEN not in caplog.text and TOKEN not in out.getvalue() + err.getvalue()
    # Nor in huggingface_hub's own token file or cache.
    user_home = Path(os.environ["HOME"])
    assert [p for p in user_home.rglob("*") if p.is_file() and secret in p.read_bytes()] == []
