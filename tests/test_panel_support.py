"""Shared set-up for the panel/API/audit tests: Django configured once per test
process against temporary STK_* dirs and a migrated temporary SQLite database,
each test in a transaction rolled back at its end; pool views written the way
the agent's worker writes them. (No pytest-django: plain fixtures.)

The STK_* variables are set only while Django reads its settings and restored
right after, so agent processes started by other tests never inherit them.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

KMSN = "9999-9999-99-99"
TOKEN = "panel-test-token-0123456789"
PASSWORD = "correct-horse-battery"
_configured: dict[str, Path] = {}


def django_env() -> dict[str, Path]:
    """Configure Django (once per process) and migrate a fresh database."""
    if _configured:
        return _configured
    root = Path(tempfile.mkdtemp(prefix="stk-panel-"))
    lease_dir = root / "share" / "socket"
    lease_dir.mkdir(parents=True)
    data_dir = root / "S001"
    data_dir.mkdir()
    env = {
        "DJANGO_SETTINGS_MODULE": "stkrelay.settings",
        "STK_KMSN": KMSN,
        "STK_STATION": "S001",
        "STK_NODE_IP": "127.0.0.1",
        "STK_RELAY_TOKEN": TOKEN,
        "STK_LEASE_DIR": str(lease_dir),
        "STK_DATA_DIR": str(data_dir),
        "STK_LEASE_TTL": "3",
        "STK_LEASE_RENEW": "1",
        "STK_LEASE_POLL": "0.5",
        "STK_RENEW_DEADLINE": "2",
        "STK_WEB_ALLOWED_HOSTS": "testserver",  # the Host header of Django's test client
        # Room for the tests' own failed logins; test_login_throttle.py sets the global bucket it tests.
        "STK_WEB_LOGIN_BURST": "100",
    }
    saved = {k: os.environ.get(k) for k in [*env, "STK_INI", "STK_PUBLIC_LEADER_LOOKUP"]}
    try:
        os.environ.pop("STK_INI", None)
        os.environ.pop("STK_PUBLIC_LEADER_LOOKUP", None)
        os.environ.update(env)
        import django

        django.setup()
        from django.conf import settings

        settings.STK.kmsn  # noqa: B018 - read now, while the environment is ours
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from elections.web.auth import ensure_roles

    ensure_roles()
    _configured.update(root=root, lease_dir=lease_dir, data_dir=data_dir)
    return _configured


@pytest.fixture
def dj():
    """Django ready; this test's database changes are rolled back afterwards."""
    paths = django_env()
    from django.db import transaction

    from elections.web import throttle
    from elections.web.panel import failovers, relay_state, state

    throttle.reset()
    failovers._cache.clear()
    state._lease_seen.clear()
    relay_state._relay_samples.clear()
    for name in ("pool.json", "leadership.json", "relay.json", "stations.json", "door.json", "entry.json"):
        (paths["data_dir"] / name).unlink(missing_ok=True)
    for path in (paths["lease_dir"]).glob("**/*"):
        if path.is_file():
            path.unlink()
    atomic = transaction.atomic()
    atomic.__enter__()
    try:
        yield paths
    finally:
        transaction.set_rollback(True)
        atomic.__exit__(None, None, None)


@functools.lru_cache(maxsize=8)
def _hashed(password: str) -> str:
    from django.contrib.auth.hashers import make_password

    return make_password(password)


def make_user(name: str, role: str | None = "viewer", password: str = PASSWORD):  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user(username=name, password=None)
    user.password = _hashed(password)  # the production hasher costs seconds on a loaded machine:
    user.save(update_fields=["password"])  # once per password, not once per user
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


def client_for(user=None, csrf: bool = False, **kw: Any):  # type: ignore[no-untyped-def]
    from django.test import Client

    c = Client(enforce_csrf_checks=csrf, **kw)
    if user is not None:
        c.force_login(user)
    return c


def member(
    eligible: bool = True,
    reasons: list[str] | None = None,
    age: float = 0.4,
    priority: int = 50,
    drain: bool = False,
    ip: str = "127.0.0.21",
    epoch: int = 7,
) -> dict[str, Any]:
    return {
        "eligible": eligible,
        "reasons": reasons or [],
        "age": age,
        "priority": priority,
        "ip": ip,
        "drain": drain,
        "health": "ok",
        "version": "0.1.0",
        "epoch": epoch,
    }


def write_pool(
    data_dir: Path,
    leader: str | None = "S001",
    epoch: int = 7,
    members: dict[str, Any] | None = None,
    renew_seq: int = 12,
    released: bool = False,
    status: str = "valid",
    updated: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """DATA_DIR/pool.json as the agent's worker writes it (monotonic `updated`)."""
    if members is None:
        members = {f"S00{i}": member(ip=f"127.0.0.2{i}") for i in (1, 2, 3)}
    lease = None
    if leader is not None and status == "valid":
        lease = {
            "node": leader,
            "epoch": epoch,
            "ip": members.get(leader, {}).get("ip", "127.0.0.21"),
            "port": 9530,
            "renew_seq": renew_seq,
            "ttl_s": 0 if released else 3,
            "released": released,
            "handoff_to": None,
        }
    doc = {
        "kmsn": KMSN,
        "node": "S001",
        "updated": time.monotonic() if updated is None else updated,
        "lease": lease,
        "lease_status": status,
        "lease_detail": "",
        "store_reachable": True,
        "members": members,
        "decision": "renew: lease held",
        **extra,
    }
    (data_dir / "pool.json").write_text(json.dumps(doc))
    return doc


def write_relay(data_dir: Path, snapshot: dict[str, Any], epoch: int = 7) -> None:
    """DATA_DIR/relay.json as a serving relay of this very process writes it."""
    doc = {
        "pid": os.getpid(),
        "epoch": epoch,
        "listening": True,
        "updated": time.monotonic(),
        "snapshot": snapshot,
    }
    (data_dir / "relay.json").write_text(json.dumps(doc))


def write_leading(data_dir: Path, epoch: int = 7) -> None:
    """leadership.json saying this agent (S001) leads `epoch` for the next minute."""
    doc = {
        "node": "S001",
        "pid": os.getpid(),
        "leader": True,
        "epoch": epoch,
        "max_epoch": epoch,
        "valid_until": time.monotonic() + 60,
        "updated": time.monotonic(),
        "decision": "renew",
    }
    (data_dir / "leadership.json").write_text(json.dumps(doc))


def event(node: str, seq: int, kind: str, epoch: int, at, reason: str = "", **detail: Any):  # type: ignore[no-untyped-def]
    from elections.models import ElectionEvent

    return ElectionEvent.objects.create(
        kmsn=KMSN, node=node, seq=seq, epoch=epoch, kind=kind, reason=reason, observed_at=at, detail=detail
    )


# -- tests of the set-up itself ---------------------------------------------------------
def test_the_migrations_cover_the_audit_models(dj):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    try:
        call_command("makemigrations", "elections", "--check", "--dry-run", "-v", "3", stdout=out)
    except SystemExit:
        pass  # other models' pending changes are not this test's business
    pending = out.getvalue().lower()
    for model in ("auditentry", "apitoken", "loginfailure"):
        assert f"model_name='{model}'" not in pending and f"name='{model}'" not in pending, pending


def test_the_roles_carry_their_permissions(dj):
    from django.contrib.auth.models import Group

    assert set(Group.objects.get(name="operator").permissions.values_list("codename", flat=True)) == {
        "drain_member",
        "promote_member",
    }
    assert not Group.objects.get(name="viewer").permissions.exists()
