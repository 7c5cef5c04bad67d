"""The relay's TCP servers end to end (docs/design.md §8): real sockets on loopback.

The server runs on its own asyncio loop in a thread; clients are blocking
sockets speaking bytes, framed with the protocol core's codec. The routing
table's own rules are also checked directly, with plain session objects.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import select
import socket
import threading
import time
from typing import Any

import pytest
from harness import wait_until
from hypothesis import given
from hypothesis import strategies as st

from relay.server.relay_server import RelayServer
from relay.server.routing import REPLACED, Router, encode_message, message_prefix
from relay.wire.auth import auth_digest
from relay.wire.events import MAGIC
from relay.wire.framing import FrameDecoder, encode_frame

HOST = "127.0.0.41"
TOKEN = "relay-test-token"
KMSN = "9999-9999-99-99"
EPOCH = 7


class Wire:
    """A blocking test client: frames in and out, raw bytes after a passthrough register."""

    def __init__(self, addr: tuple[str, int], rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5.0)
        self.sock.connect(addr)
        self.buf, self.decoder = bytearray(), FrameDecoder(64 << 20)
        self.hello: dict | None = None

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 16)
        self.buf += chunk
        return bool(chunk)

    def frame(self) -> dict:
        """The next frame from the server; AssertionError on EOF."""
        while True:
            del self.buf[: self.decoder.feed(self.buf, max_frames=1)]
            for item in self.decoder.events():
                assert isinstance(item, dict), item
                return item
            assert self._fill(), "connection closed while waiting for a frame"

    def raw(self, n: int) -> bytes:
        while len(self.buf) < n:
            assert self._fill(), f"connection closed after {len(self.buf)} of {n} bytes"
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def frame_or_none(self) -> dict | None:
        """The next frame, or None once the server closed the connection."""
        try:
            return self.frame()
        except (AssertionError, ConnectionResetError):
            return None

    def eof(self) -> bool:
        """True once the server closed the connection (reset counts too)."""
        try:
            while self._fill():
                pass
        except ConnectionResetError:
            pass
        return True

    def greet(self) -> dict:
        self.hello = self.frame()
        return self.hello

    def register_frame(self, role: str, station: str, /, **override: Any) -> dict:
        nonce = (self.hello or self.greet())["nonce"]
        auth = auth_digest(TOKEN, nonce, role, override.get("kmsn", KMSN), station)
        msg = {"type": "register", "magic": MAGIC, "role": role, "kmsn": KMSN, "station": station}
        return {**msg, "auth": auth, **override}

    def register(self, role: str, station: str, /, **override: Any) -> dict:
        self.send_frame(self.register_frame(role, station, **override))
        return self.frame()

    def send_frame(self, obj: dict) -> None:
        self.sock.sendall(encode_frame(obj))

    def send(self, data: Any, to: str | None = None, id: Any = None) -> None:
        self.send_frame({"type": "send", "data": data, **({"to": to} if to else {}), "id": id})

    def assert_nothing_pending(self) -> None:
        """Nothing arrived before the answer to a keepalive sent now."""
        self.send_frame({"type": "keepalive"})
        assert self.frame() == {"type": "keepalive_ack"}


class Relay:
    """A RelayServer on its own loop in a thread, with a gate the test controls."""

    def __init__(self, **kw: Any) -> None:
        self.leader = True
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        args = {"node": "S001", "kmsn": KMSN, "token": TOKEN, "epoch": EPOCH, "gate": lambda: self.leader}
        self.server = RelayServer(**{**args, **kw})
        self.run(self.server.start(HOST, 0, 0))
        self.json, self.passthrough = self.server.addresses["json"], self.server.addresses["passthrough"]

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def call(self, fn: Any, *args: Any) -> Any:
        async def _call() -> Any:
            return fn(*args)

        return self.run(_call())

    def snapshot(self) -> dict:
        return self.call(self.server.snapshot)  # type: ignore[no-any-return]

    def stop(self) -> None:
        self.call(self.server.lose_leadership)
        self.run(self.server.wait_closed(1.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    def client(self, role: str, station: str, **kw: Any) -> Wire:
        wire = Wire(self.passthrough if role in ("publisher", "viewer") else self.json, **kw)
        reply = wire.register(role, station)
        assert reply["type"] == "registered", reply
        return wire


@pytest.fixture
def relay_factory():
    relays: list[Relay] = []

    def make(**kw: Any) -> Relay:
        relays.append(Relay(**kw))
        return relays[-1]

    yield make
    for r in relays:
        r.stop()


@pytest.fixture
def relay(relay_factory) -> Relay:
    return relay_factory()


def message(role: str, station: str, data: Any, id: Any = None) -> dict:
    return {"type": "message", "from": {"role": role, "station": station}, "data": data, "id": id}


def _fails_with(wire: Wire, code: str) -> dict:
    frame = wire.frame()
    assert frame["type"] == "error" and frame["code"] == code, frame
    assert wire.eof()
    return frame


# -- handshake ------------------------------------------------------------------
def test_it_greets_with_hello_and_registers_with_the_servers_epoch(relay):
    wire = Wire(relay.json)
    hello = wire.greet()
    assert hello["type"] == "hello" and hello["magic"] == MAGIC
    assert hello["epoch"] == EPOCH and hello["node"] == "S001" and len(hello["nonce"]) == 32
    reply = wire.register("agent", "S002", epoch=EPOCH)
    assert reply["type"] == "registered" and reply["epoch"] == EPOCH and reply["session"]


@pytest.mark.parametrize(
    ("override", "code"),
    [
        ({"magic": "STKRELAY/0"}, "bad_magic"),
        ({"auth": "00" * 32}, "bad_auth"),
        ({"kmsn": "1111-1111-11-11"}, "wrong_kmsn"),
        ({"epoch": EPOCH + 1}, "stale_epoch"),
        ({"role": "publisher"}, "bad_request"),
        ({"station": ""}, "bad_request"),
        ({"type": "send"}, "bad_request"),
    ],
)
def test_it_refuses_a_bad_register_with_its_error_code_then_closes(relay, override, code):
    wire = Wire(relay.json)
    reply = wire.register("agent", "S002", **override)
    assert reply["type"] == "error" and reply["code"] == code, reply
    assert wire.eof()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"\x00\x00\x00\x05{nope", "bad_json"),
        (b"\x00\x00\x00\x02\xff\xfe", "bad_json"),
        (b"\x00\x00\x00\x02[]", "bad_request"),
        (b"\x00\x00\x00\x00", "bad_request"),
        ((1024 + 1).to_bytes(4, "big"), "frame_too_large"),
        (b"\xff\xff\xff\xf0", "frame_too_large"),
    ],
)
def test_it_answers_malformed_frames_with_their_error_code(relay_factory, payload, code):
    relay = relay_factory(max_frame=1024)
    wire = Wire(relay.json)
    wire.greet()
    wire.sock.sendall(payload)
    _fails_with(wire, code)


def test_it_refuses_a_handshake_larger_than_its_limit(relay):
    wire = Wire(relay.json)
    wire.greet()
    wire.sock.sendall((512 << 10).to_bytes(4, "big") + b"x" * (100 << 10))
    frame = _fails_with(wire, "frame_too_large")
    assert "handshake" in frame["message"]


def test_it_times_out_a_peer_that_never_registers(relay_factory):
    relay = relay_factory(register_timeout=0.3)
    wire = Wire(relay.json)
    wire.greet()
    started = time.monotonic()
    _fails_with(wire, "timeout")
    assert 0.25 <= time.monotonic() - started < 3


def test_it_refuses_registration_with_not_leader_as_soon_as_the_gate_closes(relay):
    early = Wire(relay.json)
    early.greet()  # connected while leader...
    kept = relay.client("agent", "S002")
    relay.leader = False  # ...registers after the gate closed
    reply = early.register("agent", "S003")
    assert reply["code"] == "not_leader"
    assert early.eof()
    assert Wire(relay.json).register("commander", "C01")["code"] == "not_leader"
    kept.send_frame({"type": "keepalive"})  # a registered peer's next bytes meet the shut gate too
    assert kept.frame()["type"] == "leader_changed" and kept.eof()


def test_not_one_byte_is_routed_once_the_gate_shut_between_two_looks_of_the_runner(relay):
    """docs/design.md §15: a relay woken from a freeze finds in its sockets what clients
    sent meanwhile; the gate (whose deadline passed) is asked before any of it is
    routed. Counted at the receiving client: nothing sent after the shut arrives."""
    agent = relay.client("agent", "S002")
    commander = relay.client("commander", "C01")
    commander.send({"n": 1}, to="S002", id=1)
    assert agent.frame() == message("commander", "C01", {"n": 1}, 1)
    relay.leader = False  # the deadline passed; the runner has not looked yet
    for n in range(2, 12):
        try:
            commander.send({"n": n}, to="S002", id=n)
        except (BrokenPipeError, ConnectionResetError):  # the relay let go of it: nothing more can arrive
            break
    got = []
    while (frame := agent.frame_or_none()) is not None:
        got.append(frame)
    assert [f["type"] for f in got] == ["leader_changed"], got
    assert relay.call(lambda: relay.server.leading) is False


# -- after registration -----------------------------------------------------------
def test_it_answers_keepalive_and_closes_a_peer_silent_for_three_keepalives(relay_factory):
    relay = relay_factory(keepalive=0.2)
    wire = relay.client("agent", "S002")
    for i in range(8):  # 1.4 s of keepalives every 0.2 s: stays open
        if i:
            time.sleep(0.2)
        last = time.monotonic()
        wire.send_frame({"type": "keepalive"})
        assert wire.frame() == {"type": "keepalive_ack"}
    frame = _fails_with(wire, "timeout")
    assert 0.55 <= time.monotonic() - last < 3, frame


def test_it_keeps_the_connection_after_an_unknown_type_but_not_after_a_send_without_data(relay):
    wire = relay.client("agent", "S002")
    wire.send_frame({"type": "dance", "id": 5})
    reply = wire.frame()
    assert reply["code"] == "bad_request" and reply["id"] == 5
    wire.assert_nothing_pending()
    wire.send_frame({"type": "send", "id": 6})
    _fails_with(wire, "bad_request")


def test_it_answers_no_route_and_stays_open(relay):
    commander = relay.client("commander", "C01")
    commander.send({"x": 1}, to="S404", id="m1")
    reply = commander.frame()
    assert reply["type"] == "error" and reply["code"] == "no_route" and reply["id"] == "m1"
    agent = relay.client("agent", "S002")
    agent.send(1, to="C404")
    assert agent.frame()["code"] == "no_route"
    commander.send(2, to="S002", id="m2")
    assert agent.frame()["data"] == 2


def test_it_refuses_to_relay_a_message_that_would_exceed_max_frame(relay_factory):
    relay = relay_factory(max_frame=1024)
    agent = relay.client("agent", "S002")
    commander = relay.client("commander", "C01")
    commander.send("x" * (1024 - 60), to="S002", id=1)  # fits; with "from" it would not
    reply = commander.frame()
    assert reply["code"] == "frame_too_large" and reply["id"] == 1
    commander.send("small", to="S002", id=2)
    assert agent.frame()["id"] == 2


def test_it_routes_a_commanders_send_to_the_named_station_only(relay):
    s2, s3 = relay.client("agent", "S002"), relay.client("agent", "S003")
    other = relay.client("commander", "C02")
    c1 = relay.client("commander", "C01")
    c1.send({"cmd": "reboot"}, to="S002", id="a")
    assert s2.frame() == message("commander", "C01", {"cmd": "reboot"}, "a")
    c1.send("all", to="*", id="b")
    assert s2.frame()["id"] == "b" and s3.frame()["id"] == "b"  # S003's first message is "b"
    for wire in (s2, s3, other, c1):  # nothing else arrived anywhere
        wire.assert_nothing_pending()


def test_it_routes_an_agents_send_to_every_commander_or_the_one_named(relay):
    c1, c2 = relay.client("commander", "C01"), relay.client("commander", "C02")
    s3 = relay.client("agent", "S003")
    s2 = relay.client("agent", "S002")
    s2.send_frame({"type": "send", "data": [1, 2]})  # no id: the message says null
    assert c1.frame() == c2.frame() == message("agent", "S002", [1, 2])
    s2.send("only", to="C02", id=9)
    assert c2.frame()["id"] == 9
    for wire in (c1, s3, s2):
        wire.assert_nothing_pending()


def test_it_replaces_an_older_duplicate_registration_with_the_newer(relay):
    old = relay.client("agent", "S002")
    new = relay.client("agent", "S002")
    frame = _fails_with(old, "bad_request")
    assert frame["message"] == REPLACED
    commander = relay.client("commander", "C01")
    commander.send("hi", to="S002", id=1)
    assert new.frame()["id"] == 1
    snap = relay.snapshot()
    assert snap["counts"] == {KMSN: {"S002": {"agent": 1}, "C01": {"commander": 1}}}
    assert snap["drops"]["replaced"] == 1


# -- passthrough ----------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 3])
def test_it_passes_a_publishers_bytes_to_every_viewer_in_order(relay, count):
    viewers = [relay.client("viewer", "S002") for _ in range(count)]
    stranger = relay.client("viewer", "S003")
    pub = Wire(relay.passthrough)
    stream = os.urandom(1 << 20)
    register = encode_frame(pub.register_frame("publisher", "S002"))
    pub.sock.sendall(register + stream[:1000])  # raw bytes right behind register
    assert pub.frame()["type"] == "registered"
    for i in range(1000, len(stream), 50_000):
        pub.sock.sendall(stream[i : i + 50_000])
    for viewer in viewers:
        assert viewer.raw(len(stream)) == stream
    stranger.sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        stranger.sock.recv(1)


def test_it_drops_a_viewer_that_stops_reading_without_stalling_the_others(relay_factory):
    relay = relay_factory(buffer_limit=256 << 10)
    reader = relay.client("viewer", "S002")
    stuck = relay.client("viewer", "S002", rcvbuf=4096)
    publisher = relay.client("publisher", "S002")
    stream = os.urandom(1 << 20) * 16
    got = bytearray()
    progress = threading.Condition()

    def read() -> None:
        while len(got) < len(stream):
            chunk = reader.sock.recv(1 << 20)
            with progress:
                got.extend(chunk)
                progress.notify()
            if not chunk:
                return

    threading.Thread(target=read, daemon=True).start()
    window = 128 << 10  # the publisher goes at the reader's pace, never the stuck viewer's
    for sent in range(0, len(stream), 32 << 10):
        with progress:
            assert progress.wait_for(lambda s=sent: len(got) >= s - window, 10), "publisher stalled"
        publisher.sock.sendall(stream[sent : sent + (32 << 10)])
    with progress:
        assert progress.wait_for(lambda: len(got) >= len(stream), 10)
    assert bytes(got) == stream
    wait_until(lambda: relay.snapshot()["drops"].get("slow_viewer") == 1, 5, "the stuck viewer's drop")
    assert stuck.eof()
    assert [c["role"] for c in relay.snapshot()["clients"]] == ["publisher", "viewer"]


# -- leadership -------------------------------------------------------------------------
def test_it_sends_leader_changed_to_every_client_then_closes_everything(relay):
    agent, commander = relay.client("agent", "S002"), relay.client("commander", "C01")
    pending = Wire(relay.json)
    pending.greet()
    viewer = relay.client("viewer", "S002")
    relay.call(relay.server.lose_leadership, 8, "127.0.0.42", 9530)
    expected = {"type": "leader_changed", "epoch": 8, "ip": "127.0.0.42", "port": 9530}
    for wire in (agent, commander, pending):
        assert wire.frame() == expected
        assert wire.eof()
    assert viewer.eof()
    relay.run(relay.server.wait_closed(1.0))
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(relay.json, timeout=2)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(relay.passthrough, timeout=2)


def test_a_client_that_keeps_sending_as_leadership_is_lost_still_reads_where_the_leader_went(relay):
    """The old relay half-closes and reads on (discarding) until the client closes: a
    socket closed with the client's bytes still coming answers them with a reset, and a
    reset may discard the unread ``leader_changed`` (issue 22: a streaming client then
    found the target by discovery, tens of ms after its relay listened)."""
    agent = relay.client("agent", "S002")
    relay.call(relay.server.lose_leadership, 8, "127.0.0.42", 9530)
    readable, _, _ = select.select([agent.sock], [], [], 5)
    assert readable, "no leader_changed within 5 s"  # sent, and the relay's side closed, in that loop turn
    for n in range(20):  # a stream that does not know yet: bytes the relay never reads into a route
        agent.send({"n": n})
    assert agent.frame() == {"type": "leader_changed", "epoch": 8, "ip": "127.0.0.42", "port": 9530}
    assert agent.eof()
    agent.sock.close()
    relay.run(relay.server.wait_closed(1.0))
    assert relay.snapshot()["connections"] == 0


def test_a_client_gone_just_before_leadership_is_lost_is_closed_quietly_and_the_rest_are_told(relay):
    """A client that closed its socket when the relay, not having read that yet, loses
    leadership: `leader_changed` is still sent, the client's host answers it with a reset,
    and the half-close finds the socket unconnected (ENOTCONN). That is a client gone, not
    the relay's fault: no `internal_error`, no traceback, and every other client is told
    (seen in make chaos: four tracebacks in 200 faults)."""
    gone, agent = relay.client("commander", "C09"), relay.client("agent", "S002")

    def close_then_lose() -> None:  # one loop turn: the relay has no chance to read the close first
        gone.sock.close()
        relay.server.lose_leadership(8, "127.0.0.42", 9530)

    relay.call(close_then_lose)
    assert agent.frame() == {"type": "leader_changed", "epoch": 8, "ip": "127.0.0.42", "port": 9530}
    assert agent.eof()
    relay.run(relay.server.wait_closed(1.0))
    snap = relay.snapshot()
    assert snap["connections"] == 0 and snap["drops"].get("internal_error", 0) == 0, snap


# -- robustness and visibility ------------------------------------------------------------
def test_it_closes_only_the_connection_whose_callback_fails(relay_factory):
    calls = []

    def epoch() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return EPOCH

    relay = relay_factory(epoch=epoch)
    assert Wire(relay.json).eof()  # the first connection's hello failed: closed
    assert relay.client("agent", "S002")
    assert relay.snapshot()["drops"]["internal_error"] == 1


def test_it_serves_a_pair_despite_1000_idle_and_100_garbage_connections(relay):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    idle = [socket.create_connection(relay.json, timeout=5) for _ in range(1000)]
    garbage = []
    for i in range(100):
        s = socket.create_connection(relay.json, timeout=5)
        junk = [os.urandom(64), b"\x00\x00\x10\x00" + b"{" * 100, b"\xff" * 4, b"\x00\x00\x00\x03[1]"][i % 4]
        s.sendall(junk)
        garbage.append(s)
    wait_until(lambda: relay.snapshot()["connections"] >= 1000, 20, "the idle connections to be accepted")
    agent, commander = relay.client("agent", "S002"), relay.client("commander", "C01")
    for n in range(100):
        commander.send(n, to="S002", id=n)
        assert agent.frame()["data"] == n
        agent.send(-n, id=n)
        assert commander.frame()["data"] == -n
    assert relay.snapshot()["unregistered"] >= 1000
    for s in idle + garbage:
        s.close()


def test_it_reports_clients_and_counters_in_a_json_snapshot(relay):
    agent, commander = relay.client("agent", "S002"), relay.client("commander", "C01")
    commander.send("x", to="S002", id=1)
    agent.frame()
    commander.send("x", to="S404", id=2)
    commander.frame()
    snap = json.loads(json.dumps(relay.snapshot()))
    assert snap["epoch"] == EPOCH and snap["leading"] is True
    assert snap["listening"]["json"] == f"{HOST}:{relay.json[1]}"
    assert snap["counts"] == {KMSN: {"S002": {"agent": 1}, "C01": {"commander": 1}}}
    assert [(c["role"], c["station"]) for c in snap["clients"]] == [("commander", "C01"), ("agent", "S002")]
    relayed = snap["relayed"]
    assert relayed["messages"] == 1 and relayed["no_route"] == 1 and relayed["bytes"] > 0


# -- the routing table alone ---------------------------------------------------------------
class FakeSession:
    def __init__(self, kmsn: str, station: str, role: str) -> None:
        self.kmsn, self.station, self.role = kmsn, station, role
        self.station_key = False
        self.frames: list[dict] = []
        self.raw, self.closed = bytearray(), None
        self.deliver = lambda frame: self.frames.append(json.loads(frame[4:]))
        self.deliver_raw = self.raw.extend
        self.close = lambda code, message: setattr(self, "closed", (code, message))


def test_the_router_never_crosses_a_kmsn_or_a_role():
    router = Router()
    mine = {role: FakeSession(KMSN, "S002", role) for role in ("agent", "commander")}
    theirs = {role: FakeSession("1111", "S002", role) for role in ("agent", "commander")}
    for s in [*mine.values(), *theirs.values()]:
        router.register(s)
    assert router.send(mine["commander"], {"to": "*", "data": 1}) == 1
    assert router.send(mine["agent"], {"data": 2}) == 1
    assert [f["data"] for f in mine["agent"].frames] == [1]
    assert [f["data"] for f in mine["commander"].frames] == [2]
    assert theirs["agent"].frames == [] and theirs["commander"].frames == []


def test_the_router_replaces_a_duplicate_publisher_and_ignores_the_old_ones_bytes():
    router = Router()
    viewer = FakeSession(KMSN, "S002", "viewer")
    old, new = FakeSession(KMSN, "S002", "publisher"), FakeSession(KMSN, "S002", "publisher")
    router.register(viewer)
    router.register(old)
    assert router.register(new) is old and old.closed == ("bad_request", REPLACED)
    assert router.publish(old, b"stale") == 0
    assert router.publish(new, b"fresh") == 1
    assert not router.unregister(old) and router.unregister(new)
    assert bytes(viewer.raw) == b"fresh"


_text = st.text(max_size=8) | st.text(  # and lone surrogates, which UTF-8 cannot carry
    st.characters(codec=None, categories=["Cs", "Ll", "Lu", "Nd", "Po", "Cc"]), max_size=8
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


@given(station=_text.filter(bool), data=_json, id=_json)
def test_the_fast_message_encoder_gives_the_same_bytes_as_encode_frame(station, data, id):
    message = {"type": "message", "from": {"role": "agent", "station": station}, "data": data, "id": id}
    expected = encode_frame(message)
    assert encode_message("agent", station, data, id, 1 << 20, message_prefix("agent", station)) == expected
    assert encode_message("agent", station, data, id, 1 << 20) == expected
