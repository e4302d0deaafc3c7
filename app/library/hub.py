"""The Hugging Face Hub (or a mirror): search, repo listings pinned to a commit, remote GGUF headers.

Every request goes through `huggingface_hub`'s shared HTTP session, at one endpoint: `--endpoint`, else the
`hf_endpoint` setting, else `HF_ENDPOINT`, else the public Hub. Redirects are followed here, by hand.

Tokens: the Hugging Face token goes to https://huggingface.co and nowhere else. A mirror (any other https
endpoint, however it was configured) gets the token saved for its own origin (`hearth token set --endpoint
URL`), and nothing is ever sent over plain http. A token goes only to the endpoint's origin, never to a host
a redirect names.

Everything the Hub sends is untrusted: API answers are decompressed here, with a cap on their size, and
names from a listing are checked before anything turns them into a path.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from importlib import metadata
from pathlib import PurePosixPath
from typing import Any, Final
from urllib.parse import quote, urljoin, urlsplit

import httpx2
from huggingface_hub import ModelInfo, __version__, constants, get_session
from huggingface_hub.errors import OfflineModeIsEnabled

from app.errors import HearthError, InvalidModelFile
from app.library.hub_token import TOKEN_NAME, check_token_text
from app.library.installed import (
    InstalledModel,
    model_header_problem,
    split_part_problem,
    split_set_problem,
)
from app.secret_store import SecretResult, SecretStatus, SecretStore
from inference.estimator import combine_split_headers
from inference.gguf import GGUFError, GGUFHeader, parse_header
from inference.projector import is_projector, is_projector_filename, projector_preference

log = logging.getLogger("hearth.hub")

# The only origin the Hugging Face token is sent to. Read at call time (tests stand a local TLS server in
# for it); nothing else may hold a copy.
PUBLIC_ENDPOINT: Final = "https://huggingface.co"
# A mirror's own token is stored under this prefix and its origin: "hf_token:https://mirror.example".
MIRROR_TOKEN_PREFIX: Final = "hf_token:"
DEFAULT_TIMEOUT_S: Final = 30.0
# A search page or a repo listing with every file's metadata is a few hundred KiB even for the largest GGUF
# repos; the cap is on the decompressed size, since 200 KiB of gzip can inflate to gigabytes.
MAX_API_REPLY_BYTES: Final = 16 << 20
# A GGUF header is metadata plus the tensor table: a few MiB even with a 256k-token vocabulary.
MAX_REMOTE_HEADER_BYTES: Final = 64 << 20
MAX_REDIRECTS: Final = 10
# What a search result shows, asked for by name (the Hub's `expand`) so each result needs no second request.
SEARCH_FIELDS: Final = ("downloads", "likes", "gated", "lastModified", "tags", "cardData")
HEADER_WORKERS: Final = 4

_COMMIT: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
# The Hub's own rule: word characters, '.' and '-', starting and ending with a word character.
_REPO_PART: Final = re.compile(r"\w(?:[\w.-]{0,94}\w)?", re.ASCII)
_REVISION: Final = re.compile(r"[\w.-]+(?:/[\w.-]+)*", re.ASCII)
_SPLIT: Final = re.compile(r"^(?P<base>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_QUANT: Final = re.compile(
    r"(?<![a-z0-9])(iq[1-4]_(?:xxs|xs|s|m|nl)|q[1-8](?:_[a-z0-9]{1,3}){0,3}|bf16|fp16|f16|f32|tq[12]_0|mxfp4)"
    r"(?![a-z0-9])",
    re.IGNORECASE,
)
_WINDOWS_DEVICE_NAMES: Final = frozenset(
    {"CON", "PRN", "AUX", "NUL"} | {f"{port}{n}" for port in ("COM", "LPT") for n in range(1, 10)}
)
# Reserved on Windows; ':' also names drives and alternate data streams.
_WINDOWS_RESERVED_CHARS: Final = frozenset('<>:"|?*')
_MAX_FILENAME_BYTES: Final = 1024
_MAX_COMPONENT_BYTES: Final = 255


class UnsafeFilename(HearthError):
    pass


class HubError(HearthError):
    """The Hub answered, but not with what was asked for."""


class HubAuthError(HubError):
    """HTTP 401: no token, or one the Hub does not accept."""


class HubGatedError(HubError):
    """HTTP 403: the token is fine but its account has not accepted the model's licence."""


class HubNotFound(HubError):
    pass


class HubRateLimited(HubError):
    def __init__(self, message: str, retry_after_s: float | None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class HubUnreachable(HubError):
    """The connection failed or the server had an error: worth retrying later."""


@dataclass(frozen=True)
class RepoSummary:
    repo_id: str
    downloads: int | None
    likes: int | None
    license: str | None
    gated: bool
    last_modified: datetime | None


@dataclass(frozen=True)
class RemoteFile:
    filename: str  # checked by check_repo_filename
    size: int | None
    sha256: str | None  # the LFS SHA-256 at the listing's commit


@dataclass(frozen=True)
class RemoteModel:
    """One GGUF model in a repo: a single file or every part of a split GGUF, in order."""

    name: str  # the file name without folders, `.gguf` and the split suffix
    quantization: str | None  # from the file name; the header says for sure
    parts: tuple[RemoteFile, ...]
    # The multimodal projector (`mmproj*.gguf`) this model is used with, when the repo has one: downloaded
    # and verified with it, counted in its fit.
    projector: RemoteFile | None = None

    @property
    def filename(self) -> str:
        return self.parts[0].filename

    @property
    def size(self) -> int | None:
        """The model's own files; the projector's size is `projector.size`."""
        sizes = [p.size for p in self.parts]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def files(self) -> tuple[RemoteFile, ...]:
        """Every file a download fetches: the parts, then the projector."""
        return (*self.parts, self.projector) if self.projector is not None else self.parts


@dataclass(frozen=True)
class RepoListing:
    repo_id: str
    revision: str  # as asked for (a branch, tag or commit)
    commit: str  # the commit it resolved to: every download pins to this
    gated: bool
    license: str | None
    models: tuple[RemoteModel, ...]
    rejected: tuple[tuple[str, str], ...]  # (file name as listed, why it was skipped)
    projectors: tuple[RemoteFile, ...] = ()  # every `mmproj*.gguf` in the repo, paired or not


@dataclass(frozen=True)
class UpdateCheck:
    branch: str
    commit: str | None  # the branch's commit now
    changed: bool | None  # None: the file is no longer on the branch, or the Hub gives no hash
    detail: str
    # What an update would download: the branch's listing and the model's file(s) in it (None when the file
    # is no longer on the branch).
    listing: RepoListing | None = None
    remote: RemoteModel | None = None


def resolve_endpoint(configured: str | None = None) -> str:
    """`configured` (the --endpoint option or the hf_endpoint setting), else HF_ENDPOINT, else the Hub."""
    raw = (configured or os.environ.get("HF_ENDPOINT") or PUBLIC_ENDPOINT).strip()
    parts = urlsplit(raw)
    try:
        _ = parts.port  # raises for a port that is not a number from 0 to 65535
    except ValueError:
        raise HearthError(f"The Hub endpoint {raw!r} has an invalid port.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HearthError(f"The Hub endpoint {raw!r} is not an http(s) URL.")
    # Credentials in the URL would end up in logs and error messages; the token goes in the keyring.
    if parts.username or parts.password:
        raise HearthError(
            "The Hub endpoint must not contain a user name or password; use `hearth token set`."
        )
    if parts.query or parts.fragment:
        raise HearthError(f"The Hub endpoint {raw!r} must not have a query or fragment.")
    return raw.rstrip("/")


def endpoint_origin(endpoint: str) -> str:
    """`scheme://host[:port]`, lower-case, without a default port: what a token is stored for and sent to."""
    scheme, host, port = _origin(endpoint)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port == (443 if scheme == "https" else 80) else f":{port}")


def is_public_hub(endpoint: str) -> bool:
    """Whether `endpoint` is on the Hugging Face Hub's own origin (https, huggingface.co, port 443)."""
    return _origin(endpoint) == _origin(PUBLIC_ENDPOINT)


class EndpointToken:
    """The token saved for one endpoint: the Hugging Face token for the public Hub, the mirror's own (stored
    by origin) for any other https endpoint, and none at all for plain http."""

    def __init__(self, endpoint: str, secrets: SecretStore | None = None) -> None:
        self.endpoint = resolve_endpoint(endpoint)
        self.origin = endpoint_origin(self.endpoint)
        self.public = is_public_hub(self.endpoint)
        self.https = urlsplit(self.endpoint).scheme == "https"
        self._secrets = secrets if secrets is not None else SecretStore()

    @property
    def name(self) -> str:
        """The keyring entry."""
        return TOKEN_NAME if self.public else f"{MIRROR_TOKEN_PREFIX}{self.origin}"

    def refusal(self) -> str | None:
        """Why no token may be stored for this endpoint, or None when one may."""
        if self.https:
            return None
        return (
            f"Hearth never sends a token over plain http, and {self.origin} is not https; "
            f"use the mirror's https address."
        )

    def get(self) -> str | None:
        # Not even asked for over http: a token read is a token that could be sent.
        return self._secrets.get(self.name).value if self.https else None

    def set(self, value: str) -> SecretResult:
        refusal = self.refusal()
        if refusal is not None:
            raise HearthError(refusal)
        return self._secrets.set(self.name, check_token_text(value))

    def clear(self) -> SecretResult:
        return self._secrets.delete(self.name)

    def status(self) -> SecretStatus:
        return self._secrets.status_of(self.name)


def check_repo_id(repo_id: str) -> str:
    parts = repo_id.split("/")
    if (
        len(parts) not in (1, 2)
        or not all(_REPO_PART.fullmatch(p) for p in parts)
        or "--" in repo_id
        or ".." in repo_id
    ):
        raise HearthError(f"{repo_id!r} is not a Hub repository id (expected owner/name).")
    return repo_id


def check_revision(revision: str) -> str:
    if len(revision) > 256 or not _REVISION.fullmatch(revision) or ".." in revision.split("/"):
        raise HearthError(f"{revision!r} is not a branch, tag or commit name.")
    return revision


def unsafe_filename_reason(name: str) -> str | None:
    """Why a file name from a repo listing must not become a path, or None when it is safe everywhere.

    huggingface_hub checked only `..` before 1.26, and Windows quietly drops a trailing dot or space
    (`model.gguf.` and `model.gguf` are the same file there), so the rules are the strictest platform's.
    """
    if not name:
        return "the name is empty"
    if len(name.encode("utf-8", "surrogatepass")) > _MAX_FILENAME_BYTES:
        return "the name is too long"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "it contains control characters"
    if "\\" in name:
        return "it contains a backslash (a Windows path or UNC name)"
    if name.startswith("/"):
        return "it is an absolute path"
    if re.match(r"[A-Za-z]:", name):
        return "it names a drive"
    if _WINDOWS_RESERVED_CHARS.intersection(name):
        return 'it contains a character Windows reserves (< > : " | ? *)'
    for component in name.split("/"):
        if not component:
            return "it has an empty path component"
        if component in (".", ".."):
            return f"it has a {component!r} path component"
        if component[-1] in ". ":
            return "a path component ends in a dot or space"
        if component.split(".")[0].upper() in _WINDOWS_DEVICE_NAMES:
            return f"{component!r} is a reserved device name on Windows"
        if len(component.encode("utf-8", "surrogatepass")) > _MAX_COMPONENT_BYTES:
            return "a path component is too long"
    return None


def check_repo_filename(name: str) -> str:
    reason = unsafe_filename_reason(name)
    if reason is not None:
        raise UnsafeFilename(f"The repository lists a file named {name!r}, which Hearth refuses: {reason}.")
    return name


def quant_label(filename: str) -> str | None:
    """The quantization named in a GGUF file name (Q4_K_M, IQ4_XS, BF16, …), upper-cased."""
    stem = PurePosixPath(filename).name
    split = _SPLIT.match(stem)
    stem = split.group("base") if split else re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    matches = _QUANT.findall(stem)
    return str(matches[-1]).upper() if matches else None


def pick_projector(model_filename: str, projectors: Sequence[RemoteFile]) -> RemoteFile | None:
    """The projector a model is used with: one in the model's own folder if there is one (repos that keep
    each model in a folder keep its projector there), else one at the top of the repo; of several, the
    preferred type (projector_preference)."""
    folder = PurePosixPath(model_filename).parent
    for place in (folder, PurePosixPath(".")):
        here = [p for p in projectors if PurePosixPath(p.filename).parent == place]
        if here:
            return min(here, key=lambda p: projector_preference(p.filename))
    return None


def group_gguf_files(
    files: Sequence[RemoteFile],
) -> tuple[tuple[RemoteModel, ...], tuple[tuple[str, str], ...]]:
    """GGUF models in a listing: split parts (`name-00001-of-00003.gguf`) become one model.

    Vision projectors (`mmproj*.gguf`) are not chat models: each model is paired with the projector it is
    used with (pick_projector). Returns the models and the files skipped with the reason; file names must
    already have been checked.
    """
    singles: list[RemoteModel] = []
    splits: dict[tuple[str, int], dict[int, RemoteFile]] = {}
    rejected: list[tuple[str, str]] = []
    projectors = [f for f in files if is_projector_filename(f.filename)]
    for file in files:
        base = PurePosixPath(file.filename).name
        if not base.lower().endswith(".gguf") or is_projector_filename(file.filename):
            continue
        match = _SPLIT.match(file.filename)
        if match is None:
            singles.append(RemoteModel(base[: -len(".gguf")], quant_label(file.filename), (file,)))
            continue
        count, index = int(match.group("count")), int(match.group("index"))
        if not 1 <= index <= count:
            rejected.append((file.filename, f"part {index} of {count} is out of range"))
            continue
        splits.setdefault((match.group("base"), count), {})[index] = file
    for (base_path, count), parts in splits.items():
        missing = [i for i in range(1, count + 1) if i not in parts]
        if missing:
            first = parts[min(parts)].filename
            rejected.append((first, f"split model is missing part(s) {', '.join(map(str, missing))}"))
            continue
        ordered = tuple(parts[i] for i in range(1, count + 1))
        singles.append(RemoteModel(PurePosixPath(base_path).name, quant_label(ordered[0].filename), ordered))
    if projectors:
        singles = [replace(m, projector=pick_projector(m.filename, projectors)) for m in singles]
    singles.sort(key=lambda m: (m.size is None, m.size or 0, m.filename))
    return tuple(singles), tuple(rejected)


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _hearth_version() -> str:
    try:
        return metadata.version("hearth")
    except metadata.PackageNotFoundError:
        return "dev"


def _disable_hf_telemetry() -> None:
    # huggingface_hub builds its user agent with detect_agent(), which downloads a registry from the
    # *public* Hub (constants.ENDPOINT, whatever endpoint the request is for) and caches it under HF_HOME.
    # Hearth promises no request the user did not ask for and nothing written outside its home, so it
    # turns that off the documented way (HF_HUB_DISABLE_TELEMETRY), here where it is read at call time.
    constants.HF_HUB_DISABLE_TELEMETRY = True


_PUBLIC_TOKEN_ADVICE: Final = (
    "the Hugging Face token is missing or invalid. If the model is private or gated, set a valid token with "
    "`hearth token set`."
)


def status_error(
    status: int, headers: Mapping[str, str], what: str, page_url: str, *, token_advice: str | None = None
) -> HubError:
    """A user-readable error for an HTTP failure; `what` names the repo or file, `token_advice` says what
    to do about a 401 at this endpoint (HubClient.refused gives the right one)."""
    if status == 401:
        return HubAuthError(
            f"The Hub refused access to {what} (HTTP 401): {token_advice or _PUBLIC_TOKEN_ADVICE}"
        )
    if status == 403:
        return HubGatedError(
            f"The Hub refused access to {what} (HTTP 403): this is a gated model. Accept the licence on the "
            f"model page {page_url} with the account your token belongs to, then try again."
        )
    if status == 404:
        return HubNotFound(f"{what} was not found on the Hub (HTTP 404).")
    if status == 429:
        retry_after = _retry_after_s(headers)
        wait = f" (it asks to wait {retry_after:g} s)" if retry_after is not None else ""
        return HubRateLimited(
            f"The Hub is rate-limiting requests for {what}{wait}; try again in a few minutes.", retry_after
        )
    if status >= 500:
        return HubUnreachable(f"The Hub had a server error for {what} (HTTP {status}); try again later.")
    return HubError(f"The Hub answered HTTP {status} for {what}.")


def _retry_after_s(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after", "").strip()
    return float(value) if value.isdigit() else None


class HubClient:
    """Thread-safe: the GUI may search on one worker while a download runs on another."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        secrets: SecretStore | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """`token` is the Hugging Face token: it is sent to https://huggingface.co and nowhere else.

        Any other https endpoint (a mirror, or whatever HF_ENDPOINT names) gets the token saved for its own
        origin, read from `secrets` (the keyring) when first needed; a plain-http endpoint gets none.
        huggingface_hub's own token (HF_TOKEN, its token file) is never used.
        """
        _disable_hf_telemetry()
        self.endpoint = resolve_endpoint(endpoint)
        self._origin = _origin(self.endpoint)
        self._credentials = EndpointToken(self.endpoint, secrets)
        self._token_lock = threading.Lock()
        self._token: str | None = None
        self._token_read = not self._credentials.https
        if self._credentials.public:
            self._token, self._token_read = token or None, True
        elif token:
            why = "it is not https" if not self._credentials.https else "it is not the Hugging Face Hub"
            log.info("the Hugging Face token is not sent to %s: %s", self._credentials.origin, why)
        self.timeout_s = timeout_s
        # The user agent HfApi sends for this library name.
        self._plain_headers = {
            "user-agent": f"hearth/{_hearth_version()}; hf_hub/{__version__}; "
            f"python/{platform.python_version()}"
        }

    def __repr__(self) -> str:
        return f"HubClient(endpoint={self.endpoint!r}, token={'set' if self._token else 'none'})"

    def refused(self, status: int, headers: Mapping[str, str], what: str, page_url: str) -> HubError:
        """status_error with the advice about tokens that fits this endpoint."""
        return status_error(status, headers, what, page_url, token_advice=self._token_advice())

    def _token_advice(self) -> str:
        origin = self._credentials.origin
        if self._credentials.public:
            return _PUBLIC_TOKEN_ADVICE
        if not self._credentials.https:
            return (
                f"Hearth never sends a token over plain http, so {origin} got none. If the model is private "
                f"or gated, use the mirror's https address."
            )
        return (
            f"the token for {origin} is missing or invalid. If the model is private or gated, set that "
            f"mirror's own token with `hearth token set --endpoint {origin}` (the Hugging Face token is sent "
            f"to huggingface.co only)."
        )

    def _bearer(self) -> str | None:
        """The token for this endpoint; a mirror's is read from the keyring (blocking) the first time."""
        with self._token_lock:
            if not self._token_read:
                self._token = self._credentials.get()
                self._token_read = True
            return self._token

    def model_page(self, repo_id: str) -> str:
        return f"{self.endpoint}/{repo_id}"

    def file_url(self, repo_id: str, commit: str, filename: str) -> str:
        return (
            f"{self.endpoint}/{quote(check_repo_id(repo_id))}/resolve/{quote(commit, safe='')}/"
            f"{quote(check_repo_filename(filename))}"
        )

    def search(self, query: str, *, limit: int = 20) -> list[RepoSummary]:
        """Repositories with GGUF files matching `query`, most downloaded first."""
        if limit < 1:
            raise HearthError("The search limit must be at least 1.")
        # HfApi.list_models sends this same request, but with no timeout and up to five retries after one:
        # on a network that silently drops packets the search would spin for minutes, or forever.
        params: dict[str, Any] | None = {
            "filter": "gguf",
            "sort": "downloads",
            "limit": limit,
            "expand": list(SEARCH_FIELDS),
            **({"search": query} if query else {}),
        }
        url: str | None = f"{self.endpoint}/api/models"
        items: list[dict[str, Any]] = []
        what = f"the search for {query!r}"
        with self._api_errors(what, self.endpoint):
            while url is not None and len(items) < limit:
                page, links = self._get_json(
                    url,
                    params,
                    what,
                    self.endpoint,
                    subject=f"The Hub's answer to {what}",
                    kind="a model list",
                )
                if not isinstance(page, list):
                    raise HubError(
                        f"The Hub at {self.endpoint} answered the search with something that is not a list "
                        f"of models."
                    )
                found = [item for item in page if isinstance(item, dict) and isinstance(item.get("id"), str)]
                items += found
                # The next page's link carries the query; one to another origin is not followed, and a
                # page without a single model ends the search (else a hostile server could page forever).
                url = links.get("next", {}).get("url") if found else None
                url = url if url is not None and _origin(url) == self._origin else None
                params = None
        # list_models's own parser of these items (dates, card data); its __init__ takes untyped **kwargs.
        infos = [ModelInfo(**{"siblings": None, **item}) for item in items[:limit]]  # type: ignore[no-untyped-call]
        return [
            RepoSummary(
                repo_id=info.id,
                downloads=info.downloads,
                likes=info.likes,
                license=_license(info),
                gated=bool(info.gated),
                last_modified=info.last_modified,
            )
            for info in infos
        ]

    def list_files(self, repo_id: str, revision: str | None = None) -> RepoListing:
        """The repo's GGUF models at `revision` (default: main), pinned to the commit it points to now."""
        check_repo_id(repo_id)
        revision = check_revision(revision or "main")
        # The request HfApi.model_info(files_metadata=True) sends; its answer is read here, capped.
        url = f"{self.endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}"
        subject = f"The Hub's listing of {repo_id}@{revision}"
        with self._api_errors(repo_id, self.model_page(repo_id)):
            data, _ = self._get_json(
                url,
                {"blobs": "true"},
                repo_id,
                self.model_page(repo_id),
                subject=subject,
                kind="a repo listing",
            )
        try:
            # HfApi.model_info's own parser; its __init__ takes untyped **kwargs.
            info = ModelInfo(**data) if isinstance(data, dict) else None  # type: ignore[no-untyped-call]
        except (TypeError, ValueError, KeyError, AttributeError):
            info = None
        if info is None:
            raise HubError(f"{subject} is not a repo listing.")
        commit = info.sha
        if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
            raise HubError(f"The Hub did not say which commit {repo_id}@{revision} is; cannot pin the files.")
        files: list[RemoteFile] = []
        rejected: list[tuple[str, str]] = []
        for sibling in info.siblings or []:
            name = sibling.rfilename
            reason = unsafe_filename_reason(name) if isinstance(name, str) else "it is not a string"
            if reason is not None:
                # Reported to the user through `rejected`; the log keeps a record.
                log.info("%s lists an unsafe file name %r: %s", repo_id, name, reason)
                rejected.append((repr(name), reason))
                continue
            lfs = sibling.lfs
            sha256 = lfs.sha256.lower() if lfs is not None and isinstance(lfs.sha256, str) else None
            size = sibling.size if isinstance(sibling.size, int) and sibling.size >= 0 else None
            files.append(RemoteFile(name, size, sha256 if sha256 and _SHA256.fullmatch(sha256) else None))
        models, skipped = group_gguf_files(files)
        return RepoListing(
            repo_id=repo_id,
            revision=revision,
            commit=commit,
            gated=bool(info.gated),
            license=_license(info),
            models=models,
            rejected=(*rejected, *skipped),
            projectors=tuple(f for f in files if is_projector_filename(f.filename)),
        )

    def read_header(self, listing: RepoListing, model: RemoteModel) -> GGUFHeader:
        """The model's GGUF header, read with range requests and checked like a local file's.

        For a split model every part's header is read; the result has the first part's metadata and the
        tensors of all parts (what memory estimates need), with the total size as `file_size`.
        """
        headers = [self._read_part_header(listing, part) for part in model.parts]
        # llama.cpp opens parts 2..N itself, trusting the first part's split keys: each part is checked.
        for index, (part, header) in enumerate(zip(model.parts, headers, strict=True), start=1):
            problem = model_header_problem(header) or split_part_problem(header, index, len(headers))
            if problem is not None:
                raise InvalidModelFile(
                    f"{listing.repo_id}/{part.filename} is not a usable GGUF model: {problem}."
                )
        if len(headers) == 1:
            return headers[0]
        problem = split_set_problem(headers)
        if problem is not None:
            raise InvalidModelFile(
                f"{listing.repo_id}/{model.filename} is not a usable split model: {problem}."
            )
        return combine_split_headers(headers)

    def read_projector_header(self, listing: RepoListing, projector: RemoteFile) -> GGUFHeader:
        """A projector's GGUF header, read with range requests; InvalidModelFile when it is not one."""
        header = self._read_part_header(listing, projector)
        if not is_projector(header):
            raise InvalidModelFile(
                f"{listing.repo_id}/{projector.filename} is named like a multimodal projector but is not one "
                f"(its architecture is {header.architecture or 'missing'}, not clip)."
            )
        return header

    def read_headers(
        self, listing: RepoListing, models: Sequence[RemoteModel]
    ) -> list[GGUFHeader | HearthError]:
        """Headers for several models at once (a few in parallel); a failure is returned in its place."""

        def one(model: RemoteModel) -> GGUFHeader | HearthError:
            try:
                return self.read_header(listing, model)
            except HearthError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=HEADER_WORKERS, thread_name_prefix="hearth-header") as pool:
            return list(pool.map(one, models))

    def check_update(self, model: InstalledModel, branch: str = "main") -> UpdateCheck:
        """Whether `branch` now has different bytes for an installed model's file(s)."""
        if model.repo_id is None or model.filename is None:
            raise HearthError(f"{model.name} was not downloaded from the Hub.")
        listing = self.list_files(model.repo_id, branch)
        current = next((m for m in listing.models if m.filename == model.filename), None)
        if current is None:
            return UpdateCheck(
                branch, listing.commit, None, f"{model.filename} is no longer on {branch} ({listing.commit})."
            )
        installed = [p.sha256 for p in model.parts] if model.parts else [model.sha256]
        remote = [p.sha256 for p in current.parts]
        if any(sha is None for sha in remote):
            detail = "The Hub gives no SHA-256 for the file."
            return UpdateCheck(branch, listing.commit, None, detail, listing, current)
        if remote == installed:
            detail = f"Same bytes as {branch} ({listing.commit[:12]})."
            return UpdateCheck(branch, listing.commit, False, detail, listing, current)
        detail = (
            f"{branch} ({listing.commit[:12]}) has different bytes for {model.filename} than the installed "
            f"commit {(model.revision or '?')[:12]}; `hearth models update {model.name}` downloads them."
        )
        return UpdateCheck(branch, listing.commit, True, detail, listing, current)

    def _headers_for(self, url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Request headers for `url`: the token only when `url` is on the endpoint's own origin (which is
        https whenever there is a token at all)."""
        headers = {**self._plain_headers, "accept-encoding": "identity", **(extra or {})}
        if _origin(url) == self._origin and (token := self._bearer()) is not None:
            headers["authorization"] = f"Bearer {token}"
        return headers

    def _get_json(
        self,
        url: str,
        params: Mapping[str, Any] | None,
        what: str,
        page_url: str,
        *,
        subject: str,
        kind: str,
    ) -> tuple[Any, Mapping[str | None, Mapping[str, str]]]:
        """An API answer, parsed (None when it is not JSON), and its Link header.

        The body is read raw and decompressed here, with a cap: httpx would inflate all of it in memory.
        An error status is raised without reading the body at all.
        """
        headers = {"accept": "application/json", "accept-encoding": "gzip"}
        timeout = httpx2.Timeout(self.timeout_s)
        with self._open(url, params=params, headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                raise self.refused(response.status_code, response.headers, what, page_url)
            body = _read_capped(response, subject=subject, kind=kind)
            links = response.links
        try:
            return json.loads(body), links
        except ValueError:
            return None, links

    @contextmanager
    def open_file(
        self, url: str, *, start: int | None = None, end: int | None = None, timeout: httpx2.Timeout
    ) -> Iterator[httpx2.Response]:
        """GET `url` (bytes `start`..`end` inclusive when given) as a stream; see `_open`."""
        extra: dict[str, str] = {}
        if start is not None:
            extra["range"] = f"bytes={start}-" if end is None else f"bytes={start}-{end}"
        with self._open(url, headers=extra, timeout=timeout) as response:
            yield response

    @contextmanager
    def _open(
        self,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx2.Timeout,
    ) -> Iterator[httpx2.Response]:
        """GET `url` as a stream, following redirects here.

        Redirects are followed by hand so the rule about the token is ours, not a library default: it
        goes to the endpoint's origin only, never to the CDN or any other host a redirect names. (httpx
        would also read each redirect's whole body first.) Raises HearthError for a redirect loop or an
        https → http downgrade; any status is returned.
        """
        session = get_session()
        for _ in range(MAX_REDIRECTS + 1):
            request = session.build_request(
                "GET", url, params=params, headers=self._headers_for(url, headers), timeout=timeout
            )
            try:
                response = session.send(request, stream=True, follow_redirects=False)
            except OfflineModeIsEnabled as exc:
                raise _offline_error() from exc
            if response.has_redirect_location:
                target = urljoin(str(request.url), response.headers["location"])
                response.close()
                params = None  # the new address carries its own query
                if urlsplit(target).scheme not in ("http", "https") or (
                    urlsplit(url).scheme == "https" and urlsplit(target).scheme != "https"
                ):
                    raise HubError(f"The Hub redirected a download to an unsafe address ({_host(target)}).")
                if _origin(target) != self._origin:
                    log.debug("following a redirect to %s without the token", _host(target))
                url = target
                continue
            try:
                yield response
            finally:
                response.close()
            return
        raise HubError(f"The Hub redirected more than {MAX_REDIRECTS} times for {_host(url)}.")

    def _read_part_header(self, listing: RepoListing, part: RemoteFile) -> GGUFHeader:
        if part.size is None:
            raise HubError(f"The Hub does not say how large {part.filename} is; cannot read its header.")
        what = f"{listing.repo_id}/{part.filename}"
        url = self.file_url(listing.repo_id, listing.commit, part.filename)
        source = HttpRangeSource(self, url, part.size, what=what, page_url=self.model_page(listing.repo_id))
        try:
            return parse_header(source, max_header_bytes=MAX_REMOTE_HEADER_BYTES)
        except GGUFError as exc:
            raise InvalidModelFile(f"{what} is not a usable GGUF model: {exc}.") from exc
        except httpx2.TransportError as exc:
            raise HubUnreachable(
                f"Reading the header of {what} from {_host(self.endpoint)} failed: {_transport_reason(exc)}."
            ) from exc

    @contextmanager
    def _api_errors(self, what: str, page_url: str) -> Iterator[None]:
        try:
            yield
        except OfflineModeIsEnabled as exc:
            raise _offline_error() from exc
        except httpx2.TransportError as exc:
            raise HubUnreachable(
                f"Could not reach the Hub at {self.endpoint}: {_transport_reason(exc)}."
            ) from exc


class HttpRangeSource:
    """A remote file as an `inference.gguf.ByteSource`, read with HTTP range requests.

    Bounded like a local read: every response must be the range asked for (206 with a matching
    Content-Range, never more bytes than asked) and the total fetched is capped, so a hostile server or
    header costs at most `max_fetch_bytes`. A server that ignores Range (200) is read only as far as needed.
    """

    def __init__(
        self,
        client: HubClient,
        url: str,
        size: int,
        *,
        what: str,
        page_url: str,
        max_fetch_bytes: int = MAX_REMOTE_HEADER_BYTES,
    ) -> None:
        self._client = client
        self._url = url
        self._what = what
        self._page_url = page_url
        self._size = size
        self._max_fetch = max_fetch_bytes
        self.fetched = 0
        self._timeout = httpx2.Timeout(client.timeout_s)

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, n: int) -> bytes:
        n = min(n, self._size - offset)
        if n <= 0 or offset < 0:
            return b""
        if self.fetched + n > self._max_fetch:
            raise GGUFError(f"reading the header would fetch more than {self._max_fetch >> 20} MiB")
        with self._client.open_file(self._url, start=offset, end=offset + n - 1, timeout=self._timeout) as r:
            if r.status_code == 206:
                _check_content_range(r.headers.get("content-range"), offset, self._size)
                return self._take(r, n)
            if r.status_code == 200:
                # The server ignored Range and sends the whole file: read up to what was asked, no further.
                if self.fetched + offset + n > self._max_fetch:
                    raise GGUFError("the server does not support range requests and the file is too large")
                return self._take(r, offset + n)[offset:]
            raise self._client.refused(r.status_code, r.headers, self._what, self._page_url)

    def _take(self, response: httpx2.Response, n: int) -> bytes:
        chunks: list[bytes] = []
        got = 0
        for chunk in response.iter_raw():
            chunk = chunk[: n - got]
            chunks.append(chunk)
            got += len(chunk)
            self.fetched += len(chunk)
            if got >= n:
                break
        return b"".join(chunks)


def _check_content_range(value: str | None, offset: int, size: int) -> None:
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (value or "").strip())
    if match is None or int(match.group(1)) != offset:
        raise GGUFError(f"the server answered a range request with the wrong range ({value!r})")
    if match.group(3) != "*" and int(match.group(3)) != size:
        raise GGUFError(f"the file on the server is {match.group(3)} bytes, not the {size} the Hub listed")


def _license(info: Any) -> str | None:
    card = getattr(info, "card_data", None)
    license_ = getattr(card, "license", None) if card is not None else None
    if isinstance(license_, str):
        return license_
    for tag in getattr(info, "tags", None) or []:
        if isinstance(tag, str) and tag.startswith("license:"):
            return tag.removeprefix("license:")
    return None


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or url


def _transport_reason(exc: httpx2.TransportError) -> str:
    if isinstance(exc, httpx2.TimeoutException):
        return "the connection timed out"
    if isinstance(exc, httpx2.ConnectError):
        return "could not connect"
    return "the connection was lost"


def _read_capped(
    response: httpx2.Response, *, subject: str, kind: str, limit: int = MAX_API_REPLY_BYTES
) -> bytes:
    """The body of an API answer, decompressed here in bounded steps: no more than `limit` bytes are
    received or produced, whatever the server sends."""
    too_large = (
        f"{subject} was larger than {limit >> 20} MiB; that is not {kind}, so Hearth stopped reading it."
    )
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    decoder: Any = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header, whichever it is
    elif encoding not in ("", "identity"):
        raise HubError(f"{subject} came {encoding}-encoded, which Hearth did not ask for.")
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise HubError(too_large)
    body = bytearray()
    received = 0
    for chunk in response.iter_raw():
        received += len(chunk)
        if received > limit:
            raise HubError(too_large)
        if decoder is None:
            body += chunk
            continue
        pending = chunk
        while pending and not decoder.eof:
            try:
                # max_length bounds each step: one small chunk of a gzip bomb cannot inflate past the cap.
                body += decoder.decompress(pending, limit + 1 - len(body))
            except zlib.error as exc:
                raise HubError(f"{subject} could not be decompressed ({exc}).") from exc
            if len(body) > limit:
                raise HubError(too_large)
            pending = decoder.unconsumed_tail
    if decoder is not None and not decoder.eof:
        raise HubError(f"{subject} ended in the middle of its compressed data.")
    if len(body) > limit:
        raise HubError(too_large)
    return bytes(body)


def _offline_error() -> HearthError:
    return HearthError("HF_HUB_OFFLINE is set, so Hearth does not contact the Hub; unset it to go online.")
