"""A compressed day of routine work raises no security alarm (issue 42).

Three real agents with a real webhook receiver on loopback: drains, promotes, pauses and resumes
from the CLI, and a short schemathesis run with a viewer's token (its commands are refused, 403).
Afterwards no agent has posted a `security` event, and `relayctl doctor` fails nothing on any
agent. Before issue 42 every drain posted "refused as evidence: replayed 1" (a nudge of an audit
row already read), the viewer's refused calls raised `too_many` on every agent, and doctor FAILed.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import ROOT, wait_until
from test_agents_notify import SECRET, Receiver
from test_agents_steering import pool, relayctl, wait_pool_view
from test_openapi import _manage

from elections.ports.local.webcert import CERT_NAME

pytestmark = pytest.mark.agents

QUIET = 3.0  # seconds after the day: the feed looks every 0.25 s and posts a first refusal at once


def doctor(agent):
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "doctor", "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)  # fmt: skip
    return json.loads(out.stdout)


def leader_of(site):
    return site.by_name(site.wait_leader(timeout=20).node)


def settled(site, epoch):
    """Every agent's view names the lease of `epoch` and every member eligible."""

    def ok():
        try:
            views = [pool(a) for a in site.agents]
        except (OSError, ValueError):
            return False
        return all((v.get("lease") or {}).get("epoch") == epoch and not (v.get("lease") or {}).get("released")
                   and all(m["eligible"] for m in v["members"].values()) for v in views)  # fmt: skip

    wait_until(ok, 30, f"every view on epoch {epoch} with every member eligible")


@pytest.mark.long
@pytest.mark.timeout(600)  # two rounds of commands and a schemathesis run, on a shared machine
def test_a_day_of_drains_promotes_pauses_and_a_viewers_api_scan_raises_no_security_alarm(
    site_factory, tmp_path
):
    receiver = Receiver()
    try:
        site = site_factory(3, extra={"WEBHOOK_URL": receiver.url, "WEBHOOK_SECRET": SECRET})
        site.start()
        lease = site.wait_leader(timeout=40)
        wait_pool_view(site)
        settled(site, lease.epoch)
        for _ in range(2):
            # A drain of the leader, issued on a follower, and its undrain.
            leader = leader_of(site)
            issuer = next(a for a in site.agents if a is not leader)
            assert relayctl(issuer, "drain", leader.name, "--reason", "patching")["code"] == "accepted"
            new = site.wait_leader(timeout=10, other_than=leader.name)
            assert relayctl(issuer, "undrain", leader.name)["code"] == "accepted"
            settled(site, new.epoch)
            # A promote, issued on the leader itself.
            leader = site.by_name(new.node)
            target = next(a for a in site.agents if a is not leader)
            doc = relayctl(leader, "promote", target.name, "--epoch", str(new.epoch))
            assert doc["code"] == "accepted", doc
            promoted = site.wait_leader(timeout=10, other_than=leader.name)
            settled(site, promoted.epoch)
            # A pause and a resume, issued on a third member.
            assert relayctl(site.agents[2], "pause", "--reason", "file server work")["code"] == "accepted"
            wait_until(lambda: all(pool(a).get("paused") for a in site.agents), 10, "the pause")
            assert relayctl(site.agents[2], "resume")["code"] == "accepted"
            wait_until(lambda: not any(pool(a).get("paused") for a in site.agents), 10, "the resume")
        # A viewer's schemathesis run: every command it tries is refused (403).
        scanned = site.agents[1]
        _manage(scanned, "stkuser", "add", "watcher", "--role", "viewer", stdin="a-long-pass-phrase-9\n")
        token = _manage(scanned, "stkuser", "token", "watcher")
        exe = str(Path(sys.executable).parent / "schemathesis")
        argv = [exe, "run", f"{scanned.web_url}/api/v1/openapi.json", "-H", f"Authorization: Bearer {token}",
                "--tls-verify", str(scanned.data_dir / CERT_NAME), "--max-examples", "3", "--seed", "1",
                "--no-color", "--report-dir", str(tmp_path)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert "Stateful" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]  # it ran its phases
        wait_until(lambda: receiver.events("drain_requested"), 10, "the day's events on the webhook")
        # Quiet for a while: no agent has anything to say of security.
        time.sleep(QUIET)
        security = [json.loads(b) for _, b in receiver.events("security")]
        assert not security, security
        for agent in site.agents:
            view = pool(agent)
            assert not view["refusals"].get("recent"), (agent.name, view["refusals"])
            failed = [c for c in doctor(agent) if not c["ok"]]
            assert not failed, (agent.name, failed)
    finally:
        receiver.stop()
