"""The Hugging Face token: in the OS keyring through app.secret_store, and nowhere else.

Never `huggingface_hub.login()` (it writes the token to a file) and never HF_TOKEN: HubClient gets the
token passed explicitly, and without one it sends none.
"""

from __future__ import annotations

from typing import Final

from app.errors import HearthError
from app.secret_store import SecretResult, SecretStatus, SecretStore

TOKEN_NAME: Final = "huggingface-token"
MAX_TOKEN_CHARS: Final = 1024


def check_token_text(value: str) -> str:
    """The token as typed or piped, trimmed; it goes into an HTTP header, so printable ASCII only."""
    token = value.strip()
    if not token:
        raise HearthError("No token was given: paste it on standard input.")
    if len(token) > MAX_TOKEN_CHARS or not all("!" <= c <= "~" for c in token):
        # Never echo the value: it may be a real token with a stray character.
        raise HearthError("That does not look like a Hugging Face token (printable characters, no spaces).")
    return token


class HubToken:
    def __init__(self, secrets: SecretStore | None = None) -> None:
        self._secrets = secrets if secrets is not None else SecretStore()

    def get(self) -> str | None:
        return self._secrets.get(TOKEN_NAME).value

    def set(self, value: str) -> SecretResult:
        return self._secrets.set(TOKEN_NAME, check_token_text(value))

    def clear(self) -> SecretResult:
        return self._secrets.delete(TOKEN_NAME)

    def status(self) -> SecretStatus:
        return self._secrets.status_of(TOKEN_NAME)
