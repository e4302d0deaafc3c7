"""`hearth serve`: a model over an OpenAI-compatible API on 127.0.0.1 until Ctrl+C."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, NoReturn, TextIO

from app.cli.arguments import Subcommands, _port
from app.cli.engine import chat_engine
from app.core import Core
from app.errors import HearthError

if TYPE_CHECKING:
    from app.local_api.api_keys import AcceptedKeys, CreatedKey


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
    from app.local_api.api_keys import ApiKeys
    from app.local_api.server import LocalServer

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
        keys = ApiKeys(core.paths.home)
        accepted = keys.accepted()
        port = core.settings.local_server_port if args.port is None else args.port
        # Its runner starts at the first embeddings request; core.close() stops it.
        with LocalServer(engine, keys=accepted, port=port, embedder=core.embedder()) as server:
            # Made once the port is ours: a key shown only once must not be made by a start that failed.
            # The running server takes it at once.
            created = keys.ensure_default()
            err.write(f"Serving {name} at {server.url} (OpenAI-compatible; Ctrl+C stops)\n")
            tell_keys(created, accepted, err)
            err.flush()
            while True:
                # time.sleep, unlike a wait on a lock, is interrupted by Ctrl+C on every platform.
                time.sleep(3600)
    finally:
        engine.close()


def tell_keys(created: CreatedKey | None, accepted: AcceptedKeys, err: TextIO) -> None:
    """Which keys this server takes. A key is shown only when it is made: here, the first time."""
    if created is not None:
        # Outside the window, the one place this key is shown; it never goes to a log.
        err.write(f"API key: {created.secret}\n")
        if created.reason:
            err.write("The system keyring could not keep the key: it works until this server stops.\n")
        else:
            err.write(
                f"It is the key named {created.info.name}, shown only now; `hearth api-keys` makes more "
                "and revokes them.\n"
            )
    elif accepted.names:
        err.write(f"API keys accepted: {', '.join(accepted.names)} (`hearth api-keys list` lists them)\n")
    else:
        err.write(
            "No API key is accepted yet: `hearth api-keys create NAME` makes one, and this server takes it "
            "at once.\n"
        )
    for name, why in accepted.unavailable.items():
        err.write(f"The API key {name} is refused for now: {why}\n")
