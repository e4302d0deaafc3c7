"""Logging: secrets redacted everywhere a record can carry them, handlers installed once, crashes recorded."""

from __future__ import annotations

import logging
import logging.handlers
import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.logging_setup import (
    LOG_BACKUP_COUNT,
    LOG_MAX_BYTES,
    REDACTED,
    RedactingFilter,
    configure_logging,
    register_secret,
)
from app.paths import HearthPaths

REPO_ROOT = Path(__file__).resolve().parents[2]


def fresh_token() -> str:
    # Unique per test: the registry is process-wide, so a shared value could hide a missed redaction.
    return f"tok-{secrets.token_hex(12)}"


@pytest.fixture
def paths(tmp_path: Path) -> HearthPaths:
    return HearthPaths(tmp_path / "home")


def read_log(paths: HearthPaths) -> str:
    for handler in logging.getLogger("hearth").handlers:
        handler.flush()
    return paths.log_file.read_text(encoding="utf-8")


def test_registered_secret_is_redacted_in_message_args_and_exception(
    paths: HearthPaths, hearth_logger: logging.Logger
) -> None:
    token = fresh_token()
    configure_logging(paths)
    register_secret(token)
    log = logging.getLogger("hearth.test")

    log.info(f"inline {token}")
    log.info("as an argument: %s", token)
    log.info("inside a mapping: %(value)s", {"value": token})
    try:
        raise ValueError(f"the backend echoed {token}")
    except ValueError:
        log.exception("while storing")

    text = read_log(paths)
    assert token not in text
    assert text.count(REDACTED) == 4
    assert f"ValueError: the backend echoed {REDACTED}" in text


def test_unregistered_hf_token_pattern_is_redacted(paths: HearthPaths, hearth_logger: logging.Logger) -> None:
    token = "hf_" + secrets.token_hex(15)
    configure_logging(paths)

    logging.getLogger("hearth.test").warning("header Authorization: Bearer %s", token)

    text = read_log(paths)
    assert token not in text
    assert f"Bearer {REDACTED}" in text


def test_short_values_are_not_registered() -> None:
    register_secret("abc")
    record = logging.LogRecord("hearth.t", logging.INFO, __file__, 1, "abc abcdef", None, None)

    RedactingFilter().filter(record)

    assert record.getMessage() == "abc abcdef"


def test_filter_redacts_stack_info_and_keeps_clean_records_untouched() -> None:
    token = fresh_token()
    register_secret(token)
    args = ("plain",)
    clean = logging.LogRecord("hearth.t", logging.INFO, __file__, 1, "value %s", args, None)
    dirty = logging.LogRecord(
        "hearth.t", logging.INFO, __file__, 1, "value", None, None, sinfo=f"Stack {token}"
    )

    RedactingFilter().filter(clean)
    RedactingFilter().filter(dirty)

    assert (clean.msg, clean.args) == ("value %s", args)
    assert dirty.stack_info == f"Stack {REDACTED}"


def test_malformed_record_is_left_for_the_handler_to_report() -> None:
    record = logging.LogRecord("hearth.t", logging.INFO, __file__, 1, "%d items", ("many",), None)

    assert RedactingFilter().filter(record) is True
    assert record.msg == "%d items"


def test_configure_twice_does_not_duplicate_handlers(
    paths: HearthPaths, hearth_logger: logging.Logger, tmp_path: Path
) -> None:
    before = len(hearth_logger.handlers)
    configure_logging(paths)
    configure_logging(paths, verbose=True)
    other = HearthPaths(tmp_path / "other")
    configure_logging(other)

    assert len(hearth_logger.handlers) == before + 2
    logging.getLogger("hearth.test").warning("once")
    assert read_log(other).count("once") == 1
    assert "once" not in paths.log_file.read_text(encoding="utf-8")


def test_file_rotates_at_2_mb_keeping_3(paths: HearthPaths, hearth_logger: logging.Logger) -> None:
    configure_logging(paths)

    (rotating,) = [h for h in hearth_logger.handlers if isinstance(h, logging.handlers.RotatingFileHandler)]
    assert Path(rotating.baseFilename) == paths.log_file
    assert (
        (rotating.maxBytes, rotating.backupCount) == (LOG_MAX_BYTES, LOG_BACKUP_COUNT) == (2 * 1024 * 1024, 3)
    )


@pytest.mark.parametrize("verbose", [False, True])
def test_stderr_is_quiet_unless_verbose(
    paths: HearthPaths, hearth_logger: logging.Logger, capsys: pytest.CaptureFixture[str], verbose: bool
) -> None:
    configure_logging(paths, verbose=verbose)
    log = logging.getLogger("hearth.test")

    log.debug("debug line")
    log.info("info line")
    log.warning("warning line")

    err = capsys.readouterr().err
    assert "warning line" in err
    assert ("debug line" in err) is verbose
    assert ("info line" in err) is verbose
    file_text = read_log(paths)
    assert "info line" in file_text
    assert ("debug line" in file_text) is verbose


def run_python(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(home)],
        cwd=home.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_uncaught_exceptions_in_main_and_worker_threads_reach_the_log(tmp_path: Path) -> None:
    token = fresh_token()
    home = tmp_path / "home"
    script = f"""
        import sys, threading
        from pathlib import Path
        from app.logging_setup import configure_logging, install_crash_handlers, register_secret
        from app.paths import HearthPaths

        paths = HearthPaths(Path(sys.argv[1])).ensure()
        configure_logging(paths)
        install_crash_handlers(paths)
        register_secret({token!r})

        def work():
            raise RuntimeError("worker saw {token}")

        thread = threading.Thread(target=work, name="download-worker")
        thread.start()
        thread.join()
        raise KeyError("main saw {token}")
    """

    result = run_python(script, home)

    assert result.returncode == 1
    log_text = (home / "logs" / "hearth.log").read_text(encoding="utf-8")
    assert "Uncaught exception in thread download-worker" in log_text
    assert f"RuntimeError: worker saw {REDACTED}" in log_text
    assert "Uncaught exception\n" in log_text
    assert f"KeyError: 'main saw {REDACTED}'" in log_text
    assert token not in log_text
    assert token not in result.stderr
    assert "Uncaught exception" in result.stderr


def test_native_crash_is_written_to_crash_log(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = """
        import faulthandler, sys
        from pathlib import Path
        from app.logging_setup import install_crash_handlers
        from app.paths import HearthPaths

        install_crash_handlers(HearthPaths(Path(sys.argv[1])))
        install_crash_handlers(HearthPaths(Path(sys.argv[1])))
        faulthandler._sigsegv()
    """

    result = run_python(script, home)

    assert result.returncode != 0
    crash_text = (home / "logs" / "crash.log").read_text(encoding="utf-8")
    assert "Fatal Python error: Segmentation fault" in crash_text
    assert crash_text.count("Fatal Python error") == 1


def test_the_hearth_entry_point_records_thread_exceptions_and_native_crashes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = """
        import ctypes, sys, threading
        from app.__main__ import main

        assert main(["conversations", "list", "--home", sys.argv[1]]) == 0

        def work():
            raise RuntimeError("a worker of the hearth process failed")

        thread = threading.Thread(target=work, name="hearth-worker")
        thread.start()
        thread.join()
        ctypes.string_at(0)
    """

    result = run_python(script, home)

    assert result.returncode != 0
    log_text = (home / "logs" / "hearth.log").read_text(encoding="utf-8")
    assert "Uncaught exception in thread hearth-worker" in log_text
    assert "RuntimeError: a worker of the hearth process failed" in log_text
    crash_text = (home / "logs" / "crash.log").read_text(encoding="utf-8")
    assert "Fatal Python error: Segmentation fault" in crash_text
    assert "in string_at" in crash_text


def test_a_native_crash_in_the_runner_leaves_the_stacks_next_to_the_runner_log(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    script = """
        import ctypes, sys, threading
        from multiprocessing import Pipe
        from inference.runner import runner_main

        parent, child = Pipe()
        # A thread of the runner segfaults while its main thread waits for a request.
        threading.Timer(1.0, ctypes.string_at, (0,)).start()
        runner_main(child, sys.argv[1] + "/runner.log")
    """

    result = run_python(script, logs)

    assert result.returncode == -11
    crash_text = (logs / "runner-crash.log").read_text(encoding="utf-8")
    assert "Fatal Python error: Segmentation fault" in crash_text
    assert "in string_at" in crash_text
    assert "in runner_main" in crash_text, "every thread's stack, the one waiting for requests too"
    assert (logs / "runner-crash.log").stat().st_mode & 0o777 == 0o600
    # The runner log's last error line stays llama.cpp's, which the client quotes to the user.
    assert "Fatal Python error" not in (logs / "runner.log").read_text(encoding="utf-8")
