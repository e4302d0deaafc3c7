"""Logging for the whole app: one rotating file, a quiet stderr, secrets redacted, crashes recorded."""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import re
import sys
import threading
from io import TextIOWrapper
from types import TracebackType
from typing import IO

from app.fsutil import make_private_dir, private_opener
from app.paths import HearthPaths

ROOT_LOGGER = "hearth"
REDACTED = "[REDACTED]"
LOG_MAX_BYTES = 2 * 1024 * 1024
LOG_BACKUP_COUNT = 3
CRASH_LOG_NAME = "crash.log"

# Redacting very short values would mangle ordinary words in every log line; real tokens are long.
_MIN_SECRET_LENGTH = 6
# Hugging Face user access tokens, caught even if nobody registered them.
_HF_TOKEN_PATTERN = r"hf_[A-Za-z0-9]{20,}"

_FORMAT = "%(asctime)s %(levelname)-8s %(name)s [%(threadName)s] %(message)s"

_registry_lock = threading.Lock()
_registered: set[str] = set()
_pattern: re.Pattern[str] = re.compile(_HF_TOKEN_PATTERN)

_config_lock = threading.Lock()
_installed_handlers: list[logging.Handler] = []
# faulthandler writes to the file descriptor at crash time, so the file stays open for the process lifetime.
_crash_file: IO[str] | None = None


def register_secret(value: str) -> None:
    """Make every later log record redact `value`."""
    global _pattern
    if len(value.strip()) < _MIN_SECRET_LENGTH:
        return
    with _registry_lock:
        if value in _registered:
            return
        _registered.add(value)
        # Longest first so a secret that contains another is replaced whole.
        alternatives = [re.escape(v) for v in sorted(_registered, key=len, reverse=True)]
        _pattern = re.compile("|".join([*alternatives, _HF_TOKEN_PATTERN]))


def redact(text: str) -> str:
    return _pattern.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """Replaces registered secrets and HF-looking tokens in the message, its args and exception text.

    Attached to handlers rather than loggers: a logger's filters do not see records from its children.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            # A malformed record is the handler's to report (handleError), not the filter's.
            message = None
        if message is not None:
            cleaned = redact(message)
            if cleaned != message:
                record.msg = cleaned
                record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Logs name the user's models, files and errors: created owner-only (0600), as is each new file after a
    rollover (the rotated ones are renames, so they keep that mode)."""

    def _open(self) -> TextIOWrapper:
        # Always "a": RotatingFileHandler appends whenever it rotates, as configure_logging has it do.
        return open(self.baseFilename, "a", encoding=self.encoding, errors=self.errors, opener=private_opener)


def _private_logs_dir(paths: HearthPaths) -> None:
    # The home first: creating logs/ with parents would leave a missing home at the umask's mode.
    make_private_dir(paths.home)
    make_private_dir(paths.logs_dir)


def configure_logging(paths: HearthPaths, *, verbose: bool = False) -> None:
    """Route the "hearth" logger tree to a rotating file and stderr; calling again replaces, never adds."""
    _private_logs_dir(paths)
    formatter = logging.Formatter(_FORMAT)
    redacting = RedactingFilter()

    file_handler = _PrivateRotatingFileHandler(
        paths.log_file, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUP_COUNT, encoding="utf-8"
    )
    file_handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    stderr_handler = logging.StreamHandler(sys.stderr)
    stderr_handler.setLevel(logging.DEBUG if verbose else logging.WARNING)

    logger = logging.getLogger(ROOT_LOGGER)
    with _config_lock:
        for handler in _installed_handlers:
            logger.removeHandler(handler)
            handler.close()
        _installed_handlers.clear()
        for handler in (file_handler, stderr_handler):
            handler.setFormatter(formatter)
            handler.addFilter(redacting)
            logger.addHandler(handler)
            _installed_handlers.append(handler)
        logger.setLevel(logging.DEBUG if verbose else logging.INFO)


def install_crash_handlers(paths: HearthPaths) -> None:
    """Uncaught exceptions (any thread) go to the log; native crashes go to logs/crash.log."""
    global _crash_file
    crash_logger = logging.getLogger(f"{ROOT_LOGGER}.crash")

    def excepthook(
        exc_type: type[BaseException], exc_value: BaseException, exc_tb: TracebackType | None
    ) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc_value, exc_tb)
            return
        crash_logger.critical("Uncaught exception", exc_info=(exc_type, exc_value, exc_tb))

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        # Matches the default hook: SystemExit ends a thread quietly.
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "unknown"
        crash_logger.critical("Uncaught exception in thread %s", name, exc_info=args.exc_value)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook

    _private_logs_dir(paths)
    with _config_lock:
        previous = _crash_file
        crash_log = paths.logs_dir / CRASH_LOG_NAME
        _crash_file = open(crash_log, "a", encoding="utf-8", opener=private_opener)  # noqa: SIM115
        faulthandler.enable(file=_crash_file)
        if previous is not None:
            previous.close()
