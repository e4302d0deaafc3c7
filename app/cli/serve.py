"""`hearth serve`: a model over an OpenAI-compatible API on 127.0.0.1 until Ctrl+C."""

from __future__ import annotations

import argparse
import time
from typing import NoReturn, TextIO

from app.cli.arguments import Subcommands, _port
from app.cli.engine import chat_engine
from app.core import Core
from app.errors import HearthError


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="serve a model over an OpenAI-compatible API on 127.0.0.1 until Ctrl+C",
    )
    serve.add_argument(
        "--port",
        type=_port,
        metavar="N",
        help="port on 127.0.0.1 (default: the local_server_port setting, 8765; 0: any free port)",
    )
    serve.add_argument("--model", help="installed model name (default: the one the window loads at start)")


def run(core: Core, args: argparse.Namespace, err: TextIO) -> NoReturn:
    """Load the model, serve it until Ctrl+C (KeyboardInterrupt: exit 130), then shut the runner down."""
    from app.local_api.server import LocalServer, get_or_create_api_key
    from app.secret_store import SecretStore

    engine = chat_engine(core)
    try:
        name = args.model
        if name is None:
            name, why = engine.model_to_autoload()
            if name is None:
                raise HearthError(f"{why} Name a model with --model.")
        core.library.get(name)  # an unknown name is one line on stderr, before anything else is said
        err.write(f"Loading {name}…\n")
        err.flush()
        engine.prepare(name)
        key = get_or_create_api_key(SecretStore())
        assert key.value is not None
        port = core.settings.local_server_port if args.port is None else args.port
        with LocalServer(engine, key.value, port=port) as server:
            err.write(f"Serving {name} at {server.url} (OpenAI-compatible; Ctrl+C stops)\n")
            # The one place outside the window where the key is shown; it never goes to a log.
            err.write(f"API key: {key.value}\n")
            if not key.persisted:
                err.write("The system keyring could not keep the key: it works until this server stops.\n")
            err.flush()
            while True:
                # time.sleep, unlike a wait on a lock, is interrupted by Ctrl+C on every platform.
                time.sleep(3600)
    finally:
        engine.close()
