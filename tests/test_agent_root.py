"""The agent's supervisor carries only its job (issue 41): no Django, migrations checked
without it, its one translated warning read from the compiled catalogue."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from harness import ROOT

from elections.management.agent_root import _translator
from elections.management.migrations_due import due, migration_names

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


HEAVY = ("celery", "kombu", "channels", "daphne", "twisted", "cryptography")
PROBE = f"""
import sys
import stkrelay.settings
import elections.management.agent_root
import elections.runtime.supervisor, elections.ports.redis_link, elections.ports.liveness_port
import elections.runtime.agent, elections.runtime.lease_writes, elections.ports.stores
print(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r}
             or m.startswith(("django.db", "django.conf", "django.apps"))))
"""


def test_the_supervisor_s_imports_load_no_django_and_no_celery(tmp_path):
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
