"""Files a user can attach that must be refused with one clear line and bounded memory: missing, empty,
unreadable, binary, oversized, damaged, encrypted, image-only, zip bombs and hostile XML."""

from __future__ import annotations

import io
import os
import random
import re
import zipfile
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest

from app.documents import DocumentError, ExtractionLimits, extract, extract_bytes
from app.documents.model import MB
from tests.helpers.document_files import (
    billion_laughs,
    claim_size,
    deep_xml,
    epub_bytes,
    mark_encrypted,
    pdf_bytes,
    rewrite_zip,
    write,
)


def refusal(path: Path, limits: ExtractionLimits | None = None) -> str:
    with pytest.raises(DocumentError) as caught:
        extract(path) if limits is None else extract(path, limits=limits)
    message = str(caught.value)
    assert "\n" not in message
    return message


def docx_bytes() -> bytes:
    document = docx.Document()
    document.add_paragraph("An ordinary paragraph.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def xlsx_bytes() -> bytes:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["a", 1])
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def pptx_bytes() -> bytes:
    presentation = pptx.Presentation()
    presentation.slides.add_slide(presentation.slide_layouts[6])
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "report.pdf"
    assert refusal(missing) == f"{missing} does not exist."


def test_folder_is_not_a_document(tmp_path: Path) -> None:
    assert refusal(tmp_path) == f"{tmp_path} is a folder, not a file."


@pytest.mark.skipif(os.name != "posix", reason="named pipes in the file system are POSIX")
def test_pipe_is_not_read(tmp_path: Path) -> None:
    # Opening a pipe with no writer would block forever: it is refused from its file type alone.
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    assert refusal(fifo) == f"{fifo} isn't a regular file."


@pytest.mark.skipif(os.name != "posix", reason="Windows has no mode bits to take reading away")
def test_unreadable_file(tmp_path: Path) -> None:
    secret = write(tmp_path / "secret.txt", b"private")
    secret.chmod(0)
    expected = f"{secret} can't be read: permission denied."
    if os.geteuid() != 0:
        assert refusal(secret) == expected
        return
    # Root reads whatever the mode says, so the check runs in a child that gives up root first.
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        message = "read it"
        try:
            os.setgid(65534)
            os.setuid(65534)
            extract(secret)
        except DocumentError as exc:
            message = str(exc)
        finally:
            os.write(write_end, message.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(child, 0)
    assert message == expected


def test_empty_file(tmp_path: Path) -> None:
    assert refusal(write(tmp_path / "empty.docx", b"")) == "empty.docx is empty (0 bytes)."


def test_binary_file_named_txt(tmp_path: Path) -> None:
    rng = random.Random(15)
    noise = bytes(rng.randrange(256) for _ in range(20_000))
    assert refusal(write(tmp_path / "notes.txt", noise)) == "notes.txt looks like a binary file, not text."
    # No NUL bytes to give it away: the decoders' verdicts must.
    no_nul = bytes(rng.randrange(1, 256) for _ in range(20_000))
    assert refusal(write(tmp_path / "notes.md", no_nul)) == "notes.md looks like a binary file, not text."
    assert refusal(write(tmp_path / "main.py", b"print('hi')\x00\x01\x02" * 100)).endswith("not text.")


def test_file_over_the_size_limit(tmp_path: Path) -> None:
    path = write(tmp_path / "big.txt", b"word " * 4096)
    assert (
        refusal(path, ExtractionLimits(max_file_bytes=10 * 1024)) == "big.txt is 20 KB; the limit is 10 KB."
    )


def test_oversized_file_is_never_read(tmp_path: Path) -> None:
    # A sparse file: 612 MB long, nothing on disk. Reading it would take seconds and the memory; the size
    # check refuses it before the first byte.
    path = tmp_path / "report.pdf"
    with path.open("wb") as fh:
        fh.truncate(612 * MB)
    assert refusal(path) == "report.pdf is 612 MB; the limit is 200 MB."
    with pytest.raises(DocumentError, match=r"^pasted\.txt is 3\.0 MB; the limit is 2\.0 MB\.$"):
        extract_bytes(b"x" * (3 * MB), "pasted.txt", limits=ExtractionLimits(max_file_bytes=2 * MB))


def test_too_much_text(tmp_path: Path) -> None:
    path = write(tmp_path / "long.txt", b"a line of text\n" * 1000)
    message = refusal(path, ExtractionLimits(max_chars=5000))
    assert message == "long.txt holds more than 5,000 characters of text, the limit."


def test_truncated_and_corrupt_pdf(tmp_path: Path) -> None:
    whole = pdf_bytes([[f"Page {n} text."] for n in range(10)])
    cut = write(tmp_path / "cut.pdf", whole[: len(whole) * 2 // 3])
    assert refusal(cut) == "cut.pdf is damaged or truncated and can't be read as a PDF."
    garbage = write(tmp_path / "garbage.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 40)
    assert refusal(garbage) == "garbage.pdf is damaged or truncated and can't be read as a PDF."


def test_password_protected_pdf(tmp_path: Path) -> None:
    path = write(tmp_path / "locked.pdf", pdf_bytes([["Secret plans."]], password="hunter2"))
    assert refusal(path) == "locked.pdf is password-protected; remove the password and attach it again."


def test_pdf_without_a_text_layer(tmp_path: Path) -> None:
    path = write(tmp_path / "scan.pdf", pdf_bytes([[], []]))
    assert refusal(path) == (
        "scan.pdf has no text layer (a scan or images of pages); reading it would need OCR, "
        "which Hearth doesn't do."
    )


@pytest.mark.parametrize(
    ("name", "build", "member"),
    [
        ("bomb.docx", docx_bytes, "word/document.xml"),
        ("bomb.xlsx", xlsx_bytes, "xl/worksheets/sheet1.xml"),
        ("bomb.pptx", pptx_bytes, "ppt/presentation.xml"),
        ("bomb.epub", lambda: epub_bytes([("a.xhtml", "<p>x</p>")], title="t"), "OEBPS/text/a.xhtml"),
    ],
)
def test_zip_bomb_by_compression_ratio(tmp_path: Path, name: str, build: object, member: str) -> None:
    assert callable(build)
    # 24 MB of zeros deflate to about 24 KB: the ratio gives it away before a byte is inflated.
    path = write(tmp_path / name, rewrite_zip(build(), {}, add={"filler.bin": bytes(24 * MB)}))
    assert path.stat().st_size < 100_000
    assert re.fullmatch(
        rf"{re.escape(name)} holds a part compressed [\d,]+ to 1; the limit is 200 to 1 \(a zip bomb\?\)\.",
        refusal(path),
    )
    # A member claiming gigabytes is refused by its declared size alone.
    claimed = write(tmp_path / f"claims-{name}", claim_size(build(), member, 3_900_000_000))
    assert (
        refusal(claimed)
        == f"claims-{name} holds a part that unpacks to 3.6 GB; the limit is 256 MB (a zip bomb?)."
    )


def test_zip_bomb_by_total_size_and_member_count(tmp_path: Path) -> None:
    rng = random.Random(7)
    parts = {f"word/media/part{n}.txt": rng.randbytes(300_000) for n in range(5)}
    path = write(tmp_path / "heavy.docx", rewrite_zip(docx_bytes(), {}, add=parts))
    limits = ExtractionLimits(max_unpacked_bytes=1 * MB)
    assert re.fullmatch(
        r"heavy\.docx unpacks to [\d.]+ MB; the limit is 1\.0 MB \(a zip bomb\?\)\.", refusal(path, limits)
    )
    many = write(
        tmp_path / "many.docx", rewrite_zip(docx_bytes(), {}, add={f"x/{n}": b"" for n in range(200)})
    )
    assert refusal(many, ExtractionLimits(max_zip_members=100)) == (
        "many.docx holds more than 100 parts, the limit (a zip bomb?)."
    )


def test_billion_laughs_in_docx_and_xlsx(tmp_path: Path) -> None:
    path = write(tmp_path / "laughs.docx", rewrite_zip(docx_bytes(), {"word/document.xml": billion_laughs()}))
    assert refusal(path) == (
        "laughs.docx was refused: word/document.xml declares a DTD, which documents never need."
    )
    sheet = billion_laughs("worksheet")
    path = write(tmp_path / "laughs.xlsx", rewrite_zip(xlsx_bytes(), {"xl/worksheets/sheet1.xml": sheet}))
    assert "declares a DTD" in refusal(path)


def test_entities_refused_even_where_a_doctype_is_allowed(tmp_path: Path) -> None:
    data = epub_bytes([("a.xhtml", "<p>x</p>")], title="t")
    path = write(
        tmp_path / "laughs.epub", rewrite_zip(data, {"OEBPS/content.opf": billion_laughs("package")})
    )
    assert (
        refusal(path)
        == "laughs.epub was refused: OEBPS/content.opf declares a DTD, which documents never need."
    )


def test_deeply_nested_xml_in_docx_and_pptx(tmp_path: Path) -> None:
    body = '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
    deep = deep_xml(body, "</w:body></w:document>", 10_000)
    path = write(tmp_path / "deep.docx", rewrite_zip(docx_bytes(), {"word/document.xml": deep}))
    assert path.stat().st_size < 100_000
    assert refusal(path) == "deep.docx was refused: word/document.xml nests elements more than 256 deep."
    slides = write(
        tmp_path / "deep.pptx",
        rewrite_zip(pptx_bytes(), {}, add={"ppt/extra.xml": deep_xml("<r>", "</r>", 10_000)}),
    )
    assert refusal(slides) == "deep.pptx was refused: ppt/extra.xml nests elements more than 256 deep."


def test_damaged_office_files(tmp_path: Path) -> None:
    whole = docx_bytes()
    assert refusal(write(tmp_path / "cut.docx", whole[: len(whole) // 2])) == (
        "cut.docx is damaged or isn't a Word file (not a valid zip)."
    )
    not_word = write(tmp_path / "other.docx", rewrite_zip(xlsx_bytes(), {}))
    assert refusal(not_word) == "other.docx is damaged or isn't a valid Word file."
    broken_xml = rewrite_zip(xlsx_bytes(), {"xl/workbook.xml": b"<workbook><sheets>"})
    assert refusal(write(tmp_path / "broken.xlsx", broken_xml)).startswith(
        "broken.xlsx is damaged (xl/workbook.xml:"
    )


def test_encrypted_and_legacy_office_files(tmp_path: Path) -> None:
    # Office's encryption stores the document inside an OLE compound file whose directory names an
    # "EncryptionInfo" stream; the old binary formats are OLE files without it.
    ole_header = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    encrypted = ole_header + "EncryptionInfo".encode("utf-16-le") + bytes(1000)
    assert refusal(write(tmp_path / "locked.xlsx", encrypted)) == (
        "locked.xlsx is password-protected; remove the password and attach it again."
    )
    assert refusal(write(tmp_path / "old.docx", ole_header + bytes(1000))) == (
        "old.docx is in the old Word format; save it as .docx (it was only renamed .docx)."
    )
    assert (
        refusal(write(tmp_path / "old.ppt", ole_header))
        == "old.ppt is in the old PowerPoint format; save it as .pptx."
    )


def test_unsupported_files(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    assert refusal(write(tmp_path / "photo.png", png)) == (
        "photo.png isn't a document Hearth can read (it reads PDF, Word, Excel, PowerPoint, CSV, HTML, "
        "Markdown, EPUB, text and source code)."
    )
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.txt", "hello")
    assert refusal(write(tmp_path / "bundle.zip", archive.getvalue())) == (
        "bundle.zip is a zip archive; attach the files inside it instead."
    )


def test_invalid_csv(tmp_path: Path) -> None:
    huge_field = b'a,"' + b"x" * 200_000 + b'"\n'
    assert refusal(write(tmp_path / "bad.csv", huge_field)).startswith("bad.csv isn't valid CSV (record 1:")


def test_xlsx_declared_dimension_is_not_trusted(tmp_path: Path) -> None:
    # A1:XFD1048576 would have every row padded to 16,384 cells; the rows present are what is read.
    sheet = (
        b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        b'<dimension ref="A1:XFD1048576"/><sheetData>'
        b'<row r="1"><c r="A1" t="inlineStr"><is><t>top</t></is></c></row>'
        b'<row r="3"><c r="B3"><v>7</v></c></row>'
        b"</sheetData></worksheet>"
    )
    path = write(tmp_path / "wide.xlsx", rewrite_zip(xlsx_bytes(), {"xl/worksheets/sheet1.xml": sheet}))
    assert [(s.text, s.location) for s in extract(path).sections] == [
        ("| top |\n|  | 7 |", "sheet Sheet, rows 1–3")
    ]


def test_zip_members_in_other_compressions_are_refused(tmp_path: Path) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_bytes())) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            new.writestr(info.filename, old.read(info), compress_type=zipfile.ZIP_BZIP2)
    path = write(tmp_path / "bzip.docx", out.getvalue())
    assert refusal(path) == "bzip.docx uses a compression method Word files never use."


def test_password_protected_zip(tmp_path: Path) -> None:
    book = epub_bytes([("a.xhtml", "<p>x</p>")], title="t")
    path = write(tmp_path / "locked.epub", mark_encrypted(book, "OEBPS/text/a.xhtml"))
    assert refusal(path) == "locked.epub is password-protected."


def test_epub_without_its_package_files(tmp_path: Path) -> None:
    book = epub_bytes([("a.xhtml", "<p>x</p>")], title="t")
    no_container = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(book)) as old, zipfile.ZipFile(no_container, "w") as new:
        for info in old.infolist():
            if info.filename != "META-INF/container.xml":
                new.writestr(info, old.read(info))
    assert refusal(write(tmp_path / "bare.epub", no_container.getvalue())) == (
        "bare.epub is damaged: META-INF/container.xml is missing."
    )
    empty = rewrite_zip(book, {"META-INF/container.xml": b"<container><rootfiles/></container>"})
    assert refusal(write(tmp_path / "empty.epub", empty)) == (
        "empty.epub is damaged: its container names no package document."
    )
