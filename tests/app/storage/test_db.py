"""The database layer against real SQLite files: pragmas, migrations, backups, restores, corruption."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import textwrap
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, text

import app.storage.db as db_module
from app.conversations.store import ConversationStore
from app.doctor import database_check
from app.errors import DamagedDatabase, DatabaseError, HearthError
from app.paths import HearthPaths
from app.storage.backup import create_backup, restore_backup
from app.storage.db import Database, check_file
from app.storage.orm import SEARCH_INDEX_TABLES, Base

HEAD = ScriptDirectory.from_config(db_module._alembic_config()).get_current_head()
# The test-only revisions below come after the real head, whatever it is.
TEST_REVISION = "9001"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def db(home: Path) -> Iterator[Database]:
    database = Database.open(home / "hearth.sqlite3", home / "backups")
    yield database
    database.dispose()


def pragmas(database: Database) -> dict[str, object]:
    names = ("journal_mode", "foreign_keys", "busy_timeout", "secure_delete", "synchronous")
    with database.session() as session:
        return {name: session.execute(text(f"PRAGMA {name}")).scalar() for name in names}


EXPECTED_PRAGMAS = {
    "journal_mode": "wal",
    "foreign_keys": 1,
    "busy_timeout": 5000,
    "secure_delete": 1,
    "synchronous": 2,  # FULL
}


def raw(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def version_of(path: Path) -> str:
    return str(raw(path, "SELECT version_num FROM alembic_version")[0][0])


def populate(path: Path, backups: Path) -> tuple[int, int]:
    """A database at head holding two conversations and three messages; returns those counts."""
    database = Database.open(path, backups)
    store = ConversationStore(database)
    conversation = store.create_conversation("Populated", system_prompt="Be brief.")
    store.add_message(conversation.id, "user", "hello")
    store.add_message(conversation.id, "assistant", "hi there")
    store.add_message(conversation.id, "user", "bye")
    store.create_conversation("Empty one")
    database.dispose()
    return 2, 3


def migrations_with(tmp_path: Path, filename: str, source: str) -> Path:
    """A copy of the real migrations plus one extra, test-only revision after the head."""
    target = tmp_path / "test-migrations"
    shutil.copytree(db_module.MIGRATIONS_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    source = (
        textwrap.dedent(source).replace("{revision}", TEST_REVISION).replace("{down_revision}", str(HEAD))
    )
    (target / "versions" / filename).write_text(source)
    return target


# A real schema change of the kind that bites: rebuilding the parent table. With foreign keys on, SQLite's
# DROP TABLE inside the rebuild would cascade-delete every message.
REBUILD_PARENT = """
    import sqlalchemy as sa
    from alembic import op

    revision = "{revision}"
    down_revision = "{down_revision}"
    branch_labels = None
    depends_on = None


    def upgrade():
        # Triggers and views that name the table make SQLite refuse the rename at the end of a rebuild,
        # and the table's own triggers would go with the old table: set them aside and put them back.
        dependents = op.get_bind().exec_driver_sql(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'view') ORDER BY type DESC"
        ).fetchall()
        for kind, name, _sql in dependents:
            op.execute(f"DROP {kind.upper()} {name}")
        with op.batch_alter_table(
            "conversations", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ) as batch:
            batch.add_column(sa.Column("archived", sa.Integer(), nullable=False, server_default="0"))
        for _kind, _name, sql in reversed(dependents):
            op.execute(sql)


    def downgrade():
        with op.batch_alter_table("conversations", recreate="always") as batch:
            batch.drop_column("archived")
"""

FAILS_INSIDE_TRANSACTION = """
    from alembic import op

    revision = "{revision}"
    down_revision = "{down_revision}"
    branch_labels = None
    depends_on = None


    def upgrade():
        op.execute("DELETE FROM messages")
        op.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("simulated failure")


    def downgrade():
        pass
"""

# Some statements end the surrounding transaction on their own; after that nothing can be rolled back and
# only the backup brings the data back.
FAILS_AFTER_COMMITTING = """
    from alembic import op

    revision = "{revision}"
    down_revision = "{down_revision}"
    branch_labels = None
    depends_on = None


    def upgrade():
        bind = op.get_bind()
        bind.exec_driver_sql("DELETE FROM messages")
        bind.exec_driver_sql("COMMIT")
        bind.exec_driver_sql("DROP TABLE messages")
        raise RuntimeError("simulated failure after a commit")


    def downgrade():
        pass
"""


def test_pragmas_are_in_effect_on_every_connection(db: Database) -> None:
    assert pragmas(db) == EXPECTED_PRAGMAS
    # A second thread gets a different pooled connection; it must be set up the same way.
    seen: list[dict[str, object]] = []
    with db.session():
        worker = threading.Thread(target=lambda: seen.append(pragmas(db)))
        worker.start()
        worker.join()
    assert seen == [EXPECTED_PRAGMAS]


def test_fresh_database_is_created_at_head_without_a_backup(db: Database, home: Path) -> None:
    tables = {row[0] for row in raw(db.path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"conversations", "messages", "models", "alembic_version"} <= tables
    assert version_of(db.path) == HEAD
    assert not (home / "backups").exists()
    assert db.quick_check() == "ok"


def test_schema_created_by_migrations_matches_the_orm_models(db: Database) -> None:
    def not_search_index(name: str | None, type_: str, _parent: object) -> bool:
        # The FTS5 tables (and their shadow tables) are kept by triggers, not mapped by the ORM.
        return type_ != "table" or not any(
            name == table or (name or "").startswith(f"{table}_") for table in SEARCH_INDEX_TABLES
        )

    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_name": not_search_index})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_initial_revision_downgrades_and_upgrades_cleanly(db: Database) -> None:
    config = db_module._alembic_config()
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "base")
    assert raw(db.path, "SELECT name FROM sqlite_master WHERE name IN ('conversations', 'messages')") == []
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    assert version_of(db.path) == HEAD


def test_reopening_a_current_database_takes_no_backup(home: Path) -> None:
    populate(home / "hearth.sqlite3", home / "backups")
    Database.open(home / "hearth.sqlite3", home / "backups").dispose()
    assert not (home / "backups").exists()


def test_older_database_is_backed_up_and_verified_before_migrating(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, backups = home / "hearth.sqlite3", home / "backups"
    conversations, messages = populate(path, backups)
    monkeypatch.setattr(
        db_module, "MIGRATIONS_DIR", migrations_with(tmp_path, "9001_archived.py", REBUILD_PARENT)
    )

    database = Database.open(path, backups)
    try:
        [backup] = list(backups.iterdir())
        assert backup.name.startswith("hearth-") and backup.name.endswith(f"-pre-{TEST_REVISION}.sqlite3")
        # The backup is a complete, self-contained database at the old revision.
        assert raw(backup, "PRAGMA integrity_check") == [("ok",)]
        assert version_of(backup) == HEAD
        assert raw(backup, "SELECT count(*) FROM messages") == [(messages,)]
        assert not Path(f"{backup}-wal").exists()

        assert version_of(path) == TEST_REVISION
        assert raw(path, "SELECT count(*) FROM conversations WHERE archived = 0") == [(conversations,)]
        # Rebuilding the parent table did not cascade into its children.
        assert raw(path, "SELECT count(*) FROM messages") == [(messages,)]
        # Its search triggers came back with it.
        store = ConversationStore(database)
        store.rename_conversation(store.list_conversations()[-1].id, "Renamed after the rebuild")
        assert [hit.title for hit in store.search("rebuild")] == ["Renamed after the rebuild"]
        assert pragmas(database) == EXPECTED_PRAGMAS
        assert database.quick_check() == "ok"
    finally:
        database.dispose()


@pytest.mark.parametrize(
    "failing", [FAILS_INSIDE_TRANSACTION, FAILS_AFTER_COMMITTING], ids=["rolled-back", "committed"]
)
def test_failed_migration_restores_the_backup_and_names_it(
    failing: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, backups = home / "hearth.sqlite3", home / "backups"
    conversations, messages = populate(path, backups)
    monkeypatch.setattr(db_module, "MIGRATIONS_DIR", migrations_with(tmp_path, "9001_broken.py", failing))

    with pytest.raises(DatabaseError) as caught:
        Database.open(path, backups)

    [backup] = list(backups.iterdir())
    assert str(backup) in str(caught.value)
    assert "simulated failure" in str(caught.value)
    assert version_of(path) == HEAD
    assert raw(path, "SELECT count(*) FROM conversations") == [(conversations,)]
    assert raw(path, "SELECT count(*) FROM messages") == [(messages,)]
    assert raw(path, "SELECT name FROM sqlite_master WHERE name = 'half_done'") == []
    assert raw(path, "PRAGMA integrity_check") == [("ok",)]

    # With the broken revision gone, the restored database opens normally.
    monkeypatch.undo()
    Database.open(path, backups).dispose()


def test_database_from_a_newer_hearth_is_refused(home: Path) -> None:
    path = home / "hearth.sqlite3"
    populate(path, home / "backups")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(DatabaseError, match="newer version of Hearth"):
        Database.open(path, home / "backups")
    assert version_of(path) == "9999"
    assert not (home / "backups").exists()


def test_file_of_garbage_is_refused_and_left_untouched(home: Path) -> None:
    path = home / "hearth.sqlite3"
    home.mkdir()
    garbage = os.urandom(16384)
    path.write_bytes(garbage)
    with pytest.raises(DatabaseError, match="damaged"):
        Database.open(path, home / "backups")
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in home.iterdir()) == ["hearth.sqlite3"]


def test_damaged_page_is_refused_and_left_untouched(home: Path) -> None:
    path = home / "hearth.sqlite3"
    populate(path, home / "backups")
    page_size = raw(path, "PRAGMA page_size")[0][0]
    assert isinstance(page_size, int)
    # Overwrite the b-tree header of the messages table's root page.
    root_page = raw(path, "SELECT rootpage FROM sqlite_master WHERE name = 'messages'")[0][0]
    assert isinstance(root_page, int)
    data = bytearray(path.read_bytes())
    offset = (root_page - 1) * page_size
    data[offset : offset + 64] = b"\xee" * 64
    path.write_bytes(bytes(data))

    with pytest.raises(DatabaseError, match="damaged") as caught:
        Database.open(path, home / "backups")
    assert str(path) in str(caught.value)
    assert path.read_bytes() == bytes(data)


def test_session_commits_on_success_and_rolls_back_on_error(db: Database) -> None:
    with db.session() as session:
        session.execute(
            text("INSERT INTO conversations (title, created_at, updated_at) VALUES ('a', 'x', 'x')")
        )
    with pytest.raises(RuntimeError), db.session() as session:
        session.execute(
            text("INSERT INTO conversations (title, created_at, updated_at) VALUES ('b', 'x', 'x')")
        )
        raise RuntimeError("boom")
    assert raw(db.path, "SELECT title FROM conversations") == [("a",)]


def test_full_disk_becomes_a_database_error_and_writing_resumes_when_space_returns(db: Database) -> None:
    store = ConversationStore(db)
    conversation = store.create_conversation()

    def cap_file_size(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # SQLite reports a file that may not grow as SQLITE_FULL, the same error as a full disk.
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count={pages}")

    db.engine.dispose()
    event.listen(db.engine, "connect", cap_file_size)
    with pytest.raises(DatabaseError, match="disk is full"):
        store.add_message(conversation.id, "user", "x" * 200_000)
    assert store.list_messages(conversation.id) == []

    event.remove(db.engine, "connect", cap_file_size)
    db.engine.dispose()
    store.add_message(conversation.id, "user", "x" * 200_000)
    assert [len(m.content) for m in store.list_messages(conversation.id)] == [200_000]
    assert db.quick_check() == "ok"


def test_failed_migration_of_a_fresh_database_leaves_nothing_behind(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = home / "hearth.sqlite3"
    monkeypatch.setattr(
        db_module, "MIGRATIONS_DIR", migrations_with(tmp_path, "9001_broken.py", FAILS_INSIDE_TRANSACTION)
    )
    with pytest.raises(DatabaseError, match="simulated failure"):
        Database.open(path, home / "backups")
    # DDL ran inside the migration's transaction, so the earlier revisions' tables were rolled back with it.
    assert raw(path, "SELECT name FROM sqlite_master") == []
    assert not (home / "backups").exists()


def damage_an_index(path: Path) -> None:
    """An index that no longer matches its table: quick_check does not look, integrity_check does."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = 'CREATE INDEX ix_messages_parent_id ON messages (role)' "
            "WHERE name = 'ix_messages_parent_id'"
        )
        conn.commit()


def test_backup_that_fails_verification_stops_the_migration(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, backups = home / "hearth.sqlite3", home / "backups"
    populate(path, backups)
    damage_an_index(path)
    monkeypatch.setattr(
        db_module, "MIGRATIONS_DIR", migrations_with(tmp_path, "9001_archived.py", REBUILD_PARENT)
    )

    with pytest.raises(DatabaseError, match="failed verification"):
        Database.open(path, backups)
    assert version_of(path) == HEAD
    assert list(backups.iterdir()) == []


def test_opening_diagnosing_and_restoring_share_one_verdict(home: Path) -> None:
    paths = HearthPaths(home)
    populate(paths.db_path, paths.backups_dir)
    backup = create_backup(paths).path
    damage_an_index(paths.db_path)
    # Quick for opening and diagnosing; backups and restores look at every index too.
    assert check_file(paths.db_path) == "ok"
    assert database_check(paths)["ok"] is True
    found = check_file(paths.db_path, thorough=True)
    assert found != "ok" and "ix_messages_parent_id" in found
    with pytest.raises(HearthError, match=f"failed verification \\({re.escape(found)}\\)"):
        create_backup(paths)

    paths.db_path.write_bytes(b"not a database at all" * 100)
    assert check_file(paths.db_path) == check_file(paths.db_path, thorough=True) == "file is not a database"
    assert database_check(paths) | {"path": ""} == {
        "path": "",
        "exists": True,
        "ok": False,
        "result": "file is not a database",
    }
    with pytest.raises(DamagedDatabase, match=r"is damaged \(file is not a database\)"):
        Database.open(paths.db_path, paths.backups_dir)
    restored = restore_backup(paths, backup)
    assert restored.previous_damaged
    assert check_file(paths.db_path, thorough=True) == "ok"
