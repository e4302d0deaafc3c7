"""The SQLite database: engine and pragmas, the ORM tables, Alembic migrations, backups.

Owns the schema and every write path's transaction rules. Imports nothing from the rest of app/ but
paths, errors and fsutil."""
