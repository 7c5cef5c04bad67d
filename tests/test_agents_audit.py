"""The audit history is the pool's: a drain issued through S003's API shows, with
its intent and outcome, on S001's and S002's audit history (real agents)."""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from harness import KMSN, ROOT, listening, wait_until

pytestmark = pytest.mark.agents


def web_up(agent):
    return listening(agent.ip, int(agent.setting("WEB_PORT")))


def stkuser(agent, *args, env=None):
    env = dict(os.environ, STK_INI=str(agent.ini), **(env or {}))
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "stkuser", *args],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


def operator_token(agent):
    stkuser(agent, "add", "op", "--role", "operator", env={"STK_USER_PASSWORD": "a-long-password-1"})
    return stkuser(agent, "token", "op")


def api(agent, token, path, body=None):
    req = urllib.request.Request(
        agent.web_url + "/api/v1" + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    try:
        with agent.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def pool_seen(agent, n=3):
    try:
        return len(json.loads((agent.data_dir / "pool.json").read_text())["members"]) == n
    except (OSError, ValueError, KeyError):
        return False


@pytest.mark.long
def test_a_drain_issued_on_s003_is_in_the_audit_history_of_s001_and_s002(site_factory):
    site = site_factory(3)
    site.start()
    lease = site.wait_leader(timeout=40)
    s001, s002, s003 = (site.by_name(n) for n in ("S001", "S002", "S003"))
    for agent in site.agents:
        wait_until(lambda a=agent: web_up(a) and pool_seen(a), 40, f"{agent.name}'s web and pool view")
    tokens = {a.name: operator_token(a) for a in site.agents}

    drain = {"target": lease.node, "expected_epoch": lease.epoch, "reason": "audit e2e"}
    status, doc = api(s003, tokens["S003"], f"/sites/{KMSN}/drain", drain)
    assert status == 202 and doc["result"] == "accepted", doc
    correlation = doc["correlation"]

    def drain_listed(agent):
        status, page = api(agent, tokens[agent.name], "/audit")
        assert status == 200, page
        rows = [a for a in page["actions"] if a["correlation"] == correlation]
        return rows and rows[0]["result"] == "accepted" and (rows, page)

    for agent in (s001, s002):
        rows, page = wait_until(lambda a=agent: drain_listed(a), 20, f"the drain in {agent.name}'s audit")
        (row,) = rows  # intent joined with its outcome, once
        assert (row["node"], row["user"], row["via"], row["action"], row["target"]) == (
            "S003", "op", "api", "drain", lease.node,
        )  # fmt: skip
        assert (row["reason"], row["expected_epoch"], row["epoch"]) == ("audit e2e", lease.epoch, lease.epoch)
        assert page["node"] == agent.name
        assert page["pool_chains"]["S003"] == {"ok": True, "entries": 2, "broken_at": None, "detail": None}
        assert page["chain"]["entries"] == 0  # nothing was recorded on this agent itself
    # The issuing agent shows its own rows once, from its own chain.
    _, mine = api(s003, tokens["S003"], "/audit")
    assert [(a["node"], a["correlation"]) for a in mine["actions"]] == [("S003", correlation)]
    assert mine["chain"]["entries"] == 2 and "S003" not in mine["pool_chains"]


def relayctl(agent, *args):
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", *args, "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else out.stderr


@pytest.mark.long
def test_a_drain_from_relayctl_is_audited_like_a_click_and_shows_on_another_agent(site_factory):
    import getpass
    import socket

    site = site_factory(3)
    site.start()
    lease = site.wait_leader(timeout=40)
    follower = next(a for a in site.agents if a.name != lease.node)
    other = next(a for a in site.agents if a.name not in (lease.node, follower.name))
    for agent in (follower, other):
        wait_until(lambda a=agent: web_up(a) and pool_seen(a), 40, f"{agent.name}'s web and pool view")
    token = operator_token(other)

    code, doc = relayctl(follower, "drain", other.name, "--reason", "x")
    assert code == 0 and doc["result"] == "accepted" and doc["audit_recorded"], doc

    def listed():
        status, page = api(other, token, "/audit")
        assert status == 200, page
        rows = [a for a in page["actions"] if a["correlation"] == doc["correlation"]]
        return rows and rows[0]["result"] == "accepted" and (rows, page)

    rows, page = wait_until(listed, 20, f"relayctl's drain in {other.name}'s audit")
    (row,) = rows
    assert (row["node"], row["user"], row["client"], row["via"]) == (
        follower.name, getpass.getuser(), f"cli@{socket.gethostname()}", "cli",
    )  # fmt: skip
    assert (row["action"], row["target"], row["reason"], row["epoch"]) == (
        "drain",
        other.name,
        "x",
        lease.epoch,
    )
    assert page["pool_chains"][follower.name] == {"ok": True, "entries": 2, "broken_at": None, "detail": None}
    # A refused command is audited too: draining an unknown member.
    code, refused = relayctl(follower, "drain", "S404", "--reason", "typo")
    assert code == 1 and refused["result"] == "unknown_member", refused
    rows, _ = wait_until(
        lambda: (r := [a for a in api(other, token, "/audit")[1]["actions"]
                       if a["correlation"] == refused["correlation"]]) and (r, None),
        20, "the refused drain in the audit",
    )  # fmt: skip
    assert rows[0]["result"] == "unknown_member" and rows[0]["via"] == "cli"
