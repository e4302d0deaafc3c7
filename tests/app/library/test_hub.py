"""app.library.hub against a real local hub server: names from listings, search, pinned listings, remote
headers."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import huggingface_hub
import pytest
from huggingface_hub.utils import _detect_agent

from app.errors import HearthError, InvalidModelFile
from app.library.hub import (
    PUBLIC_ENDPOINT,
    HttpRangeSource,
    HubAuthError,
    HubClient,
    HubError,
    HubGatedError,
    HubNotFound,
    HubUnreachable,
    RemoteFile,
    check_repo_filename,
    check_repo_id,
    group_gguf_files,
    quant_label,
    resolve_endpoint,
    unsafe_filename_reason,
)
from inference.gguf import GGUFError, parse_header, read_header
from tests.helpers.gguf_factory import BytesSource, TensorSpec, gguf_bytes
from tests.helpers.hubserver import HubServer, ServedFile, starter_file

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"


@pytest.mark.parametrize(
    "name",
    [
        "../evil.gguf",
        "models/../../evil.gguf",
        "./model.gguf",
        "/etc/passwd",
        "C:evil.gguf",
        "C:/Windows/evil.gguf",
        "c:\\evil.gguf",
        "\\\\server\\share\\evil.gguf",
        "dir\\evil.gguf",
        "model.gguf.",
        "model.gguf ",
        "dir./model.gguf",
        "a//b.gguf",
        "dir/",
        "",
        "model\x00.gguf",
        "model\n.gguf",
        "model.gguf:stream",
        "con.gguf",
        "sub/NUL",
        "what?.gguf",
        "x" * 300 + ".gguf",
    ],
)
def test_unsafe_repo_filenames_are_refused(name: str) -> None:
    assert unsafe_filename_reason(name) is not None
    with pytest.raises(HearthError):
        check_repo_filename(name)


@pytest.mark.parametrize(
    "name", ["model.Q4_K_M.gguf", "Q4_K_M/model-00001-of-00002.gguf", "a b+c (1)[x].gguf", ".hidden.gguf"]
)
def test_ordinary_repo_filenames_pass(name: str) -> None:
    assert check_repo_filename(name) == name


@pytest.mark.parametrize(
    ("filename", "label"),
    [
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("qwen2.5-7b-instruct-q8_0.gguf", "Q8_0"),
        ("Meta-Llama-3-8B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
        ("gemma-3-270m-it-BF16.gguf", "BF16"),
        ("model.f16.gguf", "F16"),
        ("Qwen3-235B-A22B-Q3_K_M-00001-of-00003.gguf", "Q3_K_M"),
        ("Q6_K/Qwen2-72B-Instruct-Q6_K-00002-of-00002.gguf", "Q6_K"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("mistral-7b-IQ2_XXS.gguf", "IQ2_XXS"),
        ("plain-model.gguf", None),
    ],
)
def test_quantization_is_read_from_the_file_name(filename: str, label: str | None) -> None:
    assert quant_label(filename) == label


def test_split_parts_become_one_model_and_incomplete_splits_are_skipped() -> None:
    files = [
        RemoteFile("big-Q4_K_M-00002-of-00003.gguf", 20, "b" * 64),
        RemoteFile("big-Q4_K_M-00001-of-00003.gguf", 10, "a" * 64),
        RemoteFile("big-Q4_K_M-00003-of-00003.gguf", 30, "c" * 64),
        RemoteFile("big-Q8_0-00001-of-00002.gguf", 10, "d" * 64),
        RemoteFile("small-Q8_0.gguf", 5, "e" * 64),
        RemoteFile("mmproj-model-f16.gguf", 5, "f" * 64),
        RemoteFile("README.md", 1, None),
    ]
    models, rejected = group_gguf_files(files)
    assert [(m.name, m.quantization, m.size) for m in models] == [
        ("small-Q8_0", "Q8_0", 5),
        ("big-Q4_K_M", "Q4_K_M", 60),
    ]
    assert [p.filename for p in models[1].parts] == [f"big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert rejected == (("big-Q8_0-00001-of-00002.gguf", "split model is missing part(s) 2"),)


def test_endpoint_comes_from_the_setting_then_hf_endpoint_then_the_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert resolve_endpoint(None) == PUBLIC_ENDPOINT
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example/")
    assert resolve_endpoint(None) == "https://mirror.example"
    assert resolve_endpoint("http://127.0.0.1:9/hf/") == "http://127.0.0.1:9/hf"
    for bad in ("ftp://x", "https://user:pw@host", "not a url", "https://h/?q=1"):
        with pytest.raises(HearthError):
            resolve_endpoint(bad)


def test_repo_ids_are_checked() -> None:
    assert check_repo_id("owner/name.v2-GGUF") == "owner/name.v2-GGUF"
    for bad in ("../x", "a/b/c", "a--b/c", "/x", "a/", "a b/c", "a/..b"):
        with pytest.raises(HearthError):
            check_repo_id(bad)


def test_search_sends_what_hfapi_sends_and_reads_every_field(hub: HubServer) -> None:
    hub.add_repo(REPO, [starter_file()], downloads=900, likes=12, gated="manual", license="apache-2.0")
    hub.add_repo("other/tiny-GGUF", [ServedFile.from_bytes("tiny.gguf", b"x")], downloads=50)
    hub.add_repo("other/not-gguf", [], downloads=10_000, tags=("safetensors",))

    results = HubClient(hub.url).search("gguf", limit=5)

    assert [r.repo_id for r in results] == [REPO, "other/tiny-GGUF"]
    first = results[0]
    assert (first.downloads, first.likes, first.license, first.gated) == (900, 12, "apache-2.0", True)
    assert first.last_modified is not None and first.last_modified.year == 2025
    [request] = hub.requests_to("/api/models")
    assert request.query["search"] == ["gguf"]
    assert request.query["filter"] == ["gguf"]
    assert request.query["limit"] == ["5"]
    assert request.query["sort"] == ["downloads"]
    assert set(request.query["expand"]) >= {"downloads", "likes", "gated", "lastModified"}


def test_search_follows_pagination_links(hub: HubServer) -> None:
    hub.page_size = 2
    for i in range(5):
        hub.add_repo(f"owner/model-{i}-GGUF", [], downloads=100 - i)
    results = HubClient(hub.url).search("model", limit=4)
    assert [r.repo_id for r in results] == [f"owner/model-{i}-GGUF" for i in range(4)]
    assert len(hub.requests_to("/api/models")) == 2


class _OddSearch(BaseHTTPRequestHandler):
    """A mirror whose search answers are not what the Hub sends: `body` as is, plus a `link` header."""

    body = b"[]"
    link: str | None = None
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        if self.link is not None:
            self.send_header("Link", self.link)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def odd_mirror() -> Iterator[tuple[str, type[_OddSearch]]]:
    handler = type("Handler", (_OddSearch,), {"paths": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_a_search_nobody_answers_ends_in_a_clear_error_without_retrying_for_minutes() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections complete, and no byte ever comes back
        client = HubClient(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(HubUnreachable, match="the connection timed out"):
            client.search("llama")
    # One request and its timeout: HfApi.list_models would wait forever, then retry five times.
    assert time.monotonic() - started < 10


def test_a_search_answer_that_is_not_a_model_list_is_an_error(
    odd_mirror: tuple[str, type[_OddSearch]],
) -> None:
    url, handler = odd_mirror
    handler.body = b"<html>Sign in to the proxy</html>"
    with pytest.raises(HubError, match="answered the search with something that is not a list of models"):
        HubClient(url).search("llama")


def test_a_next_page_on_another_origin_is_not_followed(odd_mirror: tuple[str, type[_OddSearch]]) -> None:
    url, handler = odd_mirror
    handler.body = json.dumps([{"id": "owner/one-GGUF", "downloads": 3}, {"no id": True}]).encode()
    handler.link = '<http://127.0.0.2:9/api/models?cursor=1>; rel="next"'
    results = HubClient(url, token="hf_secret").search("one", limit=5)
    assert [r.repo_id for r in results] == ["owner/one-GGUF"] and results[0].downloads == 3
    assert len(handler.paths) == 1


def test_listing_is_pinned_to_a_commit_with_lfs_hashes(hub: HubServer) -> None:
    starter = starter_file()
    repo = hub.add_repo(REPO, [starter, ServedFile.from_bytes("README.md", b"# hi", lfs=False)])

    listing = HubClient(hub.url).list_files(REPO)

    assert listing.commit == repo.head and listing.revision == "main"
    [model] = listing.models
    assert model.quantization == "Q4_1"
    assert model.parts == (RemoteFile(starter.filename, starter.size, starter.sha256),)
    [request] = hub.requests_to(f"/api/models/{REPO}/revision/main")
    assert request.query["blobs"] == ["true"]


def test_hostile_names_in_a_listing_are_skipped_and_reported(hub: HubServer) -> None:
    hub.add_repo(
        REPO,
        [starter_file()],
        listed_only=("../../escape.gguf", "C:evil.gguf", "\\\\server\\share\\x.gguf", "trailing.gguf."),
    )
    listing = HubClient(hub.url).list_files(REPO)
    assert [m.filename for m in listing.models] == [starter_file().filename]
    assert len(listing.rejected) == 4
    assert all("escape" not in m.filename for m in listing.models)


def test_remote_header_matches_the_local_one_and_is_read_with_bounded_ranges(hub: HubServer) -> None:
    starter = starter_file()
    hub.add_repo(REPO, [starter])
    client = HubClient(hub.url)
    listing = client.list_files(REPO)

    remote = client.read_header(listing, listing.models[0])

    assert starter.path is not None
    local = read_header(starter.path)
    assert remote == local
    ranges = [r.headers.get("range") for r in hub.requests_to("/resolve/")]
    assert ranges and all(r is not None and r.startswith("bytes=") for r in ranges)
    fetched = sum(int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) + 1 for r in ranges if r)
    assert fetched < 4 * local.data_offset + (1 << 21)


def test_range_source_caps_what_it_fetches_even_from_a_server_that_ignores_range(hub: HubServer) -> None:
    starter = starter_file()
    repo = hub.add_repo(REPO, [starter])
    hub.faults.ignore_range = True
    client = HubClient(hub.url)
    url = client.file_url(REPO, repo.head, starter.filename)

    source = HttpRangeSource(
        client, url, starter.size, what="starter", page_url=hub.url, max_fetch_bytes=4 << 20
    )
    assert starter.path is not None
    assert source.read(8, 4) == starter.path.read_bytes()[8:12]
    with pytest.raises(GGUFError, match=r"too large|more than"):
        source.read(8 << 20, 16)
    assert source.fetched <= 4 << 20


def test_a_hostile_remote_header_is_refused_like_a_local_one(hub: HubServer) -> None:
    # Claims 2^40 tensors in a 64-byte file: the same check as for local files, before any big read.
    evil = b"GGUF" + (3).to_bytes(4, "little") + (1 << 40).to_bytes(8, "little") + (0).to_bytes(8, "little")
    hub.add_repo(REPO, [ServedFile.from_bytes("evil-Q4_0.gguf", evil + b"\0" * 40)])
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    with pytest.raises(InvalidModelFile, match="claims"):
        client.read_header(listing, listing.models[0])


def test_split_header_has_every_parts_tensors(hub: HubServer) -> None:
    parts = [
        gguf_bytes(
            {"general.architecture": "llama", "split.no": i, "split.count": 2},
            [TensorSpec(f"blk.{i}.w", (32, 4), 0)],
        )
        for i in range(2)
    ]
    files = [ServedFile.from_bytes(f"m-Q8_0-0000{i + 1}-of-00002.gguf", p) for i, p in enumerate(parts)]
    hub.add_repo(REPO, files)
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    header = client.read_header(listing, listing.models[0])
    assert [t.name for t in header.tensors] == ["blk.0.w", "blk.1.w"]
    assert header.file_size == sum(len(p) for p in parts)
    assert header.metadata == parse_header(BytesSource(parts[0])).metadata


def test_api_errors_are_explained(hub: HubServer) -> None:
    hub.add_repo("org/private-GGUF", [starter_file()], private=True)
    client = HubClient(hub.url)
    with pytest.raises(HubAuthError, match="token is missing or invalid"):
        client.list_files("org/private-GGUF")
    with pytest.raises(HubAuthError, match="token is missing or invalid"):
        HubClient(hub.url, "hf_notarealtokenatallxxxxxxxx").search("x")
    hub.valid_tokens.add("hf_validtokenvalidtokenvalid")
    with pytest.raises(HubNotFound):
        HubClient(hub.url, "hf_validtokenvalidtokenvalid").list_files("org/missing-GGUF")
    hub.add_repo(REPO, [starter_file()])
    with pytest.raises(HubNotFound):
        client.list_files(REPO, "no-such-branch")


def test_gated_file_needs_an_accepted_licence(hub: HubServer) -> None:
    token = "hf_validtokenvalidtokenvalid"
    hub.valid_tokens.add(token)
    hub.add_repo(REPO, [starter_file()], gated="manual")
    listing = HubClient(hub.url).list_files(REPO)  # metadata stays public
    assert listing.gated
    with pytest.raises(HubAuthError):
        HubClient(hub.url).read_header(listing, listing.models[0])
    with pytest.raises(HubGatedError, match=f"{hub.url}/{REPO}"):
        HubClient(hub.url, token).read_header(listing, listing.models[0])
    hub.granted[REPO] = {token}
    assert HubClient(hub.url, token).read_header(listing, listing.models[0]).architecture == "llama"


def test_offline_mode_is_respected(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HearthError, match="HF_HUB_OFFLINE"):
        HubClient(hub.url).search("x")
    assert hub.requests == []


def test_no_request_goes_anywhere_but_the_endpoint(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # huggingface_hub fetches an "agent harness" registry from constants.ENDPOINT while building its user
    # agent unless telemetry is off. Point that at the server to see whether it would be asked.
    other = HubServer().start()
    try:
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", other.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", False)
        monkeypatch.setattr(_detect_agent, "_registry", None)
        hub.add_repo(REPO, [starter_file()])
        client = HubClient(hub.url)
        client.search("smol")
        client.list_files(REPO)
        assert other.requests == []
    finally:
        other.stop()


def test_the_server_speaks_what_hf_hub_download_expects(hub: HubServer, tmp_path: Path) -> None:
    starter = starter_file()
    repo = hub.add_repo(REPO, [starter])
    path = huggingface_hub.hf_hub_download(
        REPO, starter.filename, revision=repo.head, endpoint=hub.url, token=False, cache_dir=tmp_path
    )
    assert Path(path).stat().st_size == starter.size
    meta = huggingface_hub.get_hf_file_metadata(
        huggingface_hub.hf_hub_url(REPO, starter.filename, revision="main", endpoint=hub.url), token=False
    )
    assert (meta.commit_hash, meta.etag, meta.size) == (repo.head, starter.sha256, starter.size)
