"""Extraction from real files of every supported kind, written in the test by the libraries that make them."""

from __future__ import annotations

import codecs
import datetime as dt
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest
from docx.enum.style import WD_STYLE_TYPE
from pptx.util import Inches

from app.documents import DocumentKind, Section, extract, extract_bytes
from tests.helpers.document_files import epub_bytes, pdf_bytes, write

CHINESE = "检索增强生成把文档中的相关段落放进提示词。模型据此回答问题！"


def test_pdf_pages_keep_their_text_and_numbers(tmp_path: Path) -> None:
    path = write(
        tmp_path / "report.pdf",
        pdf_bytes(
            [
                ["Quarterly report", "Revenue grew by 12 percent."],
                [],
                ["第三页：" + CHINESE, "Mixed 中文 and English."],
            ],
            title="Q3 Report",
        ),
    )
    doc = extract(path)
    assert doc.kind is DocumentKind.PDF
    assert doc.mime_type == "application/pdf"
    assert doc.pages == 3
    assert doc.title == "Q3 Report"
    # The image-only middle page yields no section; the others keep their page numbers.
    assert [section.location for section in doc.sections] == ["page 1", "page 3"]
    assert "Revenue grew by 12 percent." in doc.sections[0].text
    assert CHINESE in doc.sections[1].text
    assert "Mixed 中文 and English." in doc.sections[1].text
    assert doc.chars == len(doc.text)


def test_pdf_with_an_empty_user_password_opens(tmp_path: Path) -> None:
    path = write(
        tmp_path / "restricted.pdf", pdf_bytes([["Printing is restricted, reading is not."]], password="")
    )
    assert "reading is not" in extract(path).text


def test_docx_headings_become_section_paths(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_heading("Install guide", level=0)
    document.add_paragraph("Read this first.")
    document.add_heading("Installation", level=1)
    document.add_paragraph("Hearth installs in a minute.")
    document.add_heading("Linux", level=2)
    document.add_paragraph("Run the AppImage.")
    document.add_paragraph(CHINESE)
    table = document.add_table(rows=3, cols=3)
    grid = [["OS", "Size", "Notes"], ["Linux", "90 MB", "a|b"], ["Mac", "", ""]]
    for row, values in zip(table.rows, grid, strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    # A cell merged across two columns is one cell of text, not two.
    merged = table.cell(2, 1).merge(table.cell(2, 2))
    merged.text = "Universal binary"
    document.add_heading("Windows", level=2)
    document.add_paragraph("Run the installer.")
    document.add_heading("Usage", level=1)
    document.add_paragraph("Type a message.")
    # A custom style based on a heading style is a heading of that level.
    tip_style = document.styles.add_style("Tip heading", WD_STYLE_TYPE.PARAGRAPH)
    tip_style.base_style = document.styles["Heading 2"]
    document.add_paragraph("Tips", style="Tip heading")
    document.add_paragraph("Press Enter to send.")
    path = tmp_path / "guide.docx"
    document.save(str(path))

    doc = extract(path)
    assert doc.kind is DocumentKind.DOCX
    assert doc.title == "Install guide"
    assert [section.location for section in doc.sections] == [
        "beginning",
        "Installation",
        "Installation > Linux",
        "Installation > Windows",
        "Usage",
        "Usage > Tips",
    ]
    linux = doc.sections[2].text
    assert linux.startswith("Linux\n\nRun the AppImage.")
    assert CHINESE in linux
    assert "| OS | Size | Notes |\n| Linux | 90 MB | a\\|b |\n| Mac | Universal binary |" in linux
    assert doc.sections[3] == Section("Windows\n\nRun the installer.", "Installation > Windows")


def test_xlsx_sheets_become_row_blocks_with_their_header(tmp_path: Path) -> None:
    workbook = openpyxl.Workbook()
    budget = workbook.active
    assert budget is not None
    budget.title = "Budget"
    budget.append(["Item", "Amount", "Due"])
    for number in range(1, 61):
        budget.append([f"item {number}", number * 1.5, dt.date(2024, 1, 1) + dt.timedelta(days=number)])
    budget["E2"] = "=B2*2"
    notes = workbook.create_sheet("备注")
    notes.append(["说明", CHINESE])
    notes.append([])
    notes.append(["total", 91.5])
    path = tmp_path / "budget.xlsx"
    workbook.save(path)

    doc = extract(path)
    assert doc.kind is DocumentKind.XLSX
    assert [section.location for section in doc.sections] == [
        "sheet Budget, rows 1–40",
        "sheet Budget, rows 41–61",
        "sheet 备注, rows 1–3",
    ]
    first, second, third = (section.text.split("\n") for section in doc.sections)
    assert first[0] == "| Item | Amount | Due |"
    # A formula's cached result is what Excel last computed; a file never opened in Excel has none.
    assert first[1] == "| item 1 | 1.5 | 2024-01-02 |"
    assert len(first) == 40
    # The header opens the next block too; whole numbers print without ".0".
    assert second[0] == "| Item | Amount | Due |"
    assert second[1] == "| item 40 | 60 | 2024-02-10 |"
    assert third == [f"| 说明 | {CHINESE} |", "| total | 91.5 |"]


def test_csv_dialect_is_sniffed_and_tsv_read_by_tabs(tmp_path: Path) -> None:
    rows = ["name;city;note", "Ana;Lisboa;likes tea", "李雷;北京;喜欢茶", 'Bob;Paris;"says ""hi""; waves"']
    doc = extract(write(tmp_path / "people.csv", "\n".join(rows).encode()))
    assert doc.kind is DocumentKind.CSV
    assert doc.sections == (
        Section(
            "| name | city | note |\n| Ana | Lisboa | likes tea |\n| 李雷 | 北京 | 喜欢茶 |\n"
            '| Bob | Paris | says "hi"; waves |',
            "rows 1–4",
        ),
    )
    tsv = extract(write(tmp_path / "people.tsv", b"a b\tc\n1, 2\t3\n"))
    assert tsv.sections[0].text == "| a b | c |\n| 1, 2 | 3 |"


def test_pptx_slides_carry_shapes_tables_and_notes(tmp_path: Path) -> None:
    presentation = pptx.Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])
    assert first.shapes.title is not None
    first.shapes.title.text = "Why local models"
    first.placeholders[1].text = "Privacy\nNo network"
    first.notes_slide.notes_text_frame.text = "Mention the offline demo."
    second = presentation.slides.add_slide(presentation.slide_layouts[6])
    group = second.shapes.add_group_shape()
    box = group.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1))
    box.text_frame.text = "本地模型保护隐私。"
    table = second.shapes.add_table(2, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
    for (row, column), value in {(0, 0): "Model", (0, 1): "Size", (1, 0): "Qwen", (1, 1): "1.5B"}.items():
        table.cell(row, column).text = value
    path = tmp_path / "talk.pptx"
    presentation.save(str(path))

    doc = extract(path)
    assert doc.kind is DocumentKind.PPTX
    assert doc.pages == 2
    assert doc.title == "Why local models"
    assert doc.sections == (
        Section("Why local models\nPrivacy\nNo network\nNotes: Mention the offline demo.", "slide 1"),
        Section("本地模型保护隐私。\n| Model | Size |\n| Qwen | 1.5B |", "slide 2"),
    )


def test_html_keeps_visible_text_by_heading(tmp_path: Path) -> None:
    page = (
        """<!DOCTYPE html><html><head><title>Hearth &amp; you</title>
    <style>body { color: red }</style><script>var secret = "not text";</script></head>
    <body><p>Intro   text
    wraps.</p><nav>Home</nav>
    <h1>Install</h1><p>Download it.<br>Then run it.</p>
    <h2>Linux</h2><table><tr><th>Distro</th><th>Package</th></tr><tr><td>Debian</td><td>.deb</td></tr></table>
    <pre>  indented
      code</pre>
    <h1>中文</h1><p>"""
        + CHINESE
        + """</p><noscript>Enable JS</noscript></body></html>"""
    )
    doc = extract(write(tmp_path / "page.html", page.encode()))
    assert doc.kind is DocumentKind.HTML
    assert doc.title == "Hearth & you"
    assert doc.sections == (
        Section("Intro text wraps.\n\nHome", "beginning"),
        Section("Install\n\nDownload it.\nThen run it.", "Install"),
        Section(
            "Linux\n\n| Distro | Package |\n| Debian | .deb |\n\n  indented\n      code", "Install > Linux"
        ),
        Section("中文\n\n" + CHINESE, "中文"),
    )
    assert "secret" not in doc.text and "color" not in doc.text and "Enable JS" not in doc.text


def test_html_meta_charset_is_honoured(tmp_path: Path) -> None:
    page = '<html><head><meta charset="gb2312"></head><body><p>' + CHINESE + "</p></body></html>"
    doc = extract(write(tmp_path / "gbk.htm", page.encode("gb2312")))
    assert doc.text == CHINESE


def test_markdown_splits_at_headings_not_inside_code(tmp_path: Path) -> None:
    text = (
        """---
title: "Notes"
---
Preface line.

# Setup
Install it.

```bash
# not a heading
pip install hearth
```

Linux
-----
Use the AppImage.

### Debian
apt install hearth

# 使用
"""
        + CHINESE
    )
    doc = extract(write(tmp_path / "notes.md", text.encode()))
    assert doc.kind is DocumentKind.MARKDOWN
    assert doc.title == "Notes"
    assert [section.location for section in doc.sections] == [
        "beginning",
        "Setup",
        "Setup > Linux",
        "Setup > Linux > Debian",
        "使用",
    ]
    assert "# not a heading" in doc.sections[1].text
    assert doc.sections[2].text == "Linux\n-----\nUse the AppImage."
    assert doc.sections[4].text == "# 使用\n" + CHINESE


@pytest.mark.parametrize(
    ("encoded", "label"),
    [
        (("第一行。" + CHINESE).encode("utf-8"), "utf-8"),
        (codecs.BOM_UTF8 + ("第一行。" + CHINESE).encode("utf-8"), "utf-8 with BOM"),
        (("第一行。" + CHINESE).encode("utf-16"), "utf-16 with BOM"),
        (("第一行。" + CHINESE).encode("gb18030"), "GB18030"),
    ],
)
def test_chinese_text_in_any_common_encoding(tmp_path: Path, encoded: bytes, label: str) -> None:
    doc = extract(write(tmp_path / "zh.txt", encoded))
    assert doc.kind is DocumentKind.TEXT, label
    assert doc.text == "第一行。" + CHINESE, label


def test_cp1252_and_slightly_damaged_utf8_are_read(tmp_path: Path) -> None:
    assert (
        extract(write(tmp_path / "fr.txt", "Café crème, déjà vu.".encode("cp1252"))).text
        == "Café crème, déjà vu."
    )
    damaged = ("naïve café " * 500).encode("utf-8") + b"\xff" + " déjà".encode()
    text = extract(write(tmp_path / "damaged.txt", damaged)).text
    assert text.startswith("naïve café") and text.endswith("\ufffd déjà")


def test_text_sections_are_located_by_line(tmp_path: Path) -> None:
    paragraphs = [f"Paragraph {n} line {m}." for n in range(30) for m in range(3)]
    lines: list[str] = []
    for index in range(0, len(paragraphs), 3):
        lines.extend([*paragraphs[index : index + 3], ""])
    doc = extract(write(tmp_path / "long.txt", "\r\n".join(lines).encode()))
    locations = [section.location for section in doc.sections]
    assert locations[0].startswith("lines 1–") and len(locations) > 1
    # Blocks end at blank lines: each starts with a paragraph's first line.
    assert all(section.text.split("\n")[0].endswith("line 0.") for section in doc.sections)
    rebuilt = "\n\n".join(section.text for section in doc.sections)
    assert rebuilt == "\n".join(lines).strip()
    one = extract(write(tmp_path / "one.txt", b"\n\n   just one line   \n"))
    assert one.sections == (Section("   just one line", "line 3"),)


def test_code_keeps_indentation_and_line_numbers(tmp_path: Path) -> None:
    source = "\n".join(
        f"def function_{n}(value):\n    '''Doc {n}.'''\n    return value + {n}\n" for n in range(40)
    )
    doc = extract(write(tmp_path / "module.py", source.encode()))
    assert doc.kind is DocumentKind.CODE
    assert doc.mime_type == "text/x-python"
    assert doc.sections[0].location == "lines 1–59"
    assert doc.sections[0].text.startswith("def function_0(value):\n    '''Doc 0.'''")
    second_start = int(doc.sections[1].location.split()[1].split("–")[0])
    assert source.split("\n")[second_start - 1] == doc.sections[1].text.split("\n")[0]
    script = extract(write(tmp_path / "run", b"#!/bin/sh\necho hi\n"))
    assert script.kind is DocumentKind.CODE
    assert extract(write(tmp_path / "Makefile", b"all:\n\ttrue\n")).kind is DocumentKind.CODE


def test_epub_chapters_follow_the_spine(tmp_path: Path) -> None:
    data = epub_bytes(
        [
            ("b.xhtml", "<h1>Chapter Two</h1><p>Second.</p>"),
            (
                "a.xhtml",
                "<h1>Chapter One</h1><p>First &amp; foremost.</p><h2>Part</h2><p>" + CHINESE + "</p>",
            ),
            ("c.xhtml", "<p>No heading here.</p>"),
        ],
        title="A Book",
        spine=[1, 0, 2],
    )
    doc = extract(write(tmp_path / "book.epub", data))
    assert doc.kind is DocumentKind.EPUB
    assert doc.title == "A Book"
    assert doc.sections == (
        Section("Chapter One\n\nFirst & foremost.", "Chapter One"),
        Section("Part\n\n" + CHINESE, "Chapter One > Part"),
        Section("Chapter Two\n\nSecond.", "Chapter Two"),
        Section("No heading here.", "c.xhtml"),
    )


def test_extract_bytes_matches_extract(tmp_path: Path) -> None:
    data = pdf_bytes([["Same either way."]])
    assert extract_bytes(data, "in-memory.pdf") == extract(write(tmp_path / "on-disk.pdf", data))
