"""Issue 26 part 1's must-hold: a remote client behind the router's port-forward keeps its one
address through a kill -9 of the leader, and of the entry member itself when a VIP is shared.

The LAN is tests/netns.py's (one namespace per agent on a bridge). A "router" namespace
(``...-entry-router``) sits on the LAN at 10.77.0.254 and on a WAN link (192.0.2.1) to a
"remote" namespace (``...-entry-remote``, 192.0.2.2) that has no route to the LAN at all:
the router's only service is a port-forward (this test's own userspace forwarder, as a
home router's NAT would do it: the agents see the router's LAN address) of
192.0.2.1:9540/9541 to the entry member's ``ENTRY_LISTEN``. A commander in the remote
namespace knows only 192.0.2.1:9540; an agent station on the LAN's observer host follows
the lease. Real agents (``runagent`` process groups, beacons on), real relays, real
entry processes (`relay.server.entry`).
"""

from __future__ import annotations

import asyncio
import errno
import json
import random
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from harness import KMSN, TOKEN, wait_until
from netns import Netns
from test_netns_vip import relayctl_in

pytestmark = pytest.mark.agents

ENTRY_PORT = 9540
PUBLIC, REMOTE = "192.0.2.1", "192.0.2.2"  # the router's WAN address and the remote client's
ROUTER_LAN = 254
VIP = "10.77.0.100"
VIP_KEYS = {"VIP_ADDRESS": f"{VIP}/24", "VIP_INTERFACE": "eth0", "VIP_GARP": "arping", "VIP_GARP_COUNT": "2"}
RATE = 0.02  # seconds between two messages of the remote commander
# Messages flow again this soon after the kill -9. The entry's issue bound it at 2.0 s when a
# kill -9 was taken over in ~0.5 s; since rule 7 and its guard (docs/serving-right.md) the taker
# serves only once a majority acks it, S (1.82 s) after the dead leader's last beacon; then the
# entry re-points (and the shared VIP moves): 2.16-2.96 s measured, so 4 s.
FLOW_AGAIN = 4.0


class Router:
    """A router namespace on the LAN and a WAN link to a remote namespace; it forwards
    ``PUBLIC:9540`` and ``:9541`` to ``target`` (a userspace forwarder on threads in it)."""

    def __init__(self, site: Any, target: str) -> None:
        self.target = target
        self.host = site.lan.add("entry-router", ROUTER_LAN)
        self.remote = Netns(f"{site.lan.tag}-entry-remote")
        ip = ["ip", "-n", self.host.name]
        subprocess.run([*ip, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0",
                        "netns", self.remote.name], check=True, timeout=20)  # fmt: skip
        subprocess.run([*ip, "addr", "add", f"{PUBLIC}/24", "dev", "eth1"], check=True, timeout=20)
        subprocess.run([*ip, "link", "set", "eth1", "up"], check=True, timeout=20)
        self.remote.run("ip", "addr", "add", f"{REMOTE}/24", "dev", "eth0")
        self.remote.run("ip", "link", "set", "eth0", "up")
        self.stop = threading.Event()
        self.forwarded = 0
        self.listeners: list[socket.socket] = []

    def start(self) -> Router:
        ready = threading.Event()

        def body() -> None:
            self.host.enter()  # the forwarder's threads are started from here: they live in it too
            for port in (ENTRY_PORT, ENTRY_PORT + 1):
                sock = socket.create_server((PUBLIC, port))
                sock.settimeout(0.2)
                self.listeners.append(sock)
                threading.Thread(target=self._accept, args=(sock, port), daemon=True).start()
            ready.set()

        threading.Thread(target=body, name="entry-router", daemon=True).start()
        assert ready.wait(10), "the router's forwarder did not start"
        return self

    def _accept(self, listener: socket.socket, port: int) -> None:
        while not self.stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.target, port), timeout=1.0)
            except OSError:
                client.close()  # as a router's NAT would: the forward target does not answer
                continue
            self.forwarded += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        for sock in self.listeners:
            sock.close()
        self.remote.delete()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        src.settimeout(None)
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        for sock in (src, dst):
            sock.close()


class RemoteStream:
    """A commander in the remote namespace that knows only ``PUBLIC:9540`` streams numbered
    messages to an agent station on the LAN's observer host that follows the lease.
    Each runs its own event loop on a thread in its namespace."""

    def __init__(self, remote: Netns, observer: Any, lease_dir: Path) -> None:
        self.remote, self.observer, self.lease_dir = remote, observer, lease_dir
        self.sent_at: dict[int, float] = {}  # monotonic, when the commander handed it over
        self.received_at: dict[int, float] = {}
        self.stop = threading.Event()
        self.receiving = threading.Event()
        self.errors: list[BaseException] = []
        self.counters: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._thread, args=(ns, main), daemon=True)
            for ns, main in ((observer, self._receive), (remote, self._send))
        ]

    def start(self) -> RemoteStream:
        self.threads[0].start()
        assert self.receiving.wait(30), f"the LAN station did not register: {self.errors}"
        self.threads[1].start()
        return self

    def _thread(self, ns: Any, main: Any) -> None:
        try:
            ns.enter()
            asyncio.run(main())
        except BaseException as exc:  # handed to the test
            self.errors.append(exc)

    def client(self, role: str, station: str, discovery: Any) -> Any:
        from relay.client.follow import Redial
        from relay.client.relay_client import RelayClient

        return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=discovery,
                           backoff=Redial(initial=0.05, maximum=0.3, rng=random.Random(station)),
                           connect_timeout=1.0, keepalive=1.0, lease_poll=0.1, queue_size=20_000)  # fmt: skip

    async def _receive(self) -> None:
        from relay.client.discovery import Discovery
        from relay.client.events import Received
        from relay.lease_file import lease_file

        receiver = self.client("agent", "R01", Discovery([lease_file(str(self.lease_dir), TOKEN, KMSN)]))
        await receiver.start(timeout=30)
        self.receiving.set()

        async def read() -> None:
            async for item in receiver.messages():
                if isinstance(item, Received) and isinstance(item.data, dict):
                    with self.lock:
                        self.received_at.setdefault(int(item.data["n"]), time.monotonic())

        reading = asyncio.ensure_future(read())
        try:
            while not self.stop.is_set():
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # the last messages in flight
            self.counters["receiver"] = receiver.counters.as_dict()
        finally:
            reading.cancel()
            await receiver.close()

    async def _send(self) -> None:
        from relay.client.discovery import Discovery, Fallbacks

        sender = self.client("commander", "C01", Discovery([Fallbacks([(PUBLIC, ENTRY_PORT)])]))
        await sender.start(timeout=30)
        try:
            n = 0
            while not self.stop.is_set():
                with self.lock:
                    self.sent_at[n] = time.monotonic()
                await sender.send({"n": n}, to="R01", id=f"m{n}")
                n += 1
                await asyncio.sleep(RATE)
            self.counters["sender"] = sender.counters.as_dict()
        finally:
            await sender.close()

    def received(self) -> int:
        with self.lock:
            return len(self.received_at)

    def flowing_again(self, since: float) -> float | None:
        """Seconds from `since` to the first receipt of a message sent after it, if any yet."""
        with self.lock:
            later = [
                self.received_at[n] for n, t in self.sent_at.items() if t >= since and n in self.received_at
            ]
        return min(later) - since if later else None

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        if self.errors:
            raise self.errors[0]


def entry_status(agent: Any) -> dict[str, Any]:
    try:
        return json.loads((agent.data_dir / "entry.json").read_text())
    except (OSError, ValueError):
        return {}


def forwards_to(agent: Any, node: str) -> bool:
    target = entry_status(agent).get("target") or {}
    return target.get("node") == node


def make_entry(agent: Any, listen: str) -> None:
    with open(agent.ini, "a") as fh:
        fh.write(f"ENTRY = 1\nENTRY_LISTEN = {listen}\n")


def _connect_errno(address: str, port: int) -> int:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((address, port))


def kill_and_measure(site: Any, stream: RemoteStream, victim: Any) -> tuple[float, Any]:
    """kill -9 `victim`'s agent; (seconds until a message sent after the kill reached the LAN
    station, the new lease)."""
    wait_until(lambda: stream.received() >= 30 or stream.errors, 30, "30 messages through the entry")
    assert not stream.errors, stream.errors
    killed = time.monotonic()
    victim.kill9()
    new = site.wait_leader(timeout=15, other_than=victim.name)
    gap = wait_until(lambda: stream.flowing_again(killed), 15, "a message sent after the kill to arrive")
    before = stream.received()
    wait_until(lambda: stream.received() >= before + 30, 15, "30 more messages")
    return gap, new


@pytest.mark.long
def test_a_remote_client_behind_the_port_forward_keeps_its_address_when_the_leader_is_killed(netns_site):
    site = netns_site(3, share="direct", extra={"PRIORITY": "50"})
    entry = site.agents[0]  # S001 has the router's port-forward; S002 is meant to lead
    make_entry(entry, f"{entry.ip}:{ENTRY_PORT}")
    with open(site.agents[1].ini, "a") as fh:
        fh.write("PRIORITY = 90\n")
    router = Router(site, entry.ip).start()
    try:
        site.start()
        lease = site.wait_settled(timeout=60)
        leader = site.by_name(lease.node)
        assert leader is not entry, "the entry member should not lead first (PRIORITY)"
        wait_until(lambda: forwards_to(entry, leader.name), 20, "the entry to forward to the leader")
        # The remote namespace reaches the LAN only through the forward.
        assert router.remote.call_in(_connect_errno, leader.ip, 9530) == errno.ENETUNREACH

        stream = RemoteStream(router.remote, site.observer, site.lease_dir).start()
        try:
            wait_until(
                lambda: entry_status(entry).get("sessions", 0) >= 1, 20, "a remote session on the entry"
            )
            gap, new = kill_and_measure(site, stream, leader)
            wait_until(lambda: forwards_to(entry, new.node), 10, "the entry to forward to the new leader")
        finally:
            stream.finish()
        status = entry_status(entry)
        print(f"messages flowed again {gap:.2f} s after the kill -9 of {leader.name} (new leader "
              f"{new.node}); entry {status.get('repointed')} re-point(s), {router.forwarded} forwards; "
              f"{stream.counters}")  # fmt: skip
        assert gap <= FLOW_AGAIN, f"{gap:.2f} s"
        assert status["repointed"] >= 1 and status["listen"] == f"{entry.ip}:{ENTRY_PORT}"
        assert stream.counters["sender"]["reconnects"] >= 1
        # Every member sees who the entry is: its heartbeat says so (pool.json of the new leader).
        pool = json.loads((site.by_name(new.node).data_dir / "pool.json").read_text())
        assert pool["members"][entry.name]["entry"] == f"{entry.ip}:{ENTRY_PORT}"
        assert pool["members"][new.node]["entry"] is None or new.node == entry.name
        # relayctl doctor on the entry member: who the entry is, where, and where it forwards now.
        checks = {c["check"]: c for c in relayctl_in(site, entry, "doctor")}
        listed, own = checks[f"entry member {entry.name}"], checks["this agent's entry"]
        assert f"public side {entry.ip}:{ENTRY_PORT}" in listed["detail"], listed
        assert own["ok"] and f"forwarding to {new.node} (" in own["detail"], own
    finally:
        router.close()


@pytest.mark.long
def test_a_remote_client_keeps_its_address_when_the_entry_member_holding_the_shared_vip_is_killed(
    netns_site,
):
    site = netns_site(2, share="direct", extra={**VIP_KEYS, "PRIORITY": "50"})
    for agent in site.agents:  # both have the forward's target: the VIP, which the leader holds
        make_entry(agent, f"{VIP}:{ENTRY_PORT}")
    router = Router(site, VIP).start()
    try:
        site.start()
        lease = site.wait_settled(timeout=60)
        holder = site.by_name(lease.node)
        other = next(a for a in site.agents if a is not holder)
        for agent in site.agents:
            wait_until(lambda a=agent: forwards_to(a, holder.name), 20, f"{agent.name}'s entry to forward")

        stream = RemoteStream(router.remote, site.observer, site.lease_dir).start()
        try:
            wait_until(
                lambda: entry_status(holder).get("sessions", 0) >= 1, 20, "a remote session on the VIP"
            )
            assert entry_status(other).get("sessions") == 0  # the VIP's packets reach only its holder
            gap, new = kill_and_measure(site, stream, holder)
            assert new.node == other.name
            wait_until(
                lambda: entry_status(other).get("sessions", 0) >= 1, 10, "the remote session on the other"
            )
        finally:
            stream.finish()
        print(f"messages flowed again {gap:.2f} s after the kill -9 of the VIP's holder {holder.name}; "
              f"{router.forwarded} forwards; {stream.counters}")  # fmt: skip
        assert gap <= FLOW_AGAIN, f"{gap:.2f} s"
        assert forwards_to(other, other.name)
    finally:
        router.close()
