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


class DatabaseError(HearthError):
    pass
