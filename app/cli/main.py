"""The `hearth` command. Expected failures print one line on stderr and exit 3; usage errors exit 2."""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from app.chat.engine import ChatEngine, TurnCallbacks
from app.cli.terminal_text import for_terminal, write_control
from app.conversations.store import (
    EXPORT_FORMATS,
    HIT_END,
    HIT_START,
    Conversation,
    Message,
    SearchHit,
    message_record,
)
from app.core import Core
from app.errors import HearthError
from app.paths import HearthPaths, resolve_home

if TYPE_CHECKING:
    # Imported where used: huggingface_hub adds a third of a second to every `hearth` start.
    from app.library.downloads import DownloadProgress
    from app.library.hub import HubClient, RemoteModel, RepoListing, UpdateCheck
    from app.library.model_ops import FileFit, RepoAssessment
    from app.remote.registry import ServerRegistry

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_USER_ERROR = 3
EXIT_INTERRUPTED = 130


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--home",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="data directory (default: $HEARTH_HOME or the platform's data directory)",
    )
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    common.add_argument(
        "--endpoint",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="Hugging Face Hub or mirror (default: the hf_endpoint setting, $HF_ENDPOINT, huggingface.co)",
    )
    return common


def _add_fit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--context", type=_positive_int, metavar="N", help="context length to plan for")
    parser.add_argument("--vram", type=_non_negative_int, metavar="MIB", help="plan for this much free VRAM")
    parser.add_argument("--ram", type=_non_negative_int, metavar="MIB", help="plan for this much free RAM")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be from 0 to 65535")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="hearth", description="Chat with local language models, privately.", parents=[common]
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    chat = sub.add_parser("chat", parents=[common], help="send one message and stream the reply to stdout")
    chat.add_argument(
        "--model",
        required=True,
        help="installed model name (see `hearth models list`), or SERVER/MODEL for a model on a server",
    )
    chat.add_argument("--conversation", type=int, metavar="ID", help="continue this conversation")
    chat.add_argument("--system", metavar="TEXT", help="system prompt")
    chat.add_argument("--temperature", type=float)
    chat.add_argument("--seed", type=int)
    chat.add_argument("--max-tokens", type=int)
    thinking = chat.add_mutually_exclusive_group()
    thinking.add_argument(
        "--show-thinking",
        action="store_const",
        dest="thinking",
        const="stdout",
        default="stderr",
        help="print a reasoning model's thinking on stdout before its answer (default: on stderr)",
    )
    thinking.add_argument(
        "--hide-thinking", action="store_const", dest="thinking", const="hidden", help="do not print it"
    )
    chat.add_argument("prompt", metavar="PROMPT")

    models = sub.add_parser("models", parents=[common], help="the installed model library")
    models_sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    models_list = models_sub.add_parser("list", parents=[common], help="list installed models")
    models_list.add_argument("--json", action="store_true")
    models_import = models_sub.add_parser(
        "import", parents=[common], help="validate, hash and add a GGUF file"
    )
    models_import.add_argument("path", metavar="PATH")
    models_import.add_argument("--name")
    models_search = models_sub.add_parser(
        "search", parents=[common], help="search the Hub for repositories with GGUF models"
    )
    models_search.add_argument("query", metavar="QUERY")
    models_search.add_argument("--limit", type=_positive_int, default=20, metavar="N")
    models_search.add_argument("--json", action="store_true")
    models_files = models_sub.add_parser(
        "files", parents=[common], help="a repository's GGUF files and how each fits this machine"
    )
    models_files.add_argument("repo", metavar="REPO")
    models_files.add_argument("--revision", metavar="R", help="branch, tag or commit (default: main)")
    _add_fit_options(models_files)
    models_files.add_argument("--json", action="store_true")
    models_download = models_sub.add_parser(
        "download",
        parents=[common],
        help="download, verify and install a GGUF model from the Hub (run again to resume)",
    )
    models_download.add_argument("repo", metavar="REPO")
    which = models_download.add_mutually_exclusive_group()
    which.add_argument("file", nargs="?", metavar="FILE", help="file name in the repository")
    which.add_argument("--quant", metavar="Q", help="the file with this quantization (e.g. Q4_K_M)")
    which.add_argument("--recommended", action="store_true", help="the file Hearth recommends here")
    models_download.add_argument("--revision", metavar="R", help="branch, tag or commit (default: main)")
    models_download.add_argument("--name", help="name in the library (default: from the file name)")
    _add_fit_options(models_download)
    models_verify = models_sub.add_parser(
        "verify", parents=[common], help="re-hash an installed model's files"
    )
    models_verify.add_argument("name", metavar="NAME")
    models_verify.add_argument(
        "--check-hub", action="store_true", help="also ask the Hub whether main now has different bytes"
    )
    models_verify.add_argument("--json", action="store_true")
    models_remove = models_sub.add_parser(
        "remove", parents=[common], help="remove an installed model and delete its files"
    )
    models_remove.add_argument("name", metavar="NAME")

    token = sub.add_parser(
        "token",
        parents=[common],
        help="the Hugging Face token (sent to https://huggingface.co only), or with --endpoint URL a "
        "mirror's own token; kept in the system keyring, never sent over plain http",
    )
    token_sub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    token_sub.add_parser("set", parents=[common], help="read a token from standard input and store it")
    token_sub.add_parser("clear", parents=[common], help="remove the stored token")
    token_sub.add_parser("status", parents=[common], help="whether a token is stored, and where")

    servers = sub.add_parser(
        "servers",
        parents=[common],
        help="OpenAI-compatible servers to chat through (vLLM, TGI, llama.cpp, Ollama)",
    )
    servers_sub = servers.add_subparsers(dest="servers_command", metavar="ACTION", required=True)
    servers_add = servers_sub.add_parser(
        "add",
        parents=[common],
        help="add a server (or replace the one of that name); its models are NAME/MODEL",
    )
    servers_add.add_argument("name", metavar="NAME")
    servers_add.add_argument("url", metavar="URL", help="the API address, e.g. http://gpu-box:8000/v1")
    servers_add.add_argument(
        "--api-key-from-stdin",
        action="store_true",
        help="read the server's API key from standard input; it is kept in the system keyring",
    )
    servers_add.add_argument(
        "--ca-bundle",
        metavar="PATH",
        help="trust the CAs in this PEM file (for an internal server's certificate)",
    )
    servers_list = servers_sub.add_parser(
        "list", parents=[common], help="the servers added, and whether a key is stored"
    )
    servers_list.add_argument("--json", action="store_true")
    servers_models = servers_sub.add_parser("models", parents=[common], help="ask a server for its models")
    servers_models.add_argument("name", metavar="NAME")
    servers_models.add_argument("--json", action="store_true")
    servers_remove = servers_sub.add_parser(
        "remove", parents=[common], help="remove a server and its stored key"
    )
    servers_remove.add_argument("name", metavar="NAME")

    conv = sub.add_parser("conversations", parents=[common], help="stored conversations")
    conv_sub = conv.add_subparsers(dest="conversations_command", metavar="ACTION", required=True)
    conv_list = conv_sub.add_parser("list", parents=[common])
    conv_list.add_argument("--json", action="store_true")
    conv_show = conv_sub.add_parser("show", parents=[common])
    conv_show.add_argument("id", type=int, metavar="ID")
    conv_show.add_argument("--json", action="store_true")
    conv_export = conv_sub.add_parser(
        "export", parents=[common], help="one conversation to stdout or a file, or all of them into a folder"
    )
    conv_export.add_argument("id", type=int, metavar="ID", nargs="?")
    conv_export.add_argument(
        "--all", action="store_true", help="every conversation, one file each, into --output"
    )
    conv_export.add_argument("--format", choices=EXPORT_FORMATS, required=True)
    conv_export.add_argument(
        "--output", metavar="PATH", help="the file to write (default: stdout); with --all, the folder"
    )
    conv_search = conv_sub.add_parser(
        "search", parents=[common], help="full-text search over titles and messages"
    )
    conv_search.add_argument("query", metavar="QUERY")
    conv_search.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    conv_search.add_argument("--json", action="store_true")
    conv_import = conv_sub.add_parser(
        "import", parents=[common], help="import a Hearth JSON export or ChatGPT's conversations.json"
    )
    conv_import.add_argument("file", metavar="FILE")
    conv_import.add_argument("--json", action="store_true")

    backup = sub.add_parser(
        "backup", parents=[common], help="write a verified copy of the conversation database"
    )
    backup.add_argument(
        "path", nargs="?", metavar="PATH", help="a new file, or a folder (default: the backups folder)"
    )
    restore = sub.add_parser(
        "restore",
        parents=[common],
        help="replace the conversation database with a backup (the current one is backed up first)",
    )
    restore.add_argument("path", metavar="PATH", help="the backup file")

    doctor = sub.add_parser(
        "doctor", parents=[common], help="report backend, GPUs, memory, keyring, database"
    )
    doctor.add_argument("--json", action="store_true")

    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="serve a model over an OpenAI-compatible API on 127.0.0.1 until Ctrl+C",
    )
    serve.add_argument(
        "--port",
        type=_port,
        metavar="N",
        help="port on 127.0.0.1 (default: the local_server_port setting, 8765; 0: any free port)",
    )
    serve.add_argument("--model", help="installed model name (default: the one the window loads at start)")

    gui = sub.add_parser("gui", parents=[common], help="open the window (the default)")
    gui.add_argument("--smoke-test", action="store_true", help="start everything, open the window, quit")
    return parser


def _print_json(data: object, out: TextIO) -> None:
    json.dump(data, out, indent=2, ensure_ascii=False, default=str)
    out.write("\n")


def _model_json(model: Any) -> dict[str, Any]:
    return {
        "name": model.name,
        "path": model.path,
        "sha256": model.sha256,
        "size_bytes": model.size_bytes,
        "source": model.source,
        "architecture": model.architecture,
        "quantization": model.quantization,
        "context_length": model.context_length,
        "n_layers": model.n_layers,
        "last_load_error": model.last_load_error,
    }


def cmd_models(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    if args.models_command == "import":
        installed_before = {m.name for m in core.library.list_models()}
        model = core.library.import_file(Path(args.path), name=args.name)
        if model.name in installed_before:
            # The library keeps one entry per file: importing it again copies nothing and renames nothing.
            ignored = (
                f"; --name {args.name!r} was not applied" if args.name and args.name != model.name else ""
            )
            out.write(f"{args.path} is already installed as {model.name} (sha256 {model.sha256}){ignored}\n")
            return EXIT_OK
        out.write(f"Imported {model.name} ({model.quantization or '?'}, sha256 {model.sha256})\n")
        return EXIT_OK
    models = core.library.list_models()
    if args.json:
        _print_json({"models": [_model_json(m) for m in models]}, out)
        return EXIT_OK
    if not models:
        out.write("No models installed. Import one with `hearth models import PATH`.\n")
    for m in models:
        size = f"{m.size_bytes / 1024 / 1024:.0f} MiB"
        out.write(f"{m.name}\t{m.quantization or '?'}\t{size}\t{m.sha256[:12]}\n")
    return EXIT_OK


HUB_ACTIONS = frozenset({"search", "files", "download", "verify", "remove"})


def _hub(core: Core, args: argparse.Namespace) -> HubClient:
    from app.library.hub import HubClient
    from app.library.hub_token import HubToken

    endpoint = getattr(args, "endpoint", None) or core.settings.hf_endpoint
    return HubClient(endpoint, HubToken().get())


def cmd_models_hub(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    action = args.models_command
    if action == "search":
        return _cmd_search(core, args, out)
    if action == "files":
        return _cmd_files(core, args, out)
    if action == "download":
        return _cmd_download(core, args, out, err)
    if action == "verify":
        return _cmd_verify(core, args, out, err)
    return _cmd_remove(core, args, out)


def _cmd_search(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    hub = _hub(core, args)
    results = hub.search(args.query, limit=args.limit)
    if args.json:
        rows = [
            {
                "repo_id": r.repo_id,
                "downloads": r.downloads,
                "likes": r.likes,
                "license": r.license,
                "gated": r.gated,
                "last_modified": r.last_modified.isoformat() if r.last_modified else None,
            }
            for r in results
        ]
        _print_json({"endpoint": hub.endpoint, "query": args.query, "results": rows}, out)
        return EXIT_OK
    if not results:
        out.write(f"No GGUF repositories match {args.query!r} on {hub.endpoint}.\n")
    for r in results:
        modified = r.last_modified.date().isoformat() if r.last_modified else "?"
        gated = "\tgated" if r.gated else ""
        out.write(
            f"{r.repo_id}\t{r.downloads or 0} downloads\t{r.likes or 0} likes\t{r.license or '?'}"
            f"\t{modified}{gated}\n"
        )
    return EXIT_OK


def _assess(core: Core, args: argparse.Namespace, hub: HubClient, listing: RepoListing) -> RepoAssessment:
    from app.library.model_ops import assess_listing

    return assess_listing(
        hub,
        listing,
        context=args.context or core.settings.context_length,
        vram_mib=args.vram,
        ram_mib=args.ram,
    )


def _fit_json(fit: FileFit) -> dict[str, Any]:
    model, estimate = fit.model, fit.estimate
    return {
        "name": model.name,
        "filename": model.filename,
        "parts": [{"filename": p.filename, "size_bytes": p.size, "sha256": p.sha256} for p in model.parts],
        "quantization": fit.quantization,
        "size_bytes": model.size,
        "sha256": model.parts[0].sha256,
        "verdict": estimate.verdict if estimate else None,
        "n_gpu_layers": estimate.n_gpu_layers if estimate else None,
        "n_layers": estimate.n_layers if estimate else None,
        "gpu_bytes": estimate.gpu_bytes if estimate else None,
        "ram_bytes": estimate.ram_bytes if estimate else None,
        "max_context": estimate.max_context if estimate else None,
        "kv_type": estimate.kv_type if estimate else None,
        "expected_speed_ratio": estimate.expected_speed_ratio if estimate else None,
        "notes": list(estimate.notes) if estimate else [],
        "recommended": fit.recommended,
        "error": fit.error,
    }


def _cmd_files(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    hub = _hub(core, args)
    listing = hub.list_files(args.repo, args.revision)
    assessment = _assess(core, args, hub, listing)
    fits, recommendation, context = assessment.fits, assessment.recommendation, assessment.context
    if args.json:
        _print_json(
            {
                "endpoint": hub.endpoint,
                "repo_id": listing.repo_id,
                "revision": listing.revision,
                "commit": listing.commit,
                "gated": listing.gated,
                "license": listing.license,
                "context": context,
                "files": [_fit_json(f) for f in fits],
                "recommendation": (
                    {
                        "filename": next((f.model.filename for f in fits if f.recommended), None),
                        "reason": recommendation.reason,
                        "warnings": list(recommendation.warnings),
                        "context": recommendation.estimate.context if recommendation.estimate else None,
                        "kv_type": recommendation.estimate.kv_type if recommendation.estimate else None,
                    }
                    if recommendation is not None
                    else None
                ),
                "rejected": [{"filename": name, "reason": why} for name, why in listing.rejected],
            },
            out,
        )
        return EXIT_OK
    gated = ", gated" if listing.gated else ""
    out.write(
        f"{listing.repo_id} at {listing.commit[:12]} ({listing.revision}{gated}); "
        f"estimates for {context} tokens of context\n"
    )
    if not fits:
        out.write("No GGUF models in this repository.\n")
    for fit in fits:
        row = _fit_json(fit)
        size = _mib(row["size_bytes"]) if row["size_bytes"] is not None else "?"
        sha = (row["sha256"] or "?")[:12]
        mark = "  *recommended" if fit.recommended else ""
        if fit.estimate is None:
            out.write(
                f"{row['quantization'] or '?'}\t{size}\t{sha}\tunreadable: {fit.error}\t{row['filename']}\n"
            )
            continue
        e = fit.estimate
        memory = f"GPU {_mib(e.gpu_bytes)} + RAM {_mib(e.ram_bytes)}"
        out.write(
            f"{row['quantization'] or '?'}\t{size}\t{sha}\t{e.verdict}\t{e.n_gpu_layers}/{e.n_layers} layers"
            f"\t{memory}\tmax context {e.max_context}\t{row['filename']}{mark}\n"
        )
    if recommendation is not None:
        out.write(f"Recommendation: {recommendation.reason}\n")
        for warning in recommendation.warnings:
            out.write(f"Warning: {warning}\n")
    for name, why in listing.rejected:
        out.write(f"Skipped {name}: {why}\n")
    return EXIT_OK


def _choose(core: Core, args: argparse.Namespace, hub: HubClient, listing: RepoListing) -> RemoteModel:
    models = listing.models
    if not models:
        raise HearthError(f"{listing.repo_id} has no GGUF models at {listing.revision}.")
    available = ", ".join(f"{m.filename} ({m.quantization or '?'})" for m in models)
    if args.file:
        for m in models:
            if args.file in (m.name, *(p.filename for p in m.parts)):
                return m
        raise HearthError(f"{listing.repo_id} has no GGUF file {args.file!r}. Available: {available}.")
    if args.quant:
        matches = [m for m in models if (m.quantization or "").upper() == args.quant.upper()]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise HearthError(f"{listing.repo_id} has no {args.quant} file. Available: {available}.")
        names = ", ".join(m.filename for m in matches)
        raise HearthError(f"Several {args.quant} files in {listing.repo_id} ({names}); name the FILE.")
    if args.recommended:
        assessment = _assess(core, args, hub, listing)
        recommendation = assessment.recommendation
        chosen = next((f.model for f in assessment.fits if f.recommended), None)
        if chosen is None:
            reason = recommendation.reason if recommendation is not None else "no file could be read"
            raise HearthError(f"Nothing in {listing.repo_id} is recommended for this machine: {reason}")
        return chosen
    if len(models) == 1:
        return models[0]
    raise HearthError(
        f"{listing.repo_id} has {len(models)} GGUF models; choose one with FILE, --quant Q or "
        f"--recommended. Available: {available}."
    )


class _ProgressBar:
    """On a terminal, one line redrawn in place; otherwise a line every 10%."""

    def __init__(self, err: TextIO) -> None:
        self._err = err
        self._tty = err.isatty()
        self._last_decile = -1

    def __call__(self, p: DownloadProgress) -> None:
        percent = 100.0 * p.done / p.total if p.total else 100.0
        eta = f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}" if p.eta_s is not None else "--:--"
        part = f" part {p.part}/{p.parts}" if p.parts > 1 else ""
        line = (
            f"{percent:5.1f}%  {_mib(p.done)} of {_mib(p.total)}  "
            f"{p.speed_bps / (1 << 20):6.1f} MiB/s  ETA {eta}{part}"
        )
        if self._tty:
            write_control(self._err, "\r")
            self._err.write(f"{line}  ")
        elif int(percent // 10) != self._last_decile:
            self._last_decile = int(percent // 10)
            self._err.write(line + "\n")
        self._err.flush()

    def end(self) -> None:
        if self._tty:
            self._err.write("\n")
            self._err.flush()


def _cmd_download(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.library.downloads import Downloader

    hub = _hub(core, args)
    listing = hub.list_files(args.repo, args.revision)
    model = _choose(core, args, hub, listing)
    err.write(f"Downloading {listing.repo_id}/{model.filename} at {listing.commit[:12]}\n")
    bar = _ProgressBar(err)
    try:
        installed = Downloader(hub, core.library).download(listing, model, name=args.name, progress=bar)
    except KeyboardInterrupt:
        err.write("hearth: interrupted; the partial download is kept: run the same command to resume\n")
        return EXIT_INTERRUPTED
    finally:
        bar.end()
    out.write(
        f"Installed {installed.name} ({installed.quantization or '?'}, {_mib(installed.total_size_bytes)}, "
        f"sha256 {installed.sha256}) from {listing.repo_id}@{listing.commit[:12]}\n"
    )
    return EXIT_OK


def _cmd_verify(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    model = core.library.get(args.name)
    intact = core.library.verify(args.name)
    update: UpdateCheck | None = None
    if args.check_hub and model.repo_id is not None:
        update = _hub(core, args).check_update(model)
    if args.json:
        hub_json = (
            {
                "branch": update.branch,
                "commit": update.commit,
                "changed": update.changed,
                "detail": update.detail,
            }
            if update is not None
            else None
        )
        _print_json({"name": model.name, "intact": intact, "hub": hub_json}, out)
    else:
        if intact:
            out.write(f"{model.name}: intact (sha256 {model.sha256})\n")
        if args.check_hub and model.repo_id is None:
            out.write(f"{model.name} was not downloaded from the Hub; there is nothing to compare.\n")
        if update is not None:
            out.write(f"Hub: {update.detail}\n")
    if not intact:
        err.write(
            f"hearth: {model.name} is damaged or missing: its files no longer match the SHA-256 recorded at "
            f"install. Remove it and download or import it again.\n"
        )
        return EXIT_USER_ERROR
    return EXIT_OK


def _cmd_remove(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    from app.library.model_ops import remove_installed

    model, deleted = remove_installed(core.library, args.name)
    freed = f"; freed {_mib(model.total_size_bytes)}" if deleted else ""
    out.write(f"Removed {model.name}{freed}\n")
    return EXIT_OK


def _read_token(err: TextIO) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass("Hugging Face token (input hidden): ", stream=err)
    return sys.stdin.readline() if sys.stdin is not None else ""


def _read_api_key(name: str, err: TextIO) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(f"API key for {name} (input hidden): ", stream=err)
    key = sys.stdin.readline() if sys.stdin is not None else ""
    if not key.strip():
        raise HearthError("No API key was given: pipe it on standard input.")
    return key


def cmd_servers(paths: HearthPaths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.remote.openai_client import is_loopback
    from app.remote.registry import ServerRegistry

    registry = ServerRegistry(paths.home)
    action = args.servers_command
    if action == "add":
        # Checked before the key is asked for, so a typo does not cost the user a paste.
        registry.check(args.name, args.url, Path(args.ca_bundle) if args.ca_bundle else None)
        key = _read_api_key(args.name, err) if args.api_key_from_stdin else None
        server, stored = registry.add(
            args.name, args.url, api_key=key, ca_bundle=Path(args.ca_bundle) if args.ca_bundle else None
        )
        out.write(f"Added {server.name}: {server.url}; its models are {server.name}/MODEL.\n")
        if key is not None and server.url.startswith("http:") and not is_loopback(server.url):
            err.write("note: the address is not https: the API key and the chats travel unencrypted.\n")
        if stored is not None and not stored.persisted:
            err.write(f"hearth: the API key was not saved: {stored.reason}\n")
            return EXIT_USER_ERROR
        return EXIT_OK
    if action == "remove":
        removed, deleted = registry.remove(args.name)
        if not deleted.persisted:
            err.write(f"hearth: removed {removed.name}, but not its API key: {deleted.reason}\n")
            return EXIT_USER_ERROR
        out.write(f"Removed {removed.name} and its API key.\n")
        return EXIT_OK
    if action == "models":
        server = registry.get(args.name)
        models = registry.client(server).list_models()
        if args.json:
            _print_json(
                {
                    "server": server.name,
                    "url": server.url,
                    "models": [
                        {"id": m.id, "name": f"{server.name}/{m.id}", "owned_by": m.owned_by} for m in models
                    ],
                },
                out,
            )
        else:
            for m in models:
                out.write(f"{server.name}/{m.id}\n")
        return EXIT_OK
    rows: list[dict[str, Any]] = []
    for server in registry.servers():
        status = registry.key_status(server.name)
        where = ("keyring" if status.persisted else "memory") if status.present else None
        rows.append(
            {
                "name": server.name,
                "url": server.url,
                "ca_bundle": server.ca_bundle,
                "api_key": {"stored": status.present, "where": where, "backend": status.backend},
                "problem": status.reason or None,
            }
        )
    if args.json:
        _print_json({"servers": rows}, out)
        return EXIT_OK
    if not rows:
        out.write("No servers; add one with `hearth servers add NAME URL`.\n")
    for row in rows:
        key = f"key in the {row['api_key']['where']}" if row["api_key"]["stored"] else "no key"
        bundle = f"\tCA bundle {row['ca_bundle']}" if row["ca_bundle"] else ""
        out.write(f"{row['name']}\t{row['url']}\t{key}{bundle}\n")
        if row["problem"]:
            out.write(f"  keyring: {row['problem']}\n")
    return EXIT_OK


def cmd_token(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import os

    from app.library.hub import PUBLIC_ENDPOINT, EndpointToken, is_public_hub

    # Without --endpoint this is the Hugging Face token, whatever the hf_endpoint setting or HF_ENDPOINT say.
    token = EndpointToken(getattr(args, "endpoint", None) or PUBLIC_ENDPOINT)
    label = "Token" if token.public else f"Token for {token.origin}"
    action = args.token_command
    if action == "set":
        refusal = token.refusal()
        if refusal is not None:
            # Said before the token is asked for, so nobody pastes one for nothing.
            err.write(f"hearth: {refusal}\n")
            return EXIT_USER_ERROR
        result = token.set(_read_token(err))
        if not result.persisted:
            err.write(f"hearth: the token was not saved: {result.reason}\n")
            return EXIT_USER_ERROR
        if token.public:
            out.write("Token saved in the system keyring; it is sent to https://huggingface.co only.\n")
            configured = os.environ.get("HF_ENDPOINT", "").strip()
            if configured.startswith(("http://", "https://")) and not is_public_hub(configured):
                err.write(
                    f"note: HF_ENDPOINT is {configured}, which gets its own token: "
                    f"`hearth token set --endpoint {configured}`.\n"
                )
        else:
            out.write(f"{label} saved in the system keyring; it is sent to that origin only.\n")
        return EXIT_OK
    if action == "clear":
        result = token.clear()
        if not result.persisted:
            err.write(f"hearth: {result.reason}\n")
            return EXIT_USER_ERROR
        out.write(f"{label} removed.\n")
        return EXIT_OK
    if token.refusal() is not None:
        out.write(f"{label}: none; Hearth never sends a token over plain http.\n")
        return EXIT_OK
    status = token.status()
    if status.present:
        where = "the system keyring" if status.persisted else "memory only"
        out.write(f"{label}: set (in {where}; keyring backend {status.backend})\n")
    else:
        out.write(f"{label}: not set (keyring backend {status.backend})\n")
    if status.reason:
        out.write(f"Keyring: {status.reason}\n")
    return EXIT_OK


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _message_json(m: Message) -> dict[str, Any]:
    return {**message_record(m), "sibling_index": m.sibling_index, "sibling_count": m.sibling_count}


def _conversation_json(c: Conversation) -> dict[str, Any]:
    return {
        "id": c.id,
        "title": c.title,
        "system_prompt": c.system_prompt,
        "model_name": c.model_name,
        "message_count": c.message_count,
        "pinned": c.pinned,
        "settings": c.settings,
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    }


def _hit_json(hit: SearchHit) -> dict[str, Any]:
    """The snippet as plain text, with the [start, end) character ranges of the words that matched."""
    plain: list[str] = []
    matches: list[list[int]] = []
    length = 0
    for i, piece in enumerate(hit.snippet.split(HIT_START)):
        matched, _, rest = piece.partition(HIT_END) if i else ("", "", piece)
        if matched:
            matches.append([length, length + len(matched)])
        plain += [matched, rest]
        length += len(matched) + len(rest)
    return {
        "conversation_id": hit.conversation_id,
        "message_id": hit.message_id,
        "title": hit.title,
        "role": hit.role,
        "in_reasoning": hit.in_reasoning,
        "snippet": "".join(plain),
        "matches": matches,
        "rank": hit.rank,
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _cmd_conversation_search(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    hits = core.store.search(args.query, limit=args.limit)
    if args.json:
        _print_json({"query": args.query, "hits": [_hit_json(h) for h in hits]}, out)
        return EXIT_OK
    if not hits:
        out.write(f"No conversations match {args.query!r}.\n")
    for hit in hits:
        # One line per hit, so the output stays greppable: newlines inside a snippet become spaces.
        snippet = " ".join(hit.snippet.replace(HIT_START, "«").replace(HIT_END, "»").split())
        if hit.in_reasoning:
            snippet = f"(thinking) {snippet}"
        where = (
            f"{hit.conversation_id}\t{hit.message_id}"
            if hit.message_id is not None
            else f"{hit.conversation_id}\t-"
        )
        out.write(f"{where}\t{hit.title}\t{snippet}\n")
    return EXIT_OK


def _cmd_conversation_export(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    store = core.store
    if args.all == (args.id is not None):
        raise HearthError("Name one conversation ID to export, or --all (with --output DIR).")
    if args.all:
        if not args.output:
            raise HearthError("--all writes one file per conversation: give the folder with --output DIR.")
        folder = Path(args.output)
        if folder.exists() and not folder.is_dir():
            raise HearthError(f"{folder} is a file; --all needs a folder to write into.")
        report = store.export_all(folder, args.format)
        written = report.written
        for conversation_id, title, _why in report.unreadable:
            out.write(f"Could not read conversation {conversation_id} ({title}): it is damaged\n")
        out.write(f"Exported {_count(len(written), 'conversation')} to {folder}\n")
        for path in written:
            out.write(f"{path}\n")
        return EXIT_OK
    text = (
        store.export_markdown(args.id)
        if args.format == "md"
        else json.dumps(store.export_json(args.id), indent=2, ensure_ascii=False) + "\n"
    )
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise HearthError(f"Could not write {args.output}: {exc.strerror or exc}") from exc
    else:
        out.write(text)
    return EXIT_OK


def _cmd_conversation_import(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    report = core.store.import_file(Path(args.file))
    if args.json:
        _print_json(dataclasses.asdict(report), out)
        return EXIT_OK
    source = "ChatGPT's conversations.json" if report.source == "chatgpt" else "a Hearth export"
    out.write(
        f"Imported {_count(report.conversations, 'conversation')} "
        f"({_count(report.messages, 'message')}) from {source}.\n"
    )
    if report.skipped:
        out.write(f"Left out {_count(report.skipped, 'system, tool, hidden or empty message')}.\n")
    if report.skipped_conversations:
        out.write(
            f"Left out {_count(report.skipped_conversations, 'conversation')} with no messages to import.\n"
        )
    for conversation_id in report.conversation_ids:
        conversation = core.store.get_conversation(conversation_id)
        out.write(f"{conversation.id}\t{conversation.message_count} messages\t{conversation.title}\n")
    return EXIT_OK


def cmd_conversations(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    store = core.store
    action = args.conversations_command
    if action == "list":
        conversations = store.list_conversations()
        if args.json:
            _print_json({"conversations": [_conversation_json(c) for c in conversations]}, out)
        else:
            for c in conversations:
                pinned = "\tpinned" if c.pinned else ""
                out.write(f"{c.id}\t{c.updated_at}\t{c.message_count} messages\t{c.title}{pinned}\n")
        return EXIT_OK
    if action == "show":
        conversation = store.get_conversation(args.id)
        messages = store.list_messages(args.id)
        if args.json:
            _print_json(
                {**_conversation_json(conversation), "messages": [_message_json(m) for m in messages]}, out
            )
        else:
            out.write(f"# {conversation.title}\n\n")
            for m in messages:
                badge = "" if m.status == "complete" else f" [{m.status}]"
                if m.reasoning:
                    out.write(f"{m.role} (thinking): {m.reasoning}\n\n")
                out.write(f"{m.role}{badge}: {m.content}\n\n")
        return EXIT_OK
    if action == "search":
        return _cmd_conversation_search(core, args, out)
    if action == "import":
        return _cmd_conversation_import(core, args, out)
    return _cmd_conversation_export(core, args, out)


class _StreamToStdout(TurnCallbacks):
    """The answer on stdout; a reasoning model's thinking framed as Ollama's CLI does, on stderr (`thinking`
    "stderr"), before the answer on stdout ("stdout"), or not at all ("hidden")."""

    def __init__(self, out: TextIO, err: TextIO, thinking: str = "stderr") -> None:
        self._out, self._err = out, err
        self._thinking = {"stderr": err, "stdout": out}.get(thinking)
        self._thinking_open = False

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        self._err.write(f"conversation {conversation_id}\n")
        self._err.flush()

    def context_note(self, assistant_message_id: int, note: str) -> None:
        self._err.write(f"note: {note}\n")
        self._err.flush()

    def reasoning_delta(self, assistant_message_id: int, text: str) -> None:
        sink = self._thinking
        if sink is None:
            return
        if not self._thinking_open:
            sink.write("Thinking…\n")
            self._thinking_open = True
        sink.write(text)
        sink.flush()

    def answer_was_reasoning(self, assistant_message_id: int) -> None:
        # Printed text cannot be taken back; the stored reply has it in the right place.
        self._err.write(
            "\nnote: the model did not mark where its thinking began; the text printed so far was its "
            "thinking, not its answer\n"
        )
        self._err.flush()

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        if text:
            self.end_thinking()
        self._out.write(text)
        self._out.flush()

    def end_thinking(self) -> None:
        if self._thinking is not None and self._thinking_open:
            self._thinking.write("\n…done thinking.\n\n")
            self._thinking.flush()
            self._thinking_open = False


def _chat_engine(core: Core, servers: ServerRegistry | None = None) -> ChatEngine:
    """The engine a command runs, with the runner's log and the CPU kernels learned on this machine."""
    return ChatEngine(
        core.store,
        core.library,
        core.settings,
        runner_log=core.paths.runner_log_file,
        cpu_kernels_file=core.paths.cpu_kernels_file,
        servers=servers,
    )


def cmd_chat(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.remote.registry import ServerRegistry

    engine = _chat_engine(core, servers=ServerRegistry(core.paths.home))
    # The options given win over the conversation's settings, which win over the model's and the global ones.
    defaults = engine.sampling_for(args.conversation, args.model)
    overrides = {
        "temperature": args.temperature,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
    }
    sampling = dataclasses.replace(defaults, **{k: v for k, v in overrides.items() if v is not None})
    restore = _cancel_on_interrupt(engine.cancel)
    stream = _StreamToStdout(out, err, args.thinking)
    try:
        result = engine.run_turn(
            args.prompt,
            args.model,
            conversation_id=args.conversation,
            system_prompt=args.system,
            sampling=sampling,
            callbacks=stream,
        )
    finally:
        restore()
        engine.close()
    stream.end_thinking()  # a reply cut off mid-thought
    out.write("\n")
    out.flush()
    if result.status == "complete":
        return EXIT_OK
    if result.status == "stopped":
        err.write("stopped; the partial reply was saved\n")
        return EXIT_INTERRUPTED
    err.write(f"hearth: the reply failed ({result.status}): {result.error}; the partial reply was saved\n")
    return EXIT_FAILED


def _cancel_on_interrupt(cancel: Callable[[], None]) -> Callable[[], None]:
    """Ctrl+C stops generation like the Stop button: the partial reply is kept as `stopped`."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(_signum: int, _frame: FrameType | None) -> None:
        cancel()

    previous = signal.signal(signal.SIGINT, handler)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore


def cmd_serve(core: Core, args: argparse.Namespace, err: TextIO) -> NoReturn:
    """Load the model, serve it until Ctrl+C (KeyboardInterrupt: exit 130), then shut the runner down."""
    from app.local_api.server import LocalServer, get_or_create_api_key
    from app.secret_store import SecretStore

    engine = _chat_engine(core)
    try:
        name = args.model
        if name is None:
            name, why = engine.model_to_autoload()
            if name is None:
                raise HearthError(f"{why} Name a model with --model.")
        core.library.get(name)  # an unknown name is one line on stderr, before anything else is said
        err.write(f"Loading {name}…\n")
        err.flush()
        engine.prepare(name)
        key = get_or_create_api_key(SecretStore())
        assert key.value is not None
        port = core.settings.local_server_port if args.port is None else args.port
        with LocalServer(engine, key.value, port=port) as server:
            err.write(f"Serving {name} at {server.url} (OpenAI-compatible; Ctrl+C stops)\n")
            # The one place outside the window where the key is shown; it never goes to a log.
            err.write(f"API key: {key.value}\n")
            if not key.persisted:
                err.write("The system keyring could not keep the key: it works until this server stops.\n")
            err.flush()
            while True:
                # time.sleep, unlike a wait on a lock, is interrupted by Ctrl+C on every platform.
                time.sleep(3600)
    finally:
        engine.close()


def cmd_backup(paths: HearthPaths, args: argparse.Namespace, out: TextIO) -> int:
    from app.storage.backup import create_backup, restore_backup

    if args.command == "backup":
        written = create_backup(paths, Path(args.path) if args.path else None)
        out.write(f"{written}\n")
        return EXIT_OK
    result = restore_backup(paths, Path(args.path))
    kept = "moved aside (it is damaged)" if result.previous_damaged else "backed up"
    out.write(f"Restored {paths.db_path} from {result.restored_from}\n")
    if result.previous is not None:
        out.write(f"The database it replaced was {kept}: {result.previous}\n")
    return EXIT_OK


def cmd_doctor(paths: HearthPaths, args: argparse.Namespace, out: TextIO) -> int:
    from app.doctor import collect_report, format_report

    report = collect_report(paths)
    if args.json:
        _print_json(report, out)
    else:
        out.write(format_report(report))
    return EXIT_OK if report["database"]["ok"] else EXIT_USER_ERROR


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    gui: Callable[[HearthPaths, bool], int] | None = None,
    crash_handlers: bool = False,
) -> int:
    """`crash_handlers`: record uncaught exceptions and native crashes in logs/ (process-wide hooks, so only
    for the process's own entry point, never for a caller such as a test that runs main in-process)."""
    # Replies, conversations and Hub strings are not Hearth's text: on a terminal their control sequences
    # would be obeyed (OSC 52 writes the clipboard). Pipes and files still get every character.
    out = for_terminal(out or sys.stdout)
    err = for_terminal(err or sys.stderr)
    parser = build_parser()
    args = parser.parse_args(argv)
    paths = resolve_home(getattr(args, "home", None))
    from app.logging_setup import configure_logging, install_crash_handlers

    paths.ensure()
    configure_logging(paths, verbose=getattr(args, "verbose", False))
    if crash_handlers:
        install_crash_handlers(paths)
    try:
        if args.command in (None, "gui"):
            if gui is None:
                parser.error("the GUI is not available in this entry point")
            return gui(paths, bool(getattr(args, "smoke_test", False)))
        if args.command == "doctor":
            return cmd_doctor(paths, args, out)
        if args.command == "token":
            return cmd_token(args, out, err)
        if args.command == "servers":
            return cmd_servers(paths, args, out, err)
        if args.command in ("backup", "restore"):
            return cmd_backup(paths, args, out)
        # Reading and exporting conversations works on a damaged database too (opened read-only).
        readable = args.command == "conversations" and args.conversations_command != "import"
        core = Core.open(paths, allow_damaged=readable)
        if core.damaged:
            err.write(f"hearth: opened read-only: {core.damaged}\n")
        try:
            if args.command == "chat":
                return cmd_chat(core, args, out, err)
            if args.command == "serve":
                cmd_serve(core, args, err)
            if args.command == "models" and args.models_command in HUB_ACTIONS:
                return cmd_models_hub(core, args, out, err)
            if args.command == "models":
                return cmd_models(core, args, out)
            return cmd_conversations(core, args, out)
        finally:
            core.close()
    except HearthError as exc:
        err.write(f"hearth: {exc}\n")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        err.write("hearth: interrupted\n")
        return EXIT_INTERRUPTED
