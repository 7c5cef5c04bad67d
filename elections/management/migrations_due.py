"""Whether the agent's database lacks a migration, read without Django (issue 41).

`runagent` used to run `migrate` on every start: Django and every model loaded into
the supervisor (~25 MiB it then kept) and a second or more on the path to the first
election, to find, nearly always, nothing to do. Here the migration files of the
installed apps (found with `importlib.util.find_spec`, which runs none of them) are
compared with the `django_migrations` table: only when one is missing, or the
database cannot be read, does the agent run `migrate` (a short child of its own).
A wrong answer can only be "due": a migration is never taken as applied unless
its (app, name) row is there.

When one is due, the children start beside that `migrate` child rather than after it
(its ~1-4 s and their start-up overlap, issue 41); the two that use the database
(web, the lease worker) wait for it first (`wait_migrated`). The wait is on an `flock`
of DATA_DIR itself (`migrating_lock`), taken by the supervisor and handed to the
`migrate` child as an open descriptor: the kernel lets go of it when that child ends,
however it ends, and no file is added to DATA_DIR for it.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
from pathlib import Path

from stkhost.locks import held_for_child, wait_unheld

MIGRATING = "STK_MIGRATING"  # "1" in a child's environment: a migrate child may still run


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


def applied_migrations(db: Path) -> set[tuple[str, str]] | None:
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
    done = applied_migrations(db)
    if done is None:
        return True
    return any(not migration_names(app) <= done for app in apps)


def migrating_lock(data_dir: str | os.PathLike[str]) -> int:
    """A descriptor of DATA_DIR, locked exclusively: pass it to the `migrate` child
    (`pass_fds`) and close it here; the lock then lasts as long as that child."""
    return held_for_child(data_dir)


def wait_migrated(data_dir: str | os.PathLike[str]) -> None:
    """In a child that uses the database: return once no `migrate` child of this agent
    runs any more (at once unless `MIGRATING` is in the environment). A migration that
    failed is the supervisor's to say; it then stops every child."""
    if os.environ.get(MIGRATING) == "1":
        wait_unheld(data_dir)
