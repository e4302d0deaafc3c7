"""Test-only: put on PYTHONPATH by tests/reliability/test_privacy.py so that every Python process the app
starts (the model runner) records its socket activity to the file named by HEARTH_TEST_AUDIT_LOG."""

from __future__ import annotations

import os
import socket
import sys

_LOG = os.environ.get("HEARTH_TEST_AUDIT_LOG")
_EVENTS = frozenset({"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"})


def _describe(event: str, args: tuple[object, ...]) -> str:
    if event in ("socket.connect", "socket.sendto"):
        sock, address = args[0], args[1]
        family = getattr(sock, "family", None)
        return f"{event} {socket.AddressFamily(family).name if family is not None else '?'} {address!r}"
    return f"{event} {args[:2]!r}"


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event in _EVENTS and _LOG:
        with open(_LOG, "a", encoding="utf-8") as log:  # noqa: PTH123
            log.write(f"{os.getpid()} {_describe(event, args)}\n")


if _LOG:
    with open(_LOG, "a", encoding="utf-8") as started:  # noqa: PTH123
        started.write(f"{os.getpid()} hook installed in {sys.argv[:1]!r}\n")
    sys.addaudithook(_hook)
