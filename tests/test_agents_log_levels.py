"""Steady state at DEBUG, changes at INFO (issue 23.6), on a real 3-agent site in JSON logs:
once the pool has settled (a leader, every member seen, the leader's relay up, every
panel answering), several renewals, lease polls, beacons and heartbeats go by without a
single line at INFO or above from any process of any agent (worker, beat, web, relay,
the supervisor). A follower used to log "the lease changed" at every poll."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from harness import DEFAULT, FAST, KMSN, TOKEN, wait_until

from relay.client.discovery import Discovery
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file

pytestmark = pytest.mark.agents

RENEWALS = 3  # renewals the window spans, and at least two LEASE_TTLs of polls

# (timing, beacons): the packaged defaults with beacons (a quiet follower, the "every 3 s"),
# and FAST lease-only (every follower reads the lease at every LEASE_POLL, 0.5 s).
CASES = {"default-beacons": (DEFAULT, {}), "fast-lease-only": (FAST, {"BEACON_INTERVAL": "0"})}


def pool_view(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def lines_between(agent, offset: int, end: int) -> list[dict]:
    with open(agent.log_path, "rb") as fh:
        fh.seek(max(offset - 1, 0))
        raw = fh.read(end - offset + 1)
    if offset and not raw.startswith(b"\n"):  # the window opened inside a line: it is not the window's
        raw = raw[raw.find(b"\n") :]
    text = raw[: raw.rfind(b"\n") + 1].decode("utf-8", "replace")  # and a line cut at its end is not either
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"level": "unparsed", "message": line})
    return out


def settled(site, leader: str) -> bool:
    for agent in site.agents:
        view = pool_view(agent)
        lease = view.get("lease") or {}
        members = view.get("members") or {}
        if lease.get("node") != leader or set(members) != {a.name for a in site.agents}:
            return False
        if not all(m.get("eligible") for m in members.values()):
            return False
    relay = site.by_name(leader).data_dir / "relay.json"
    try:
        return json.loads(relay.read_text()).get("listening") is True
    except (OSError, ValueError):
        return False


def relay_client(site, role, station):
    discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
    return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=discovery, keepalive=1.0)


@pytest.mark.long
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_settled_pool_logs_nothing_at_info_through_renewals_and_polls(site_factory, case):
    """`default-beacons` has two relay clients connected through the window (keepalives every
    second, the relay runner and its sessions in their steady state)."""
    timing, extra = CASES[case]
    site = site_factory(3, timing=timing, extra={"LOG_FORMAT": "json", **extra})
    site.start()
    lease = site.wait_leader(timeout=40)
    wait_until(lambda: settled(site, lease.node), 30, "the pool settled")
    for agent in site.agents:  # every panel answers: the web processes are up and said so
        wait_until(lambda a=agent: a.urlopen("/healthz").status == 200, 30, f"{agent.name}'s panel")
    ttl = float(timing["LEASE_TTL"])

    async def window():
        clients = [relay_client(site, "commander", "C01"), relay_client(site, "agent", "S101")]
        clients = clients if case == "default-beacons" else []
        for c in clients:
            await c.start(timeout=15)
        # Their arrival is a change, logged at INFO before the window opens: each session's join on
        # the relay, and the leader recording each station seen with the site token (its bindings
        # learn it from relay.json at its next cycle, up to a LEASE_RENEW later).
        leader = site.by_name(lease.node)
        until = time.monotonic() + 30
        while not all(f"recorded station_seen for {c.station}" in leader.log() for c in clients):
            assert time.monotonic() < until, "the leader never recorded the clients' stations"
            await asyncio.sleep(0.1)
        offsets = {a.name: a.log_path.stat().st_size for a in site.agents}
        seq = site.lease().renew_seq
        started = time.monotonic()
        while (site.lease() or lease).renew_seq < seq + RENEWALS or time.monotonic() - started < 2 * ttl:
            assert time.monotonic() - started < 4 * ttl + 10, (
                f"{RENEWALS} renewals and two lease TTLs of polls"
            )
            assert all(c.registered for c in clients), "a client dropped during the window"
            await asyncio.sleep(0.05)
        ends = {a.name: a.log_path.stat().st_size for a in site.agents}  # before the clients leave
        for c in clients:
            await c.close()
        return offsets, ends

    offsets, ends = asyncio.run(window())
    now = site.lease()
    assert (now.node, now.epoch) == (lease.node, lease.epoch), "the pool did not stay settled"
    loud = {
        a.name: [d for d in lines_between(a, offsets[a.name], ends[a.name]) if d.get("level") != "debug"]
        for a in site.agents
    }
    assert not any(loud.values()), json.dumps(loud, indent=1)[:6000]
