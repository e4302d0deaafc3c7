"""Errors a user can cause and fix. The CLI prints their message on one line and exits 3."""

from __future__ import annotations


class HearthError(Exception):
    """A failure with a message meant for the user, not a traceback."""


class ModelNotFound(HearthError):
    pass


class InvalidModelFile(HearthError):
    pass


class ConversationNotFound(HearthError):
    pass


class MessageNotFound(HearthError):
    pass


class ContextOverflow(HearthError):
    """The conversation does not fit the model's context and the overflow policy says not to cut it."""


class DatabaseError(HearthError):
    pass


class DamagedDatabase(DatabaseError):
    """The database failed its check at start-up and was left as it is; it can still be opened read-only."""


class NoModelLoaded(HearthError):
    """Something needs the loaded model (the local API server) and the runner has none."""


class ReplyNotSaved(HearthError):
    """A reply finished but its final state could not be written (a full disk): the prompt and what was
    flushed while streaming are stored, and the rest is written as soon as the database can be."""

    def __init__(self, message: str, assistant_message_id: int) -> None:
        super().__init__(message)
        self.assistant_message_id = assistant_message_id
