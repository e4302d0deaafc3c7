"""Markdown blocks settle predictably, render safely, and code gets colours once its fence closes."""

from __future__ import annotations

import random

import pytest
from PySide6.QtGui import QFont, QFontDatabase, QTextCursor, QTextTable
from PySide6.QtWidgets import QApplication

from ui.highlight import MAX_HIGHLIGHT_CHARS, highlight_spans, language_of
from ui.markdown import (
    SETTLE_SOFT_LIMIT,
    BlockSplitter,
    RenderStyle,
    protect_math,
    render_markdown,
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
