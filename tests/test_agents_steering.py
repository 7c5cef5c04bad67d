"""Drain, promote, undrain and priorities on real agents (ADR 0011)."""

import json
import subprocess
import sys
import time

import pytest
from harness import DEFAULT, ROOT, listening, wait_until

pytestmark = pytest.mark.agents


def relayctl(agent, *args, expect=0):
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", *args, "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    assert out.returncode == expect, out.stdout + out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def serving(agent):
    """The epoch this agent's relay serves, once its port accepts connections."""
    try:
        doc = json.loads((agent.data_dir / "relay.json").read_text())
    except (OSError, ValueError):
        doc = {}
    if not listening(agent.ip, int(agent.setting("RELAY_PORT")), timeout=0.2):
        return None
    return doc.get("epoch") if doc.get("listening") else "listening"


def pool(agent):
    return json.loads((agent.data_dir / "pool.json").read_text())


def wait_pool_view(site, n=3):
    def ready():
        try:
            return all(len(pool(a)["members"]) == n for a in site.agents)
        except (OSError, ValueError, KeyError):
            return False

    wait_until(ready, 30, "every agent to see every member")


@pytest.mark.long
def test_draining_the_leader_moves_the_relay_within_2s_without_waiting_out_the_ttl(site_factory):
    site = site_factory(3, timing=DEFAULT)  # TTL 10: a TTL wait would show
    site.start()
    first = site.wait_leader(timeout=40)
    old = site.by_name(first.node)
    wait_until(lambda: serving(old) == first.epoch, 15, "the leader's relay")
    wait_pool_view(site)
    issuer = next(a for a in site.agents if a is not old)
    follower = ClientThread(site)  # a relay client attached to the old leader
    assert follower.wait_epoch(first.epoch, 15)
    doc = relayctl(issuer, "drain", first.node, "--reason", "maintenance")
    accepted = time.monotonic()  # the command is in the pool's event log now
    assert doc["code"] == "accepted"
    new = site.wait_leader(timeout=10, other_than=first.node)
    target = site.by_name(new.node)
    wait_until(lambda: serving(target) is not None, 5, "the new leader's relay")
    took = time.monotonic() - accepted
    assert new.epoch == first.epoch + 1
    assert took < 2.0, f"drain to serving took {took:.2f} s"
    assert follower.wait_epoch(new.epoch, 5), "the relay client did not move to the new leader"
    follower.stop()
    wait_until(lambda: serving(old) is None, 3, "the drained leader's relay to stop")
    # It stays out: drained members never lead.
    wait_until(lambda: "drained" in pool(target)["members"][first.node]["reasons"], 10,
               "the drained member to show as drained")  # fmt: skip
    assert site.lease().node == new.node

    # The same history on two agents' databases, though the drain was issued on a third.
    def projection(agent):
        return sorted((n, s, k, e) for n, s, k, e in _rows(agent))

    others = [a for a in site.agents if a is not issuer]
    wait_until(lambda: projection(others[0]) == projection(others[1])
               and any(k == "drain_requested" for _, _, k, _ in projection(others[0])),
               10, "identical histories")  # fmt: skip


class ClientThread:
    """A RelayClient on its own event loop thread, so the test can block freely."""

    def __init__(self, site):
        import asyncio
        import threading

        from harness import KMSN, TOKEN

        from relay.client.discovery import Discovery
        from relay.client.relay_client import RelayClient
        from relay.lease_file import lease_file

        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
        self.client = RelayClient(role="agent", kmsn=KMSN, station="S501", token=TOKEN, discovery=discovery)
        asyncio.run_coroutine_threadsafe(self.client.start(timeout=30), self.loop).result(35)

    def wait_epoch(self, epoch, timeout):
        try:
            wait_until(
                lambda: self.client.registered and self.client.epoch == epoch, timeout, f"epoch {epoch}"
            )
            return True
        except AssertionError:
            return False

    def stop(self):
        import asyncio

        asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def _rows(agent):
    import sqlite3

    db = sqlite3.connect(f"file:{agent.data_dir / 'stkrelay.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute("SELECT node, seq, kind, epoch FROM elections_electionevent").fetchall()
    finally:
        db.close()


@pytest.mark.long
def test_promote_moves_leadership_to_the_chosen_member_within_2s(site_factory):
    site = site_factory(3, timing=DEFAULT)
    site.start()
    first = site.wait_leader(timeout=40)
    wait_pool_view(site)
    target = next(a for a in site.agents if a.name != first.node)
    wait_until(lambda: pool(target)["members"][target.name]["eligible"], 20, "the target to be eligible")
    doc = relayctl(site.agents[0], "promote", target.name, "--epoch", str(first.epoch))
    accepted = time.monotonic()  # the command is in the pool's event log now
    assert doc["code"] == "accepted", doc
    wait_until(lambda: serving(target) is not None, 5, f"{target.name} to serve")
    took = time.monotonic() - accepted
    assert site.lease().epoch == first.epoch + 1
    # The target's gate opens on its members' acks (docs/design.md §15): a round trip more than the
    # lease alone; 3 s leaves a loaded runner room (bench/switchover.py measures it).
    assert took < 3.0, f"promote to serving took {took:.2f} s"
    assert site.lease().node == target.name
    # A command against an epoch that has passed is refused (exit 4).
    stale = relayctl(site.agents[0], "promote", first.node, "--epoch", str(first.epoch), expect=4)
    assert stale["code"] == "stale_epoch"


@pytest.mark.long
def test_a_drained_member_never_leads_even_alone_until_undrained(site_factory):
    site = site_factory(3)  # TTL 3
    site.start()
    first = site.wait_leader(timeout=40)
    wait_pool_view(site)
    keep = next(a for a in site.agents if a.name != first.node)
    assert relayctl(keep, "drain", keep.name)["code"] == "accepted"
    wait_until(lambda: "drained" in pool(keep)["members"][keep.name]["reasons"], 10, "the drain to take")
    for a in site.agents:
        if a is not keep:
            a.kill9()
    end = time.monotonic() + 2 * 3 + 2
    while time.monotonic() < end:
        rec = site.lease()
        assert rec is None or rec.node != keep.name, "a drained member took the lease"
        time.sleep(0.1)
    # The last eligible member... is none: undrain needs no force, and then it leads.
    dead = site.lease()  # still names a killed member: valid bytes, expired by everyone's clock
    assert relayctl(keep, "undrain", keep.name)["code"] == "accepted"
    rec = site.wait_leader(timeout=15, min_epoch=(dead.epoch if dead else 0) + 1)
    assert rec.node == keep.name


def test_a_member_with_priority_0_never_leads(site_factory):
    site = site_factory(1, timing={"LEASE_TTL": "3", "LEASE_RENEW": "1", "LEASE_POLL": "0.5",
                                   "RENEW_DEADLINE": "2", "PRIORITY": "0"})  # fmt: skip
    site.start()
    only = site.agents[0]
    wait_until(lambda: "priority 0" in only.state().get("decision", ""), 30, "the agent to say why it idles")
    assert site.lease() is None


@pytest.mark.long
def test_pause_stops_automatic_failover_until_resumed_and_relayctl_reports_the_pool(site_factory):
    site = site_factory(3)  # TTL 3
    site.start()
    first = site.wait_leader(timeout=40)
    wait_pool_view(site)
    listing = relayctl(site.agents[0], "list")
    assert listing["lease"]["node"] == first.node and set(listing["members"]) == {"S001", "S002", "S003"}
    doctor = relayctl(site.agents[0], "doctor")
    assert {c["check"]: c["ok"] for c in doctor}["lease signature"] is True
    plan = relayctl(site.agents[0], "plan", "S002")
    assert plan["epoch"] == first.epoch + 1 and any(a["verb"] == "start_relay" for a in plan["actions"])
    assert relayctl(site.agents[0], "pause", "--reason", "file server maintenance")["code"] == "accepted"
    wait_until(
        lambda: all(pool(a)["members"][a.name].get("eligible") is not None for a in site.agents), 10, "views"
    )
    wait_until(
        lambda: all(pool(a).get("paused") is True for a in site.agents), 10, "every agent to fold the pause"
    )
    site.by_name(first.node).kill9()
    end = time.monotonic() + 2 * 3 + 2  # two TTLs and more: nobody takes the dead leader's lease
    while time.monotonic() < end:
        rec = site.lease()
        assert rec is not None and rec.node == first.node, rec
        time.sleep(0.1)
    alive = next(a for a in site.agents if a.name != first.node)
    assert "paused" in alive.state().get("decision", "")
    assert relayctl(alive, "resume")["code"] == "accepted"
    new = site.wait_leader(timeout=15, min_epoch=first.epoch + 1)
    assert new.node != first.node
    history = relayctl(alive, "history", "-n", "50")
    kinds = [row["kind"] for row in history]
    assert "pause_requested" in kinds and "resume_requested" in kinds
