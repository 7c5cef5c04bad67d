"""Whether the agent's database lacks a migration, read without Django (issue 41).

`runagent` used to run `migrate` on every start: Django and every model loaded into
the supervisor (~25 MiB it then kept) and a second or more on the path to the first
election, to find, nearly always, nothing to do. Here the migration files of the
installed apps (found with `importlib.util.find_spec`, which runs none of them) are
compared with the `django_migrations` table: only when one is missing, or the
database cannot be read, does the agent run `migrate` (a short child of its own).
A wrong answer can only be "due": a migration is never taken as applied unless
its (app, name) row is there.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path


def migration_names(app: str) -> set[tuple[str, str]]:
    """(app label, migration name) of every migration file of the installed app `app`."""
    spec = importlib.util.find_spec(app)
    if spec is None or not spec.submodule_search_locations:
        return set()
    label = app.rsplit(".", 1)[-1]
    names = set()
    for folder in spec.submodule_search_locations:
        for path in (Path(folder) / "migrations").glob("*.py"):
            if not path.name.startswith("_"):
                names.add((label, path.stem))
    return names


def applied(db: Path) -> set[tuple[str, str]] | None:
    """The (app, name) rows of `django_migrations`, or None if the database cannot be read."""
    if not db.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return {(a, n) for a, n in conn.execute("SELECT app, name FROM django_migrations")}
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def due(db: Path, apps: list[str]) -> bool:
    """True unless every migration file of `apps` is recorded as applied in `db`."""
    done = applied(db)
    if done is None:
        return True
    return any(not migration_names(app) <= done for app in apps)
