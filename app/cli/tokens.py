"""`hearth token`: the Hugging Face token, or a mirror's own, in the system keyring. (Not `token.py`, which
would shadow the standard library's module of that name.)"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import TYPE_CHECKING, TextIO

from app.cli.arguments import Subcommands
from app.cli.errors import EXIT_OK
from app.errors import HearthError

if TYPE_CHECKING:
    from app.library.hub import EndpointToken


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    token = sub.add_parser(
        "token",
        parents=[common],
        help="the Hugging Face token (sent to https://huggingface.co only), or with --endpoint URL a "
        "mirror's own token; kept in the system keyring, never sent over plain http",
    )
    token_sub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    token_sub.add_parser("set", parents=[common], help="read a token from standard input and store it")
    token_sub.add_parser("clear", parents=[common], help="remove the stored token")
    token_sub.add_parser("status", parents=[common], help="whether a token is stored, and where")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.library.hub import PUBLIC_ENDPOINT, EndpointToken

    # Without --endpoint this is the Hugging Face token, whatever the hf_endpoint setting or HF_ENDPOINT say.
    token = EndpointToken(getattr(args, "endpoint", None) or PUBLIC_ENDPOINT)
    label = "Token" if token.public else f"Token for {token.origin}"
    action = args.token_command
    if action == "set":
        return _cmd_set(token, label, out, err)
    if action == "clear":
        return _cmd_clear(token, label, out)
    return _cmd_status(token, label, out)


def _read_token(err: TextIO) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass("Hugging Face token (input hidden): ", stream=err)
    return sys.stdin.readline() if sys.stdin is not None else ""


def _cmd_set(token: EndpointToken, label: str, out: TextIO, err: TextIO) -> int:
    from app.library.hub import is_public_hub

    refusal = token.refusal()
    if refusal is not None:
        # Said before the token is asked for, so nobody pastes one for nothing.
        raise HearthError(refusal)
    result = token.set(_read_token(err))
    if not result.persisted:
        raise HearthError(f"the token was not saved: {result.reason}")
    if token.public:
        out.write("Token saved in the system keyring; it is sent to https://huggingface.co only.\n")
        configured = os.environ.get("HF_ENDPOINT", "").strip()
        if configured.startswith(("http://", "https://")) and not is_public_hub(configured):
            err.write(
                f"note: HF_ENDPOINT is {configured}, which gets its own token: "
                f"`hearth token set --endpoint {configured}`.\n"
            )
    else:
        out.write(f"{label} saved in the system keyring; it is sent to that origin only.\n")
    return EXIT_OK


def _cmd_clear(token: EndpointToken, label: str, out: TextIO) -> int:
    result = token.clear()
    if not result.persisted:
        raise HearthError(result.reason)
    out.write(f"{label} removed.\n")
    return EXIT_OK


def _cmd_status(token: EndpointToken, label: str, out: TextIO) -> int:
    if token.refusal() is not None:
        out.write(f"{label}: none; Hearth never sends a token over plain http.\n")
        return EXIT_OK
    status = token.status()
    if status.present:
        where = "the system keyring" if status.persisted else "memory only"
        out.write(f"{label}: set (in {where}; keyring backend {status.backend})\n")
    else:
        out.write(f"{label}: not set (keyring backend {status.backend})\n")
    if status.reason:
        out.write(f"Keyring: {status.reason}\n")
    return EXIT_OK
