"""The relay client library and `manage.py relayclient` (docs/design.md §9), end to end.

Real sockets on 127.0.0.51-59, real `relay.server.relay_server.RelayServer`s (in the test's
own event loop, or as a process the test kills), real signed lease files and a
real HTTP server standing in for an agent's ``/api/v1/leader``. Every wait is a
condition with a deadline.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import harness
import pytest
from harness import ROOT, wait_until

from elections.core.lease import LeaseRecord
from relay.client.discovery import AgentApi, Discovery, Fallbacks, Leader
from relay.client.events import NoLeader, QueueFull, Received, Refused, ServerError, Status
from relay.client.follow import Redial, choose_leader, lease_says_move
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file
from relay.server.relay_server import RelayServer

TOKEN = "client-test-token"
KMSN = "9999-9999-99-99"
HOST_A, HOST_B, HOST_R = "127.0.0.51", "127.0.0.52", "127.0.0.53"
HOST_HTTP, HOST_KILLED, HOST_CLI = "127.0.0.54", "127.0.0.55", "127.0.0.56"
HOST_DEAD = "127.0.0.59"  # nothing ever listens here


# -- real parts ------------------------------------------------------------------------
def write_lease(lease_dir: Path, node: str, ip: str, port: int, epoch: int, **kw: Any) -> None:
    """A signed lease with this module's token and KMSN (see harness.write_lease)."""
    kw.setdefault("token", TOKEN)
    kw.setdefault("kmsn", KMSN)
    harness.write_lease(lease_dir, node, ip, port, epoch, **kw)


def dead_port(host: str = HOST_DEAD) -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LeaderApi:
    """A real HTTP server answering ``GET /api/v1/leader`` like an agent's web port."""

    def __init__(self, host: str = HOST_HTTP) -> None:
        self.status, self.doc = 404, {"kmsn": KMSN, "leader": None, "status": "missing"}
        self.paths: list[str] = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.paths.append(self.path)
                body = json.dumps(api.doc).encode()
                self.send_response(api.status if self.path.startswith("/api/v1/leader") else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def names(self, node: str, ip: str, port: int, epoch: int, kmsn: str = KMSN) -> None:
        self.status = 200
        self.doc = {
            "kmsn": kmsn,
            "leader": node,
            "station": node,
            "ip": ip,
            "port": port,
            "epoch": epoch,
            "status": "valid",
        }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def leader_api():
    apis: list[LeaderApi] = []

    def make() -> LeaderApi:
        apis.append(LeaderApi())
        return apis[-1]

    yield make
    for api in apis:
        api.close()


class Gate:
    def __init__(self, open: bool = True) -> None:
        self.open = open

    def __call__(self) -> bool:
        return self.open


class Relay:
    """A RelayServer on the test's loop, with its address and a gate the test steers."""

    def __init__(self, node: str, epoch: int, gate: Gate) -> None:
        self.node, self.epoch, self.gate = node, epoch, gate
        # A gate that names a successor (test_switchover_hint's HandingGate) hands it in, as the runner does.
        named = getattr(gate, "successor", None)
        self.server = RelayServer(node=node, kmsn=KMSN, token=TOKEN, gate=gate, epoch=epoch, successor=named)
        self.ip, self.port = "", 0

    async def start(self, host: str) -> Relay:
        await self.server.start(host, 0, 0)
        self.ip, self.port = self.server.addresses["json"]
        return self

    def clients(self) -> dict:
        return self.server.router.counts().get(KMSN, {})


class Pool:
    """One scenario's relays, clients and lease dir; everything is closed at the end."""

    def __init__(self, tmp: Path) -> None:
        self.lease_dir = tmp / "lease"
        self.lease_dir.mkdir()
        self.relays: list[Relay] = []
        self.clients: list[RelayClient] = []
        self.statuses: dict[str, list[Status]] = {}

    async def relay(self, node: str, host: str, epoch: int, gate: Gate | None = None) -> Relay:
        relay = await Relay(node, epoch, gate or Gate()).start(host)
        self.relays.append(relay)
        return relay

    def lease(self, relay: Relay, epoch: int | None = None) -> None:
        write_lease(self.lease_dir, relay.node, relay.ip, relay.port, relay.epoch if epoch is None else epoch)

    def client(self, role: str, station: str, discovery: Discovery | None = None, **kw: Any) -> RelayClient:
        statuses = self.statuses.setdefault(station, [])
        kw.setdefault("backoff", Redial(initial=0.05, maximum=0.3, rng=random.Random(station)))
        kw.setdefault("connect_timeout", 2.0)
        kw.setdefault("lease_poll", 0.1)
        client = RelayClient(
            role=role,
            kmsn=kw.pop("kmsn", KMSN),
            station=station,
            token=kw.pop("token", TOKEN),
            discovery=discovery
            or Discovery.build(kmsn=KMSN, lease=lease_file(str(self.lease_dir), TOKEN, KMSN)),
            on_status=statuses.append,
            **kw,
        )
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for relay in self.relays:
            relay.server.lose_leadership()
            await relay.server.wait_closed(0.5)


def play(tmp_path: Path, body: Callable[[Pool], Awaitable[None]], timeout: float = 30) -> None:
    async def main() -> None:
        pool = Pool(tmp_path)
        try:
            await asyncio.wait_for(body(pool), timeout)
        finally:
            await pool.close()

    asyncio.run(main())


async def until(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `cond` on the loop until truthy; fail with `what` at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = cond()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.02)


async def received(client: RelayClient, n: int, timeout: float = 5.0) -> list[Any]:
    out = []
    for _ in range(n):
        item = await client.receive(timeout)
        out.append(item.data if isinstance(item, Received) else item)
    return out


# -- pure parts ------------------------------------------------------------------------
def test_it_waits_a_full_jitter_delay_under_a_doubling_cap():
    backoff = Redial(initial=0.1, maximum=5.0, rng=random.Random(1))
    assert [backoff.cap(n) for n in range(8)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    for attempt in range(12):
        delays = [backoff.delay(attempt) for _ in range(200)]
        assert all(0 <= d <= backoff.cap(attempt) for d in delays)
        assert max(delays) > 0.8 * backoff.cap(attempt)  # jitter spans the whole range
    assert Redial(rng=random.Random(5)).delay(3) == Redial(rng=random.Random(5)).delay(3)
    with pytest.raises(ValueError):
        Redial(initial=0)


def test_it_prefers_a_leader_changed_hint_only_when_it_is_newer_than_discovery():
    hint = Leader(HOST_B, 1, 8, None, "leader_changed")
    lease7, lease8 = Leader(HOST_A, 1, 7, "S051", "lease"), Leader(HOST_B, 2, 8, "S052", "lease")
    assert choose_leader(hint, lease7) is hint
    assert choose_leader(hint, lease8) is lease8
    assert choose_leader(hint, None) is hint
    assert choose_leader(None, lease7) is lease7
    assert choose_leader(Leader(HOST_B, 1, None), lease7) is lease7
    assert choose_leader(hint, Leader(HOST_DEAD, 1, None, None, "fallback")) is hint


def test_it_moves_when_the_lease_names_a_newer_epoch_or_another_node_only():
    def record(node: str, epoch: int) -> LeaseRecord:
        return LeaseRecord(KMSN, node, HOST_A, 1, 1, epoch, "20990101000000", node, 1, 10)

    assert lease_says_move(record("S052", 8), 7, "S051")
    assert lease_says_move(record("S051", 8), 7, "S051")  # re-elected: its relay restarted
    assert lease_says_move(record("S052", 7), 7, "S051")
    assert lease_says_move(record("S051", 7), 7, "S051") is None
    assert lease_says_move(record("S052", 6), 7, "S051") is None  # a stale lease proves nothing


# -- discovery ---------------------------------------------------------------------------
def test_it_takes_the_leader_from_a_valid_lease_before_asking_agents(tmp_path, leader_api):
    api = leader_api()
    api.names("S052", HOST_B, 9530, 9)
    write_lease(tmp_path, "S051", HOST_A, 9530, 7)
    discovery = Discovery.build(
        kmsn=KMSN,
        lease=lease_file(str(tmp_path), TOKEN, KMSN),
        agents=[api.url],
        fallbacks=[(HOST_DEAD, 1)],
    )
    leader = asyncio.run(discovery.find())
    assert leader == Leader(HOST_A, 9530, 7, "S051", "lease")
    assert api.paths == []


@pytest.mark.parametrize(
    "damage",
    ["forged", "corrupt", "released", "other kmsn", "missing"],
)
def test_it_ignores_a_lease_that_is_no_evidence_then_asks_an_agent_then_falls_back(
    tmp_path, leader_api, damage
):
    lease = tmp_path / "relay_leader.json"
    if damage == "forged":
        write_lease(tmp_path, "S066", HOST_DEAD, 9530, 99, token="not-the-token")
    elif damage == "corrupt":
        write_lease(tmp_path, "S066", HOST_DEAD, 9530, 99)
        lease.write_bytes(lease.read_bytes()[:40])
    elif damage == "released":
        write_lease(tmp_path, "S066", HOST_DEAD, 9530, 99, ttl_s=0)
    elif damage == "other kmsn":
        write_lease(tmp_path, "S066", HOST_DEAD, 9530, 99, kmsn="1111-1111-11-11")
    api = leader_api()
    api.names("S052", HOST_B, 9530, 8)
    discovery = Discovery.build(
        kmsn=KMSN,
        lease=lease_file(str(tmp_path), TOKEN, KMSN),
        agents=[api.url],
        fallbacks=[(HOST_R, 9540)],
    )
    leader = asyncio.run(discovery.find())
    assert leader == Leader(HOST_B, 9530, 8, "S052", f"agent {api.url}")
    assert api.paths == [f"/api/v1/leader?kmsn={KMSN}"]

    api.status, api.doc = 404, {"kmsn": KMSN, "leader": None, "status": "forged"}
    assert asyncio.run(discovery.find()) == Leader(HOST_R, 9540, None, None, "fallback")
    assert len(api.paths) == 2
    said = discovery.describe()
    assert "lease" in said and "HTTP 404" in said and "fallback" in said


def test_it_asks_every_agent_and_believes_the_highest_epoch(leader_api):
    lagging, current, foreign = leader_api(), leader_api(), leader_api()
    lagging.names("S051", HOST_A, 9530, 7)
    current.names("S052", HOST_B, 9530, 8)
    foreign.names("S099", HOST_DEAD, 9530, 50, kmsn="1111-1111-11-11")
    down = f"http://{HOST_DEAD}:{dead_port()}"
    api = AgentApi([down, lagging.url, foreign.url, current.url], KMSN, timeout=1.0)
    leader = asyncio.run(api.find())
    assert leader is not None and (leader.node, leader.epoch) == ("S052", 8)
    assert "unreachable" in api.last and "KMSN '1111-1111-11-11'" in api.last


def test_it_walks_through_the_fallbacks_in_turn():
    fallbacks = Fallbacks([(HOST_A, 1), (HOST_B, 2)])

    async def three() -> list[Leader | None]:
        return [await fallbacks.find() for _ in range(3)]

    assert [f.address for f in asyncio.run(three()) if f] == [(HOST_A, 1), (HOST_B, 2), (HOST_A, 1)]


def test_it_reads_nothing_from_a_lease_dir_that_is_gone(tmp_path):
    source = lease_file(str(tmp_path / "unmounted"), TOKEN, KMSN)
    assert asyncio.run(source.find()) is None
    assert "unreachable" in source.last


# -- sessions ------------------------------------------------------------------------------
def test_it_registers_then_relays_between_a_commander_and_an_agent(tmp_path):
    async def body(pool: Pool) -> None:
        a = await pool.relay("S051", HOST_A, 7)
        pool.lease(a)
        # settle=0: a no_route is surfaced at once, not retried while recipients come back
        agent, commander = pool.client("agent", "S002"), pool.client("commander", "C01", settle=0)
        await agent.start(timeout=5)
        await commander.start(timeout=5)
        assert (agent.epoch, agent.node, agent.leader.source) == (7, "S051", "lease")
        assert a.clients() == {"S002": {"agent": 1}, "C01": {"commander": 1}}

        assert await commander.send({"x": 1}, to="S002", id="m1") == "sent"
        item = await agent.receive(5)
        assert item == Received({"x": 1}, "commander", "C01", "m1")
        await agent.send("up", id=5)
        assert await commander.receive(5) == Received("up", "agent", "S002", 5)

        # no recipient: an error object in the stream, and the session goes on
        await commander.send("lost", to="S404", id="m2")
        error = await commander.receive(5)
        assert isinstance(error, ServerError) and (error.code, error.id) == ("no_route", "m2")
        with pytest.raises(ServerError) as raised:
            await commander.send_confirmed("lost", to="S404", id="m3")
        assert raised.value.code == "no_route"
        assert await commander.send_confirmed({"x": 2}, to="S002") is not None
        assert (await agent.receive(5)).data == {"x": 2}
        assert commander.registered and 0 < await commander.ping() < 1

        assert commander.counters.as_dict() == {
            "reconnects": 0,
            "queued": 0,
            "dropped": 0,
            "sent": 4,
            "confirmed": 2,
            "resent": 0,
            "retried": 0,
            "received": 1,
            "duplicates": 0,
            "errors": 2,
            "inbox_dropped": 0,
            "unproven": 0,
        }
        assert agent.counters.received == 2 and agent.counters.sent == 1
        assert [s.kind for s in pool.statuses["S002"]] == ["connecting", "registered"]
        with pytest.raises(ValueError):
            await commander.send("nowhere")  # a commander must name a station

        async def drain() -> list[Any]:
            return [item.data async for item in agent.messages()]

        collecting = asyncio.create_task(drain())
        await commander.send("last", to="S002")
        await until(lambda: agent.counters.received == 3, 5, "the last message")
        await agent.close()  # ends the stream, after what was already received
        assert await asyncio.wait_for(collecting, 5) == ["last"]
        assert agent.state == "closed" and pool.statuses["S002"][-1].kind == "closed"

    play(tmp_path, body)


def test_it_hands_a_receipt_to_on_confirmed_for_each_message_the_relay_confirmed(tmp_path):
    async def body(pool: Pool) -> None:
        a = await pool.relay("S051", HOST_A, 7)
        pool.lease(a)
        receipts: list[Any] = []
        agent = pool.client("agent", "S002")
        commander = pool.client("commander", "C01", settle=0, on_confirmed=receipts.append)
        await agent.start(timeout=5)
        await commander.start(timeout=5)
        for i in range(5):
            await commander.send(i, to="S002", id=f"m{i}")
        await commander.send("lost", to="S404", id="gone")  # no_route: never confirmed
        sent = await commander.send_confirmed("last", to="S002", id="c1")
        await until(lambda: len(receipts) == 6, 5, "six receipts")
        assert receipts == ["m0", "m1", "m2", "m3", "m4", sent]
        assert commander.counters.confirmed == 6

    play(tmp_path, body)


def test_it_stops_at_once_when_refused_for_a_bad_token(tmp_path):
    async def body(pool: Pool) -> None:
        a = await pool.relay("S051", HOST_A, 7)
        pool.lease(a)
        client = pool.client("agent", "S002", token="wrong-token")
        with pytest.raises(Refused) as refused:
            await client.start(timeout=5)
        assert refused.value.code == "bad_auth" and "S051" in str(refused.value)
        assert client.state == "closed"

    play(tmp_path, body)


@pytest.mark.parametrize(
    ("token", "code"),
    [("another-sites-token-0123456789", "bad_auth"), (TOKEN, "wrong_kmsn")],
    ids=["a-stranger", "this-sites-key-for-another-kmsn"],
)
def test_a_client_naming_another_kmsn_is_refused_for_good_and_only_a_key_holder_learns_ours(
    tmp_path, token, code
):
    async def body(pool: Pool) -> None:
        a = await pool.relay("S051", HOST_A, 7)
        other = "1111-1111-11-11"
        discovery = Discovery.build(kmsn=other, fallbacks=[(a.ip, a.port)])
        client = pool.client("agent", "S002", discovery, token=token, kmsn=other)
        with pytest.raises(Refused) as refused:
            await client.start(timeout=5)
        assert refused.value.code == code and client.state == "closed"
        assert (KMSN in str(refused.value)) == (code == "wrong_kmsn"), str(refused.value)

    play(tmp_path, body)


def test_it_says_no_leader_when_nothing_registers_it_in_time(tmp_path):
    async def body(pool: Pool) -> None:
        discovery = Discovery.build(kmsn=KMSN, fallbacks=[(HOST_DEAD, dead_port())])
        client = pool.client("agent", "S002", discovery)
        with pytest.raises(NoLeader) as raised:
            await client.start(timeout=0.5)
        assert "cannot connect" in str(raised.value) and "fallback" in str(raised.value)
        reconnecting = [s for s in pool.statuses["S002"] if s.kind == "reconnecting"]
        assert len(reconnecting) >= 2 and all(s.delay is not None and s.delay <= 0.3 for s in reconnecting)

    play(tmp_path, body)


# -- following the leader --------------------------------------------------------------------
def test_it_follows_leader_changed_to_b_and_flushes_the_gap_messages_in_order(tmp_path):
    async def body(pool: Pool) -> None:
        a = await pool.relay("S051", HOST_A, 7)
        b_gate = Gate(open=True)
        b = await pool.relay("S052", HOST_B, 8, b_gate)
        # The receiver already sits on B, so the flush cannot race its return.
        receiver = pool.client("agent", "S002", Discovery([Fallbacks([(b.ip, b.port)])]))
        await receiver.start(timeout=5)
        b_gate.open = False  # from now on B accepts nobody: the gap
        pool.lease(a)
        commander, agent = pool.client("commander", "C01"), pool.client("agent", "S003")
        await commander.start(timeout=5)
        await agent.start(timeout=5)
        assert (commander.node, agent.node) == ("S051", "S051")

        a.server.lose_leadership(8, b.ip, b.port)
        pool.lease(b)
        await until(lambda: not commander.registered and not agent.registered, 5, "both to leave A")
        outcomes = [await commander.send({"n": n}, to="S002", id=n) for n in range(1, 6)]
        assert outcomes == ["queued"] * 5 and commander.pending == 5
        refused = await until(lambda: _kinds(pool, "C01", "refused"), 5, "B to refuse the commander")
        assert "not_leader" in refused[0].reason and refused[0].node == "S052"

        b_gate.open = True
        await until(lambda: commander.registered and agent.registered, 5, "both to re-register on B")
        assert (commander.node, commander.epoch, agent.node, agent.epoch) == ("S052", 8, "S052", 8)
        assert await received(receiver, 5) == [{"n": n} for n in range(1, 6)]
        assert b.clients() == {"S002": {"agent": 1}, "S003": {"agent": 1}, "C01": {"commander": 1}}
        c = commander.counters
        assert (c.reconnects, c.queued, c.dropped, c.sent) == (1, 5, 0, 5) and commander.pending == 0
        reasons = [s.reason for s in pool.statuses["C01"] if s.kind == "reconnecting"]
        assert "says the leader changed: epoch=8" in reasons[0]
        flushed = [s for s in pool.statuses["C01"] if s.kind == "registered"][-1]
        # settle window: one message (the probe) goes first; the rest once the relay routed it
        assert flushed.reason == "flushed 1 of 5 queued messages; the rest follow their probes"
        assert flushed.epoch == 8

    play(tmp_path, body)


@pytest.mark.parametrize(
    ("overflow", "outcomes", "delivered", "queued", "dropped"),
    [
        ("drop_oldest", ["queued"] * 5, [3, 4, 5], 5, 2),
        ("drop_newest", ["queued"] * 3 + ["dropped"] * 2, [1, 2, 3], 3, 2),
        ("raise", ["queued"] * 3 + ["QueueFull"] * 2, [1, 2, 3], 3, 0),
    ],
)
def test_it_bounds_the_queue_with_its_overflow_policy_and_counts_the_drops(
    tmp_path, overflow, outcomes, delivered, queued, dropped
):
    async def body(pool: Pool) -> None:
        r = await pool.relay("S051", HOST_R, 7)
        receiver = pool.client("agent", "S002", Discovery([Fallbacks([(r.ip, r.port)])]))
        await receiver.start(timeout=5)
        write_lease(pool.lease_dir, "S066", HOST_DEAD, dead_port(), 7)  # names a dead relay
        sender = pool.client("commander", "C01", queue_size=3, overflow=overflow)
        starting = asyncio.create_task(sender.start())
        got = []
        for n in range(1, 6):
            try:
                got.append(await sender.send(n, to="S002", id=n))
            except QueueFull:
                got.append("QueueFull")
        assert got == outcomes
        assert (sender.counters.queued, sender.counters.dropped, sender.pending) == (queued, dropped, 3)

        pool.lease(r)  # the lease now names a live relay: the watcher cuts the backoff short
        await asyncio.wait_for(starting, 5)
        await sender.send_confirmed("end", to="S002")
        assert await received(receiver, 4) == [*delivered, "end"]

    play(tmp_path, body)


def test_it_moves_when_the_lease_names_a_newer_epoch_even_if_its_relay_says_nothing(tmp_path):
    async def body(pool: Pool) -> None:
        a = await pool.relay("S051", HOST_A, 7)
        b = await pool.relay("S052", HOST_B, 8)
        pool.lease(a)
        client = pool.client("agent", "S002")
        await client.start(timeout=5)
        assert client.node == "S051"
        pool.lease(b)
        await until(lambda: client.node == "S052", 3, "the client to move to B")
        assert client.epoch == 8 and client.counters.reconnects == 1
        assert a.clients() == {}
        reasons = [s.reason for s in pool.statuses["S002"] if s.kind == "reconnecting"]
        assert reasons == ["the lease names S052 epoch 8, newer than epoch 7"]

    play(tmp_path, body)


def test_it_refuses_a_stale_relay_after_seeing_a_newer_epoch_and_finds_the_current_one(tmp_path):
    async def body(pool: Pool) -> None:
        a = await pool.relay("S051", HOST_A, 7)  # still up, but epoch 8 exists elsewhere
        b = await pool.relay("S052", HOST_B, 8)
        # Fallbacks are tried in turn: B, then the stale A, then B again.
        fallbacks = Fallbacks([(b.ip, b.port), (a.ip, a.port), (b.ip, b.port)])
        client = pool.client("agent", "S003", Discovery([fallbacks]))
        await client.start(timeout=5)
        assert (client.node, client.known_epoch) == ("S052", 8)
        peer = next(p for p in b.server.peers if p.station == "S003")
        peer.drop("test: a network blip")
        await until(lambda: len(_kinds(pool, "S003", "registered")) == 2, 5, "the client to come back")
        assert client.node == "S052" and a.clients() == {}
        refused = _kinds(pool, "S003", "refused")
        assert len(refused) == 1 and refused[0].node == "S051"
        assert "stale_epoch (server epoch 7 < client epoch 8)" in refused[0].reason

    play(tmp_path, body)


SERVER = """
import asyncio, sys
from relay.server.relay_server import RelayServer

async def main():
    node, host, epoch, kmsn, token = sys.argv[1:6]
    server = RelayServer(node=node, kmsn=kmsn, token=token, gate=lambda: True, epoch=int(epoch))
    await server.start(host, 0, 0)
    print(server.addresses["json"][1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class RelayProcess:
    """A relay in its own process, to be killed (SIGKILL) or frozen (SIGSTOP)."""

    def __init__(self, node: str, host: str, epoch: int) -> None:
        self.node, self.ip, self.epoch = node, host, epoch
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, node, host, str(epoch), KMSN, TOKEN],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())  # the child prints its port once listening

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(5)


def test_it_reconnects_with_backoff_to_the_lease_leader_when_its_relay_is_killed(tmp_path, relay_process):
    killed = relay_process("S055", HOST_KILLED, 7)

    async def body(pool: Pool) -> None:
        write_lease(pool.lease_dir, "S055", killed.ip, killed.port, 7)
        client = pool.client("agent", "S002", backoff=Redial(initial=0.05, maximum=0.4, rng=random.Random(3)))
        await client.start(timeout=5)
        assert client.node == "S055"
        killed.kill()
        await until(lambda: len(_kinds(pool, "S002", "reconnecting")) >= 4, 5, "a few failed attempts")
        b = await pool.relay("S052", HOST_B, 8)
        pool.lease(b)
        await until(lambda: client.node == "S052", 5, "the client to register with the lease's B")
        attempts = _kinds(pool, "S002", "reconnecting")
        assert "closed the connection" in attempts[0].reason or "lost" in attempts[0].reason
        assert any("cannot connect" in s.reason for s in attempts[1:])
        # full jitter under a doubling cap: 0.05, 0.1, 0.2, 0.4, 0.4 ...
        caps = Redial(initial=0.05, maximum=0.4).cap
        assert all(s.delay is not None and 0 <= s.delay <= caps(n) for n, s in enumerate(attempts))
        assert client.counters.reconnects == 1

    play(tmp_path, body)


def test_it_drops_a_relay_that_falls_silent_after_three_keepalive_intervals(tmp_path, relay_process):
    frozen = relay_process("S055", HOST_KILLED, 7)

    async def body(pool: Pool) -> None:
        write_lease(pool.lease_dir, "S055", frozen.ip, frozen.port, 7)
        client = pool.client("agent", "S002", keepalive=0.2)
        await client.start(timeout=5)
        assert 0 < await client.ping() < 1
        frozen.proc.send_signal(signal.SIGSTOP)  # the socket stays open; nothing answers
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        await until(lambda: not client.registered, 3, "the client to give up on the silent relay")
        assert 0.55 <= loop.time() - stopped_at < 2.0
        assert "silent for" in _kinds(pool, "S002", "reconnecting")[0].reason
        b = await pool.relay("S052", HOST_B, 8)
        pool.lease(b)
        await until(lambda: client.node == "S052", 5, "the client to register with B")

    play(tmp_path, body)


def _kinds(pool: Pool, station: str, kind: str) -> list[Status]:
    return [s for s in pool.statuses[station] if s.kind == kind]


# -- the CLI ---------------------------------------------------------------------------------
class ThreadRelay:
    """A RelayServer on its own loop in a thread, for tests whose clients are processes."""

    def __init__(self, node: str, host: str, epoch: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.relay = Relay(node, epoch, Gate())
        asyncio.run_coroutine_threadsafe(self.relay.start(host), self.loop).result(5)
        self.node, self.ip, self.port = node, self.relay.ip, self.relay.port

    def clients(self) -> dict:
        async def counts() -> dict:
            return self.relay.clients()

        return asyncio.run_coroutine_threadsafe(counts(), self.loop).result(5)

    def stop(self) -> None:
        async def stop() -> None:
            self.relay.server.lose_leadership()
            await self.relay.server.wait_closed(0.5)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def cli(tmp_path):
    """A relay named by a real lease, and `manage.py relayclient` runs against it."""
    lease_dir, data_dir = tmp_path / "lease", tmp_path / "data"
    lease_dir.mkdir()
    data_dir.mkdir()
    relay = ThreadRelay("S056", HOST_CLI, 7)
    write_lease(lease_dir, "S056", relay.ip, relay.port, 7)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env.update(
        PYTHONUNBUFFERED="1",
        STK_KMSN=KMSN,
        STK_STATION="S001",
        STK_RELAY_TOKEN=TOKEN,
        STK_LEASE_DIR=str(lease_dir),
        STK_DATA_DIR=str(data_dir),
        STK_REDIS_URL="redis://127.0.0.1:1/0",  # nothing there: the CLI must not need Redis
    )
    procs: list[subprocess.Popen] = []

    class Cli:
        def __init__(self) -> None:
            self.relay, self.lease_dir, self.tmp = relay, lease_dir, tmp_path

        def run(
            self, *args: str, timeout: float = 20, stdin: str = "", **environ: str
        ) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "manage.py", "relayclient", *args],
                cwd=ROOT,
                env=dict(env, **environ),
                capture_output=True,
                text=True,
                timeout=timeout,
                input=stdin,
            )

        def start(self, *args: str, name: str) -> tuple[subprocess.Popen, Path, Path]:
            out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
            with open(out, "wb") as o, open(err, "wb") as e:
                proc = subprocess.Popen(
                    [sys.executable, "manage.py", "relayclient", *args],
                    cwd=ROOT,
                    env=env,
                    stdout=o,
                    stderr=e,
                    stdin=subprocess.DEVNULL,
                )
            procs.append(proc)
            return proc, out, err

    yield Cli()
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    relay.stop()


def test_it_listens_and_sends_from_the_command_line_through_the_leader_named_by_the_lease(cli):
    listen, out, err = cli.start(
        "listen", "--role", "agent", "--station", "S002", "--count", "2", name="listen"
    )
    wait_until(lambda: "registered" in err.read_text(), 15, "listen to register")
    assert cli.relay.clients() == {"S002": {"agent": 1}}

    sent = cli.run("send", "--role", "commander", "--station", "C01", "--to", "S002", '{"x":1}')
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("relayclient: sent id=") and "via S056" in sent.stdout
    sent = cli.run(
        "send", "--role", "commander", "--station", "C01", "--to", "S002", "--id", "m2", "--json", '"hi"'
    )
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {
        "ok": True,
        "id": "m2",
        "to": "S002",
        "node": "S056",
        "ip": cli.relay.ip,
        "port": cli.relay.port,
        "epoch": 7,
    }

    assert listen.wait(10) == 0, err.read_text()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(m["type"], m["from"], m["data"]) for m in lines] == [
        ("message", {"role": "commander", "station": "C01"}, {"x": 1}),
        ("message", {"role": "commander", "station": "C01"}, "hi"),
    ]
    assert lines[1]["id"] == "m2"


def test_it_prints_a_message_with_control_and_bidi_characters_escaped_and_still_the_same_json(cli):
    listen, out, err = cli.start(
        "listen", "--role", "agent", "--station", "S002", "--count", "1", name="listen"
    )
    wait_until(lambda: "registered" in err.read_text(), 15, "listen to register")
    hostile = "\x1b]0;owned\x07\x9b2J\u202etxt.exe\r\nFAKE"
    sent = cli.run(
        "send", "--role", "commander", "--station", "C01", "--to", "S002", json.dumps({"t": hostile})
    )
    assert sent.returncode == 0, sent.stderr
    assert listen.wait(10) == 0, err.read_text()
    (line,) = out.read_text().splitlines()
    assert not re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", line), repr(line)
    assert json.loads(line)["data"] == {"t": hostile}


def test_it_pings_the_leader_from_the_command_line_and_says_where_it_is(cli, leader_api):
    done = cli.run("ping", "--json", "--count", "2")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["leader"], doc["epoch"], doc["ip"], doc["port"]) == ("S056", 7, cli.relay.ip, cli.relay.port)
    assert doc["source"] == "lease" and len(doc["rtt_ms"]) == 2 and all(r > 0 for r in doc["rtt_ms"])
    api = leader_api()
    api.names("S056", cli.relay.ip, cli.relay.port, 7)
    via_agent = cli.run("ping", "--json", "--lease-dir", "", "--agent", api.url)
    assert via_agent.returncode == 0, via_agent.stderr
    assert json.loads(via_agent.stdout)["source"] == f"agent {api.url}"
    plain = cli.run("ping", "--count", "1")
    assert plain.returncode == 0 and plain.stdout.startswith(
        f"leader S056 at {cli.relay.ip}:{cli.relay.port} epoch 7"
    )


def test_it_exits_1_from_the_command_line_when_nobody_can_receive_the_message(cli):
    done = cli.run("send", "--role", "commander", "--station", "C01", "--to", "S404", "--id", "x", "{}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "relayclient send: the relay refused the message: no_route: no recipient (id 'x')"
    )


def test_it_exits_4_from_the_command_line_with_one_line_when_the_token_is_wrong(cli):
    relay = f"{cli.relay.ip}:{cli.relay.port}"
    done = cli.run(
        "send",
        "--role",
        "agent",
        "--station",
        "S002",
        "--token-file",
        "-",
        "--fallback",
        relay,
        "{}",
        stdin="wrong\n",
    )
    assert done.returncode == 4
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "bad_auth" in lines[0]
        and lines[0].startswith(f"relayclient: refused by S056 at {relay}")
    )
    assert done.stdout == ""
    # With only the lease to go by, a wrong token cannot even verify the lease's signature.
    done = cli.run("ping", "--connect-timeout", "0.5", STK_RELAY_TOKEN="wrong")
    assert done.returncode == 3
    assert "lease forged" in done.stderr and "a wrong relay token" in done.stderr


@pytest.mark.parametrize("flag", ["--token", "--api-token"])
def test_it_refuses_a_secret_on_the_command_line_with_one_line_and_never_uses_it(cli, flag):
    done = cli.run("ping", flag, TOKEN, "--connect-timeout", "0.5")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert f"{flag} is no longer accepted" in line and f"{flag}-file" in line
    assert cli.relay.clients() == {}  # it never connected


def test_it_reads_the_token_from_a_file_or_stdin_and_refuses_an_empty_one(cli, tmp_path):
    (tmp_path / "token").write_text(TOKEN + "\n")
    assert cli.run("ping", "--count", "1", "--token-file", str(tmp_path / "token")).returncode == 0
    assert cli.run("ping", "--count", "1", "--token-file", "-", stdin=TOKEN + "\n").returncode == 0
    empty = cli.run("ping", "--token-file", "-", stdin="\n")
    assert empty.returncode == 2 and "--token-file stdin is empty" in empty.stderr
    both = cli.run("ping", "--token-file", "-", "--credential-file", "-", stdin=TOKEN + "\n")
    assert both.returncode == 2 and "one secret only" in both.stderr


def test_it_exits_3_from_the_command_line_when_no_leader_can_be_reached(cli):
    write_lease(cli.lease_dir, "S066", HOST_DEAD, dead_port(), 7)
    done = cli.run("ping", "--connect-timeout", "0.5", "--fallback", f"{HOST_DEAD}:{dead_port()}")
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("relayclient: cannot reach a leader")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["send", "--role", "commander", "--station", "C01", "{}"], "must name --to"),
        (["send", "--role", "agent", "--station", "S002", "not json"], "not JSON"),
        (["listen", "--role", "agent"], "--station is required"),
        (["ping", "--fallback", "nowhere"], "is not HOST:PORT"),
        (["ping", "--lease-dir", "", "--kmsn", KMSN], "no way to find the leader"),
    ],
)
def test_it_exits_2_from_the_command_line_on_bad_usage_or_configuration(cli, args, says):
    done = cli.run(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in done.stderr
