"""Text out of a file a person attached: what kind of document it is, refusing it with one clear line when it
can't or shouldn't be read, and otherwise its sections in reading order.

Every reader works from an open file under the limits in ExtractionLimits: a file's size is checked before a
byte is read, zips before anything is inflated, XML before a parser builds a tree, text as it is collected."""

from __future__ import annotations

import io
import logging
import mimetypes
import stat
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import BinaryIO, Final

from app.documents.formats.common import read_capped
from app.documents.model import (
    DEFAULT_LIMITS,
    DocumentError,
    DocumentKind,
    ExtractedDocument,
    ExtractionLimits,
    human_size,
)

log = logging.getLogger("hearth.documents")

_CODE_SUFFIXES: Final = frozenset(
    {
        ".py", ".pyi", ".pyw", ".ipynb", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".java", ".kt",
        ".kts", ".scala", ".groovy", ".gradle", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx",
        ".cs", ".fs", ".go", ".rs", ".rb", ".php", ".swift", ".m", ".mm", ".sh", ".bash", ".zsh", ".fish",
        ".ps1", ".psm1", ".bat", ".cmd", ".lua", ".pl", ".pm", ".r", ".jl", ".dart", ".sql", ".css",
        ".scss", ".sass", ".less", ".vue", ".svelte", ".json", ".jsonc", ".jsonl", ".yaml", ".yml", ".toml",
        ".ini", ".cfg", ".conf", ".xml", ".xsd", ".xsl", ".proto", ".graphql", ".gql", ".tf", ".hcl",
        ".nix", ".cmake", ".mk", ".hs", ".ml", ".mli", ".ex", ".exs", ".erl", ".clj", ".cljs", ".el",
        ".lisp", ".scm", ".vim", ".zig", ".nim", ".v", ".sv", ".vhd", ".vhdl", ".asm", ".s", ".f90", ".pas",
        ".ada", ".d", ".cr", ".elm", ".purs", ".sol", ".glsl", ".hlsl", ".wgsl", ".cu", ".diff", ".patch",
    }
)  # fmt: skip
_CODE_NAMES: Final = frozenset(
    {"makefile", "dockerfile", "containerfile", "jenkinsfile", "rakefile", "gemfile", "vagrantfile",
     "cmakelists.txt", ".gitignore", ".gitattributes", ".editorconfig", ".bashrc", ".zshrc", ".profile"}
)  # fmt: skip
_TEXT_SUFFIXES: Final = frozenset(
    {".txt", ".text", ".log", ".rst", ".org", ".adoc", ".asciidoc", ".tex", ".srt", ".vtt", ".nfo", ".me"}
)
_BY_SUFFIX: Final = {
    ".pdf": DocumentKind.PDF,
    ".docx": DocumentKind.DOCX,
    ".xlsx": DocumentKind.XLSX,
    ".xlsm": DocumentKind.XLSX,
    ".pptx": DocumentKind.PPTX,
    ".csv": DocumentKind.CSV,
    ".tsv": DocumentKind.CSV,
    ".html": DocumentKind.HTML,
    ".htm": DocumentKind.HTML,
    ".xhtml": DocumentKind.HTML,
    ".md": DocumentKind.MARKDOWN,
    ".markdown": DocumentKind.MARKDOWN,
    ".mdown": DocumentKind.MARKDOWN,
    ".mkd": DocumentKind.MARKDOWN,
    ".epub": DocumentKind.EPUB,
}
_LEGACY: Final = {
    ".doc": "the old Word format; save it as .docx",
    ".xls": "the old Excel format; save it as .xlsx",
    ".ppt": "the old PowerPoint format; save it as .pptx",
}
_LABELS: Final = {
    DocumentKind.PDF: "PDF",
    DocumentKind.DOCX: "Word",
    DocumentKind.XLSX: "Excel",
    DocumentKind.PPTX: "PowerPoint",
    DocumentKind.CSV: "CSV",
    DocumentKind.HTML: "HTML",
    DocumentKind.MARKDOWN: "Markdown",
    DocumentKind.TEXT: "text",
    DocumentKind.CODE: "source code",
    DocumentKind.EPUB: "EPUB",
}
_OOXML: Final = frozenset({DocumentKind.DOCX, DocumentKind.XLSX, DocumentKind.PPTX})
# Office's own encryption wraps the document in an OLE compound file, named by this stream inside it.
_OLE_MAGIC: Final = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE_ENCRYPTED_MARK: Final = "EncryptionInfo".encode("utf-16-le")
_OLE_SCAN_BYTES: Final = 1024 * 1024
_ZIP_MAGIC: Final = b"PK\x03\x04"
_SUPPORTED: Final = "PDF, Word, Excel, PowerPoint, CSV, HTML, Markdown, EPUB, text and source code"


def extract(path: Path | str, *, limits: ExtractionLimits = DEFAULT_LIMITS) -> ExtractedDocument:
    """The document at `path`, or DocumentError saying in one line why it can't be read."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError as exc:
        raise DocumentError(f"{path} does not exist.") from exc
    except PermissionError as exc:
        raise DocumentError(f"{path} can't be read: permission denied.") from exc
    except OSError as exc:
        raise DocumentError(f"{path} can't be read: {exc.strerror or exc}.") from exc
    if stat.S_ISDIR(info.st_mode):
        raise DocumentError(f"{path} is a folder, not a file.")
    # A pipe or a device would block or never end; only regular files have a size to check.
    if not stat.S_ISREG(info.st_mode):
        raise DocumentError(f"{path} isn't a regular file.")
    _check_size(path.name, info.st_size, limits)
    try:
        fh = path.open("rb")
    except PermissionError as exc:
        raise DocumentError(f"{path} can't be read: permission denied.") from exc
    except OSError as exc:
        raise DocumentError(f"{path} can't be read: {exc.strerror or exc}.") from exc
    with fh:
        return _extract_open(fh, path.name, limits)


def extract_bytes(data: bytes, name: str, *, limits: ExtractionLimits = DEFAULT_LIMITS) -> ExtractedDocument:
    """A document held in memory (pasted, or already stored); `name` gives its type and appears in errors."""
    name = PurePath(name).name or name
    _check_size(name, len(data), limits)
    return _extract_open(io.BytesIO(data), name, limits)


def _check_size(name: str, size: int, limits: ExtractionLimits) -> None:
    if size == 0:
        raise DocumentError(f"{name} is empty (0 bytes).")
    if size > limits.max_file_bytes:
        raise DocumentError(
            f"{name} is {human_size(size)}; the limit is {human_size(limits.max_file_bytes)}."
        )


def _extract_open(fh: BinaryIO, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    kind = _kind(fh, name)
    try:
        return _read(kind, fh, name, limits)
    except DocumentError:
        raise
    except RecursionError as exc:
        raise DocumentError(f"{name} is nested too deeply to read.") from exc
    except MemoryError as exc:
        raise DocumentError(f"{name} needs more memory to read than is free.") from exc
    except Exception as exc:
        # The parsers beneath (pypdf, lxml, openpyxl, …) fail on hostile input in ways no list can name;
        # whatever they raise, the file is what is wrong, and the user needs that line, not a traceback.
        log.info("%s could not be read as %s", name, kind, exc_info=True)
        raise DocumentError(f"{name} is damaged or isn't a valid {_LABELS[kind]} file.") from exc


def _read(kind: DocumentKind, fh: BinaryIO, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    if kind is DocumentKind.PDF:
        from app.documents.formats.pdf import extract_pdf

        return extract_pdf(fh, name, limits)
    if kind in _OOXML:
        from app.documents.formats import office

        readers: dict[DocumentKind, Callable[[BinaryIO, str, ExtractionLimits], ExtractedDocument]] = {
            DocumentKind.DOCX: office.extract_docx,
            DocumentKind.XLSX: office.extract_xlsx,
            DocumentKind.PPTX: office.extract_pptx,
        }
        return readers[kind](fh, name, limits)
    if kind is DocumentKind.EPUB:
        from app.documents.formats.epub import extract_epub

        return extract_epub(fh, name, limits)
    data = read_capped(fh, name, limits)
    if kind is DocumentKind.HTML:
        from app.documents.formats.html import extract_html

        return extract_html(data, name, limits)
    from app.documents.formats import text

    if kind is DocumentKind.MARKDOWN:
        return text.extract_markdown(data, name, limits)
    if kind is DocumentKind.CSV:
        return text.extract_csv(data, name, limits, tabs=name.lower().endswith(".tsv"))
    if kind is DocumentKind.CODE:
        return text.extract_lines(data, name, kind, _code_mime(name), limits)
    return text.extract_lines(data, name, kind, "text/plain", limits)


def _code_mime(name: str) -> str:
    guess = mimetypes.guess_type(name, strict=False)[0]
    # The registry knows .ts as MPEG transport streams and .m as Objective-C or MATLAB alike: keep text types.
    if guess and (guess.startswith("text/") or guess.endswith(("json", "javascript", "xml", "x-sh"))):
        return guess
    return "text/plain"


def _kind(fh: BinaryIO, name: str) -> DocumentKind:
    """By extension first, as people name files; by content for the rest. A renamed or mislabelled
    container is caught by its reader, which reports it as not a valid file of that kind."""
    suffix = PurePath(name).suffix.lower()
    head = fh.read(8)
    fh.seek(0)
    kind = _BY_SUFFIX.get(suffix)
    if kind in _OOXML and head.startswith(_OLE_MAGIC):
        raise _ole_error(fh, name, suffix)
    if kind is not None:
        return kind
    if suffix in _LEGACY:
        raise DocumentError(f"{name} is in {_LEGACY[suffix]}.")
    if suffix in _CODE_SUFFIXES or name.lower() in _CODE_NAMES:
        return DocumentKind.CODE
    if suffix in _TEXT_SUFFIXES:
        return DocumentKind.TEXT
    return _sniff(fh, name, head)


def known_by_name(name: str) -> bool:
    """Whether a file's name alone says it is of a kind Hearth reads: its extension, or its whole name for
    Makefile and the like. A name without an extension says nothing (such files are read by content), and
    the old Office formats are refused, so neither is known."""
    pure = PurePath(name)
    suffix = pure.suffix.lower()
    return (
        suffix in _BY_SUFFIX
        or suffix in _CODE_SUFFIXES
        or suffix in _TEXT_SUFFIXES
        or pure.name.lower() in _CODE_NAMES
    )


def _ole_error(fh: BinaryIO, name: str, suffix: str) -> DocumentError:
    if _OLE_ENCRYPTED_MARK in fh.read(_OLE_SCAN_BYTES):
        return DocumentError(f"{name} is password-protected; remove the password and attach it again.")
    legacy = {".docx": ".doc", ".xlsx": ".xls", ".xlsm": ".xls", ".pptx": ".ppt"}[suffix]
    return DocumentError(f"{name} is in {_LEGACY[legacy]} (it was only renamed {suffix}).")


def _sniff(fh: BinaryIO, name: str, head: bytes) -> DocumentKind:
    """A file whose extension says nothing: known signatures, then text if it decodes as text."""
    if head.startswith(b"%PDF-"):
        return DocumentKind.PDF
    if head.startswith(_ZIP_MAGIC):
        raise DocumentError(f"{name} is a zip archive; attach the files inside it instead.")
    from app.documents.formats.text import decode_text

    # Deciding needs only a sample; a cut at 64 KB may split a character, which decode_text tolerates.
    sample = fh.read(64 * 1024)
    fh.seek(0)
    try:
        decoded = decode_text(sample, name)
    except DocumentError as exc:
        raise DocumentError(f"{name} isn't a document Hearth can read (it reads {_SUPPORTED}).") from exc
    return DocumentKind.CODE if decoded.startswith("#!") else DocumentKind.TEXT
