"""One real agent watching its own pool and two other pools (other shares, other
keys; docs/design.md §11), the other pools simulated by writers of validly signed
records (tests/poolsim.py). The API shows all three with the right leaders and
epochs; a forged record in a watched pool is refused with that pool's key; a
watched share that hangs (FUSE, tests/faultyfs.py) or is renamed away shows as
unreachable and never stops the agent's own renewals."""

from __future__ import annotations

import time

import pytest
from harness import KMSN, wait_until
from poolsim import SimPool, Ticker, pool_section
from test_agents_audit import api, operator_token, web_up
from test_agents_share_hang import (
    _answers_fast,
    faulty_share,  # noqa: F401 - the fixture, used below
)

from elections.core.lease import signature_ok
from elections.ports.events.eventlog import read_events

pytestmark = pytest.mark.agents

A, B = "1111-1111-11-11", "2222-2222-22-22"
KEY_A, KEY_B = "site-a-key-0123456789abc", "site-b-key-9876543210xyz"


class ShareOf:
    """What the FUSE fixture mounts over: `lease_dir.parent`."""

    def __init__(self, lease_dir):  # type: ignore[no-untyped-def]
        self.lease_dir = lease_dir


def sites_of(agent, token):  # type: ignore[no-untyped-def]
    status, doc = api(agent, token, "/sites")
    return {s["kmsn"]: s for s in doc.get("sites", [])} if status == 200 else {}


def own_renewals(site) -> int:  # type: ignore[no-untyped-def]
    lease = site.lease()
    return lease.renew_seq if lease is not None else -1


@pytest.mark.long
def test_an_agent_shows_its_pool_and_two_watched_pools_and_keeps_renewing_when_one_hangs(
    site_factory,
    faulty_share,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    site = site_factory(1)
    # Pool A on a plain directory; pool B behind a FUSE share that can hang. B's
    # simulated agents write to the backing directory: only this agent's view hangs.
    a = SimPool(tmp_path / "a" / "socket", A, KEY_A, members=3)
    b_share = tmp_path / "b" / "share" / "socket"
    b_share.mkdir(parents=True)
    control = faulty_share(ShareOf(b_share))
    b = SimPool(b_share.parent.with_name("backing") / "socket", B, KEY_B, members=3)
    a.elect("S001")
    a.elect("S003", reason="lease expired")
    b.elect("S002")
    tick_a, tick_b = Ticker(a), Ticker(b)
    agent = site.agents[0]
    with open(agent.ini, "a") as fh:
        fh.write(pool_section(A, a.dir, KEY_A, NODE="OFFICE1"))
        fh.write(pool_section(B, b_share, KEY_B, NODE="OFFICE1", SHARE_TIMEOUT="0.5"))
    try:
        site.start()
        own = site.wait_leader(30)
        wait_until(lambda: web_up(agent), 30, "the agent's panel")
        token = operator_token(agent)
        want = {KMSN: ("S001", own.epoch), A: ("S003", 2), B: ("S002", 1)}
        wait_until(
            lambda: {k: (s["leader"], s["epoch"]) for k, s in sites_of(agent, token).items()} == want,
            30, "the three pools with their leaders and epochs",
        )  # fmt: skip
        watched = sites_of(agent, token)
        assert (watched[A]["watched"], watched[B]["watched"], watched[KMSN]["watched"]) == (True, True, False)
        assert watched[A]["members_total"] == 3 and watched[A]["leader_changes_24h"] == 2
        status, history = api(agent, token, f"/history?kmsn={A}&period=all")
        assert status == 200 and [f["to"] for f in history["failovers"]] == ["S003", "S001"]
        # Never contends there: no lock, no heartbeat of its own.
        assert not (a.dir / "relay_leader.lock").exists()
        assert not (a.dir / "members" / "OFFICE1.json").exists()

        # A drain in a watched pool: that pool's command event, signed with that pool's key.
        status, outcome = api(agent, token, f"/sites/{A}/drain", {"target": "S002", "expected_epoch": 2})
        assert status == 202, outcome
        (line,) = read_events(a.dir / "events" / "OFFICE1.jsonl")
        assert line["kind"] == "drain_requested" and signature_ok(line, KEY_A)

        # A forged lease and event line in A are refused with A's key: the leader stays
        # (A's agents pause, so that no renewal replaces the forgery before a look).
        tick_a.stop()
        a.forge_lease("S666", epoch=99)
        a.forge_event("S001", target="S003")
        wait_until(lambda: sites_of(agent, token)[A]["security_alarm"], 15, "the forgery refused in A")
        assert (sites_of(agent, token)[A]["leader"], sites_of(agent, token)[A]["epoch"]) == ("S003", 2)

        # B's share hangs and A's directory is renamed away: both unreachable, own renewals go on.
        before = own_renewals(site)
        (control / "hang").touch()
        a.dir.rename(a.dir.with_name("socket.away"))
        started = time.monotonic()
        wait_until(lambda: not sites_of(agent, token)[B]["store_reachable"], 20, "B unreachable")
        wait_until(lambda: not sites_of(agent, token)[A]["store_reachable"], 20, "A unreachable")
        leader_all_along, slowest = True, 0.0
        while time.monotonic() - started < 6:
            leader_all_along &= bool(agent.state().get("leader"))
            slowest = max(slowest, _answers_fast(agent, "/"), _answers_fast(agent, "/login/"))
            time.sleep(0.2)
        after = own_renewals(site)
        assert leader_all_along, "the agent stopped leading its own pool while a watched share hung"
        assert slowest < 2.0, f"a page took {slowest:.2f} s while a watched share hung"
        assert after - before >= 4, f"own renewals {before} -> {after} in {time.monotonic() - started:.1f} s"
        now = sites_of(agent, token)
        assert now[KMSN]["leader"] == "S001" and now[B]["alarms"][:2] == ["no_leader", "unreachable"]

        (control / "hang").unlink()
        wait_until(lambda: sites_of(agent, token)[B]["leader"] == "S002", 20, "B back")
        assert "Traceback" not in agent.log()
    finally:
        tick_a.stop()
        tick_b.stop()
        (control / "hang").unlink(missing_ok=True)


@pytest.mark.long
def test_a_watched_share_flooded_with_huge_and_many_files_never_delays_own_renewals_or_pages(
    site_factory, tmp_path
):
    import json

    site = site_factory(1)
    a = SimPool(tmp_path / "a" / "socket", A, KEY_A, members=3)
    a.elect("S002")
    tick = Ticker(a)
    agent = site.agents[0]
    with open(agent.ini, "a") as fh:
        fh.write(pool_section(A, a.dir, KEY_A, NODE="OFFICE1"))
    try:
        site.start()
        site.wait_leader(30)
        wait_until(lambda: web_up(agent), 30, "the agent's panel")
        token = operator_token(agent)
        wait_until(lambda: sites_of(agent, token).get(A, {}).get("leader") == "S002", 30, "the watched pool")
        # Whoever can write pool A's share: 20,000 member files, a 64 MiB member file,
        # 500 event files, and 40 MB of event lines not signed with A's key.
        for i in range(20_000):
            (a.dir / "members" / f"N{i:05d}.json").write_bytes(b"{}")
        with open(a.dir / "members" / "S009.json", "wb") as fh:
            fh.truncate(64 << 20)
        for i in range(500):
            (a.dir / "events" / f"J{i:03d}.jsonl").write_bytes(b'{"node": "J", "seq": 1}\n')
        line = json.dumps({"node": "S003", "seq": 1, "kind": "drain_requested", "sig": "00" * 32,
                           "pad": "x" * 900}).encode() + b"\n"  # fmt: skip
        with open(a.dir / "events" / "S003.jsonl", "ab") as fh:
            fh.write(line * (40_000_000 // len(line)))
        before, started, slowest, leading = own_renewals(site), time.monotonic(), 0.0, True
        while time.monotonic() - started < 10:
            t0 = time.monotonic()
            status, _ = api(agent, token, "/sites")
            slowest = max(
                slowest, time.monotonic() - t0, _answers_fast(agent, "/"), _answers_fast(agent, "/login/")
            )
            assert status == 200
            leading &= bool(agent.state().get("leader"))
            time.sleep(0.2)
        took, after = time.monotonic() - started, own_renewals(site)
        assert leading, "the agent stopped leading its own pool while a watched share was flooded"
        assert after - before >= took / 1.0 - 3, (
            f"own renewals {before} -> {after} in {took:.1f} s (LEASE_RENEW 1 s)"
        )
        assert slowest < 2.0, f"a page took {slowest:.2f} s while a watched share was flooded"
        wait_until(lambda: sites_of(agent, token)[A]["security_alarm"], 20, "the flood refused and shown")
        assert sites_of(agent, token)[A]["leader"] == "S002"  # the real records still read through it
        assert "Traceback" not in agent.log()
    finally:
        tick.stop()
