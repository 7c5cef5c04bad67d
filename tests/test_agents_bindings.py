"""Stations bound to their credentials on a real 3-agent site (`elections.core.stations`).

Real agents (`runagent`, the standby relay), the real share, real relay
clients: a station that registered once with its credential is bound
pool-wide (every agent's stations.json); a token-only impostor is refused
``bad_auth`` on the leader and, after a kill -9 of the leader, on the new one,
where it is counted (relay.json) and raised as an ``impersonation`` security
event (pool.json, /metrics); the real station receives every message the
commander sends; `relayctl unbind` on a follower lets the token in again;
forged and unsigned ``station_bound`` lines on the share are ignored and counted.
"""

import asyncio
import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from harness import KMSN, ROOT, TOKEN, listening, wait_until

from elections.core.lease import sign
from elections.ports.local.localstate import LocalState
from relay.client.discovery import Discovery
from relay.client.events import Received, Refused
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file
from stkhost.pool_keys import station_credential

pytestmark = pytest.mark.agents


def client(site, station, role="agent", credential=""):
    discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
    return RelayClient(role=role, kmsn=KMSN, station=station, token="" if credential else TOKEN,
                       credential=credential, discovery=discovery, keepalive=1.0)  # fmt: skip


def relayctl(agent, *args):
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", *args, "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else out.stderr


def scrape(agent) -> str:
    """The agent's /metrics, from loopback (allowed without a token)."""
    with agent.urlopen("/metrics", timeout=10) as answer:
        return answer.read().decode()


def bound_on(agent) -> frozenset:
    return LocalState(agent.data_dir).stations().bound


async def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out after {timeout} s waiting for {what}"
        await asyncio.sleep(0.1)


async def refused(site, station) -> str:
    impostor = client(site, station)
    try:
        with pytest.raises(Refused) as why:
            await impostor.start(timeout=20)
        return why.value.code
    finally:
        await impostor.close()


def refusal_count(agent, cause: str) -> int:
    counts = LocalState(agent.data_dir).pool().refusals.get("counts") or {}
    return counts.get(cause, 0)


@pytest.mark.long
def test_a_bound_station_survives_a_leader_kill_refuses_the_token_and_a_reset_lets_it_in(site_factory):
    site = site_factory(3)  # TTL 3, renew 1, poll 0.5, deadline 2
    site.start()
    first = site.wait_leader(timeout=40)
    port = int(site.agents[0].setting("RELAY_PORT"))
    leader = site.by_name(first.node)
    wait_until(lambda: listening(leader.ip, port), 15, "the leader's relay to listen")
    key = station_credential(TOKEN, KMSN, "S201")  # POOL_KEY defaults to RELAY_TOKEN

    async def scenario():
        real = client(site, "S201", credential=key)
        await real.start(timeout=20)
        registered = time.monotonic()
        await wait_for(
            lambda: all("S201" in bound_on(a) for a in site.agents), 20, "S201 bound on every agent"
        )
        print(f"bound on every agent {time.monotonic() - registered:.2f} s after the credential registration")
        await real.close()
        assert await refused(site, "S201") == "bad_auth"

        leader.kill9()
        new = await asyncio.to_thread(site.wait_leader, 40, first.node, first.epoch + 1)
        successor = site.by_name(new.node)
        await asyncio.to_thread(wait_until, lambda: listening(successor.ip, port), 15, "the new relay")
        # Nobody holds S201 on the new leader: only the pool's binding stands between it and the token.
        assert await refused(site, "S201") == "bad_auth"

        def counted() -> bool:  # relay.json is written every second
            relay = LocalState(successor.data_dir).relay()
            return relay.epoch == new.epoch and relay.snapshot["drops"].get("bound_station", 0) >= 1

        await wait_for(counted, 10, "the refusal counted in the new relay's relay.json")
        await wait_for(lambda: refusal_count(successor, "impersonation") >= 1, 10, "the impersonation alarm")
        metrics = await asyncio.to_thread(scrape, successor)
        for family, cause in (("security_events", "impersonation"), ("relay_drops", "bound_station")):
            sample = rf'stkrelay_{family}_total\{{cause="{cause}",kmsn="[^"]+"\}} [1-9]'
            assert re.search(sample, metrics), family

        real = client(site, "S201", credential=key)
        commander = client(site, "C01", role="commander")
        for c in (real, commander):
            await c.start(timeout=20)
        assert real.epoch == new.epoch
        for n in range(30):
            await commander.send({"n": n}, to="S201")
            if n % 10 == 0:
                assert await refused(site, "S201") == "bad_auth"
        got = []
        while len(got) < 30:
            item = await real.receive(timeout=10)
            if isinstance(item, Received):
                got.append(item.data["n"])
        assert got == list(range(30))
        await real.close()
        await commander.close()
        return successor

    successor = asyncio.run(scenario())
    follower = next(a for a in site.agents if a.alive() and a is not successor)
    wait_until(lambda: "C01" in LocalState(follower.data_dir).stations().known, 20, "C01 seen with the token")
    code, doc = relayctl(follower, "credential", "--all")
    rows = {r["station"]: r for r in doc["stations"]}
    assert code == 0 and rows["S201"]["bound"] and rows["S201"]["credential"] == key
    assert {"S002", "S003", "C01"} <= rows.keys() and rows["C01"]["seen_with"] == "token"

    code, doc = relayctl(follower, "unbind", "S201", "--reason", "S201 reinstalled, credential lost")
    assert code == 0 and doc["result"] == "accepted", doc
    wait_until(lambda: all("S201" not in bound_on(a) for a in site.agents if a.alive()), 20, "the reset")

    def relay_has_it() -> bool:  # the relay reads stations.json every 0.25 s and reports every second
        report = LocalState(successor.data_dir).relay().snapshot.get("stations") or {}
        return report.get("loaded") is True and report.get("bound") == 0

    wait_until(relay_has_it, 10, "the leader's relay to take the reset")

    async def after_reset():
        back = client(site, "S201")  # the site token is accepted again
        await back.start(timeout=20)
        assert back.registered
        await back.close()

    asyncio.run(after_reset())
    history = [k for k, _, _ in follower.history()]
    assert "station_bound" in history and "unbind_requested" in history and "audit" in history


@pytest.mark.long
def test_forged_and_unsigned_binding_lines_on_the_share_are_ignored_and_counted(site_factory):
    site = site_factory(3)
    site.start()
    first = site.wait_leader(timeout=40)
    leader = site.by_name(first.node)
    port = int(site.agents[0].setting("RELAY_PORT"))
    wait_until(lambda: listening(leader.ip, port), 15, "the leader's relay to listen")
    before = {a.name: (refusal_count(a, "forged"), refusal_count(a, "unsigned")) for a in site.agents}
    line = {"node": "S009", "seq": 1, "kind": "station_bound", "epoch": first.epoch, "clock": 10**6,
            "at": datetime.now(UTC).isoformat(), "reason": "planted", "station": "S202"}  # fmt: skip
    forged = {**line, "sig": sign(line, "not-the-pool-key")}
    unsigned = {**line, "node": "S010", "station": "S203"}
    events = site.lease_dir / "events"
    (events / "S009.jsonl").write_text(json.dumps(forged) + "\n")
    (events / "S010.jsonl").write_text(json.dumps(unsigned) + "\n")

    def counted() -> bool:
        return all(
            refusal_count(a, "forged") > before[a.name][0]
            and refusal_count(a, "unsigned") > before[a.name][1]
            for a in site.agents
        )

    wait_until(counted, 20, "every agent to count the forged and the unsigned line")
    assert all(bound_on(a) == frozenset() for a in site.agents)

    async def planted_names_take_the_token():
        for station in ("S202", "S203"):
            c = client(site, station)
            await c.start(timeout=20)
            assert c.registered
            await c.close()

    asyncio.run(planted_names_take_the_token())


@pytest.mark.long
def test_a_binding_outlives_a_restart_of_every_agent_with_the_shares_event_files_deleted(site_factory):
    site = site_factory(3)
    site.start()
    first = site.wait_leader(timeout=40)
    port = int(site.agents[0].setting("RELAY_PORT"))
    wait_until(lambda: listening(site.by_name(first.node).ip, port), 15, "the leader's relay to listen")
    key = station_credential(TOKEN, KMSN, "S301")

    async def bind():
        real = client(site, "S301", credential=key)
        await real.start(timeout=20)
        await wait_for(lambda: all("S301" in bound_on(a) for a in site.agents), 20, "S301 bound everywhere")
        await real.close()

    asyncio.run(bind())
    for agent in site.agents:
        agent.terminate()
    # Anyone who can write the share can delete files: the agents' own databases still hold the binding.
    deleted = [p for p in (site.lease_dir / "events").iterdir() if p.is_file()]
    assert deleted
    for path in deleted:
        path.unlink()
    restarted = time.time()
    for agent in site.agents:
        agent.start()
    lease = site.wait_leader(timeout=40, min_epoch=first.epoch + 1)
    wait_until(lambda: listening(site.by_name(lease.node).ip, port), 20, "the restarted leader's relay")

    def republished() -> bool:  # each worker folded again and wrote stations.json after the restart
        return all((a.data_dir / "stations.json").stat().st_mtime > restarted for a in site.agents)

    wait_until(republished, 20, "every agent to publish its fold again")
    assert all("S301" in bound_on(a) for a in site.agents)

    async def impostor():
        assert await refused(site, "S301") == "bad_auth"

    asyncio.run(impostor())
