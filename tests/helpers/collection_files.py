"""Folders of real documents for collection tests: a handbook in several formats with one broken file, and
a folder of many short notes (enough files that a Cancel lands in the middle of indexing them)."""

from __future__ import annotations

from pathlib import Path

import docx

from tests.helpers.document_files import pdf_bytes, write

HANDBOOK_FILES = ("leave.docx", "tides.pdf", "lamp.md", "broken.pdf")
# What indexing a handbook folder leaves to say about the broken file.
BROKEN = "broken.pdf"


def handbook(folder: Path) -> Path:
    """A Word file, a two-page PDF and a Markdown file that read, and a truncated PDF that does not."""
    folder.mkdir(parents=True, exist_ok=True)
    leave = docx.Document()
    leave.add_heading("Leave", level=1)
    leave.add_paragraph("Every keeper gets twenty-five days of paid holiday a year.")
    leave.add_heading("Sick days", level=1)
    leave.add_paragraph("Tell the harbour master before the evening watch.")
    leave.save(str(folder / "leave.docx"))
    write(
        folder / "tides.pdf",
        pdf_bytes([["Tide tables", "High water at six."], ["Storm warnings", "Raise the red flag."]]),
    )
    (folder / "lamp.md").write_text(
        "# The lamp\n\nThe spare key to the lamp room is kept under the third blue flowerpot.\n",
        encoding="utf-8",
    )
    write(folder / BROKEN, b"%PDF-1.7\n1 0 obj\n<<")
    return folder


def notes(folder: Path, count: int) -> Path:
    """`count` short text notes, each about a different ship."""
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        (folder / f"ship-{number:03}.txt").write_text(
            f"Ship {number} entered the harbour on day {number % 28 + 1} carrying {number * 7} crates of "
            "salt, rope and lamp oil for the keepers.\n",
            encoding="utf-8",
        )
    return folder
