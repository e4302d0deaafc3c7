"""The transcript streams cheaply, renders lazily, copies what it shows and respects the scroll position."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QColor, QGuiApplication, QHelpEvent, QImage, QRawFont, QTextLayout, QWheelEvent
from PySide6.QtWidgets import QApplication, QToolTip, QWidget
from pytestqt.qtbot import QtBot

import ui.markdown
import ui.message_row
import ui.row_view
import ui.safe_browser as safe_browser
import ui.transcript
from tests.helpers.ui_fixtures import click_in_transcript, settle_transcript
from tests.ui.test_ui_safe_browser import _FileOpenWatch, _write_png
from ui.markdown import RenderStyle, Segment
from ui.message_row import TAIL_MARKDOWN_LIMIT, MessageRow, ReplyStats, TranscriptEntry
from ui.theme import DARK, LIGHT
from ui.transcript import Transcript

pytestmark = pytest.mark.gui

LONG = "\n\n".join(f"Paragraph {i}: " + "words " * 40 for i in range(6))


class _Links:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[str] = []
        self.opened: list[str] = []

    def confirm(self, parent: QWidget, url: QUrl) -> bool:
        self.asked.append(url.toString())
        return self.answer

    def open(self, url: QUrl) -> bool:
        self.opened.append(url.toString())
        return True


@pytest.fixture
def links() -> _Links:
    return _Links(answer=True)


@pytest.fixture
def transcript(qtbot: QtBot, links: _Links) -> Transcript:
    view = Transcript(confirm_open=links.confirm, open_url=links.open)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    qtbot.waitExposed(view)
    return view


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bool]]]:
    """Every Markdown render the transcript asks for: (source, settled)."""
    seen: list[tuple[str, bool]] = []
    real = ui.markdown.render_markdown

    def counting(source: str, style: RenderStyle, *, settled: bool = True) -> Segment:
        seen.append((source, settled))
        return real(source, style, settled=settled)

    monkeypatch.setattr(ui.message_row, "render_markdown", counting)
    yield seen


def _history(count: int) -> list[TranscriptEntry]:
    return [
        TranscriptEntry(i, "user" if i % 2 else "assistant", f"Message {i}\n\n{LONG}")
        for i in range(1, count + 1)
    ]


def test_a_burst_of_deltas_renders_once_per_flush(
    qtbot: QtBot, transcript: Transcript, renders: list[tuple[str, bool]]
) -> None:
    transcript.add_entry(TranscriptEntry(99, "assistant", "", status="streaming"))
    renders.clear()

    for i in range(300):
        transcript.append_delta(99, f"tok{i} ")
    assert renders == [], "rendered per token instead of on the flush tick"
    qtbot.waitUntil(lambda: len(renders) == 1, timeout=1000)
    settle_transcript(qtbot)

    assert len(renders) == 1
    row = transcript.row(99)
    assert row is not None
    assert row.rendered_text().startswith("tok0 tok1 ")
    assert row.rendered_text().rstrip().endswith("tok299")


def test_settled_blocks_render_once_and_only_the_tail_again(
    qtbot: QtBot, transcript: Transcript, renders: list[tuple[str, bool]]
) -> None:
    transcript.set_entries(_history(6))
    transcript.add_entry(TranscriptEntry(99, "assistant", "", status="streaming"))
    settle_transcript(qtbot)
    renders.clear()

    paragraphs = [f"Paragraph {i} says " + "something useful " * 8 + "\n\n" for i in range(30)]
    for paragraph in paragraphs:
        for word in paragraph.split(" "):
            transcript.append_delta(99, word + " ")
        transcript.flush()
    transcript.finish(99, "complete", ReplyStats(0.12, 85.3, 400, 35))
    settle_transcript(qtbot)

    settled = Counter(source for source, is_settled in renders if is_settled)
    assert all(count == 1 for count in settled.values()), "a settled block was rendered twice"
    assert len(settled) == len(paragraphs)
    assert all(not source.startswith("Message") for source in settled), "history rows re-rendered"
    tails = [source for source, is_settled in renders if not is_settled]
    assert max(len(source) for source in tails) < 2 * len(paragraphs[0]), "the tail grew with the reply"
    row = transcript.row(99)
    assert row is not None
    assert row.text.replace(" ", "") == "".join(paragraphs).replace(" ", "")
    assert row.stats_text == "TTFT 0.12 s · 85.3 tok/s · 35 tokens in · 400 tokens out"
    assert row.badge_text == ""


def test_an_endless_paragraph_is_appended_not_rerendered(
    qtbot: QtBot, transcript: Transcript, renders: list[tuple[str, bool]]
) -> None:
    transcript.add_entry(TranscriptEntry(7, "assistant", "", status="streaming"))
    renders.clear()
    words = 0
    while words * 6 < TAIL_MARKDOWN_LIMIT * 3:
        transcript.append_delta(7, "words ")
        words += 1
        if words % 50 == 0:
            transcript.flush()
    transcript.flush()

    longest = max(len(source) for source, _settled in renders)
    assert longest <= TAIL_MARKDOWN_LIMIT, "an oversized tail was re-rendered as Markdown"
    row = transcript.row(7)
    assert row is not None
    assert row.rendered_text().count("words") == words


def test_code_is_highlighted_when_its_fence_closes(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.add_entry(TranscriptEntry(3, "assistant", "", status="streaming"))
    transcript.append_delta(3, "Here:\n\n```python\ndef answer():\n    return 42\n")
    transcript.flush()
    row = transcript.row(3)
    assert row is not None

    def keyword_colour() -> str:
        for _top, segment in row.body_segments():
            cursor = segment.document.find("def")
            if not cursor.isNull():
                return cursor.charFormat().foreground().color().name()
        raise AssertionError("the code is not shown")

    assert keyword_colour() != LIGHT.syn_keyword, "highlighted before the fence closed"
    transcript.append_delta(3, "```\n")
    transcript.flush()
    assert keyword_colour() == LIGHT.syn_keyword
    assert row.code_blocks() == ["def answer():\n    return 42"]


def test_copy_buttons_copy_the_code_and_the_whole_message(qtbot: QtBot, transcript: Transcript) -> None:
    markdown = 'Two blocks:\n\n```bash\necho one\n```\n\n```json\n{"two": 2}\n```\n\nDone.'
    transcript.set_entries(
        [TranscriptEntry(1, "user", "Show code"), TranscriptEntry(2, "assistant", markdown)]
    )
    clipboard = QGuiApplication.clipboard()

    with qtbot.waitSignal(transcript.copied):
        click_in_transcript(transcript, transcript.code_copy_rect(2, 1).center())
    assert clipboard.text() == '{"two": 2}'
    click_in_transcript(transcript, transcript.code_copy_rect(2, 0).center())
    assert clipboard.text() == "echo one"

    click_in_transcript(transcript, transcript.action_rect(2, "copy").center())
    assert clipboard.text() == markdown, "Copy gives the Markdown source, not the rendered text"
    row = transcript.row(2)
    assert row is not None
    assert row.action_label("copy") == "Copied"
    click_in_transcript(transcript, transcript.action_rect(1, "copy").center())
    assert clipboard.text() == "Show code"


def test_message_actions_are_offered_by_role_and_wait_while_busy(
    qtbot: QtBot, transcript: Transcript
) -> None:
    transcript.set_entries(
        [
            TranscriptEntry(1, "user", "Question", sibling_index=2, sibling_count=2),
            TranscriptEntry(2, "assistant", "Answer", sibling_index=1, sibling_count=3),
        ]
    )
    user, reply = transcript.row(1), transcript.row(2)
    assert user is not None and reply is not None
    assert user.actions() == ["previous", "sibling", "next", "copy", "edit", "delete"]
    assert reply.actions() == ["previous", "sibling", "next", "copy", "regenerate", "delete", "info"]
    assert reply.sibling_text == "1/3"
    assert not transcript.action_enabled(2, "previous") and transcript.action_enabled(2, "next")
    assert transcript.action_enabled(1, "previous") and not transcript.action_enabled(1, "next")

    with qtbot.waitSignal(transcript.actionTriggered) as triggered:
        click_in_transcript(transcript, transcript.action_rect(2, "regenerate").center())
    assert triggered.args == ["regenerate", 2]
    with qtbot.waitSignal(transcript.actionTriggered) as triggered:
        click_in_transcript(transcript, transcript.action_rect(2, "next").center())
    assert triggered.args == ["next", 2]

    transcript.set_editing_enabled(False)
    with qtbot.assertNotEmitted(transcript.actionTriggered, wait=50):
        click_in_transcript(transcript, transcript.action_rect(2, "regenerate").center())
    with qtbot.waitSignal(transcript.actionTriggered) as triggered:
        click_in_transcript(transcript, transcript.action_rect(2, "info").center())
    assert triggered.args == ["info", 2]


def test_a_200_message_conversation_opens_without_rendering_every_message(
    qtbot: QtBot, transcript: Transcript, renders: list[tuple[str, bool]]
) -> None:
    started = time.perf_counter()
    transcript.set_entries(_history(200))
    opened = time.perf_counter() - started
    rendered_at_open = sum(1 for row in transcript.rows() if row.segments is not None)

    assert rendered_at_open < 20, f"{rendered_at_open} rows rendered before the first paint"
    assert transcript.is_at_bottom()
    assert transcript.visible_message_ids()[-1] == 200
    assert opened < 1.0, f"opening took {opened:.2f} s"
    # The idle pass measures the rest a slice at a time, so the scroll bar ends up exact.
    qtbot.waitUntil(lambda: all(row.measured_width is not None for row in transcript.rows()), timeout=10_000)
    assert transcript.is_at_bottom()


def test_rows_far_away_let_go_of_their_documents(
    qtbot: QtBot, transcript: Transcript, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ui.row_view, "MAX_RENDERED_ROWS", 30)
    transcript.set_entries(_history(120))
    qtbot.waitUntil(lambda: all(row.measured_width is not None for row in transcript.rows()), timeout=10_000)
    qtbot.waitUntil(lambda: sum(1 for row in transcript.rows() if row.segments is not None) <= 30)

    transcript.scroll_to_message(3)
    QApplication.processEvents()
    row = transcript.row(3)
    assert row is not None and row.segments is not None, "a row scrolled into view renders again"


def test_auto_scroll_follows_only_when_already_at_the_bottom(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.set_entries(_history(9))
    transcript.add_entry(TranscriptEntry(99, "assistant", "", status="streaming"))
    bar = transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=2000)

    before = bar.maximum()
    for _ in range(3):
        transcript.append_delta(99, LONG + "\n\n")
        settle_transcript(qtbot)
    qtbot.waitUntil(lambda: bar.maximum() > before and bar.value() == bar.maximum(), timeout=2000)

    # Scrolled up to read: the view stays put while the reply keeps growing.
    bar.setValue(bar.maximum() // 3)
    reading = bar.value()
    first_visible = transcript.visible_message_ids()[0]
    grown = bar.maximum()
    for _ in range(3):
        transcript.append_delta(99, LONG + "\n\n")
        settle_transcript(qtbot)
    qtbot.waitUntil(lambda: bar.maximum() > grown, timeout=2000)
    settle_transcript(qtbot)
    assert bar.value() == reading
    assert transcript.visible_message_ids()[0] == first_visible

    # Back at the bottom (the wheel, like a user): following resumes.
    while not transcript.is_at_bottom():
        wheel = QWheelEvent(
            QPointF(50, 50),
            QPointF(transcript.viewport().mapToGlobal(QPoint(50, 50))),
            QPoint(0, 0),
            QPoint(0, -1200),
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
            Qt.ScrollPhase.NoScrollPhase,
            False,
        )
        QApplication.sendEvent(transcript.viewport(), wheel)
    transcript.append_delta(99, LONG)
    settle_transcript(qtbot)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=2000)


def test_reading_inside_a_growing_reply_is_not_disturbed(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.set_entries(_history(3))
    transcript.add_entry(TranscriptEntry(99, "assistant", "", status="streaming"))
    for _ in range(6):
        transcript.append_delta(99, LONG + "\n\n")
    transcript.flush()
    row = transcript.row(99)
    assert row is not None
    # A slow flush renders the burst over several turns; until it has, the reply may end in view.
    qtbot.waitUntil(lambda: not row.draining, timeout=10_000)
    transcript.scroll_to_message(99)
    bar = transcript.verticalScrollBar()
    bar.setValue(bar.value() + 300)  # the user reads a few paragraphs into the reply
    assert not transcript.is_at_bottom()
    reading = bar.value()
    for _ in range(4):
        transcript.append_delta(99, LONG + "\n\n")
        transcript.flush()
    transcript.finish(99, "complete")
    settle_transcript(qtbot)
    assert bar.value() == reading


def test_rows_measured_above_the_viewport_do_not_move_what_is_read(
    qtbot: QtBot, transcript: Transcript
) -> None:
    transcript.set_entries(_history(80))
    transcript.scroll_to_message(60)
    QApplication.processEvents()
    assert transcript.visible_message_ids()[0] == 60
    # The idle pass now measures rows 1..59 above the viewport, changing their estimated heights.
    qtbot.waitUntil(lambda: all(row.measured_width is not None for row in transcript.rows()), timeout=10_000)
    assert transcript.visible_message_ids()[0] == 60


def test_links_ask_first_and_show_an_escaped_tooltip(
    qtbot: QtBot, transcript: Transcript, links: _Links
) -> None:
    transcript.set_entries(
        [
            TranscriptEntry(
                1, "assistant", "See [the docs](https://example.com/a?b=<c>) or [this](file:///etc/passwd)."
            )
        ]
    )

    click_in_transcript(transcript, transcript.text_point(1, "this"))
    assert links.asked == [], "a file: link must not even be offered"
    click_in_transcript(transcript, transcript.text_point(1, "docs"))
    assert links.asked == ["https://example.com/a?b=%3Cc%3E"]
    assert links.opened == links.asked

    point = transcript.text_point(1, "docs")
    event = QHelpEvent(QEvent.Type.ToolTip, point, transcript.viewport().mapToGlobal(point))
    QApplication.sendEvent(transcript.viewport(), event)
    assert QToolTip.text() == "<p>https://example.com/a?b=&lt;c&gt;</p>"


@pytest.mark.skipif(sys.platform != "linux", reason="uses inotify to watch for file opens")
def test_images_in_replies_never_load(
    qtbot: QtBot, transcript: Transcript, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret.png"
    _write_png(secret)
    asked: list[str] = []
    real = safe_browser.refuse_resource

    def spy(resource_type: int, url: QUrl) -> QImage | object:
        asked.append(url.toString())
        return real(resource_type, url)

    monkeypatch.setattr(safe_browser, "refuse_resource", spy)
    watch = _FileOpenWatch(secret)
    try:
        transcript.set_entries(
            [
                TranscriptEntry(
                    1, "assistant", f"![x]({QUrl.fromLocalFile(str(secret)).toString()}) <img src='{secret}'>"
                )
            ]
        )
        transcript.viewport().grab()
        assert watch.events() == 0
        assert asked, "Qt never asked for the image, so the test proves nothing"
    finally:
        watch.close()


def test_statuses_and_errors_are_plain_text(transcript: Transcript) -> None:
    transcript.set_entries(
        [
            TranscriptEntry(1, "user", "**not bold** <b>raw</b>"),
            TranscriptEntry(2, "assistant", "half", status="interrupted"),
            TranscriptEntry(3, "assistant", "", status="error", error="<img src='file:///etc/passwd'>"),
        ]
    )
    user, interrupted, failed = (transcript.row(i) for i in (1, 2, 3))
    assert user is not None and interrupted is not None and failed is not None
    transcript.scroll_to_message(1)
    assert user.rendered_text() == "**not bold** <b>raw</b>"
    assert interrupted.badge_text.startswith("Interrupted")
    assert failed.badge_text == "Error: <img src='file:///etc/passwd'>"


def test_cjk_streams_intact_and_has_glyphs(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.add_entry(TranscriptEntry(1, "assistant", "", status="streaming"))
    for piece in ["炉", "端で", "温か", "い茶を", "。한국", "어，中文"]:
        transcript.append_delta(1, piece)
    transcript.finish(1, "complete")
    row = transcript.row(1)
    assert row is not None
    assert row.rendered_text() == "炉端で温かい茶を。한국어，中文"

    layout = QTextLayout("中文", transcript.font())
    layout.beginLayout()
    layout.createLine()
    layout.endLayout()
    glyphs = [index for run in layout.glyphRuns() for index in run.glyphIndexes()]
    fonts = {QRawFont(run.rawFont()).familyName() for run in layout.glyphRuns()}
    if all(index == 0 for index in glyphs):
        pytest.skip("no font with CJK glyphs is installed on this machine")
    assert all(index != 0 for index in glyphs), f"missing CJK glyphs (fonts used: {fonts})"


def test_theme_change_recolours_code(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.set_entries([TranscriptEntry(1, "assistant", "```python\nimport os\n```\n")])
    row = transcript.row(1)
    assert row is not None

    def colour() -> QColor:
        current = transcript.row(1)
        assert current is not None and current.segments
        return current.segments[0].document.find("import").charFormat().foreground().color()

    assert colour().name() == LIGHT.syn_keyword
    transcript.set_theme(DARK)
    QApplication.processEvents()
    assert colour().name() == DARK.syn_keyword


def _huge_table(rows: int) -> str:
    lines = ["| # | Name | Region | Height | Status | Inspected |", "|---:|---|---|---:|---|---|"]
    lines += [
        f"| {i} | cell-{i}-a | coast {i % 17} | {i % 60}.5 | lit | 2024-01-{i % 28 + 1:02d} |"
        for i in range(rows)
    ]
    return "Every one of them:\n\n" + "\n".join(lines) + "\n\nThat is the list.\n"


def _laid_out(row: MessageRow) -> bool:
    """All of the row is rendered and laid out at its width."""
    return row.segments is not None and not row.draining and row.exact


def _wait_laid_out(qtbot: QtBot, row: MessageRow) -> None:
    qtbot.waitUntil(lambda: _laid_out(row), timeout=60_000)


def _pieces_laid_out(row: MessageRow) -> tuple[int, int]:
    """(pieces laid out at the row's width, pieces)."""
    assert row.segments is not None and row.geometry is not None
    content = row.content_width(row.geometry.width)
    pieces = [segment for segment in row.segments if segment.lazy]
    return sum(1 for segment in pieces if segment.width == content), len(pieces)


def test_a_huge_table_shows_its_end_first_and_is_laid_out_a_slice_per_turn(
    qtbot: QtBot, transcript: Transcript, monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = _huge_table(2_000)
    turns = 0
    laid_out_in_turn: Counter[int] = Counter()
    real_layout = ui.markdown.Segment.layout

    def counting(segment: Segment, width: float) -> float:
        if segment.lazy and segment.width != width:
            laid_out_in_turn[turns] += 1
        return real_layout(segment, width)

    monkeypatch.setattr(ui.markdown.Segment, "layout", counting)
    ticker = QTimer()
    ticker.setInterval(0)

    def tick() -> None:
        nonlocal turns
        turns += 1

    ticker.timeout.connect(tick)
    ticker.start()
    transcript.set_entries(
        [TranscriptEntry(1, "user", "List them all."), TranscriptEntry(2, "assistant", reply)]
    )
    row = transcript.row(2)
    assert row is not None

    def last_piece_laid_out() -> bool:
        if row.segments is None or row.draining or row.geometry is None:
            return False
        pieces = [segment for segment in row.segments if segment.lazy]
        return bool(pieces) and pieces[-1].width == row.content_width(row.geometry.width)

    # Cut into pieces first (cheap), then what is in view, the reply's end, is laid out before the rest.
    qtbot.waitUntil(last_piece_laid_out, timeout=60_000)
    done, total = _pieces_laid_out(row)
    assert total > 100 and done < total // 4
    assert transcript.is_at_bottom() and transcript.visible_message_ids() == [2]

    qtbot.waitUntil(lambda: _laid_out(row), timeout=60_000)
    ticker.stop()
    assert len(laid_out_in_turn) > 5, "laid out in a few long stalls instead of a slice per turn"
    assert max(laid_out_in_turn.values()) < total // 4
    assert transcript.is_at_bottom()

    shown = row.rendered_text()
    position = 0
    for i in range(2_000):
        position = shown.find(f"cell-{i}-a", position)
        assert position >= 0, f"row {i} is missing or out of order"
    click_in_transcript(transcript, transcript.action_rect(2, "copy").center())
    assert QGuiApplication.clipboard().text() == reply


def test_resizing_a_huge_table_lays_out_again_what_is_in_view_first(
    qtbot: QtBot, transcript: Transcript
) -> None:
    transcript.set_entries([TranscriptEntry(1, "assistant", _huge_table(1_000))])
    row = transcript.row(1)
    assert row is not None
    qtbot.waitUntil(lambda: _laid_out(row), timeout=60_000)
    bar = transcript.verticalScrollBar()
    bar.setValue(bar.maximum() // 2)

    def in_view() -> list[tuple[float, Segment]]:
        top = bar.value() - transcript.row_top(1)
        return row.segments_between(top, top + transcript.viewport().height())

    reading = row.pin(bar.value() - transcript.row_top(1))
    assert reading is not None

    transcript.resize(transcript.width() - 150, transcript.height())
    done, total = _pieces_laid_out(row)
    assert not row.exact and done < total // 2, "everything was laid out again at once"
    geometry = row.geometry
    assert geometry is not None
    content = row.content_width(geometry.width)
    qtbot.waitUntil(lambda: all(segment.width == content for _y, segment in in_view()), timeout=60_000)
    done, total = _pieces_laid_out(row)
    assert done < total, "what is in view came last"

    qtbot.waitUntil(lambda: _laid_out(row), timeout=60_000)
    now = row.pin(bar.value() - transcript.row_top(1))
    assert now is not None and abs(now[0] - reading[0]) <= 1, "the rows being read moved out of view"


def test_a_huge_code_block_has_one_copy_button_for_all_of_it(qtbot: QtBot, transcript: Transcript) -> None:
    code = "\n".join(f"value_{i} = compute({i}, 'line {i}')" for i in range(5_000))
    reply = f"The module:\n\n```python\n{code}\n```\n\nDone.\n"
    transcript.set_entries([TranscriptEntry(1, "user", "All of it."), TranscriptEntry(2, "assistant", reply)])
    row = transcript.row(2)
    assert row is not None
    qtbot.waitUntil(lambda: _laid_out(row), timeout=60_000)

    assert row.code_blocks() == [code]
    assert code in row.rendered_text()
    with qtbot.waitSignal(transcript.copied):
        click_in_transcript(transcript, transcript.code_copy_rect(2, 0).center())
    assert QGuiApplication.clipboard().text() == code
    with pytest.raises(IndexError):
        transcript.code_copy_rect(2, 1)


def test_pieces_painted_from_their_images_look_as_painted_directly(
    qtbot: QtBot, links: _Links, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = "\n".join(f"total_{i} = add({i}, 'x')  # step {i}" for i in range(400))
    reply = _huge_table(200) + f"\n```python\n{code}\n```\n"
    shots: list[list[QImage]] = []
    for limit in (0, ui.transcript.PIECE_IMAGES_BYTES):
        monkeypatch.setattr(ui.transcript, "PIECE_IMAGES_BYTES", limit)
        view = Transcript(confirm_open=links.confirm, open_url=links.open)
        qtbot.addWidget(view)
        view.resize(700, 500)
        view.show()
        qtbot.waitExposed(view)
        view.set_entries([TranscriptEntry(1, "assistant", reply)])
        row = view.row(1)
        assert row is not None
        _wait_laid_out(qtbot, row)
        bar = view.verticalScrollBar()
        images = []
        for value in (0, bar.maximum() // 3, bar.maximum() * 2 // 3, bar.maximum()):
            bar.setValue(value)
            QApplication.processEvents()
            images.append(view.viewport().grab().toImage())
        shots.append(images)
    assert shots[0] == shots[1]
