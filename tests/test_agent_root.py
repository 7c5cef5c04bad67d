"""The agent's supervisor carries only its job (issue 41): no Django, migrations checked
without it, its one translated warning read from the compiled catalogue."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness import ROOT

from elections.management.agent_root import _translator
from elections.management.migrations_due import MIGRATING, due, migrating_lock, migration_names, wait_migrated

APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
        "django.contrib.messages", "channels", "elections", "relay"]  # fmt: skip


def _db(path: Path, rows: set[tuple[str, str]]) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE django_migrations (id INTEGER PRIMARY KEY, app TEXT, name TEXT, applied TEXT)")
    conn.executemany("INSERT INTO django_migrations (app, name, applied) VALUES (?, ?, '')", sorted(rows))
    conn.commit()
    conn.close()
    return path


def test_migrations_are_due_unless_every_file_of_every_app_is_recorded(tmp_path):
    every = set().union(*(migration_names(app) for app in APPS))
    assert ("elections", "0001_initial") in every and ("auth", "0001_initial") in every
    assert not any(name.startswith("_") for _, name in every)  # __init__ is no migration
    assert due(tmp_path / "absent.sqlite3", APPS)  # a first start
    assert not due(_db(tmp_path / "all.sqlite3", every), APPS)
    newest = max(n for a, n in every if a == "elections")
    assert due(_db(tmp_path / "one_less.sqlite3", every - {("elections", newest)}), APPS)  # an upgrade
    (tmp_path / "junk.sqlite3").write_bytes(b"not a database")
    assert due(tmp_path / "junk.sqlite3", APPS)  # unreadable: let Django's migrate say why


HEAVY = ("celery", "kombu", "channels", "daphne", "twisted", "cryptography", "asyncio")
ALSO = ("http.client", "elections.runtime.agent")  # the config's pins, the agent's wiring
PROBE = f"""
import sys
import stkrelay.settings
import elections.management.agent_root
import elections.runtime.supervisor, elections.ports.local.redis_link, elections.ports.beacons.liveness_port
import elections.runtime.lease_writes, elections.ports.store.stores, elections.ports.beacons.beacon_config
print(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r} or m in {ALSO!r}
             or m.startswith(("django.db", "django.conf", "django.apps"))))
"""


def test_the_supervisor_s_imports_load_no_django_no_celery_and_no_asyncio(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(tmp_path / "absent.ini"), "STK_SKIP_DIR_CHECKS": "1"}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_supervisor_s_warning_speaks_the_ini_s_language_without_django():
    said = "run the agent as the folder's owner, or chmod 700 it"
    assert (
        _translator([ROOT / "locale"], "zh-hant")(said)
        == "以該資料夾的擁有者執行代理程式，或對它執行 chmod 700"
    )
    assert _translator([ROOT / "locale"], "en")(said) == said


def test_children_wait_for_the_migrate_child_however_it_ends(tmp_path, monkeypatch):
    """The lock is the migrate child's once the supervisor closed its own descriptor: a waiter
    is held while that child runs, and let go when it ends (here by SIGKILL: no clean exit)."""
    lock = migrating_lock(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(lock,))
    os.close(lock)
    monkeypatch.setenv(MIGRATING, "1")
    waited = threading.Thread(target=wait_migrated, args=(tmp_path,), daemon=True)
    waited.start()
    waited.join(0.5)
    assert waited.is_alive()  # held while the child runs
    child.kill()
    child.wait()
    waited.join(10)
    assert not waited.is_alive()
    monkeypatch.delenv(MIGRATING)
    lock = migrating_lock(tmp_path)  # held by this very process now: no MIGRATING, no wait
    try:
        began = time.monotonic()
        wait_migrated(tmp_path)
        assert time.monotonic() - began < 1.0
    finally:
        os.close(lock)
