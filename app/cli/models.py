"""`hearth models`: the installed library (list, import, verify, remove), the Hub (search, files,
download) and the models other apps downloaded (scan, folders)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from app.cli import models_settings
from app.cli.arguments import Subcommands, _non_negative_int, _positive_int
from app.cli.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USER_ERROR, report
from app.cli.output import print_json
from app.cli.terminal_text import write_control
from app.core import Core
from app.errors import HearthError
from app.model_scan import (
    Added,
    FoundModel,
    ScanResult,
    add_folder,
    add_found,
    list_folders,
    remove_folder,
    scan_models,
)

if TYPE_CHECKING:
    # Imported where used: huggingface_hub adds a third of a second to every `hearth` start.
    from app.library.downloads import DownloadProgress
    from app.library.hub import HubClient, RemoteModel, RepoListing, UpdateCheck
    from app.library.model_ops import FileFit, RepoAssessment


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    models = sub.add_parser("models", parents=[common], help="the installed model library")
    models_sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    models_list = models_sub.add_parser("list", parents=[common], help="list installed models")
    models_list.add_argument("--json", action="store_true")
    models_import = models_sub.add_parser(
        "import", parents=[common], help="validate, hash and add a GGUF file"
    )
    models_import.add_argument("path", metavar="PATH")
    models_import.add_argument("--name")
    models_import.add_argument(
        "--mmproj",
        metavar="PATH",
        help="a vision model's multimodal projector (default: the mmproj*.gguf beside the model that fits)",
    )
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
        "remove",
        parents=[common],
        help="remove an installed model; its files are deleted only if they are in Hearth's models folder",
    )
    models_remove.add_argument("name", metavar="NAME")
    models_updates = models_sub.add_parser(
        "updates",
        parents=[common],
        help="whether the Hub's main branch now has different bytes for models from the Hub",
        description=UPDATES_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models_updates.add_argument("--json", action="store_true")
    models_update = models_sub.add_parser(
        "update",
        parents=[common],
        help="download and verify a model's new bytes from the Hub, then switch to them (again: resume)",
    )
    which_update = models_update.add_mutually_exclusive_group(required=True)
    which_update.add_argument("name", nargs="?", metavar="NAME")
    which_update.add_argument("--all", action="store_true", help="every model the Hub has an update for")
    _add_scan_parsers(models_sub, common)
    models_settings.add_parsers(models_sub, common)


UPDATES_DESCRIPTION = """\
Compare every model downloaded from the Hub (or added from the Hugging Face cache) with its file on the
repo's main branch now. Nothing is downloaded; `hearth models update NAME` does that.

--json prints:
  {"updates": [{"name": NAME, "repo": ID, "file": F, "installed_sha256": HEX, "upstream_sha256": HEX,
                "upstream_commit": SHA, "in_place": BOOL}],
   "checked": N, "errors": [{"name": NAME, "reason": TEXT}]}
(for a split model, "file" and the hashes are those of the first part that changed; "in_place": the model
is used from another app's folder, and its update downloads into Hearth's models folder.)
Exit status 3 when a model could not be checked (it is listed in "errors").
"""


SCAN_DESCRIPTION = """\
Find GGUF models other apps downloaded: Ollama ($OLLAMA_MODELS or ~/.ollama/models), LM Studio
(~/.lmstudio/models and the folder it is set to use), the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub
or ~/.cache/huggingface/hub), GPT4All, Jan and the folders added with `hearth models folders add`.
Listing reads only headers. --add registers the usable ones in place: nothing is copied, and Hearth never
changes or deletes them (`hearth models remove` only forgets one); each is SHA-256 hashed once, and an
Ollama or Hugging Face blob must match the digest it is named by.

--json prints:
  {"models": [{"app": "ollama|lmstudio|hf-cache|gpt4all|jan|folder", "name": NAME, "path": PATH,
               "size_bytes": N, "parts": N, "quantization": Q|null, "usable": BOOL, "problem": TEXT|null,
               "in_library": BOOL, "library_name": NAME|null, "add_as": NAME, "sha256": HEX|null,
               "projector": PATH|null, "repo_id": ID|null, "revision": SHA|null, "filename": F|null}],
   "searched": [{"app": APP, "path": PATH, "exists": BOOL, "found": N, "notes": [TEXT]}],
   "added": [{"name": NAME, "library_name": NAME|null, "added": BOOL, "error": TEXT|null}]}
("added" only with --add; "sha256" is the digest the app names the file by, not a hash of it.)
"""


def _add_scan_parsers(models_sub: Subcommands, common: argparse.ArgumentParser) -> None:
    scan = models_sub.add_parser(
        "scan",
        parents=[common],
        help="find models other apps downloaded (Ollama, LM Studio, Hugging Face cache, GPT4All, Jan)",
        description=SCAN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scan.add_argument("--add", action="store_true", help="add the usable ones to the library, in place")
    scan.add_argument("--json", action="store_true")
    folders = models_sub.add_parser(
        "folders", parents=[common], help="your own folders of GGUF files for `hearth models scan`"
    )
    folders_sub = folders.add_subparsers(dest="folders_command", metavar="ACTION", required=True)
    folders_add = folders_sub.add_parser(
        "add", parents=[common], help="scan this folder (and the folders in it) too"
    )
    folders_add.add_argument("path", metavar="PATH")
    folders_list = folders_sub.add_parser("list", parents=[common], help="the folders scanned")
    folders_list.add_argument("--json", action="store_true")
    folders_remove = folders_sub.add_parser(
        "remove", parents=[common], help="stop scanning a folder (its files and library entries stay)"
    )
    folders_remove.add_argument("path", metavar="PATH")


def _add_fit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--context", type=_positive_int, metavar="N", help="context length to plan for")
    parser.add_argument("--vram", type=_non_negative_int, metavar="MIB", help="plan for this much free VRAM")
    parser.add_argument("--ram", type=_non_negative_int, metavar="MIB", help="plan for this much free RAM")


def run(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    action = args.models_command
    if action == "list":
        return _cmd_list(core, args, out)
    if action == "set":
        return models_settings.run_set(core, args, out)
    if action == "show":
        return models_settings.run_show(core, args, out)
    if action == "import":
        return _cmd_import(core, args, out)
    if action == "search":
        return _cmd_search(core, args, out)
    if action == "files":
        return _cmd_files(core, args, out)
    if action == "download":
        return _cmd_download(core, args, out, err)
    if action == "verify":
        return _cmd_verify(core, args, out)
    if action == "updates":
        return _cmd_updates(core, args, out, err)
    if action == "update":
        return _cmd_update(core, args, out, err)
    if action == "scan":
        return _cmd_scan(core, args, out, err)
    if action == "folders":
        return _cmd_folders(core, args, out)
    return _cmd_remove(core, args, out)


def _model_json(model: Any, missing: bool) -> dict[str, Any]:
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
        "missing": missing,
        "vision": model.vision,
        "projector": (
            {
                "filename": model.projector.filename,
                "path": model.projector.path,
                "size_bytes": model.projector.size_bytes,
                "sha256": model.projector.sha256,
            }
            if model.projector is not None
            else None
        ),
    }


def _cmd_list(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    models = core.library.list_models()
    # A model registered where another app keeps it goes missing when that app moves or deletes it.
    missing = {m.name for m in models if m.missing_files()}
    if args.json:
        print_json({"models": [_model_json(m, m.name in missing) for m in models]}, out)
        return EXIT_OK
    if not models:
        out.write("No models installed. Import one with `hearth models import PATH`.\n")
    for m in models:
        size = f"{m.total_size_bytes / 1024 / 1024:.0f} MiB"
        vision = "\tvision" if m.vision else ""
        gone = "\tmissing" if m.name in missing else ""
        out.write(f"{m.name}\t{m.quantization or '?'}\t{size}\t{m.sha256[:12]}{vision}{gone}\n")
    return EXIT_OK


def _cmd_import(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    before = {m.name: m.projector for m in core.library.list_models()}
    mmproj = Path(args.mmproj) if args.mmproj else None
    model = core.library.import_file(Path(args.path), name=args.name, mmproj=mmproj)
    projector = model.projector
    if model.name in before:
        # The library keeps one entry per file: importing it again copies nothing and renames nothing.
        ignored = f"; --name {args.name!r} was not applied" if args.name and args.name != model.name else ""
        out.write(f"{args.path} is already installed as {model.name} (sha256 {model.sha256}){ignored}\n")
    else:
        out.write(f"Imported {model.name} ({model.quantization or '?'}, sha256 {model.sha256})\n")
    if projector is not None and projector != before.get(model.name):
        out.write(
            f"with its vision projector {projector.filename} (sha256 {projector.sha256}): it can see images\n"
        )
    return EXIT_OK


def _hub(core: Core, args: argparse.Namespace) -> HubClient:
    from app.library.hub import HubClient
    from app.library.hub_token import HubToken

    endpoint = getattr(args, "endpoint", None) or core.settings.hf_endpoint
    return HubClient(endpoint, HubToken().get())


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
        print_json({"endpoint": hub.endpoint, "query": args.query, "results": rows}, out)
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


def _projector_json(fit: FileFit) -> dict[str, Any] | None:
    file, info = fit.model.projector, fit.projector
    if file is None:
        return None
    return {
        "filename": file.filename,
        "size_bytes": file.size,
        "sha256": file.sha256,
        "projector_type": info.projector_type if info else None,
        "image_tokens": info.image_tokens if info else None,
    }


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
        "vision": model.projector is not None,
        "projector": _projector_json(fit),
    }


def _cmd_files(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    hub = _hub(core, args)
    listing = hub.list_files(args.repo, args.revision)
    assessment = _assess(core, args, hub, listing)
    fits, recommendation, context = assessment.fits, assessment.recommendation, assessment.context
    if args.json:
        print_json(
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
        if row["projector"] is not None:
            out.write(f"\t+ {_projector_line(row['projector'])}\n")
    if recommendation is not None:
        out.write(f"Recommendation: {recommendation.reason}\n")
        for warning in recommendation.warnings:
            out.write(f"Warning: {warning}\n")
    for name, why in listing.rejected:
        out.write(f"Skipped {name}: {why}\n")
    return EXIT_OK


def _projector_line(projector: dict[str, Any]) -> str:
    size = _mib(projector["size_bytes"]) if projector["size_bytes"] is not None else "?"
    tokens = projector["image_tokens"]
    per_image = f", about {tokens} tokens of context per image" if tokens else ""
    return f"vision projector {projector['filename']} ({size}, counted in the fit{per_image})"


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
        report(err, "interrupted; the partial download is kept: run the same command to resume")
        return EXIT_INTERRUPTED
    finally:
        bar.end()
    out.write(
        f"Installed {installed.name} ({installed.quantization or '?'}, {_mib(installed.total_size_bytes)}, "
        f"sha256 {installed.sha256}) from {listing.repo_id}@{listing.commit[:12]}\n"
    )
    return EXIT_OK


def _cmd_verify(core: Core, args: argparse.Namespace, out: TextIO) -> int:
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
        print_json({"name": model.name, "intact": intact, "hub": hub_json}, out)
    else:
        if intact:
            out.write(f"{model.name}: intact (sha256 {model.sha256})\n")
        if args.check_hub and model.repo_id is None:
            out.write(f"{model.name} was not downloaded from the Hub; there is nothing to compare.\n")
        if update is not None:
            out.write(f"Hub: {update.detail}\n")
    if not intact:
        raise HearthError(
            f"{model.name} is damaged or missing: its files no longer match the SHA-256 recorded at "
            f"install. Remove it and download or import it again."
        )
    return EXIT_OK


def _cmd_updates(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.library.updates import check_updates, report_json, save_report

    checked = check_updates(core.library, _hub(core, args))
    save_report(core.paths.home, checked)
    if args.json:
        data = report_json(checked)
        del data["checked_at"]
        print_json(data, out)
    else:
        if not checked.checked:
            out.write("No models from the Hub are installed; there is nothing to check.\n")
        for u in checked.updates:
            where = "\t(used from another app: the update downloads into Hearth's models folder)"
            out.write(
                f"{u.name}\t{u.repo}@{u.upstream_commit[:12]}\t{u.file}\t{u.installed_sha256[:12]} -> "
                f"{u.upstream_sha256[:12]}{where if u.in_place else ''}\n"
            )
        if checked.checked and not checked.updates:
            out.write(f"All {checked.checked} models from the Hub are up to date.\n")
        elif checked.updates:
            out.write("Update with `hearth models update NAME`, or all with `hearth models update --all`.\n")
    for problem in checked.errors:
        report(err, f"{problem.name} could not be checked: {problem.reason}")
    return EXIT_USER_ERROR if checked.errors else EXIT_OK


def _cmd_update(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.library.updates import check_updates, forget_update, save_report, update_model

    hub = _hub(core, args)
    unchecked = False
    if args.all:
        checked = check_updates(core.library, hub)
        unchecked = bool(checked.errors)
        save_report(core.paths.home, checked)
        names = [u.name for u in checked.updates]
        for problem in checked.errors:
            report(err, f"{problem.name} could not be checked: {problem.reason}")
        if not names and not unchecked:
            out.write("Every model from the Hub is up to date.\n")
    else:
        names = [core.library.get(args.name).name]
    for name in names:
        before = core.library.get(name)
        if not before.path.resolve().is_relative_to(core.library.models_dir.resolve()):
            err.write(
                f"{name} is used from {before.path}, which Hearth never changes: the update downloads into "
                f"Hearth's models folder.\n"
            )
        err.write(f"Updating {name} from {before.repo_id}\n")
        bar = _ProgressBar(err)
        try:
            result = update_model(core.library, hub, name, progress=bar)
        except KeyboardInterrupt:
            report(err, f"interrupted; {name} is unchanged, its partial download kept: run again to resume")
            return EXIT_INTERRUPTED
        finally:
            bar.end()
        if result is None:
            out.write(f"{name} is up to date.\n")
            continue
        forget_update(core.paths.home, name)
        model = result.model
        freed = f"; deleted the old file ({len(result.deleted)} file(s))" if result.deleted else ""
        commit = (model.revision or "?")[:12]
        out.write(f"Updated {name} to {model.repo_id}@{commit} (sha256 {model.sha256}){freed}\n")
    return EXIT_USER_ERROR if unchecked else EXIT_OK


def _cmd_remove(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    from app.library.model_ops import remove_installed

    model, deleted = remove_installed(core.library, args.name)
    if deleted:
        out.write(f"Removed {model.name}; freed {_mib(model.total_size_bytes)}\n")
    elif model.path.resolve().is_relative_to(core.library.models_dir.resolve()):
        out.write(f"Removed {model.name}\n")
    else:
        out.write(f"Removed {model.name} from the library; its file was left where it is: {model.path}\n")
    return EXIT_OK


def _found_json(found: FoundModel) -> dict[str, Any]:
    candidate = found.candidate
    return {
        "app": found.app,
        "name": found.name,
        "path": found.path,
        "size_bytes": found.size_bytes,
        "parts": found.parts,
        "quantization": found.quantization,
        "usable": found.usable,
        "problem": found.problem,
        "in_library": found.in_library,
        "library_name": found.library_name,
        "add_as": found.add_as,
        "sha256": candidate.sha256,
        "projector": found.projector,
        "repo_id": candidate.repo_id,
        "revision": candidate.revision,
        "filename": candidate.filename,
    }


def _scan_json(result: ScanResult, added: list[Added] | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "models": [_found_json(m) for m in result.models],
        "searched": [
            {"app": s.app, "path": s.path, "exists": s.exists, "found": s.found, "notes": list(s.notes)}
            for s in result.searched
        ],
    }
    if added is not None:
        data["added"] = [
            {
                "name": a.found.name,
                "library_name": a.model.name if a.model is not None else None,
                "added": a.added,
                "error": a.error,
            }
            for a in added
        ]
    return data


def _found_line(found: FoundModel) -> str:
    if not found.usable:
        state = f"unusable: {found.problem}"
    elif found.in_library:
        state = f"in the library as {found.library_name}"
    else:
        state = f"not in the library (adds as {found.add_as})"
    return f"{found.app}\t{found.name}\t{_mib(found.size_bytes)}\t{state}\t{found.path}\n"


def _cmd_scan(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    result = scan_models(core.library, list_folders(core.paths.home))
    added: list[Added] | None = None
    if args.add:
        reported: dict[str, int] = {}

        def hashing(found: FoundModel, done: int, total: int) -> None:
            # A line at each quarter: hashing a large model takes minutes.
            quarter = 4 * done // total if total else 4
            if reported.get(found.name) != quarter:
                reported[found.name] = quarter
                err.write(f"Hashing {found.name}: {_mib(done)} of {_mib(total)}\n")
                err.flush()

        added = add_found(core.library, result.addable, hashing)
    if args.json:
        print_json(_scan_json(result, added), out)
    else:
        for found in result.models:
            out.write(_found_line(found))
        looked = [s for s in result.searched if s.exists]
        if not result.models:
            where = ", ".join(str(s.path) for s in looked) or "none of their folders exist here"
            out.write(f"No GGUF models found (looked in: {where}).\n")
        for searched in looked:
            for note in searched.notes:
                report(err, f"{searched.app}: {note}")
        for entry in added or []:
            if entry.added and entry.model is not None:
                out.write(f"Added {entry.model.name} in place from {entry.found.app}: {entry.model.path}\n")
    failed = [a for a in added or [] if a.error is not None]
    for entry in failed:
        report(err, f"{entry.found.name} ({entry.found.app}) was not added: {entry.error}")
    return EXIT_USER_ERROR if failed else EXIT_OK


def _cmd_folders(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    home = core.paths.home
    action = args.folders_command
    if action == "add":
        folder = add_folder(home, Path(args.path))
        out.write(f"Added {folder}; `hearth models scan` now looks in it.\n")
    elif action == "remove":
        folder = remove_folder(home, Path(args.path))
        out.write(f"Removed {folder} from the model folders; nothing in it was touched.\n")
    elif args.json:
        print_json({"folders": [str(f) for f in list_folders(home)]}, out)
    else:
        folders = list_folders(home)
        if not folders:
            out.write("No model folders added. Add one with `hearth models folders add PATH`.\n")
        for folder in folders:
            gone = "" if folder.is_dir() else "\tmissing"
            out.write(f"{folder}{gone}\n")
    return EXIT_OK


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
