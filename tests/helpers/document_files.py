"""Real document files built in the test, and the hostile variants of them.

PDFs are written with pypdf: each page has a genuine text layer. ASCII lines use the standard Helvetica
font; other lines a Type0 font with Identity-H encoding and a ToUnicode map (the way CJK PDFs are made), so
pypdf's extractor reads Latin and Chinese back alike. The CJK font program itself is not embedded: a viewer
substitutes one, and text extraction never needs glyphs.

Zip containers are rewritten member by member (`rewrite_zip`) to plant bombs and deep XML in otherwise
valid DOCX/XLSX/PPTX/EPUB files; `claim_size` patches a member's declared size to claim gigabytes while the
file stays a few kilobytes on disk."""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from pypdf import PdfWriter
from pypdf.generic import (
    ArrayObject,
    DecodedStreamObject,
    DictionaryObject,
    IndirectObject,
    NameObject,
    NumberObject,
    TextStringObject,
)


def _stream(writer: PdfWriter, data: bytes) -> IndirectObject:
    stream = DecodedStreamObject()
    stream.set_data(data)
    return writer._add_object(stream)


def _to_unicode(chars: set[str]) -> bytes:
    lines = [
        "/CIDInit /ProcSet findresource begin",
        "12 dict begin",
        "begincmap",
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def",
        "/CMapName /Adobe-Identity-UCS def",
        "/CMapType 2 def",
        "1 begincodespacerange",
        "<0000> <FFFF>",
        "endcodespacerange",
    ]
    ordered = sorted(chars)
    for index in range(0, len(ordered), 100):
        block = ordered[index : index + 100]
        lines.append(f"{len(block)} beginbfchar")
        lines.extend(f"<{ord(char):04X}> <{ord(char):04X}>" for char in block)
        lines.append("endbfchar")
    lines += ["endcmap", "CMapName currentdict /CMap defineresource pop", "end", "end"]
    return "\n".join(lines).encode("ascii")


def _show(line: str) -> str:
    """A line drawn as a PDF word processor draws it: ASCII as a literal string in a standard font, anything
    else as two-byte codes in the Type0 font."""
    if line.isascii():
        escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        return f"/F2 10 Tf ({escaped}) Tj T*"
    return "/F1 10 Tf <" + "".join(f"{ord(char):04X}" for char in line) + "> Tj T*"


def pdf_bytes(
    pages: Sequence[Sequence[str]], *, title: str | None = None, password: str | None = None
) -> bytes:
    """A PDF with one page per entry, each line of it drawn as text (Basic Multilingual Plane only); an
    empty entry is a page with a filled rectangle and no text, as a scanned page looks to an extractor.
    `password` encrypts it (RC4-128) with that user password; "" encrypts it openable by anyone."""
    writer = PdfWriter()
    chars = {char for page in pages for line in page for char in line}
    cid_font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/CIDFontType2"),
                NameObject("/BaseFont"): NameObject("/HearthTest"),
                NameObject("/CIDSystemInfo"): DictionaryObject(
                    {
                        NameObject("/Registry"): TextStringObject("Adobe"),
                        NameObject("/Ordering"): TextStringObject("Identity"),
                        NameObject("/Supplement"): NumberObject(0),
                    }
                ),
                NameObject("/DW"): NumberObject(1000),
            }
        )
    )
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type0"),
                NameObject("/BaseFont"): NameObject("/HearthTest"),
                NameObject("/Encoding"): NameObject("/Identity-H"),
                NameObject("/DescendantFonts"): ArrayObject([cid_font]),
                NameObject("/ToUnicode"): _stream(writer, _to_unicode(chars)),
            }
        )
    )
    helvetica = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
                NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
            }
        )
    )
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font, NameObject("/F2"): helvetica})}
        )
        if lines:
            ops = ["BT", "12 TL", "50 750 Td"]
            ops.extend(_show(line) for line in lines)
            ops.append("ET")
        else:
            ops = ["0.5 g", "50 50 500 700 re f"]
        page[NameObject("/Contents")] = _stream(writer, "\n".join(ops).encode("ascii"))
    if title is not None:
        writer.add_metadata({"/Title": title})
    if password is not None:
        writer.encrypt(user_password=password, owner_password="owner-secret", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def rewrite_zip(
    source: bytes, replace: Mapping[str, bytes], *, add: Mapping[str, bytes] | None = None
) -> bytes:
    """The zip `source` with the named members' contents replaced and `add`'s members appended."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(source)) as old, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info.filename, replace.get(info.filename, old.read(info)))
        for member, data in (add or {}).items():
            new.writestr(member, data)
    return out.getvalue()


def claim_size(source: bytes, member: str, size: int) -> bytes:
    """The zip with `member`'s uncompressed size declared as `size` (under 4 GiB) in its central
    directory and local header, its data unchanged: a bomb's claim without the bomb's bulk."""
    return _patch_member(source, member, local_offset=22, central_offset=24, value=size)


def mark_encrypted(source: bytes, member: str) -> bytes:
    """The zip with `member` flagged as encrypted (general-purpose bit 0), as a password-protected zip has
    it; zipfile itself cannot write one."""
    with zipfile.ZipFile(io.BytesIO(source)) as archive:
        flags = archive.getinfo(member).flag_bits | 0x1
    return _patch_member(source, member, local_offset=6, central_offset=8, value=flags, width="<H")


def _patch_member(
    source: bytes, member: str, *, local_offset: int, central_offset: int, value: int, width: str = "<L"
) -> bytes:
    data = bytearray(source)
    with zipfile.ZipFile(io.BytesIO(source)) as archive:
        info = archive.getinfo(member)
    struct.pack_into(width, data, info.header_offset + local_offset, value)
    encoded = member.encode("utf-8")
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if bytes(data[at + 46 : at + 46 + name_length]) == encoded:
            struct.pack_into(width, data, at + central_offset, value)
            return bytes(data)
        at = data.find(b"PK\x01\x02", at + 4)
    raise KeyError(member)


def billion_laughs(root: str = "w:document") -> bytes:
    """The classic entity-expansion document: ten levels of ten references, 10⁹ "lol"s once expanded."""
    entities = ['<!ENTITY lol0 "lol">']
    entities += [f'<!ENTITY lol{level} "{("&lol" + str(level - 1) + ";") * 10}">' for level in range(1, 10)]
    return (
        f'<?xml version="1.0"?>\n<!DOCTYPE {root} [\n'
        + "\n".join(entities)
        + f"\n]>\n<{root}>&lol9;</{root}>"
    ).encode()


def deep_xml(root_open: str, root_close: str, depth: int) -> bytes:
    """A part whose root holds `depth` nested elements."""
    return (root_open + "<x>" * depth + "</x>" * depth + root_close).encode()


def epub_bytes(
    chapters: Sequence[tuple[str, str]], *, title: str, spine: Sequence[int] | None = None
) -> bytes:
    """An EPUB 3 with one XHTML file per (file name, body HTML) chapter, read in `spine` order (indexes
    into `chapters`; by default their order)."""
    order = list(range(len(chapters))) if spine is None else list(spine)
    manifest = "\n".join(
        f'<item id="c{index}" href="text/{file}" media-type="application/xhtml+xml"/>'
        for index, (file, _) in enumerate(chapters)
    )
    itemrefs = "\n".join(f'<itemref idref="c{index}"/>' for index in order)
    package = f"""<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">test</dc:identifier>
<dc:title>{title}</dc:title><dc:language>en</dc:language></metadata>
<manifest>{manifest}</manifest>
<spine>{itemrefs}</spine>
</package>"""
    container = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", container, compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr("OEBPS/content.opf", package, compress_type=zipfile.ZIP_DEFLATED)
        for file, body in chapters:
            xhtml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n'
                f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{file}</title></head>'
                f"<body>{body}</body></html>"
            )
            archive.writestr(f"OEBPS/text/{file}", xhtml, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
