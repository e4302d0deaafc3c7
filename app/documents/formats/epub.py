"""EPUB 2 and 3 without another dependency: the zip (vetted like Office files), META-INF/container.xml to
find the package document, its spine for reading order, and each chapter through the HTML reader."""

from __future__ import annotations

import posixpath
import zipfile
from typing import BinaryIO, Final
from urllib.parse import unquote
from xml.etree import ElementTree

from app.documents.formats.common import SectionCollector
from app.documents.formats.html import decode_html, parse_html
from app.documents.formats.safezip import open_checked_zip, scan_xml_members
from app.documents.model import DocumentError, DocumentKind, ExtractedDocument, ExtractionLimits

EPUB_MIME: Final = "application/epub+zip"
_CONTAINER: Final = "META-INF/container.xml"
_CHAPTER_TYPES: Final = frozenset({"application/xhtml+xml", "text/html"})


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def extract_epub(fh: BinaryIO, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    """Chapters in spine order, each cut at its headings; a passage is located by heading path, or by the
    chapter's own title, or as "part 3" (its place in the spine) when the chapter has neither."""
    with open_checked_zip(fh, name, "EPUB", limits) as archive:
        # Only the two package files go through ElementTree; chapters go to html.parser, which needs no scan.
        scan_xml_members(
            archive, name, limits, select=lambda member: member == _CONTAINER, allow_doctype=True
        )
        container = _xml(archive, _CONTAINER, name)
        package_path = next(
            (
                element.get("full-path", "")
                for element in container.iter()
                if _local(element.tag) == "rootfile" and element.get("full-path")
            ),
            "",
        )
        if not package_path:
            raise DocumentError(f"{name} is damaged: its container names no package document.")
        scan_xml_members(
            archive, name, limits, select=lambda member: member == package_path, allow_doctype=True
        )
        package = _xml(archive, package_path, name)
        base = posixpath.dirname(package_path)
        manifest: dict[str, tuple[str, str]] = {}
        spine: list[str] = []
        title: str | None = None
        for element in package.iter():
            tag = _local(element.tag)
            if tag == "item" and element.get("id") and element.get("href"):
                manifest[element.get("id", "")] = (element.get("href", ""), element.get("media-type", ""))
            elif tag == "itemref" and element.get("idref"):
                spine.append(element.get("idref", ""))
            elif tag == "title" and title is None and element.text and element.text.strip():
                title = element.text.strip()
        collector = SectionCollector(name, limits)
        for part, idref in enumerate(spine, start=1):
            href, media_type = manifest.get(idref, ("", ""))
            if not href or media_type not in _CHAPTER_TYPES:
                continue
            member = posixpath.normpath(posixpath.join(base, unquote(href.partition("#")[0])))
            chapter = parse_html(decode_html(_read(archive, member, name), name))
            for path, text in chapter.sections:
                collector.add(text, path or chapter.title or f"part {part}")
    return ExtractedDocument(DocumentKind.EPUB, EPUB_MIME, collector.result(), None, title)


def _read(archive: zipfile.ZipFile, member: str, name: str) -> bytes:
    try:
        return archive.read(member)
    except KeyError as exc:
        raise DocumentError(f"{name} is damaged: {member} is missing.") from exc


def _xml(archive: zipfile.ZipFile, member: str, name: str) -> ElementTree.Element:
    try:
        return ElementTree.fromstring(_read(archive, member, name))
    except ElementTree.ParseError as exc:
        raise DocumentError(f"{name} is damaged ({member}: {exc}).") from exc
