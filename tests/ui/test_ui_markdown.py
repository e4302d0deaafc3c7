"""Markdown blocks settle predictably, render safely, and code gets colours once its fence closes."""

from __future__ import annotations

import random

import pytest
from PySide6.QtGui import QFont, QFontDatabase, QTextCursor, QTextTable
from PySide6.QtWidgets import QApplication

from ui.highlight import MAX_HIGHLIGHT_CHARS, highlight_spans, language_of
from ui.markdown import (
    CODE_PIECE_LINES,
    SETTLE_SOFT_LIMIT,
    BlockSplitter,
    Piece,
    RenderStyle,
    Segment,
    protect_math,
    render_markdown,
    render_piece,
    split_block,
    split_markdown,
)
from ui.theme import DARK, LIGHT

pytestmark = pytest.mark.gui

SAMPLE = """Intro paragraph with **bold**.

1. first step

2. second step
   continued on an indented line

- a
- b

```python
def f(x):

    return x + 1
```
Right after the fence.

    indented code

| a | b |
|---|---|
| 1 | 2 |

Math stays: $a_1 + b_1$ and \\(x^2\\).

Last line without a newline"""


@pytest.fixture
def style(qapp: QApplication) -> RenderStyle:
    return RenderStyle(LIGHT, QFont(), QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))


def test_any_chunking_settles_the_same_blocks() -> None:
    whole = split_markdown(SAMPLE)
    generator = random.Random(4)
    for _ in range(100):
        splitter = BlockSplitter()
        pieces: list[str] = []
        position = 0
        while position < len(SAMPLE):
            size = generator.randint(1, 9)
            pieces += splitter.feed(SAMPLE[position : position + size])
            position += size
        assert pieces + splitter.finish() == whole
    assert "".join(whole) == SAMPLE, "no text is lost or duplicated between blocks"


def test_blocks_settle_at_a_new_paragraph_and_when_a_fence_closes() -> None:
    splitter = BlockSplitter()
    assert splitter.feed("First paragraph.\n\n") == []  # the next line may continue a list or an item
    # Decided once the next line is complete: it could still turn out to be an indented continuation.
    assert splitter.feed("Second") == []
    assert splitter.feed(" paragraph.\n") == ["First paragraph.\n\n"]
    assert splitter.pending == "Second paragraph.\n"
    assert splitter.feed("```rust\nfn main() {}\n\nlet x = 1;\n") == []
    assert splitter.in_fence
    settled = splitter.feed("```\n")
    assert settled == ["Second paragraph.\n```rust\nfn main() {}\n\nlet x = 1;\n```\n"]
    assert splitter.pending == ""


def test_a_loose_list_stays_one_block_until_it_grows_too_long() -> None:
    items = "".join(f"{i}. item {i}\n\n" for i in range(1, 6))
    assert split_markdown(items + "After.\n") == [items, "After.\n"]

    long_items = "".join(f"- item {i} " + "word " * 30 + "\n\n" for i in range(200))
    blocks = split_markdown(long_items)
    assert len(blocks) > 1
    assert all(len(block) < SETTLE_SOFT_LIMIT + 400 for block in blocks)
    assert "".join(blocks) == long_items


def test_math_is_left_as_written(style: RenderStyle) -> None:
    source = "Euler: $e^{i\\pi} + 1 = 0$, sums $a_1 + b_1$, \\(x^2\\) and \\[y_2\\]; costs $5 or $6."
    document = render_markdown(source, style).document
    assert document.toPlainText() == source
    assert "`$a_1$`" in protect_math("`$a_1$`"), "code spans are untouched"


def test_code_is_coloured_only_when_settled(style: RenderStyle) -> None:
    source = "```python\ndef greet(name):\n    return 'hi ' + name\n```\n"

    live = render_markdown(source, style, settled=False)
    settled = render_markdown(source, style)

    def keyword_colour(segment_document: QTextCursor) -> str:
        return segment_document.charFormat().foreground().color().name()

    live_def = live.document.find("def")
    settled_def = settled.document.find("def")
    assert keyword_colour(live_def) != LIGHT.syn_keyword
    assert keyword_colour(settled_def) == LIGHT.syn_keyword
    assert settled.document.find("'hi '").charFormat().foreground().color().name() == LIGHT.syn_string
    (code,) = settled.code_blocks
    assert code.language == "python"
    assert code.text == "def greet(name):\n    return 'hi ' + name"

    dark = render_markdown(source, RenderStyle(DARK, style.font, style.code_font))
    assert dark.document.find("def").charFormat().foreground().color().name() == DARK.syn_keyword


def test_tables_lists_inline_code_and_links(style: RenderStyle) -> None:
    segment = render_markdown(
        "| Language | Typing |\n|---|---|\n| Rust | static |\n\n- one\n- two\n\n"
        "Use `pip` and [docs](https://example.com).",
        style,
    )
    document = segment.document
    tables = [frame for frame in document.rootFrame().childFrames() if isinstance(frame, QTextTable)]
    assert len(tables) == 1 and tables[0].rows() == 2 and tables[0].columns() == 2
    assert document.find("one").block().textList() is not None
    inline = document.find("pip").charFormat()
    assert inline.background().color().name() == LIGHT.inline_code_bg
    link = document.find("docs").charFormat()
    assert link.isAnchor() and link.anchorHref() == "https://example.com"
    assert link.foreground().color().name() == LIGHT.link


def test_raw_html_stays_text(style: RenderStyle) -> None:
    segment = render_markdown('<img src="file:///etc/passwd"> <b>bold</b>', style)
    assert segment.document.toPlainText() == '<img src="file:///etc/passwd"> <b>bold</b>'
    assert "\ufffc" not in segment.document.toPlainText()


@pytest.mark.parametrize(
    ("language", "code", "expected"),
    [
        ("python", "def f():\n    return 1", "syn_keyword"),
        ("js", "const x = 'a';", "syn_keyword"),
        ("ts", "let y: number = 2;", "syn_keyword"),
        ("c", "int main(void) { return 0; }", "syn_type"),
        ("cpp", "#include <vector>\nint x;", "syn_comment"),
        ("rust", "fn main() { let x = 1; }", "syn_keyword"),
        ("go", "func main() { var x int }", "syn_keyword"),
        ("bash", 'echo "hello" # hi', "syn_comment"),
        ("json", '{"key": 1}', "syn_number"),
    ],
)
def test_common_languages_are_highlighted(language: str, code: str, expected: str) -> None:
    colours = {colour for _start, _length, colour in highlight_spans(code, language)}
    assert expected in colours


def test_unknown_or_huge_code_is_left_plain() -> None:
    assert highlight_spans("whatever", "brainfuck") == []
    assert highlight_spans("x = 1\n" * (MAX_HIGHLIGHT_CHARS // 6 + 1), "python") == []
    assert language_of("py title=example.py") == "py"
    assert language_of("") == ""


FENCE_LOOKALIKES = (
    "```\n"
    "    ```\n"  # indented four spaces: code, not a fence
    "``` python\n"  # a fence with an info string opens, it does not close
    "``\n"
    "~~~\n"
    "  ````\n"  # closes: up to three spaces, at least as long
    "after\n"
    "\n"
    "Next.\n"
)


def test_only_a_closing_line_closes_a_fence_however_the_text_arrives() -> None:
    expected = [FENCE_LOOKALIKES[: FENCE_LOOKALIKES.index("after")], "after\n\n", "Next.\n"]
    assert split_markdown(FENCE_LOOKALIKES) == expected
    generator = random.Random(13)
    for _ in range(50):
        splitter = BlockSplitter()
        blocks: list[str] = []
        position = 0
        while position < len(FENCE_LOOKALIKES):
            size = generator.randint(1, 5)
            blocks += splitter.feed(FENCE_LOOKALIKES[position : position + size])
            position += size
        assert blocks + splitter.finish() == expected


def _tables(segment: Segment) -> list[QTextTable]:
    return [frame for frame in segment.document.rootFrame().childFrames() if isinstance(frame, QTextTable)]


def test_a_huge_table_is_cut_into_pieces_that_line_up_and_keep_every_row(style: RenderStyle) -> None:
    head = "| # | Name | Note |\n|---:|---|:---:|\n"
    rows = [f"| {i} | name {i} | {'wide ' * (i % 9)}**{i}** |" for i in range(1, 501)]
    pieces = list(split_block(head + "\n".join(rows) + "\n\n"))

    assert len(pieces) > 10 and all(isinstance(piece, Piece) for piece in pieces)
    tables = [piece for piece in pieces if isinstance(piece, Piece)]
    assert [piece.joined for piece in tables] == [False] + [True] * (len(tables) - 1)
    assert [piece.last for piece in tables] == [False] * (len(tables) - 1) + [True]
    assert all(piece.source.startswith(head) for piece in tables), "each piece parses under the same head"
    assert [line for piece in tables for line in piece.source.splitlines()[2:]] == rows

    segments = [render_piece(piece, style) for piece in tables]
    for segment in segments:
        segment.layout(600)
    shown = [_tables(segment)[0] for segment in segments]
    assert sum(table.rows() for table in shown) == len(rows) + 1, "the head shows once, above the first piece"
    assert shown[0].cellAt(0, 1).firstCursorPosition().block().text() == "Name"
    assert shown[1].cellAt(0, 1).firstCursorPosition().block().text() != "Name"

    def column_lefts(segment: Segment, table: QTextTable) -> list[float]:
        layout = segment.document.documentLayout()
        row = table.rows() - 1
        return [
            layout.blockBoundingRect(table.cellAt(row, column).firstCursorPosition().block()).left()
            for column in range(table.columns())
        ]

    assert all(
        column_lefts(segment, table) == column_lefts(segments[0], shown[0])
        for segment, table in zip(segments, shown, strict=True)
    )
    text = "\n".join(segment.plain_text() for segment in segments)
    assert [cell for cell in text.split("\n") if cell.startswith("name ")] == [
        f"name {i}" for i in range(1, 501)
    ]

    small = head + "| 1 | one | x |\n" * 5
    assert list(split_block(small)) == [small], "a table that is cheap to lay out stays whole"


def test_a_huge_code_block_is_cut_into_pieces_coloured_and_copied_as_one(style: RenderStyle) -> None:
    # Long enough to be cut, short enough to be coloured (MAX_HIGHLIGHT_CHARS).
    lines = [f"x_{i} = {i}  # {i}" for i in range(400)]
    # A string that runs across the first cut, and a tab the Copy button must give back as a tab.
    lines[CODE_PIECE_LINES - 2] = 's = """starts here'
    lines[CODE_PIECE_LINES + 1] = 'ends here"""'
    lines[5] = "\tindented = True"
    code = "\n".join(lines)
    pieces = list(split_block(f"The module:\n```python\n{code}\n```\n"))

    assert pieces[0] == "The module:\n", "the line above the fence renders on its own"
    parts = [piece for piece in pieces[1:] if isinstance(piece, Piece)]
    assert len(parts) == len(pieces) - 1 > 1
    assert "\n".join(piece.source for piece in parts) == code
    segments = [render_piece(piece, style) for piece in parts]
    first, second = segments[0].code_blocks[0], segments[1].code_blocks[0]
    assert first.text == code and not first.continued and first.open_end, "one Copy button, for all of it"
    assert all(segment.code_blocks[0].continued for segment in segments[1:])
    assert second.continued and segments[-1].code_blocks[0].padding > 0

    def colour(segment: Segment, text: str) -> str:
        return segment.document.find(text).charFormat().foreground().color().name()

    assert colour(segments[1], f"x_{CODE_PIECE_LINES}") == LIGHT.syn_string, "the string goes on past the cut"
    assert colour(segments[1], f"# {CODE_PIECE_LINES + 5}") == LIGHT.syn_comment
    assert colour(segments[0], "True") != colour(segments[0], "indented")
    assert "\tindented" in segments[0].plain_text()

    short = "```python\n" + "\n".join(lines[:20]) + "\n```\n"
    assert list(split_block(short)) == [short]
