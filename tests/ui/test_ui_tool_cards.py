"""Tool calls and results as collapsible cards in the transcript: collapsed to a header line with a preview,
expanded by a click to their text as a code block (data, never Markdown), open or closed as the user left
them through re-reads, resizes and theme changes, and cheap however long a result is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QColor, QGuiApplication, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.conversations.store import ConversationStore, PartInput, ReplyProvenance
from app.paths import HearthPaths
from app.storage.orm import MessageStatus
from tests.helpers.ui_fixtures import GuiSessions, click_in_transcript, settle_transcript
from ui.chat_area import entry_for
from ui.message_row import MessageRow, TranscriptEntry
from ui.theme import DARK, LIGHT
from ui.transcript import Transcript

pytestmark = pytest.mark.gui

ARGUMENTS = '{"a": 2, "b": 40}'
PRETTY = '{\n  "a": 2,\n  "b": 40\n}'
PROVENANCE = ReplyProvenance("SmolTools", "ab" * 32, {}, 1)


@pytest.fixture
def links() -> list[str]:
    """Every link the transcript offered to open (none should be: tool text is never Markdown)."""
    return []


@pytest.fixture
def transcript(qtbot: QtBot, links: list[str]) -> Transcript:
    def confirm(_parent: QWidget, url: QUrl) -> bool:
        links.append(url.toString())
        return False

    view = Transcript(confirm_open=confirm, open_url=lambda _url: False)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    qtbot.waitExposed(view)
    return view


class _Turn:
    """A stored conversation: a prompt, a reply that called `add`, the tool's result(s), and the answer."""

    def __init__(self, store: ConversationStore, *results: tuple[str, bool]) -> None:
        self.store = store
        turn = store.begin_turn(
            None, prompt="What is 2 + 40?", after=None, system_prompt=None, reply=PROVENANCE
        )
        self.conversation_id = turn.conversation_id
        self.reply_id = turn.reply.id
        call = PartInput("tool_call", "add", text=ARGUMENTS, call_id="c4ll0aaaa")
        store.finish_message(
            self.reply_id, content="Let me add.", status=MessageStatus.COMPLETE, tool_calls=[call]
        )
        after = self.reply_id
        self.tool_ids: list[int] = []
        for number, (text, is_error) in enumerate(results):
            tool = store.add_tool_result(
                after, call_id=f"c4ll0{number}", tool_name="add", text=text, is_error=is_error
            )
            self.tool_ids.append(tool.id)
            after = tool.id
        answer = store.begin_turn(
            self.conversation_id, prompt=None, after=after, system_prompt=None, reply=PROVENANCE
        )
        store.finish_message(answer.reply.id, content="It is 42.", status=MessageStatus.COMPLETE)

    def entries(self) -> list[TranscriptEntry]:
        return [entry_for(message) for message in self.store.list_messages(self.conversation_id)]


def _row(transcript: Transcript, message_id: int) -> MessageRow:
    row = transcript.row(message_id)
    assert row is not None
    return row


def _laid_out(row: MessageRow) -> bool:
    return row.segments is not None and not row.draining and row.exact


def _shown(transcript: Transcript, turn: _Turn, qtbot: QtBot) -> None:
    transcript.set_entries(turn.entries())
    settle_transcript(qtbot)


def test_calls_and_results_start_collapsed_to_a_header_with_a_preview(
    qtbot: QtBot, transcript: Transcript, store: ConversationStore
) -> None:
    result = "The sum is 42.\n" + "\n".join(f"detail {i}" for i in range(40))
    turn = _Turn(store, (result, False))
    _shown(transcript, turn, qtbot)
    reply, tool = _row(transcript, turn.reply_id), _row(transcript, turn.tool_ids[0])
    transcript.scroll_to_message(turn.reply_id)

    assert [card.kind for card in reply.cards] == ["call"] and [card.kind for card in tool.cards] == [
        "result"
    ]
    assert reply.text == "Let me add." and tool.text == ""
    # The text, then the card's header: its heading and the arguments compacted on one line.
    assert reply.rendered_text() == 'Let me add.\nCalled add {"a": 2, "b": 40}'
    assert reply.card_label(0) == "▸ Called add"
    shown = tool.rendered_text()
    assert shown.startswith("add returned The sum is 42. detail 0 detail 1")
    assert "detail 39" not in shown and "\n" not in shown, "a collapsed result shows more than one line"
    # Collapsed, nothing of the text is rendered: no code block, no document.
    assert reply.code_blocks() == [] and tool.code_blocks() == []
    assert reply.cards_expanded == set() and tool.cards_expanded == set()


def test_clicking_a_header_expands_its_text_as_code_and_clicking_again_collapses_it(
    qtbot: QtBot, transcript: Transcript, store: ConversationStore
) -> None:
    turn = _Turn(store, ("42", False))
    _shown(transcript, turn, qtbot)
    reply = _row(transcript, turn.reply_id)
    collapsed = reply.height

    click_in_transcript(transcript, transcript.card_rect(turn.reply_id).center())
    qtbot.waitUntil(lambda: _laid_out(reply))
    assert reply.cards_expanded == {0}
    assert reply.card_label(0) == "▾ Called add"
    assert reply.height > collapsed + 3 * transcript.fontMetrics().height()
    # The arguments indented, as a JSON code block of their own, under the header.
    assert reply.code_blocks() == [PRETTY]
    assert reply.rendered_text() == f"Let me add.\nCalled add\n{PRETTY}"
    header = transcript.card_rect(turn.reply_id)
    assert transcript.text_point(turn.reply_id, '"b": 40').y() > header.bottom()

    click_in_transcript(transcript, transcript.card_rect(turn.reply_id).center())
    assert reply.cards_expanded == set() and reply.code_blocks() == []
    assert reply.height == collapsed

    # A tool's result, the same way.
    tool = _row(transcript, turn.tool_ids[0])
    click_in_transcript(transcript, transcript.card_rect(turn.tool_ids[0]).center())
    qtbot.waitUntil(lambda: _laid_out(tool))
    assert tool.code_blocks() == ["42"]
    assert tool.rendered_text() == "add returned\n42"


def test_an_open_card_stays_open_through_rereads_resizes_and_theme_changes(
    qtbot: QtBot, transcript: Transcript, store: ConversationStore
) -> None:
    turn = _Turn(store, ("42", False))
    entries = turn.entries()
    # The branch as it was while the answer was being written: the tool's result not shown yet.
    transcript.set_entries([entry for entry in entries if entry.message_id != turn.tool_ids[0]])
    settle_transcript(qtbot)
    click_in_transcript(transcript, transcript.card_rect(turn.reply_id).center())
    reply = _row(transcript, turn.reply_id)
    qtbot.waitUntil(lambda: _laid_out(reply))
    expanded = reply.height

    # Read again once the turn ended, with the result in it: new rows, the card still open.
    transcript.sync_entries(turn.entries())
    settle_transcript(qtbot)
    reply = _row(transcript, turn.reply_id)
    assert reply.cards_expanded == {0}
    transcript.sync_entries(turn.entries())
    assert _row(transcript, turn.reply_id).cards_expanded == {0}
    # A row made anew (its text changed) keeps it open too.
    changed = [
        replace(entry, content="Adding.") if entry.message_id == turn.reply_id else entry
        for entry in turn.entries()
    ]
    transcript.sync_entries(changed)
    reply = _row(transcript, turn.reply_id)
    assert reply.text == "Adding." and reply.cards_expanded == {0}
    qtbot.waitUntil(lambda: _laid_out(reply) and reply.code_blocks() == [PRETTY])

    transcript.resize(360, 500)
    settle_transcript(qtbot)
    qtbot.waitUntil(lambda: _laid_out(reply) and reply.measured_width is not None)
    assert reply.cards_expanded == {0} and reply.code_blocks() == [PRETTY]
    assert reply.height >= expanded

    def number_colour() -> str:
        [block] = [segment for _top, segment in reply.body_segments() if segment.code_blocks]
        return block.document.find("40").charFormat().foreground().color().name()

    light = number_colour()
    transcript.set_theme(DARK)
    settle_transcript(qtbot)
    qtbot.waitUntil(lambda: _laid_out(reply))
    assert reply.cards_expanded == {0} and reply.code_blocks() == [PRETTY]
    assert number_colour() != light, "the card's text was not rendered again in the new theme"

    # The other cards stay as they were: collapsed.
    assert _row(transcript, turn.tool_ids[0]).cards_expanded == set()


def _pixels(image: QImage) -> set[int]:
    return {image.pixel(x, y) for y in range(image.height()) for x in range(image.width())}


def test_a_failed_result_is_marked_as_failed(
    qtbot: QtBot, transcript: Transcript, store: ConversationStore
) -> None:
    turn = _Turn(store, ("42", False), ("The user did not allow this call.", True))
    _shown(transcript, turn, qtbot)
    returned, failed = (_row(transcript, message_id) for message_id in turn.tool_ids)
    assert failed.cards[0].failed and not returned.cards[0].failed
    assert failed.card_label(0) == "▸ add failed"
    assert failed.rendered_text() == "add failed The user did not allow this call."

    def header(message_id: int) -> set[int]:
        rect = transcript.card_rect(message_id)
        QApplication.processEvents()
        return _pixels(transcript.viewport().grab(rect).toImage())

    error = QColor(LIGHT.error).rgb()
    assert error in header(turn.tool_ids[1]), "the failed card is not drawn in the error colour"
    assert error not in header(turn.tool_ids[0])
    click_in_transcript(transcript, transcript.action_rect(turn.tool_ids[1], "copy").center())
    assert QGuiApplication.clipboard().text() == "`add` failed\n\n```\nThe user did not allow this call.\n```"


HOSTILE = "<b>bold</b> [click](javascript:alert(1)) **strong**\n```\nstill inside\n````\n<img src='file:///etc/passwd'>"


def test_hostile_text_shows_literally_collapsed_and_expanded(
    qtbot: QtBot, transcript: Transcript, store: ConversationStore, links: list[str]
) -> None:
    turn = _Turn(store, (HOSTILE, False))
    _shown(transcript, turn, qtbot)
    tool = _row(transcript, turn.tool_ids[0])
    transcript.card_rect(turn.tool_ids[0])
    geometry = tool.geometry
    assert geometry is not None
    assert geometry.cards[0].preview.startswith("<b>bold</b> [click](javascript:alert(1)) **strong** ```")

    click_in_transcript(transcript, transcript.card_rect(turn.tool_ids[0]).center())
    qtbot.waitUntil(lambda: _laid_out(tool))
    # One code block holding all of it, fences and all: nothing closed it early, nothing became Markdown.
    assert tool.code_blocks() == [HOSTILE]
    assert tool.rendered_text() == f"add returned\n{HOSTILE}"
    for _top, segment in tool.body_segments():
        document = segment.document
        block = document.begin()
        while block.isValid():
            fragments = block.begin()
            while not fragments.atEnd():
                fragment = fragments.fragment()
                assert not fragment.charFormat().isAnchor(), f"{fragment.text()!r} became a link"
                assert not fragment.charFormat().font().bold(), f"{fragment.text()!r} became bold"
                fragments += 1
            block = block.next()
    click_in_transcript(transcript, transcript.text_point(turn.tool_ids[0], "click"))
    assert links == []
    click_in_transcript(transcript, transcript.action_rect(turn.tool_ids[0], "copy").center())
    assert QGuiApplication.clipboard().text() == f"`add` returned\n\n`````\n{HOSTILE}\n`````"


def test_a_32000_character_result_collapsed_is_one_header_tall_and_expands_a_piece_at_a_time(
    qtbot: QtBot, transcript: Transcript, store: ConversationStore
) -> None:
    huge = "\n".join(f"row {i:05d}: value" for i in range(2_000))[:32_000]
    turn = _Turn(store, ("42", False), (huge, False))
    _shown(transcript, turn, qtbot)
    small, big = (_row(transcript, message_id) for message_id in turn.tool_ids)
    transcript.card_rect(turn.tool_ids[1])
    assert big.height == small.height, "a long result made its collapsed row taller"
    collapsed = big.rendered_text()
    assert collapsed.startswith("add returned row 00000: value row 00001") and "row 01999" not in collapsed

    click_in_transcript(transcript, transcript.card_rect(turn.tool_ids[1]).center())
    # Cut into pieces, laid out where they are seen first: the click did not lay out all of it.
    assert not big.exact
    qtbot.waitUntil(lambda: _laid_out(big), timeout=30_000)
    pieces = [segment for _top, segment in big.body_segments() if segment.lazy]
    assert len(pieces) > 10
    assert big.code_blocks() == [huge]
    assert big.height > 30 * small.height
    shown = big.rendered_text()
    assert shown.startswith("add returned\nrow 00000: value\n") and shown.endswith(huge.splitlines()[-1])

    click_in_transcript(transcript, transcript.card_rect(turn.tool_ids[1]).center())
    assert big.height == small.height


def test_copy_gives_the_message_with_its_calls(
    qtbot: QtBot, transcript: Transcript, store: ConversationStore
) -> None:
    turn = _Turn(store, ("42", False))
    _shown(transcript, turn, qtbot)
    clipboard = QGuiApplication.clipboard()
    click_in_transcript(transcript, transcript.action_rect(turn.reply_id, "copy").center())
    assert clipboard.text() == f"Let me add.\n\nCalled `add`\n\n```json\n{PRETTY}\n```"
    click_in_transcript(transcript, transcript.action_rect(turn.tool_ids[0], "copy").center())
    assert clipboard.text() == "`add` returned\n\n```\n42\n```"

    # An expanded card's code block has a Copy button of its own: the arguments alone.
    click_in_transcript(transcript, transcript.card_rect(turn.reply_id).center())
    reply = _row(transcript, turn.reply_id)
    qtbot.waitUntil(lambda: _laid_out(reply))
    click_in_transcript(transcript, transcript.code_copy_rect(turn.reply_id).center())
    assert clipboard.text() == PRETTY


def test_a_search_hit_in_a_result_opens_its_card(qtbot: QtBot, gui: GuiSessions, hermetic_home: Path) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    turn = _Turn(session.services.store, ("The treasure is buried under the oak.", False))
    window.refresh_conversations()
    qtbot.waitUntil(lambda: window.conversationList.count() == 1)

    window.activateWindow()
    QTest.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.searchPanel.query.hasFocus())
    QTest.keyClicks(window.searchPanel.query, "treasure")
    qtbot.waitUntil(lambda: len(window.searchPanel.hits) == 1, timeout=3000)
    QTest.keyClick(window.searchPanel.query, Qt.Key.Key_Return)
    tool_id = turn.tool_ids[0]
    qtbot.waitUntil(lambda: window.transcript.row(tool_id) is not None, timeout=3000)
    row = _row(window.transcript, tool_id)
    assert row.cards_expanded == {0}
    qtbot.waitUntil(lambda: row.code_blocks() == ["The treasure is buried under the oak."])
    # The reply that made the call stays as it was.
    assert _row(window.transcript, turn.reply_id).cards_expanded == set()
