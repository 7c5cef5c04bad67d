"""ADR 0011's forced-failure test of L3 continuity, on a LAN of network namespaces.

Three real agents (tests/netns.py: one namespace each on a bridge, their own
Redis and loopback) run the on-prem VIP executor: the leader adds
``10.77.0.100/24`` to its ``eth0`` and announces it with gratuitous ARP
(`arping`, from the bootstrap's iputils-arping). The relay of the leader
listens on the VIP while it holds it (issue 19: `relay.server.listen_set`). A client
on the LAN's observer host that knows only the VIP streams messages through
it; the leader's whole agent (process group) is killed with SIGKILL; the
client reconnects to the same address, now on the new leader, and every
message the relay confirmed reaches the receiver. A planned move then shows
the old holder's relay no longer listening there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from harness import KMSN, ROOT, TOKEN, wait_until
from netns import RELAY_PORT

pytestmark = pytest.mark.agents

VIP = "10.77.0.100"
VIP_KEYS = {"VIP_ADDRESS": f"{VIP}/24", "VIP_INTERFACE": "eth0", "VIP_GARP": "arping", "VIP_GARP_COUNT": "2"}
RATE = 0.02  # seconds between two messages of the stream


class VipStream:
    """A commander and an agent on the observer host, both dialling only the VIP;
    the commander streams numbered messages to the agent until `stop`. Runs its
    own event loop on a thread inside the observer's namespace."""

    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.confirmed: list[int] = []  # ids, in confirmation order (on_confirmed)
        self.confirmed_at: list[float] = []  # monotonic, when each was confirmed
        self.received: list[int] = []
        self.sent = 0
        self.stop = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.nodes: dict[str, str | None] = {}
        self.counters: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="vip-stream", daemon=True)

    def start(self) -> VipStream:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.observer.enter()
            asyncio.run(self._main())
        except BaseException as exc:  # handed to the test
            self.error = exc
        finally:
            self.done.set()

    def client(self, role: str, station: str, **kw: Any) -> Any:
        from relay.client.discovery import Discovery, Fallbacks
        from relay.client.follow import Redial
        from relay.client.relay_client import RelayClient

        return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN,
                           discovery=Discovery([Fallbacks([(VIP, RELAY_PORT)])]),
                           backoff=Redial(initial=0.05, maximum=0.5, rng=random.Random(station)),
                           connect_timeout=1.0, keepalive=1.0, queue_size=20_000, **kw)  # fmt: skip

    async def _main(self) -> None:
        from relay.client.events import Received

        def confirmed(mid: Any) -> None:
            with self.lock:
                self.confirmed.append(int(str(mid).removeprefix("m")))
                self.confirmed_at.append(time.monotonic())

        receiver = self.client("agent", "R01")
        sender = self.client("commander", "C01", on_confirmed=confirmed)
        await receiver.start(timeout=30)
        await sender.start(timeout=30)

        async def receive() -> None:
            async for item in receiver.messages():
                if isinstance(item, Received) and isinstance(item.data, dict):
                    with self.lock:
                        self.received.append(int(item.data["n"]))

        reading = asyncio.ensure_future(receive())
        try:
            n = 0
            while not self.stop.is_set():
                await sender.send({"n": n}, to="R01", id=f"m{n}")
                self.sent = n = n + 1
                self.nodes = {"sender": sender.node, "receiver": receiver.node}
                await asyncio.sleep(RATE)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while sender.pending or sender.unconfirmed:  # everything sent gets confirmed, in the end
                assert loop.time() < deadline, f"{sender.pending} pending, {sender.unconfirmed} unconfirmed"
                await asyncio.sleep(0.05)
            while loop.time() < deadline:
                with self.lock:
                    if set(self.confirmed) <= set(self.received):
                        break
                await asyncio.sleep(0.05)
            self.nodes = {"sender": sender.node, "receiver": receiver.node}
            self.counters = {"sender": sender.counters.as_dict(), "receiver": receiver.counters.as_dict()}
        finally:
            reading.cancel()
            await sender.close()
            await receiver.close()

    def count(self) -> int:
        with self.lock:
            return len(self.confirmed)

    def finish(self, timeout: float = 60) -> None:
        self.stop.set()
        assert self.done.wait(timeout), "the stream did not finish"
        if self.error is not None:
            raise self.error


def relay_status(agent: Any) -> dict[str, Any]:
    try:
        return json.loads((agent.data_dir / "relay.json").read_text())
    except (OSError, ValueError):
        return {}


def listens_on(agent: Any, address: str) -> str | None:
    """The state of `address` in the agent's relay.json ``listen`` list, while it serves."""
    status = relay_status(agent)
    if not status.get("listening"):
        return None
    for entry in status.get("snapshot", {}).get("listen", []):
        if entry.get("address") == address:
            return str(entry.get("state"))
    return None


def bound_in_namespace(site: Any, agent: Any, address: str, port: int = RELAY_PORT) -> bool:
    """Whether a listening TCP socket is bound to address:port in the agent's namespace (ss)."""
    out = site.host(agent).run("ss", "-Hltn", f"sport = :{port}").stdout
    return any(line.split()[3] == f"{address}:{port}" for line in out.splitlines() if len(line.split()) > 3)


def door_leads_to(agent: Any, node: str) -> bool:
    """Whether the agent's station door (door.json) listens and leads to `node`'s relay."""
    try:
        door = json.loads((agent.data_dir / "door.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(door.get("listening")) and (door.get("target") or {}).get("node") == node


def vip_on(site: Any, agent: Any) -> bool:
    out = site.host(agent).run("ip", "-j", "addr", "show", "dev", "eth0").stdout
    return any(i.get("local") == VIP for link in json.loads(out) for i in link.get("addr_info", []))


@pytest.mark.long
def test_a_client_that_knows_only_the_vip_loses_no_confirmed_message_when_the_leader_is_killed(netns_site):
    site = netns_site(3, share="direct", extra=VIP_KEYS)
    site.start()
    lease = site.wait_settled(timeout=60)
    leader = site.by_name(lease.node)
    wait_until(lambda: listens_on(leader, VIP) == "listening", 20, "the leader's relay on the VIP")
    assert vip_on(site, leader) and not any(vip_on(site, a) for a in site.agents if a is not leader)
    # The leader's own agent dials 127.0.0.1:9530: the station door holds it (on every member; the relay
    # leaves loopback to it) and leads to this relay.
    assert listens_on(leader, "127.0.0.1") is None
    wait_until(
        lambda: door_leads_to(leader, leader.name), 20, "the leader's station door leading to its relay"
    )
    assert site.host(leader).call_in(_connects, "127.0.0.1", RELAY_PORT)

    stream = VipStream(site.observer).start()
    try:
        wait_until(lambda: stream.count() >= 50 or stream.done.is_set(), 60, "50 confirmed messages")
        assert stream.nodes == {"sender": leader.name, "receiver": leader.name}, stream.nodes
        before = stream.count()
        leader.kill9()  # the whole agent: supervisor, worker, web, relay
        new = site.wait_leader(timeout=30, other_than=leader.name)
        holder = site.by_name(new.node)
        wait_until(lambda: listens_on(holder, VIP) == "listening", 20, "the new leader's relay on the VIP")
        assert vip_on(site, holder)
        wait_until(lambda: stream.count() >= before + 50 or stream.done.is_set(), 60,
                   "50 more confirmed messages through the VIP, on the new leader")  # fmt: skip
        # Both on the new leader (the last send may have seen the sender between two sessions)
        settled = {"sender": holder.name, "receiver": holder.name}
        wait_until(lambda: stream.nodes == settled, 10, f"both clients on {holder.name}: {stream.nodes}")
    finally:
        stream.finish()
    confirmed, received = set(stream.confirmed), set(stream.received)
    gap = max(b - a for a, b in itertools.pairwise(stream.confirmed_at))
    print(f"sent {stream.sent}, confirmed {len(confirmed)}, received {len(received)}, longest wait between "
          f"two confirmations {gap:.2f} s (the failover); {stream.counters}")  # fmt: skip
    assert len(stream.confirmed) == len(confirmed)  # each confirmed once
    assert confirmed == set(range(stream.sent)), "every message sent was confirmed in the end"
    assert not confirmed - received, f"confirmed but never received: {sorted(confirmed - received)[:20]}"
    assert stream.counters["sender"]["dropped"] == 0
    assert stream.counters["sender"]["reconnects"] >= 1 and stream.counters["receiver"]["reconnects"] >= 1

    # The killed agent's host still has the VIP (nobody removed it) and answers ARP for it beside
    # the new holder. Restarted, the agent follows the newer epoch and lets go of what it held.
    assert vip_on(site, leader) and (leader.data_dir / "addresses.json").exists()
    leader.start()
    wait_until(lambda: not vip_on(site, leader), 60, "the restarted agent to release the VIP it held")
    assert not (leader.data_dir / "addresses.json").exists() and vip_on(site, holder)
    assert listens_on(holder, VIP) == "listening"


@pytest.mark.long
def test_the_relay_stops_listening_on_the_vip_when_the_address_moves_away(netns_site):
    site = netns_site(2, share="direct", extra=VIP_KEYS)
    site.start()
    lease = site.wait_settled(timeout=60)
    first, second = site.by_name(lease.node), next(a for a in site.agents if a.name != lease.node)
    wait_until(lambda: listens_on(first, VIP) == "listening", 20, "the leader's relay on the VIP")
    assert bound_in_namespace(site, first, VIP) and bound_in_namespace(site, first, "127.0.0.1")
    doctor = relayctl_in(site, first, "doctor")
    [line] = [c for c in doctor if c["check"] == "relay listens on"]
    assert line["ok"] and f"{VIP}:{RELAY_PORT} (vip)" in line["detail"], line
    assert f"{first.ip}:{RELAY_PORT} (node)" in line["detail"] and "127.0.0.1" not in line["detail"]
    [door] = [c for c in doctor if c["check"] == "station door"]  # loopback is the door's
    assert door["ok"] and "127.0.0.1:9530" in door["detail"] and f"to {first.name} (" in door["detail"], door

    relayctl_in(site, first, "promote", second.name, "--epoch", str(lease.epoch))
    wait_until(lambda: listens_on(second, VIP) == "listening", 30, "the promoted member's relay on the VIP")
    wait_until(lambda: not vip_on(site, first), 20, "the old leader to release the VIP")
    wait_until(lambda: not bound_in_namespace(site, first, VIP), 10, "the old leader's relay off the VIP")
    assert not (first.data_dir / "addresses.json").exists()
    assert json.loads((second.data_dir / "addresses.json").read_text())["addresses"][0]["address"] == VIP


def relayctl_in(site: Any, agent: Any, *args: str) -> Any:
    """`relayctl ... --json` in the agent's namespace (its probes dial from there)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "STK_INI": str(agent.ini)}
    argv = [*site.host(agent).wrapper, sys.executable, str(ROOT / "manage.py"), "relayctl", *args, "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert out.stdout.strip(), out.stderr
    return json.loads(out.stdout)


def _connects(ip: str, port: int) -> bool:
    import socket

    try:
        socket.create_connection((ip, port), timeout=1).close()
        return True
    except OSError:
        return False
