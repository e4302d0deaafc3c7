"""Zip containers (DOCX, XLSX, PPTX, EPUB) checked before any parser touches them: declared sizes and
compression ratios against the limits (zip bombs), and XML parts scanned by a streaming parser that refuses
DTDs, entity declarations and deep nesting (billion laughs, quadratic blow-up, stack exhaustion)."""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable
from typing import IO, BinaryIO, Final
from xml.parsers import expat

from app.documents.model import DocumentError, ExtractionLimits, human_size

_SCAN_CHUNK: Final = 64 * 1024
# The first bytes of a part tell XML from media: after an optional BOM and whitespace, XML opens with "<".
_SNIFF_BYTES: Final = 64


class _Refused(Exception):
    """Raised from inside the expat callbacks to stop a scan at the first offending construct."""


def open_checked_zip(fh: BinaryIO, name: str, label: str, limits: ExtractionLimits) -> zipfile.ZipFile:
    """The file as a zip whose declared sizes are within the limits; nothing has been inflated yet."""
    try:
        _check_entry_count(fh, name, limits.max_zip_members)
        fh.seek(0)
        archive = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as exc:
        raise DocumentError(f"{name} is damaged or isn't a {label} file (not a valid zip).") from exc
    members = archive.infolist()
    total = 0
    for member in members:
        if member.flag_bits & 0x1:
            raise DocumentError(f"{name} is password-protected.")
        # zipfile inflates bzip2 and LZMA without an output bound per read (deflate has one), and no Office
        # file or EPUB uses them.
        if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise DocumentError(f"{name} uses a compression method {label} files never use.")
        if member.file_size > limits.max_member_bytes:
            raise DocumentError(
                f"{name} holds a part that unpacks to {human_size(member.file_size)}; the limit is "
                f"{human_size(limits.max_member_bytes)} (a zip bomb?)."
            )
        if member.file_size >= limits.ratio_check_min_bytes:
            ratio = member.file_size / max(member.compress_size, 1)
            if ratio > limits.max_compression_ratio:
                raise DocumentError(
                    f"{name} holds a part compressed {ratio:,.0f} to 1; the limit is "
                    f"{limits.max_compression_ratio:,.0f} to 1 (a zip bomb?)."
                )
        total += member.file_size
    if total > limits.max_unpacked_bytes:
        raise DocumentError(
            f"{name} unpacks to {human_size(total)}; the limit is {human_size(limits.max_unpacked_bytes)} "
            "(a zip bomb?)."
        )
    return archive


_EOCD: Final = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR: Final = struct.Struct("<4sLQL")
_ZIP64_EOCD: Final = struct.Struct("<4sQ2H2L4Q")
_CENTRAL_HEADER_SIZE: Final = 46


def _check_entry_count(fh: BinaryIO, name: str, limit: int) -> None:
    """Count the central directory's entries by walking its headers, before zipfile builds an object for
    each: a few megabytes of 46-byte entries would otherwise become hundreds of megabytes of ZipInfo. Finds
    the directory exactly as zipfile does; anything it cannot make sense of is left for zipfile to reject."""
    size = fh.seek(0, 2)
    tail_start = max(size - (1 << 16) - _EOCD.size, 0)
    fh.seek(tail_start)
    tail = fh.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _EOCD.size:
        return
    directory_size = _EOCD.unpack_from(tail, at)[5]
    end = tail_start + at
    locator_at = end - _ZIP64_LOCATOR.size
    if locator_at >= _ZIP64_EOCD.size:
        fh.seek(locator_at)
        if fh.read(4) == b"PK\x06\x07":
            fh.seek(locator_at - _ZIP64_EOCD.size)
            record = fh.read(_ZIP64_EOCD.size)
            if record[:4] == b"PK\x06\x06":
                directory_size = _ZIP64_EOCD.unpack(record)[8]
                end = locator_at - _ZIP64_EOCD.size
    start = end - directory_size
    if start < 0:
        return
    fh.seek(start)
    walked = count = 0
    while walked < directory_size:
        header = fh.read(_CENTRAL_HEADER_SIZE)
        if len(header) < _CENTRAL_HEADER_SIZE or header[:4] != b"PK\x01\x02":
            return
        variable = sum(struct.unpack_from("<3H", header, 28))
        fh.seek(variable, 1)
        walked += _CENTRAL_HEADER_SIZE + variable
        count += 1
        if count > limit:
            raise DocumentError(f"{name} holds more than {limit:,} parts, the limit (a zip bomb?).")


def scan_xml_members(
    archive: zipfile.ZipFile,
    name: str,
    limits: ExtractionLimits,
    *,
    select: Callable[[str], bool] | None = None,
    allow_doctype: bool = False,
) -> None:
    """Stream every XML part (those `select` picks, or by default every part that opens like XML) through
    expat, refusing the file at the first DTD, entity declaration or element nested past the depth limit.
    Office files never carry a DOCTYPE; EPUB's XHTML may carry a bare one, which `allow_doctype` accepts as
    long as it declares nothing."""
    for member in archive.infolist():
        if member.is_dir() or (select is not None and not select(member.filename)):
            continue
        try:
            with archive.open(member) as stream:
                if select is None and not _looks_like_xml(stream.read(_SNIFF_BYTES)):
                    continue
            with archive.open(member) as stream:
                _scan(stream, limits.max_xml_depth, allow_doctype)
        except _Refused as exc:
            raise DocumentError(f"{name} was refused: {member.filename} {exc}.") from exc
        except (expat.ExpatError, zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise DocumentError(f"{name} is damaged ({member.filename}: {exc}).") from exc


def _looks_like_xml(head: bytes) -> bool:
    for bom in (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"):
        head = head.removeprefix(bom)
    stripped = head.lstrip(b" \t\r\n\x00")
    return stripped.startswith(b"<")


def _scan(stream: IO[bytes], max_depth: int, allow_doctype: bool) -> None:
    parser = expat.ParserCreate()
    # External parameter entities (a DTD fetched from a URL or a file) are never read.
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    depth = 0

    def start(_tag: str, _attributes: object) -> None:
        nonlocal depth
        depth += 1
        if depth > max_depth:
            raise _Refused(f"nests elements more than {max_depth} deep")

    def end(_tag: str) -> None:
        nonlocal depth
        depth -= 1

    def doctype(_name: str, _system: str | None, _public: str | None, internal_subset: int) -> None:
        if not allow_doctype or internal_subset:
            raise _Refused("declares a DTD, which documents never need")

    def entity(*_args: object) -> None:
        raise _Refused("declares XML entities (an entity-expansion attack?)")

    def external(*_args: object) -> int:
        raise _Refused("refers to an external entity")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    parser.UnparsedEntityDeclHandler = entity
    parser.ExternalEntityRefHandler = external
    while chunk := stream.read(_SCAN_CHUNK):
        parser.Parse(chunk, False)
    parser.Parse(b"", True)
