"""What the chat service reports, fed to the Qt-free chat session on the GUI thread."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.chat.session import ChatSession
from app.qt.chat_service import ChatService
from inference.protocol import GenerationStats


class SessionFeed(QObject):
    """The service emits from its worker thread. A receiver that is a QObject living on the GUI thread has
    each signal queued there, and its connections end when it is destroyed with its parent (the window), so
    nothing reaches a session whose widgets are gone."""

    def __init__(self, chat: ChatService, session: ChatSession, parent: QObject) -> None:
        super().__init__(parent)
        self._session = session
        chat.replyStarted.connect(self._started)
        chat.replyDelta.connect(self._delta)
        chat.replyReasoningDelta.connect(self._reasoning)
        chat.replyAnswerWasReasoning.connect(self._answer_was_reasoning)
        chat.replyContextNote.connect(self._context_note)
        chat.replyFinished.connect(self._finished)
        chat.replyFailed.connect(self._failed)
        chat.conversationsChanged.connect(self._conversations_changed)

    def _started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        self._session.reply_started(conversation_id, user_message_id, assistant_message_id)

    def _delta(self, assistant_message_id: int, text: str) -> None:
        self._session.reply_delta(assistant_message_id, text)

    def _reasoning(self, assistant_message_id: int, text: str) -> None:
        self._session.reply_reasoning(assistant_message_id, text)

    def _answer_was_reasoning(self, assistant_message_id: int) -> None:
        self._session.answer_was_reasoning(assistant_message_id)

    def _context_note(self, assistant_message_id: int, note: str) -> None:
        self._session.context_note(assistant_message_id, note)

    def _finished(self, assistant_message_id: int, stats: GenerationStats, status: str) -> None:
        self._session.reply_done(assistant_message_id, stats, status)

    def _failed(self, assistant_message_id: int, kind: str, message: str) -> None:
        self._session.reply_error(assistant_message_id, kind, message)

    def _conversations_changed(self) -> None:
        self._session.refresh_conversations()
