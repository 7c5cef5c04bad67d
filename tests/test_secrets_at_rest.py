"""Secrets at rest (issue 40, finding 10): an ini holding a secret that group or others may
read is said (stkrelay.W111: runagent, manage.py check, relayctl doctor); the agent runs
under umask 077 with DATA_DIR 0700, so its database (sessions, password hashes) and keys are
its user's only; the share's files keep 0644/0755, since other members must read them.
Real files, real modes, a real agent."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from harness import ROOT, wait_until

from elections.ports.share.share import LocalShare
from stkrelay.config import load

TOKEN = "k3y-of-the-site-2026-x9"


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def ini_with(tmp_path, text: str, perms: int):
    ini = tmp_path / "stk.ini"
    ini.write_text(
        f"[stk]\nKMSN = 1\nSTATION = S1\nLEASE_DIR = {tmp_path}\nDATA_DIR = {tmp_path / 'd'}\n" + text
    )
    ini.chmod(perms)
    return ini


def w111(cfg):
    return [w for w in cfg.warnings if w.id == "stkrelay.W111"]


@pytest.mark.parametrize("perms", [0o644, 0o640, 0o604])
def test_an_ini_holding_a_secret_that_others_may_read_is_said(tmp_path, perms):
    cfg = load(str(ini_with(tmp_path, f"RELAY_TOKEN = {TOKEN}\n", perms)), env={})
    (warning,) = w111(cfg)
    assert "RELAY_TOKEN" in warning.message and f"{perms:04o}" in warning.message
    assert cfg.problems == []  # a warning: existing sites keep running after the upgrade


@pytest.mark.parametrize(
    "text",
    [
        f"POOL_KEY = {TOKEN}\n",
        f"SMB_PASSWORD = {TOKEN}\n",
        f"[pool:2222-3333-44-55]\nRELAY_TOKEN = {TOKEN}\n",
    ],
)
def test_every_secret_counts_also_in_a_watched_pools_section(tmp_path, text):
    assert w111(load(str(ini_with(tmp_path, text, 0o644)), env={}))


def test_a_private_ini_or_one_without_secrets_is_not_said(tmp_path):
    assert not w111(load(str(ini_with(tmp_path, f"RELAY_TOKEN = {TOKEN}\n", 0o600)), env={}))
    assert not w111(load(str(ini_with(tmp_path, "", 0o644)), env={"STK_RELAY_TOKEN": TOKEN}))  # from env


def test_manage_py_check_shows_it_as_a_warning_with_its_id(tmp_path):
    ini = ini_with(tmp_path, f"RELAY_TOKEN = {TOKEN}\nNODE_IP = 127.0.0.41\n", 0o644)
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "STK_INI": str(ini)}, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "stkrelay.W111" in out.stdout + out.stderr and "chmod 600" in out.stdout + out.stderr


def test_the_shares_files_stay_readable_by_other_members_under_the_agents_umask(tmp_path):
    """The agent's umask is 077; the share is other machines' too: its files are 0644, its
    folders 0755, whatever the umask (a member there may be another user, over NFS or a volume)."""
    share = LocalShare(tmp_path)
    old = os.umask(0o077)
    try:
        share.replace("lease.json", b"{}")
        share.create_exclusive("lock", b"x")
        share.ensure_dir("events")
        share.append_line("events/S001.jsonl", b"{}\n")
    finally:
        os.umask(old)
    assert [mode(tmp_path / p) for p in ("lease.json", "lock", "events", "events/S001.jsonl")] == [
        0o644, 0o644, 0o755, 0o644]  # fmt: skip


def test_a_real_agent_keeps_its_data_dir_private_and_its_share_readable(site_factory):
    site = site_factory(n=1)
    agent = site.agents[0]
    agent.ini.chmod(0o644)  # as a README before this change left it
    agent.data_dir.chmod(0o755)  # as a DATA_DIR made by hand (or by an older agent)
    site.start()
    site.wait_leader(timeout=60)
    wait_until(lambda: "stkrelay.W111" in agent.log(), 10, "the W111 line in the agent's log")
    assert mode(agent.data_dir) == 0o700
    db = agent.data_dir / "stkrelay.sqlite3"
    assert mode(db) == 0o600  # sessions and password hashes
    assert mode(agent.data_dir / "web-tls.pem") == 0o600
    made = [p for p in agent.data_dir.iterdir() if p.is_file() and p.name not in ("stk.ini", "agent.log")]
    assert made and all(mode(p) & 0o077 == 0 for p in made), {p.name: oct(mode(p)) for p in made}
    doctor = subprocess.run(
        [sys.executable, "manage.py", "relayctl", "doctor", "--json"],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)},
    )
    checks = {c["check"]: c for c in json.loads(doctor.stdout)}
    assert checks["configuration"]["warn"] and "stkrelay.W111" in checks["configuration"]["detail"]
    assert "RELAY_HOST is not set" in checks["this PC's stations"]["detail"]  # the doctor says where they go
    shared = [p for p in site.lease_dir.rglob("*") if not p.name.startswith(".")]
    assert shared and all(mode(p) == (0o755 if p.is_dir() else 0o644) for p in shared), {
        str(p.relative_to(site.lease_dir)): oct(mode(p)) for p in shared}  # fmt: skip
