"""The SQLite database: one engine, per-connection pragmas, migrations behind a verified backup."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool, Pool, QueuePool

from app.errors import DamagedDatabase, DatabaseError
from app.fsutil import create_private_file, make_private_dir, tighten

log = logging.getLogger("hearth.db")

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
BUSY_TIMEOUT_MS = 5000
# What an integrity check reports at most: the first problems say that the file is damaged, and how.
MAX_FINDINGS = 10
# Files SQLite keeps next to a database; it creates them with the database file's own mode.
SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")

# Execution option read by the "begin" listener: which kind of BEGIN a connection's transactions use.
_BEGIN_OPTION = "hearth_begin"

_FRIENDLY_ERRORS = {
    sqlite3.SQLITE_FULL: "the disk is full; free up some space",
    sqlite3.SQLITE_IOERR: "the disk reported a read or write error",
    sqlite3.SQLITE_BUSY: "the database is in use by another program (is Hearth already running?)",
    sqlite3.SQLITE_READONLY: "the database file is read-only",
    sqlite3.SQLITE_CANTOPEN: "the database file cannot be opened",
    sqlite3.SQLITE_CORRUPT: "the database file is damaged",
    sqlite3.SQLITE_NOTADB: "the file is not a SQLite database",
}


class Database:
    """One SQLAlchemy engine over one SQLite file. Create it with `Database.open`.

    Safe to share between threads: each session checks out its own pooled connection. Never share a
    Session between threads.
    """

    def __init__(self, path: Path, engine: Engine, *, read_only: bool = False) -> None:
        self.path = path
        self.engine = engine
        self.read_only = read_only
        # Writers take the write lock at BEGIN. A deferred transaction that reads and then writes fails
        # immediately with SQLITE_BUSY (the busy timeout cannot help) if another connection committed
        # in between; with IMMEDIATE it waits its turn instead.
        self._write_sessions = sessionmaker(
            engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"}), expire_on_commit=False
        )
        self._read_sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, path: Path, backups_dir: Path) -> Database:
        """Check, migrate and open the database at `path`, creating it if it does not exist.

        Raises DamagedDatabase when the existing file fails `PRAGMA quick_check` (the file is left as it
        is; `open_read_only` can still read it), DatabaseError when it belongs to a newer Hearth, or
        when a migration fails (the database is restored from the backup taken just before, and the
        message names that backup).
        """
        path = Path(path).resolve()
        try:
            make_private_dir(path.parent)
        except OSError as exc:
            raise DatabaseError(f"Cannot create the folder {path.parent}: {exc.strerror or exc}.") from exc
        with _user_readable_errors(path):
            if path.exists():
                verdict = check_file(path)
                if verdict != "ok":
                    raise DamagedDatabase(
                        f"The conversation database {path} is damaged ({verdict}). Hearth has not changed "
                        f"it. Export what can still be read (`hearth conversations export --all`), or "
                        f"restore a backup from {backups_dir} (`hearth restore PATH`)."
                    )
            _keep_private(path)
            _migrate(path, Path(backups_dir))
            return cls(path, _create_engine(path, foreign_keys=True, poolclass=QueuePool))

    @classmethod
    def open_read_only(cls, path: Path) -> Database:
        """Open an existing file for reading only, unchecked and unmigrated: for salvaging a damaged one.

        SQLite itself refuses every write on these connections, so nothing can change the file.
        """
        path = Path(path).resolve()
        if not path.is_file():
            raise DatabaseError(f"The conversation database {path} does not exist.")
        uri = f"{path.as_uri()}?mode=ro"

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.isolation_level = None
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only=ON")
            return conn

        engine = create_engine("sqlite+pysqlite://", creator=connect, poolclass=QueuePool)
        event.listen(engine, "begin", _begin)
        return cls(path, engine, read_only=True)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        if self.read_only:
            raise DatabaseError(
                f"The conversation database {self.path} is damaged and open read-only: nothing can be "
                "changed. Export your conversations, or restore a backup."
            )
        with _user_readable_errors(self.path), self._write_sessions.begin() as session:
            yield session

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A consistent read-only snapshot that never waits for a writer; rolled back at the end."""
        with _user_readable_errors(self.path), self._read_sessions() as session:
            yield session

    def quick_check(self) -> str:
        """Return "ok", or what SQLite found wrong with the file."""
        try:
            return check_file(self.path)
        except sqlite3.DatabaseError as exc:
            return str(exc)

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it to zero bytes.

        Deleted text would otherwise linger in old WAL frames (secure_delete only covers the main
        file). Returns False when a long-running reader kept the WAL from being truncated.
        """
        with _user_readable_errors(self.path), closing(self.engine.raw_connection()) as raw:
            # Straight on the driver connection: a checkpoint cannot run inside a transaction, and a
            # SQLAlchemy connection would begin one first.
            cursor = raw.cursor()
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            result = cursor.fetchone()
            cursor.close()
        # The first column is 1 when a reader kept the checkpoint from finishing.
        truncated = result is not None and result[0] == 0
        if not truncated:
            log.warning(
                "a reader blocked the WAL checkpoint of %s; deleted text stays until the next one", self.path
            )
        return truncated

    def dispose(self) -> None:
        self.engine.dispose()


def _create_engine(path: Path, *, foreign_keys: bool, poolclass: type[Pool]) -> Engine:
    engine = create_engine(
        URL.create("sqlite+pysqlite", database=str(path)),
        # Pooled connections move between threads; each session holds one connection at a time.
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        poolclass=poolclass,
    )

    def configure(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # The driver's implicit BEGIN skips SELECTs and DDL, which leaves reads unrepeatable and
        # migrations non-transactional; the "begin" listener below emits BEGIN itself instead.
        dbapi_connection.isolation_level = None
        mode = dbapi_connection.execute("PRAGMA journal_mode=WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            raise DatabaseError(f"SQLite could not switch {path} to write-ahead logging (mode {mode}).")
        # Only migrations turn foreign keys off: rebuilding a parent table would cascade-delete children.
        dbapi_connection.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        dbapi_connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # Deleted text is overwritten with zeros instead of lingering in free pages.
        dbapi_connection.execute("PRAGMA secure_delete=ON")
        # In WAL mode, NORMAL may lose the last commits on power loss; FULL does not.
        dbapi_connection.execute("PRAGMA synchronous=FULL")

    event.listen(engine, "connect", configure)
    event.listen(engine, "begin", _begin)
    return engine


def _begin(conn: Connection) -> None:
    conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get(_BEGIN_OPTION, 'DEFERRED')}")


def integrity(conn: sqlite3.Connection, *, thorough: bool = False) -> str:
    """Return "ok", or what SQLite found wrong with the database (its first MAX_FINDINGS problems).

    `quick_check` by default; `thorough` runs `integrity_check`, which also checks every index against its
    table (slower: for backups, which are trusted only once it passes). Raises sqlite3.DatabaseError when
    the file cannot be read as a database at all.
    """
    pragma = "integrity_check" if thorough else "quick_check"
    messages = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}({MAX_FINDINGS})")]
    return "ok" if messages == ["ok"] else "; ".join(messages)


def check_file(path: Path, *, thorough: bool = False) -> str:
    """`integrity` of the database at `path`, read-only: a damaged file must not be written to, not even by
    the WAL checkpoint SQLite runs when a read-write connection closes.

    A file SQLite finds damaged or not a database at all gets that as its verdict; raises sqlite3.Error
    when the file cannot be checked (it cannot be opened, or it is locked).
    """
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)) as conn:
            return integrity(conn, thorough=thorough)
    except sqlite3.DatabaseError as exc:
        if _primary_code(exc) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return str(exc)
        raise


def _primary_code(exc: BaseException | None) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _user_readable(exc: BaseException | None, path: Path) -> DatabaseError | None:
    reason = _FRIENDLY_ERRORS.get(_primary_code(exc) or -1)
    if reason is None:
        return None
    return DatabaseError(f"Could not use the conversation database {path}: {reason} ({exc}).")


@contextmanager
def _user_readable_errors(path: Path) -> Iterator[None]:
    """Turn SQLite failures a user can act on (disk full, I/O error, locked…) into DatabaseError."""
    try:
        yield
    except DBAPIError as exc:
        translated = _user_readable(exc.orig, path)
        if translated is None:
            raise
        raise translated from exc
    except sqlite3.Error as exc:
        translated = _user_readable(exc, path)
        if translated is None:
            raise
        raise translated from exc


def _keep_private(path: Path) -> None:
    """Create the database file owner-only before SQLite does (SQLite would use 0644, and its -wal and -shm
    files copy the database's mode), and tighten one an older Hearth created readable to others."""
    if not path.exists():
        try:
            create_private_file(path)
        except OSError as exc:
            raise DatabaseError(
                f"Cannot create the conversation database {path}: {exc.strerror or exc}."
            ) from exc
    for suffix in ("", *SIDE_FILE_SUFFIXES):
        tighten(Path(f"{path}{suffix}"))


def _alembic_config() -> Config:
    config = Config()
    # Option values go through configparser interpolation, where "%" is special.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return config


def _migrate(path: Path, backups_dir: Path) -> None:
    config = _alembic_config()
    scripts = ScriptDirectory.from_config(config)
    head = scripts.get_current_head()
    assert head is not None, "app/storage/migrations has no revisions"
    engine = _create_engine(path, foreign_keys=False, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            has_schema = conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar_one() > 0
        if current == head:
            return
        if current is not None and current not in {script.revision for script in scripts.walk_revisions()}:
            raise DatabaseError(
                f"The conversation database {path} was written by a newer version of Hearth "
                f"(schema {current}). Update Hearth to open it."
            )
        backup = _backup(path, backups_dir, target=head) if has_schema else None
        try:
            with engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"}).begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, "head")
                _check_foreign_keys(conn)
        except Exception as exc:
            cause = str(exc.orig) if isinstance(exc, DBAPIError) else str(exc)
            if backup is None:
                raise DatabaseError(f"Could not create the conversation database {path}: {cause}") from exc
            try:
                _restore(backup, path)
            except sqlite3.Error as restore_exc:
                raise DatabaseError(
                    f"Updating the conversation database {path} failed ({cause}), and so did restoring it "
                    f"({restore_exc}). Your conversations are safe in the backup {backup}."
                ) from exc
            raise DatabaseError(
                f"Updating the conversation database {path} failed ({cause}). It was restored from the "
                f"backup {backup}, which has been kept."
            ) from exc
        log.info("migrated %s from %s to %s", path, current or "empty", head)
    finally:
        engine.dispose()


def _check_foreign_keys(conn: Connection) -> None:
    # Migrations run with foreign keys off, so nothing else would notice rows left pointing nowhere.
    problems = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if problems:
        raise DatabaseError(
            f"the migration left {len(problems)} row(s) referring to missing rows "
            f"(first: {tuple(problems[0])})"
        )


def backup_name(reason: str) -> str:
    """A backup file name that sorts by time: hearth-<UTC time>-<reason>.sqlite3."""
    now = datetime.now(UTC)
    return f"hearth-{now:%Y%m%dT%H%M%S}.{now:%f}Z-{reason}.sqlite3"


def copy_verified(source: Path, destination: Path) -> str:
    """Copy a database with SQLite's online backup API (consistent even while it is being written, WAL
    included) into a self-contained file, owner-only like the database, and return the copy's thorough
    `integrity` verdict."""
    create_private_file(destination)
    with (
        closing(sqlite3.connect(source, timeout=BUSY_TIMEOUT_MS / 1000)) as original,
        closing(sqlite3.connect(destination)) as copy,
    ):
        original.backup(copy)
        # A self-contained file, with no -wal or -shm next to it.
        copy.execute("PRAGMA journal_mode=DELETE")
        return integrity(copy, thorough=True)


def known_revisions() -> tuple[str, frozenset[str]]:
    """The schema revision this Hearth creates, and every revision it can migrate from."""
    scripts = ScriptDirectory.from_config(_alembic_config())
    head = scripts.get_current_head()
    assert head is not None, "app/storage/migrations has no revisions"
    return head, frozenset(script.revision for script in scripts.walk_revisions())


def _backup(path: Path, backups_dir: Path, *, target: str) -> Path:
    """Copy the live database with SQLite's online backup API and verify the copy before trusting it."""
    destination = backups_dir / backup_name(f"pre-{target}")
    try:
        make_private_dir(backups_dir)
        verdict = copy_verified(path, destination)
    except OSError as exc:
        destination.unlink(missing_ok=True)
        raise DatabaseError(
            f"Could not back up the conversation database into {backups_dir} before updating it "
            f"({exc.strerror or exc}); the database was not changed."
        ) from exc
    except BaseException:
        destination.unlink(missing_ok=True)
        raise
    if verdict != "ok":
        destination.unlink(missing_ok=True)
        raise DatabaseError(
            f"The backup of {path} taken before updating it failed verification ({verdict}); "
            f"the database was not changed."
        )
    log.info("backed up %s to %s before migrating to %s", path, destination, target)
    return destination


def _restore(backup: Path, path: Path) -> None:
    with (
        closing(sqlite3.connect(backup)) as source,
        closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)) as target,
    ):
        source.backup(target)
    log.warning("restored %s from %s after a failed migration", path, backup)
