"""Update checks and updates against the local hub server: the upstream file is replaced by a new commit
on main (`ServedRepo.replace_upstream`), and the real Downloader fetches and verifies the new bytes."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.errors import HearthError
from app.library.downloads import Downloader, RetryPolicy, local_path
from app.library.hub import HubClient
from app.library.installed import InstalledModel, ModelLibrary
from app.library.updates import (
    UPDATES_DIR,
    UpdateReport,
    check_updates,
    daily_check_due,
    forget_update,
    load_report,
    save_report,
    update_model,
)
from tests.helpers.gguf_factory import TensorSpec, gguf_bytes
from tests.helpers.hubserver import HubServer, ServedFile

REPO = "someone/tiny-GGUF"
FILENAME = "tiny-Q8_0.gguf"
GIVE_UP_AT_ONCE = RetryPolicy(stall_timeout_s=0.5, base_delay_s=0.01, max_failures_without_progress=0)


def tiny_model(filename: str = FILENAME, block: int = 0, **metadata: object) -> ServedFile:
    """A small valid GGUF model (or part: `block` names its tensor); random tensor bytes make every call a
    different file."""
    data = gguf_bytes(
        {"general.architecture": "llama", "llama.block_count": 2, **metadata},
        [TensorSpec(f"blk.{block}.attn_q.weight", (256, 64), 0, data=os.urandom(256 * 64 * 4))],
    )
    return ServedFile.from_bytes(filename, data)


def download(hub: HubServer, library: ModelLibrary, repo: str = REPO) -> InstalledModel:
    client = HubClient(hub.url)
    listing = client.list_files(repo)
    return Downloader(client, library).download(listing, listing.models[0])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_upstream_replacement_is_listed_with_both_hashes_and_the_commit(
    hub: HubServer, library: ModelLibrary
) -> None:
    old = tiny_model()
    repo = hub.add_repo(REPO, [old, ServedFile.from_bytes("README.md", b"hello", lfs=False)])
    installed = download(hub, library)
    client = HubClient(hub.url)

    unchanged = check_updates(library, client)
    assert unchanged.updates == () and unchanged.errors == () and unchanged.checked == 1

    new = tiny_model()
    commit = repo.replace_upstream(new)
    report = check_updates(library, client)
    assert report.checked == 1 and report.errors == ()
    [update] = report.updates
    assert (update.name, update.repo, update.file) == (installed.name, REPO, FILENAME)
    assert (update.installed_sha256, update.upstream_sha256) == (old.sha256, new.sha256)
    assert update.upstream_commit == commit and not update.in_place


def test_a_changed_part_of_a_split_model_is_an_update(hub: HubServer, library: ModelLibrary) -> None:
    def part(i: int) -> ServedFile:
        return tiny_model(f"tiny-Q8_0-0000{i + 1}-of-00002.gguf", i, **{"split.no": i, "split.count": 2})

    parts = [part(0), part(1)]
    repo = hub.add_repo(REPO, parts)
    download(hub, library)
    client = HubClient(hub.url)
    assert check_updates(library, client).updates == ()

    new_part = part(1)
    repo.replace_upstream(new_part)
    [update] = check_updates(library, client).updates
    assert update.file == parts[1].filename
    assert (update.installed_sha256, update.upstream_sha256) == (parts[1].sha256, new_part.sha256)


def test_a_gone_repo_and_a_removed_file_are_errors_not_updates(hub: HubServer, library: ModelLibrary) -> None:
    hub.add_repo(REPO, [tiny_model()])
    other = hub.add_repo("someone/other-GGUF", [tiny_model("other-Q4_0.gguf")])
    gone = download(hub, library)
    removed = download(hub, library, "someone/other-GGUF")
    del hub.repos[REPO]
    other.commit([tiny_model("renamed-Q4_0.gguf")])

    report = check_updates(library, HubClient(hub.url))

    assert report.updates == () and report.checked == 2
    reasons = {e.name: e.reason for e in report.errors}
    assert "token is missing or invalid" in reasons[gone.name] or "not found" in reasons[gone.name]
    assert "no longer on main" in reasons[removed.name]


def test_no_hub_at_all_is_one_error(hub: HubServer, library: ModelLibrary) -> None:
    hub.add_repo(REPO, [tiny_model()])
    hub.add_repo("someone/other-GGUF", [tiny_model("other-Q4_0.gguf")])
    download(hub, library)
    download(hub, library, "someone/other-GGUF")
    url = hub.url
    hub.stop()
    with pytest.raises(HearthError, match="Could not reach the Hub"):
        check_updates(library, HubClient(url, timeout_s=2))


def test_an_update_downloads_verifies_switches_and_deletes_the_old_file(
    hub: HubServer, library: ModelLibrary
) -> None:
    repo = hub.add_repo(REPO, [tiny_model()])
    before = download(hub, library)
    client = HubClient(hub.url)
    assert update_model(library, client, before.name) is None

    new = tiny_model()
    commit = repo.replace_upstream(new)
    result = update_model(library, client, before.name)

    assert result is not None
    after = library.get(before.name)
    assert after == result.model and after.id == before.id
    assert (after.sha256, after.revision, after.filename) == (new.sha256, commit, FILENAME)
    assert after.path.is_relative_to(library.models_dir / UPDATES_DIR) and sha256(after.path) == new.sha256
    assert library.verify(before.name)
    assert result.deleted == (before.path,) and not before.path.exists()
    # The repo's old folder was made for the first download and is empty now.
    assert not before.path.parent.exists()
    assert check_updates(library, client).updates == ()


def test_wrong_bytes_from_the_server_leave_the_old_model_intact(
    hub: HubServer, library: ModelLibrary
) -> None:
    repo = hub.add_repo(REPO, [tiny_model()])
    before = download(hub, library)
    repo.replace_upstream(tiny_model())
    hub.faults.flip_byte_at = 1000

    with pytest.raises(HearthError):
        update_model(library, HubClient(hub.url), before.name, policy=GIVE_UP_AT_ONCE)

    assert library.get(before.name) == before
    assert before.path.exists() and library.verify(before.name)
    staged = library.models_dir / UPDATES_DIR
    assert not any(p.is_file() and p.suffix == ".gguf" for p in staged.rglob("*"))


def test_an_interrupted_update_keeps_the_old_model_and_resumes(hub: HubServer, library: ModelLibrary) -> None:
    repo = hub.add_repo(REPO, [tiny_model()])
    before = download(hub, library)
    new = tiny_model()
    repo.replace_upstream(new)
    hub.faults.drop_after, hub.faults.drops = 20_000, 1
    client = HubClient(hub.url)

    with pytest.raises(HearthError, match="kept"):
        update_model(library, client, before.name, policy=GIVE_UP_AT_ONCE)
    assert library.get(before.name) == before and library.verify(before.name)

    result = update_model(library, client, before.name)
    assert result is not None and result.model.sha256 == new.sha256
    assert any(b.start == 20_000 for b in hub.bodies if b.sha256 == new.sha256)


def test_a_model_used_in_place_is_updated_into_the_models_folder_and_its_file_kept(
    hub: HubServer, library: ModelLibrary, tmp_path: Path
) -> None:
    old = tiny_model()
    repo = hub.add_repo(REPO, [old])
    # As `hearth models scan --add` registers a file from the Hugging Face cache.
    elsewhere = tmp_path / "hf-cache" / FILENAME
    elsewhere.parent.mkdir()
    assert old.data is not None
    elsewhere.write_bytes(old.data)
    before = library.register_in_place(
        elsewhere,
        name="tiny",
        source="hf-cache",
        expected_sha256=old.sha256,
        repo_id=REPO,
        revision=repo.head,
        filename=FILENAME,
    )
    client = HubClient(hub.url)
    new = tiny_model()
    repo.replace_upstream(new)

    [update] = check_updates(library, client).updates
    assert update.in_place
    result = update_model(library, client, before.name)

    assert result is not None and result.deleted == ()
    assert elsewhere.read_bytes() == old.data
    assert result.model.path.is_relative_to(library.models_dir) and result.model.sha256 == new.sha256
    assert local_path(library.models_dir, REPO, FILENAME) != result.model.path


def test_the_last_check_is_kept_and_the_daily_check_runs_at_most_daily(hermetic_home: Path) -> None:
    assert not daily_check_due(hermetic_home, enabled=False)
    assert daily_check_due(hermetic_home, enabled=True)
    now = datetime.now(UTC)
    from app.library.updates import ModelUpdate, UpdateProblem

    update = ModelUpdate("tiny", REPO, FILENAME, "a" * 64, "b" * 64, "c" * 40, False)
    save_report(hermetic_home, UpdateReport((update,), 2, (UpdateProblem("gone", "why"),), now))

    loaded = load_report(hermetic_home)
    assert loaded == UpdateReport((update,), 2, (UpdateProblem("gone", "why"),), now)
    assert not daily_check_due(hermetic_home, enabled=True, now=now + timedelta(hours=23))
    assert daily_check_due(hermetic_home, enabled=True, now=now + timedelta(hours=25))
    forget_update(hermetic_home, "tiny")
    reloaded = load_report(hermetic_home)
    assert reloaded is not None and reloaded.updates == () and reloaded.checked == 2

    (hermetic_home / "model-updates.json").write_text("{not json")
    assert load_report(hermetic_home) is None
