"""`hearth docs`: collections of files and folders that chats can answer from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from app.cli.arguments import Subcommands, _positive_int
from app.cli.errors import EXIT_FAILED, EXIT_OK
from app.cli.output import print_json
from app.core import Core

if TYPE_CHECKING:
    from app.documents.collections import CollectionSummary
    from app.documents.library import DocumentLibrary, IndexProgress, RefreshReport


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    docs = sub.add_parser("docs", parents=[common], help="document collections that chats can answer from")
    actions = docs.add_subparsers(dest="docs_command", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add", parents=[common], help="create a collection (or add to one) and index its files"
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("paths", metavar="PATH", nargs="+", type=Path, help="files, or folders (recursive)")
    listing = actions.add_parser("list", parents=[common], help="the collections, with their file counts")
    listing.add_argument("--json", action="store_true")
    show = actions.add_parser("show", parents=[common], help="a collection's paths and each file's status")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true")
    search = actions.add_parser("search", parents=[common], help="the passages that best answer a query")
    search.add_argument("name", metavar="NAME")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("--limit", type=_positive_int, default=5, metavar="N")
    search.add_argument("--json", action="store_true")
    refresh = actions.add_parser("refresh", parents=[common], help="index what changed since the last time")
    refresh.add_argument("name", metavar="NAME")
    remove = actions.add_parser(
        "remove", parents=[common], help="remove a collection, or only some of its paths"
    )
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("paths", metavar="PATH", nargs="*", type=Path)


def run(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    documents = core.documents()
    try:
        return _run(documents, args, out, err)
    finally:
        documents.close()


def _run(documents: DocumentLibrary, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    collections = documents.collections
    command = args.docs_command
    if command == "add":
        if any(summary.name == args.name for summary in collections.list()):
            collections.add_paths(args.name, args.paths)
        else:
            collections.create(args.name, args.paths)
        return _refresh(documents, args.name, err)
    if command == "refresh":
        return _refresh(documents, args.name, err)
    if command == "list":
        summaries = collections.list()
        if args.json:
            print_json({"collections": [_summary_record(s) for s in summaries]}, out)
            return EXIT_OK
        for s in summaries:
            out.write(
                f"{s.name}\t{s.files.indexed} of {s.files.total} files indexed\t{s.chunks} passages\t"
                f"{', '.join(s.roots)}\n"
            )
        return EXIT_OK
    if command == "show":
        collection = collections.get(args.name)
        files = collections.files(args.name)
        if args.json:
            print_json(
                {
                    "name": collection.name,
                    "paths": list(collection.roots),
                    "files": [
                        {
                            "path": f.path,
                            "status": f.status,
                            "error": f.error,
                            "size": f.size_bytes,
                            "sha256": f.content_sha256,
                            "indexed_at": f.indexed_at.isoformat() if f.indexed_at else None,
                        }
                        for f in files
                    ],
                },
                out,
            )
            return EXIT_OK
        out.write(f"{collection.name}: {', '.join(collection.roots)}\n")
        for f in files:
            why = f"\t{f.error}" if f.error else ""
            out.write(f"{f.status}\t{f.path}{why}\n")
        return EXIT_OK
    if command == "search":
        passages = documents.search_collection(args.name, args.query, args.limit)
        if args.json:
            print_json(
                {
                    "results": [
                        {"path": p.name, "text": p.text, "location": p.location, "score": p.score}
                        for p in passages
                    ]
                },
                out,
            )
            return EXIT_OK
        for number, p in enumerate(passages, 1):
            out.write(f"[{number}] {p.name} ({p.location}), score {p.score:.3f}\n{p.text}\n\n")
        return EXIT_OK
    if args.paths:
        collections.remove_paths(args.name, args.paths)
    else:
        collections.remove(args.name)
    return EXIT_OK


def _refresh(documents: DocumentLibrary, name: str, err: TextIO) -> int:
    def progress(step: IndexProgress) -> None:
        if step.path:
            err.write(f"indexing {step.done + 1}/{step.total}: {step.path}\n")
            err.flush()

    report = documents.refresh(name, progress)
    _report(report, err)
    return EXIT_FAILED if report.failed and not report.indexed and not report.unchanged else EXIT_OK


def _report(report: RefreshReport, err: TextIO) -> None:
    for path, why in report.failed:
        err.write(f"skipped {path}: {why}\n")
    err.write(
        f"{report.collection}: {report.indexed} indexed, {len(report.failed)} failed, "
        f"{report.unchanged} unchanged, {report.missing} missing\n"
    )


def _summary_record(s: CollectionSummary) -> dict[str, object]:
    return {
        "name": s.name,
        "paths": list(s.roots),
        "files": {
            "total": s.files.total,
            "indexed": s.files.indexed,
            "pending": s.files.pending,
            "changed": s.files.changed,
            "failed": s.files.failed,
            "missing": s.files.missing,
        },
        "passages": s.chunks,
        "size": s.size_bytes,
        "updated_at": s.updated_at.isoformat(),
    }
