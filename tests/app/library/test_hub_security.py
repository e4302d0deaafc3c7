"""Security review items for the Hub (issue 13), against real local servers on 127.0.0.1:

- the Hugging Face token goes to https://huggingface.co only; a mirror gets its own token, stored for its
  origin; nothing is ever sent over plain http (item 6);
- API answers are capped after decompression, so a gzip bomb costs a few MiB, not gigabytes (item 13);
- every part of a split GGUF is validated, on download and on import, since llama.cpp opens parts 2..N
  itself (item 7).
"""

from __future__ import annotations

import gzip
import io
import json
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import keyring
import pytest

import app.library.hub
from app.cli.main import main
from app.errors import HearthError, InvalidModelFile
from app.library.downloads import Downloader, RetryPolicy
from app.library.hub import (
    MAX_API_REPLY_BYTES,
    EndpointToken,
    HubAuthError,
    HubClient,
    HubError,
    endpoint_origin,
    is_public_hub,
)
from app.library.installed import ModelLibrary
from tests.helpers.gguf_factory import TensorSpec, gguf_bytes, header_bytes, write_gguf
from tests.helpers.hubserver import HubServer, ServedFile, throwaway_tls

REPO = "org/tiny-GGUF"
HF_TOKEN = "hf_TheHuggingFaceTokenNeverLeavesHuggingFace"
MIRROR_TOKEN = "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00"
FAST = RetryPolicy(stall_timeout_s=2, connect_timeout_s=2, base_delay_s=0.01, max_failures_without_progress=1)
F32 = 0


def run(*argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    previous = sys.stdin
    sys.stdin = io.StringIO(stdin if stdin is not None else "")
    try:
        code = main(list(argv), out=out, err=err)
    finally:
        sys.stdin = previous
    return code, out.getvalue(), err.getvalue()


def tiny_gguf(name: str = "tiny") -> bytes:
    return gguf_bytes(
        {"general.architecture": "llama", "general.name": name, "llama.block_count": 1},
        [TensorSpec("token_embd.weight", (32, 4), F32, data=bytes(range(256)) * 2)],
    )


def split_parts(count: int = 3, *, split_no: Callable[[int], int] = lambda i: i) -> list[bytes]:
    """A real split GGUF: every part carries split.no (from 0), split.count and its own tensors."""
    return [
        gguf_bytes(
            {
                "general.architecture": "llama",
                "llama.block_count": count,
                "split.no": split_no(i),
                "split.count": count,
                "split.tensors.count": count,
            },
            [TensorSpec(f"blk.{i}.attn_q.weight", (32, 8), F32, data=bytes([i]) * 1024)],
        )
        for i in range(count)
    ]


def split_names(base: str, count: int = 3) -> list[str]:
    return [f"{base}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def hostile_gguf() -> bytes:
    """GGUF magic and version, then a claim of 2^40 tensors in a 64-byte file: for llama.cpp's parser only."""
    return header_bytes(1 << 40, 0) + bytes(40)


@pytest.fixture
def mirror(hub: HubServer, tmp_path: Path) -> Iterator[HubServer]:
    """An https mirror: trusted like the hub (same throwaway CA), but another origin, not the public Hub."""
    server = HubServer(tls=throwaway_tls(tmp_path / "mirror-tls")[1]).start()
    yield server
    server.stop()


@pytest.fixture
def plain_mirror() -> Iterator[HubServer]:
    server = HubServer().start()
    yield server
    server.stop()


def authorizations(*servers: HubServer) -> set[str | None]:
    return {r.authorization for server in servers for r in server.requests}


# -- item 6: which token goes where -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "public"),
    [
        ("https://huggingface.co", True),
        ("https://HuggingFace.co:443/", True),
        ("https://huggingface.co/some/path", True),
        ("http://huggingface.co", False),
        ("https://huggingface.co:8443", False),
        ("https://huggingface.co.evil.example", False),
        ("https://evil.example/huggingface.co", False),
        ("https://cdn-lfs.huggingface.co", False),
        ("https://hf-mirror.com", False),
    ],
)
def test_only_the_hubs_own_https_origin_counts_as_the_hub(endpoint: str, public: bool) -> None:
    assert is_public_hub(endpoint) is public


def test_a_mirrors_token_is_stored_by_origin() -> None:
    assert EndpointToken("https://huggingface.co").name == "huggingface-token"
    assert EndpointToken("https://Mirror.Example:443/hf/").name == "hf_token:https://mirror.example"
    assert EndpointToken("https://mirror.example:8443").name == "hf_token:https://mirror.example:8443"
    assert endpoint_origin("http://[::1]:80/x") == "http://[::1]"


def test_a_mirror_never_gets_the_hugging_face_token(
    hub: HubServer, mirror: HubServer, library: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror.add_repo(REPO, [ServedFile.from_bytes("tiny-Q8_0.gguf", tiny_gguf())])
    mirror.valid_tokens.add(HF_TOKEN)  # so a leak would not even show as a 401
    hub.valid_tokens.add(HF_TOKEN)

    # Named explicitly, and by HF_ENDPOINT as another tool may have exported it.
    client = HubClient(mirror.url, HF_TOKEN)
    client.search("tiny")
    listing = client.list_files(REPO)
    client.read_header(listing, listing.models[0])
    Downloader(client, library, policy=FAST).download(listing, listing.models[0])
    monkeypatch.setenv("HF_ENDPOINT", mirror.url)
    HubClient(None, HF_TOKEN).search("tiny")
    # And through the CLI, with the token saved the ordinary way.
    code, _, err = run("token", "set", stdin=HF_TOKEN + "\n")
    assert code == 0 and f"HF_ENDPOINT is {mirror.url}, which gets its own token" in err
    code, _, err = run("models", "files", REPO, "--endpoint", mirror.url, "--json")
    assert code == 0, err

    assert mirror.requests and authorizations(mirror) == {None}
    # The stand-in for huggingface.co still gets it: the rule is about where, not whether.
    HubClient(hub.url, HF_TOKEN).search("tiny")
    assert authorizations(hub) == {f"Bearer {HF_TOKEN}"}


def test_a_mirror_gets_its_own_token_set_for_its_origin(hub: HubServer, mirror: HubServer) -> None:
    mirror.add_repo(REPO, [ServedFile.from_bytes("tiny-Q8_0.gguf", tiny_gguf())], private=True)
    mirror.valid_tokens.add(MIRROR_TOKEN)
    with pytest.raises(HubAuthError, match=rf"hearth token set --endpoint {mirror.url}"):
        HubClient(mirror.url, HF_TOKEN).list_files(REPO)

    code, out, _ = run("token", "set", "--endpoint", mirror.url + "/", stdin=MIRROR_TOKEN + "\n")
    assert (
        code == 0
        and out == f"Token for {mirror.url} saved in the system keyring; it is sent to that origin only.\n"
    )
    assert keyring.get_keyring().get_password("Hearth", f"hf_token:{mirror.url}") == MIRROR_TOKEN
    assert keyring.get_keyring().get_password("Hearth", "huggingface-token") is None
    assert run("token", "status", "--endpoint", mirror.url)[1].startswith(f"Token for {mirror.url}: set (in")
    assert run("token", "status")[1].startswith("Token: not set")

    listing = HubClient(mirror.url, HF_TOKEN).list_files(REPO)
    assert [m.filename for m in listing.models] == ["tiny-Q8_0.gguf"]
    assert authorizations(mirror) == {None, f"Bearer {MIRROR_TOKEN}"}
    HubClient(hub.url, None).search("tiny")
    assert authorizations(hub) == {None}  # the mirror's token stays with the mirror

    assert run("token", "clear", "--endpoint", mirror.url)[1] == f"Token for {mirror.url} removed.\n"
    assert keyring.get_keyring().get_password("Hearth", f"hf_token:{mirror.url}") is None


def test_no_token_is_ever_sent_over_plain_http(plain_mirror: HubServer, library: ModelLibrary) -> None:
    plain_mirror.add_repo(REPO, [ServedFile.from_bytes("tiny-Q8_0.gguf", tiny_gguf())], private=True)
    plain_mirror.valid_tokens.update({HF_TOKEN, MIRROR_TOKEN})
    origin = endpoint_origin(plain_mirror.url)
    # Even an entry for this origin put in the keyring by hand is not read, let alone sent.
    keyring.get_keyring().set_password("Hearth", f"hf_token:{origin}", MIRROR_TOKEN)

    with pytest.raises(HubAuthError, match="Hearth never sends a token over plain http") as refused:
        HubClient(plain_mirror.url, HF_TOKEN).list_files(REPO)
    assert "https address" in str(refused.value)
    public = plain_mirror.add_repo("org/public-GGUF", [ServedFile.from_bytes("p-Q8_0.gguf", tiny_gguf("p"))])
    client = HubClient(plain_mirror.url, HF_TOKEN)
    listing = client.list_files(public.repo_id)
    Downloader(client, library, policy=FAST).download(listing, listing.models[0])
    assert plain_mirror.requests and authorizations(plain_mirror) == {None}

    # Refused before the token is asked for: nothing is read from stdin, nothing stored.
    code, out, err = run("token", "set", "--endpoint", plain_mirror.url, stdin=HF_TOKEN + "\n")
    assert code == 3 and out == ""
    assert err == (
        f"hearth: Hearth never sends a token over plain http, and {origin} is not https; use the mirror's "
        f"https address.\n"
    )
    code, out, _ = run("token", "status", "--endpoint", plain_mirror.url)
    assert code == 0 and out == f"Token for {origin}: none; Hearth never sends a token over plain http.\n"
    with pytest.raises(HearthError, match="plain http"):
        EndpointToken(plain_mirror.url).set(HF_TOKEN)


# -- item 13: API answers are capped after decompression -------------------------------------------------


def peak_bytes(action: Callable[[], object]) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    error: BaseException | None = None
    try:
        action()
    except HearthError as exc:
        error = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, error


def test_a_gzip_bomb_from_the_hub_is_cut_off_at_the_cap(hub: HubServer) -> None:
    hub.add_repo(REPO, [ServedFile.from_bytes("tiny-Q8_0.gguf", tiny_gguf())])
    hub.faults.api_gzip_bomb = 256 << 20  # about 260 KiB on the wire
    client = HubClient(hub.url)
    cap = MAX_API_REPLY_BYTES >> 20

    peak, error = peak_bytes(lambda: client.search("tiny"))
    assert isinstance(error, HubError)
    assert str(error) == (
        f"The Hub's answer to the search for 'tiny' was larger than {cap} MiB; that is not a model list, so "
        f"Hearth stopped reading it."
    )
    assert peak < 3 * MAX_API_REPLY_BYTES, f"{peak >> 20} MiB held for a capped answer"

    peak, error = peak_bytes(lambda: client.list_files(REPO))
    assert isinstance(error, HubError)
    assert f"The Hub's listing of {REPO}@main was larger than {cap} MiB; that is not a repo listing" in str(
        error
    )
    assert peak < 3 * MAX_API_REPLY_BYTES


class _GzipJson(BaseHTTPRequestHandler):
    """A mirror that compresses its answers, as the real Hub may: gzip-encoded JSON."""

    body: bytes = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_compressed_answer_under_the_cap_is_read() -> None:
    models = [{"id": f"owner/model-{i}-GGUF", "downloads": 1000 - i} for i in range(3)]
    handler = type("Handler", (_GzipJson,), {"body": gzip.compress(json.dumps(models).encode())})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        results = HubClient(f"http://127.0.0.1:{server.server_address[1]}").search("model", limit=3)
    finally:
        server.shutdown()
        server.server_close()
    assert [(r.repo_id, r.downloads) for r in results] == [(m["id"], m["downloads"]) for m in models]


# -- item 7: every part of a split GGUF is validated ------------------------------------------------------


def hub_files(library: ModelLibrary) -> list[str]:
    folder = library.models_dir / "hub"
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def download_split(hub: HubServer, library: ModelLibrary, parts: list[bytes]) -> None:
    names = split_names("tiny-Q8_0", len(parts))
    hub.add_repo(REPO, [ServedFile.from_bytes(n, p) for n, p in zip(names, parts, strict=True)])
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    Downloader(client, library, policy=FAST).download(listing, listing.models[0])


def test_a_split_download_checks_every_part(hub: HubServer, library: ModelLibrary) -> None:
    download_split(hub, library, split_parts())
    [model] = library.list_models()
    assert [p.path.name for p in model.parts] == split_names("tiny-Q8_0")
    assert library.verify(model.name)


def test_a_hostile_second_part_is_refused_and_nothing_is_installed(
    hub: HubServer, library: ModelLibrary
) -> None:
    parts = split_parts()
    parts[1] = hostile_gguf()
    with pytest.raises(InvalidModelFile) as refused:
        download_split(hub, library, parts)
    message = str(refused.value)
    assert message.startswith(
        f"{REPO}: tiny-Q8_0-00002-of-00003.gguf (part 2 of 3) is not a usable GGUF model"
    )
    assert message.endswith("Its download was deleted and nothing was installed.")
    assert library.list_models() == [] and hub_files(library) == []
    # Stopped at the bad part: the third was never fetched.
    assert hub.requests_to("00003-of-00003") == []


@pytest.mark.parametrize(
    ("parts", "reason"),
    [
        # A well-formed part numbered wrong: llama.cpp would have parsed it before refusing it.
        (split_parts(split_no=lambda i: 0), "part number 0 (split.no, from 0), not 1"),
        # A plain model posing as part 2: without split keys it is no part of anything.
        ([split_parts()[0], tiny_gguf(), split_parts()[2]], "has no split.count"),
    ],
)
def test_a_part_that_does_not_belong_is_refused(
    hub: HubServer, library: ModelLibrary, parts: list[bytes], reason: str
) -> None:
    with pytest.raises(InvalidModelFile, match=r"part 2 of 3") as refused:
        download_split(hub, library, parts)
    assert reason in str(refused.value)
    assert library.list_models() == [] and hub_files(library) == []


def test_the_remote_header_of_a_split_checks_every_part(hub: HubServer) -> None:
    names = split_names("tiny-Q8_0")
    parts = split_parts(split_no=lambda i: 0)
    hub.add_repo(REPO, [ServedFile.from_bytes(n, p) for n, p in zip(names, parts, strict=True)])
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    with pytest.raises(InvalidModelFile, match=rf"{REPO}/{names[1]} is not a usable GGUF model"):
        client.read_header(listing, listing.models[0])


def write_split(folder: Path, parts: list[bytes], base: str = "big-Q8_0") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in split_names(base, len(parts))]
    for path, data in zip(paths, parts, strict=True):
        path.write_bytes(data)
    return paths


def test_importing_part_1_imports_every_part(library: ModelLibrary, tmp_path: Path) -> None:
    sources = write_split(tmp_path / "downloads", split_parts())
    progress: list[tuple[int, int]] = []
    model = library.import_file(sources[0], progress=lambda done, total: progress.append((done, total)))

    assert model.name == "big-Q8_0" and len(model.parts) == 3
    assert [p.path for p in model.parts] == [library.models_dir / n for n in split_names("big-Q8_0")]
    assert [p.path.read_bytes() for p in model.parts] == [s.read_bytes() for s in sources]
    assert library.verify(model.name)
    total = sum(s.stat().st_size for s in sources)
    assert progress[-1] == (total, total)
    assert library.import_file(sources[0]) == model  # the same parts again: nothing copied


def test_an_import_with_a_hostile_part_copies_and_registers_nothing(
    library: ModelLibrary, tmp_path: Path
) -> None:
    parts = split_parts()
    parts[2] = hostile_gguf()
    sources = write_split(tmp_path / "downloads", parts)
    with pytest.raises(
        InvalidModelFile, match=r"big-Q8_0-00003-of-00003\.gguf \(part 3 of 3\) is not a usable"
    ):
        library.import_file(sources[0])
    assert library.list_models() == []
    assert not library.models_dir.exists() or list(library.models_dir.iterdir()) == []


def test_an_import_needs_part_1_and_every_other_part(library: ModelLibrary, tmp_path: Path) -> None:
    sources = write_split(tmp_path / "downloads", split_parts())
    with pytest.raises(HearthError, match=r"part 2 of a 3-part model: import its first part, big-Q8_0-00001"):
        library.import_file(sources[1])
    sources[2].unlink()
    with pytest.raises(HearthError, match=r"big-Q8_0-00003-of-00003\.gguf is not next to it"):
        library.import_file(sources[0])
    # Part 1 under another name: llama.cpp would look for its other parts and find none (or someone else's).
    alone = sources[0].with_name("renamed.gguf")
    sources[0].rename(alone)
    with pytest.raises(InvalidModelFile, match="one of 3 parts of a split model, but it came alone"):
        library.import_file(alone)
    assert library.list_models() == []


def test_a_single_file_with_split_keys_is_refused_as_a_download_too(
    hub: HubServer, library: ModelLibrary, tmp_path: Path
) -> None:
    part = split_parts()[0]
    hub.add_repo(REPO, [ServedFile.from_bytes("lonely-Q8_0.gguf", part)])
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    with pytest.raises(InvalidModelFile, match="came alone"):
        Downloader(client, library, policy=FAST).download(listing, listing.models[0])
    assert library.list_models() == [] and hub_files(library) == []
    # Not a split at all: the plain model still imports.
    assert (
        library.import_file(write_gguf(tmp_path / "plain.gguf", {"general.architecture": "llama"})).parts
        == ()
    )


def test_the_fixture_hub_stands_in_for_the_public_hub(hub: HubServer) -> None:
    # What the other tests rely on: the hub fixture speaks https and is what app.library.hub calls the public
    # Hub.
    assert hub.url.startswith("https://127.0.0.1:") and hub.url == app.library.hub.PUBLIC_ENDPOINT
