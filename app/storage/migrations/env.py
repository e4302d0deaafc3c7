"""Alembic environment for Hearth.

Migrations run only from app.storage.db.Database.open, which hands over an open connection (foreign keys off,
inside a write transaction) in config.attributes["connection"]; there is no alembic.ini and no URL here.
"""

from __future__ import annotations

from alembic import context

from app.storage.orm import Base


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None or context.is_offline_mode():
        raise RuntimeError("Hearth's migrations run from app.storage.db.Database.open with a live connection")
    # render_as_batch: SQLite can alter little in place, so table changes become copy-and-rename.
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
