"""What every subcommand's parser shares: the global options and the argument types."""

from __future__ import annotations

import argparse
from typing import TypeAlias

# What `add_subparsers` returns; each noun's module adds its parsers to it.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def common_options() -> argparse.ArgumentParser:
    """The options accepted before and after the subcommand; SUPPRESS keeps one given early from being reset
    by the subcommand's parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--home",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="data directory (default: $HEARTH_HOME or the platform's data directory)",
    )
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    common.add_argument(
        "--endpoint",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="Hugging Face Hub or mirror (default: the hf_endpoint setting, $HF_ENDPOINT, huggingface.co)",
    )
    return common


# argparse puts a type's name in its error message ("invalid _port value: 'x'"), so renaming one of these
# changes what the user reads.


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be from 0 to 65535")
    return value
