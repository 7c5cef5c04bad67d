"""Old stations on the built-in relay (RELAY_LEGACY = 1, docs/relay.md "Legacy stations"): real sockets.

The old station here is written from docs/relay.md's description of the legacy
exchange, with raw sockets and `struct`, not with our framing code or client
library: a 4-byte big-endian length, one JSON object, the old MAGIC and the
site token in clear, and it speaks first. The modern side is our own
`relay.client.relay_client.RelayClient` (protocol 1.1, HMAC handshake). Hostile input
(wrong token, wrong KMSN, legacy off, huge, truncated and nested frames) is
refused with a clear error, counted in the relay's snapshot, and the relay goes
on serving.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

import pytest
from harness import wait_until
from test_relay_server import KMSN, TOKEN, Relay, Wire

from relay.client.discovery import Discovery
from relay.client.relay_client import RelayClient
from relay.wire.legacy import LegacySettings
from stkhost.pool_keys import station_credential

OLD_MAGIC = "STK-OLD-MAGIC-7"  # a stand-in: the real value is the site's relay_server.py MAGIC


class OldStation:
    """relay_client.prg as docs/relay.md describes it: raw length-prefixed JSON, speaks first."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr, timeout=5.0)

    def put(self, obj: Any) -> None:
        payload = json.dumps(obj).encode("utf-8")
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def get(self) -> dict:
        (n,) = struct.unpack(">I", self._exactly(4))
        return json.loads(self._exactly(n))  # type: ignore[no-any-return]

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, f"relay closed after {len(data)} of {n} bytes"
            data += chunk
        return data

    def register(self, role: str = "agent", station: str = "S002", **over: Any) -> dict:
        self.put({"type": "register", "magic": OLD_MAGIC, "role": role, "kmsn": KMSN, "station": station,
                  "token": TOKEN, **over})  # fmt: skip
        return self.get()

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def relays():
    made: list[Relay] = []

    def make(**kw: Any) -> Relay:
        kw.setdefault("legacy", LegacySettings(OLD_MAGIC, 0.3))
        made.append(Relay(**kw))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def refused(station: OldStation, code: str) -> dict:
    frame = station.get()
    assert frame["type"] == "error" and frame["code"] == code, frame
    assert station.closed()
    return frame


def legacy(relay: Relay) -> dict:
    return relay.snapshot()["legacy"]  # type: ignore[no-any-return]


def test_an_old_station_and_a_modern_commander_exchange_messages(relays):
    relay = relays()
    old = OldStation(relay.json)
    reply = old.register("agent", "S002")  # the first frame it reads is the answer: no hello
    assert reply == {"type": "registered", "epoch": 7, "session": reply["session"]}
    snap = relay.snapshot()
    assert snap["legacy"]["sessions"] == 1 and snap["legacy"]["registered"] == 1
    (client,) = snap["clients"]
    assert client["legacy"] is True and client["key"] == "token" and client["station"] == "S002"

    async def modern() -> None:
        discovery = Discovery.build(kmsn=KMSN, fallbacks=[relay.json])
        async with RelayClient(role="commander", kmsn=KMSN, station="C01", token=TOKEN,
                               discovery=discovery, connect_timeout=3.0) as commander:  # fmt: skip
            await commander.send_confirmed({"cmd": "status"}, to="S002")
            got = await asyncio.to_thread(old.get)
            assert got["type"] == "message" and got["from"] == {"role": "commander", "station": "C01"}
            assert got["data"] == {"cmd": "status"}
            await asyncio.to_thread(old.put, {"type": "send", "data": {"temp": 21}, "id": "old-1"})
            received = await commander.receive(timeout=5)
            assert received.data == {"temp": 21}
            assert (received.sender_role, received.sender_station) == ("agent", "S002")
            await asyncio.to_thread(old.put, {"type": "keepalive"})
            assert await asyncio.to_thread(old.get) == {"type": "keepalive_ack"}

    asyncio.run(asyncio.wait_for(modern(), 20))
    assert legacy(relay)["sessions"] == 1
    old.close()
    wait_until(lambda: legacy(relay)["sessions"] == 0, timeout=5)


def test_a_modern_client_is_greeted_after_the_wait_and_an_old_one_after_a_hello_too(relays):
    relay = relays(legacy=LegacySettings(OLD_MAGIC, 0.0))  # hello at once: old stations skip it
    old = OldStation(relay.json)
    hello = old.get()
    assert hello["type"] == "hello" and hello["magic"] == "STKRELAY/1"
    assert old.register("commander", "C07")["type"] == "registered"
    assert legacy(relay)["registered"] == 1


@pytest.mark.parametrize(
    "over, code, needle",
    [
        ({"token": "not-the-site-token"}, "bad_auth", "RELAY_TOKEN"),
        ({"kmsn": "1111-1111-11-11"}, "wrong_kmsn", KMSN),
        ({"token": ""}, "bad_request", "token"),
        ({"role": "tunnel"}, "bad_request", "role"),
        ({"station": {"nested": {"deeper": [1, 2, 3]}}}, "bad_request", "station"),
    ],
)
def test_a_bad_register_is_refused_clearly_and_counted(relays, over, code, needle):
    relay = relays()
    station = OldStation(relay.json)
    frame = refused_after(station, over, code)
    assert needle in frame["message"]
    assert legacy(relay)["refused"] == {code: 1} and legacy(relay)["sessions"] == 0
    assert OldStation(relay.json).register()["type"] == "registered"  # the relay goes on serving


def refused_after(station: OldStation, over: dict, code: str) -> dict:
    station.put({"type": "register", "magic": OLD_MAGIC, "role": "agent", "kmsn": KMSN, "station": "S002",
                 "token": TOKEN, **over})  # fmt: skip
    return refused(station, code)


def test_the_site_token_is_compared_whole(relays):
    relay = relays()
    for token in (TOKEN[:-1], TOKEN + "x", TOKEN.upper(), " " + TOKEN):
        refused_after(OldStation(relay.json), {"token": token}, "bad_auth")
    assert legacy(relay)["refused"] == {"bad_auth": 4}


def test_a_station_credential_works_as_the_token_and_keys_only_refuses_the_site_token(relays):
    relay = relays(station_keys_only=True)
    credential = station_credential(TOKEN, KMSN, "S002")
    old = OldStation(relay.json)
    assert old.register(token=credential)["type"] == "registered"
    assert relay.snapshot()["clients"][0]["key"] == "station"
    frame = refused_after(OldStation(relay.json), {"station": "S003"}, "bad_auth")
    assert "RELAY_STATION_KEYS_ONLY" in frame["message"]
    # The credential of one station does not open another.
    refused_after(OldStation(relay.json), {"station": "S003", "token": credential}, "bad_auth")


def test_with_legacy_off_an_old_station_is_refused_bad_magic(relays):
    relay = relays(legacy=None)
    old = OldStation(relay.json)
    old.put({"type": "register", "magic": OLD_MAGIC, "role": "agent", "kmsn": KMSN, "station": "S002",
             "token": TOKEN})  # fmt: skip
    assert old.get()["type"] == "hello"  # v1: the server spoke first, the station did not listen
    refused(old, "bad_magic")
    snap = relay.snapshot()
    assert snap["legacy"] == {"enabled": False} and snap["drops"].get("protocol_error") == 1


def test_huge_frames_are_refused_before_being_buffered(relays):
    relay = relays()
    huge = OldStation(relay.json)
    huge.sock.sendall(struct.pack(">I", 0xFFFFFFFF))
    refused(huge, "frame_too_large")
    # Under max_frame but over what an unregistered client may send (64 KiB): cut off there.
    big = OldStation(relay.json)
    big.sock.sendall(struct.pack(">I", 900_000) + b'{"type":"register","pad":"' + b"x" * 70_000)
    refused(big, "frame_too_large")
    assert legacy(relay)["refused"] == {"frame_too_large": 2}
    assert OldStation(relay.json).register()["type"] == "registered"


def test_nested_and_broken_json_is_refused(relays):
    relay = relays()
    deep = OldStation(relay.json)
    payload = b"[" * 50_000 + b"]" * 50_000
    deep.sock.sendall(struct.pack(">I", len(payload)) + payload)
    refused(deep, "bad_json")
    for payload in (b"\xff\xfe not utf-8", b'{"type":"register",', b'["a list"]', b"NaN"):
        station = OldStation(relay.json)
        station.sock.sendall(struct.pack(">I", len(payload)) + payload)
        station.get()
        assert station.closed()
    assert legacy(relay)["refused"] == {"bad_json": 4, "bad_request": 1}
    assert OldStation(relay.json).register()["type"] == "registered"


def test_a_truncated_frame_is_counted_whether_the_station_leaves_or_stalls(relays):
    relay = relays(register_timeout=0.6)
    gone = OldStation(relay.json)
    gone.sock.sendall(struct.pack(">I", 100) + b'{"type":"reg')
    gone.close()
    wait_until(lambda: legacy(relay)["refused"].get("truncated") == 1, timeout=5)
    stalled = OldStation(relay.json)
    stalled.sock.sendall(struct.pack(">I", 100) + b'{"type":"reg')
    refused(stalled, "timeout")
    assert legacy(relay)["refused"] == {"timeout": 1, "truncated": 1}
    assert OldStation(relay.json).register()["type"] == "registered"


def test_an_old_session_is_fenced_like_any_other(relays):
    relay = relays()
    relay.leader = False
    refused_after(OldStation(relay.json), {}, "not_leader")
    relay.leader = True
    old = OldStation(relay.json)
    assert old.register()["type"] == "registered"
    relay.call(relay.server.lose_leadership, 8, "127.0.0.42", 9530)
    assert old.get() == {"type": "leader_changed", "epoch": 8, "ip": "127.0.0.42", "port": 9530}
    assert old.closed()


def test_an_old_publisher_feeds_a_modern_viewer(relays):
    relay = relays()
    viewer = relay.client("viewer", "S002")
    old = OldStation(relay.passthrough)
    assert old.register("publisher", "S002")["type"] == "registered"
    old.sock.sendall(b"\x00\x00\x00\x01h264-bytes")
    assert viewer.raw(14) == b"\x00\x00\x00\x01h264-bytes"
    assert legacy(relay)["sessions"] == 1


def test_a_peer_through_the_cloud_tunnel_is_never_offered_the_legacy_register(relays):
    """The cloud greets remote clients with its nonce; their connection here stays v1 only."""
    relay = relays()
    remote = relay.call(lambda: relay.server.new_connection(roles={"agent"}, raw_mode=False, nonce="ab" * 16))
    local = relay.call(lambda: relay.server.new_connection(roles={"agent"}, raw_mode=False))
    assert type(remote).__name__ == "ServerConnection" and type(local).__name__ == "LegacyServerConnection"
    register = {"type": "register", "magic": OLD_MAGIC, "role": "agent", "kmsn": KMSN, "station": "S002",
                "token": TOKEN}  # fmt: skip
    payload = json.dumps(register).encode()
    remote.receive_data(struct.pack(">I", len(payload)) + payload)
    answer = remote.data_to_send()
    assert b'"bad_magic"' in answer and remote.close_expected()


def test_a_silent_client_reads_the_hello_before_leader_changed(relays):
    """Leadership lost within the wait: a modern client that waited still gets its hello first."""
    relay = relays(legacy=LegacySettings(OLD_MAGIC, 2.0))
    wire = Wire(relay.json)
    wait_until(lambda: relay.snapshot()["connections"] == 1, timeout=5)
    relay.call(relay.server.lose_leadership, 8, "127.0.0.42", 9530)
    assert wire.frame()["type"] == "hello"
    assert wire.frame() == {"type": "leader_changed", "epoch": 8, "ip": "127.0.0.42", "port": 9530}
    # One that spoke first (an old station, mid-register) gets no hello, just the news.
    relay2 = relays(legacy=LegacySettings(OLD_MAGIC, 2.0))
    old = OldStation(relay2.json)
    old.sock.sendall(struct.pack(">I", 100) + b'{"type":')

    def spoke() -> bool:  # on the relay's loop: its bytes arrived before any hello
        return any(p.conn is not None and p.conn.spoke_first for p in relay2.server.peers)

    wait_until(lambda: relay2.call(spoke), timeout=5)
    relay2.call(relay2.server.lose_leadership, 9, None, None)
    assert old.get() == {"type": "leader_changed", "epoch": 9, "ip": None, "port": None}
