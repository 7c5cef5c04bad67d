"""A hostile party on the site's LAN against the station door (relay/server/station_door.py) and
what it extends (the entry's gate, the fencing proxy, its splice pipe, the keyed PROXY v2 header),
each attack on real loopback sockets or the door's own decision functions; docs/security.md,
"Attacks tried on the station door", lists them with their results."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import time
from pathlib import Path

from harness import free_pair
from test_entry import relay, view
from test_proxy import rig, until
from test_proxy_splice import pattern

from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import PoolView
from relay.server.entry import EntryGate, target_of
from relay.server.station_door import StationDoor
from relay.wire.proxy_header import SIGNATURE, HeaderReader, Verified, encode


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_pool_view_from_the_future_is_no_leader():
    """A pool.json left by the previous boot (its `updated` is that boot's monotonic reading, far
    above this boot's clock) or written by something else: never fresh, however far ahead."""
    now = time.monotonic()
    assert target_of(view(updated=now + 3600), now, 2.0) is None
    assert target_of(view(updated=now + 2.5), now, 2.0) is None
    assert target_of(view(updated=now), now, 2.0) is not None


def test_the_gate_shuts_the_moment_the_view_it_read_goes_stale_not_at_its_next_read():
    """The gate reads pool.json at most every `cache_s`; the view's freshness runs out between
    reads, and the gate says no from that moment (each send, each accept asks it)."""
    clock = Clock(1000.0)
    reads = []

    def read() -> PoolView:
        reads.append(clock.now)
        return view(updated=1000.0)

    gate = EntryGate(read, stale_after=2.0, cache_s=0.05, clock=clock)
    gate.target = gate.look()
    assert gate.target is not None and gate()
    clock.now = 1001.99  # read again: fresh still
    assert gate()
    clock.now = 1002.001  # within the cache, past the view's freshness
    assert not gate() and gate.look() is None
    assert len(reads) == 2


def test_a_leader_gone_from_pool_json_shuts_the_gate_within_10_ms():
    clock = Clock(1000.0)
    views = [view(updated=1000.0)]
    gate = EntryGate(lambda: views[-1], stale_after=2.0, clock=clock)
    gate.target = gate.look()
    views.append(PoolView(kmsn="k", node="S001", updated=1000.0))  # the worker: no leader
    clock.now += 0.0101  # 10 ms (and a float's rounding)
    assert not gate()


KEY = "door-attack-pool-key-5c1e9a7d3b20"


class Recorder:
    """The leader's relay as a stand-in on 127.0.0.1: keeps every byte of each connection, and
    the peer it came from (the door's upstream socket)."""

    def __init__(self) -> None:
        self.got: list[tuple[tuple[str, int], bytearray]] = []
        self.ended = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.client, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = bytearray()
        self.got.append((writer.get_extra_info("peername")[:2], data))
        try:
            while chunk := await reader.read(65536):
                data += chunk
        except ConnectionError:
            pass
        self.ended += 1
        writer.close()


def attacker_dials(host: str, port: int, payload: bytes, source: str = "127.0.0.89") -> tuple[str, int]:
    """A LAN host's connection to the door: `payload`, then EOF; its own address and port."""
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.connect((host, port))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        try:
            while sock.recv(1000):
                pass
        except ConnectionError:
            pass
        return sock.getsockname()[:2]


async def connected(sock: socket.socket, address: tuple[str, int]) -> socket.socket:
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    return sock


async def shut(door: StationDoor, task: asyncio.Future, *ends: socket.socket | asyncio.StreamWriter) -> None:
    """Close the test's own sockets, then stop the door: it exits cleanly (0)."""
    for end in ends:
        end.close()
    door._stop.set()
    assert await asyncio.wait_for(task, 5) == 0


def forged(src: tuple[str, int], dst: tuple[str, int], key: str = "not-the-pool-key") -> bytes:
    return encode(src, dst, dst, key)


def test_a_forged_proxy_header_through_the_door_goes_nowhere_and_never_names_another_address(tmp_path: Path):
    """``RELAY_FORWARD = lan``: a LAN host dials a follower's NODE_IP door with PROXY v2 headers of
    its own (claiming 127.0.0.1 or another station; a bad MAC, none, truncated, a huge TLV, twice).
    A header from the LAN is verified (another member's door may send one) and a forged one never
    is: that connection goes nowhere. Bytes that are no header go on after the door's own header,
    which names the attacker's real address, untouched, where the relay's protocol takes them as
    a (bad) frame."""
    loopback, lan = "127.0.0.81", "127.0.0.82"
    port = free_pair(loopback, lan)
    victim = ("127.0.0.1", 40000)
    sig_only = SIGNATURE + struct.pack("!BBH", 0x21, 0x11, 0xFFFF)
    payloads = {
        "bad_mac": forged(victim, (lan, port)) + b"hello",
        "no_mac": SIGNATURE + struct.pack("!BBH", 0x21, 0x11, 12) + bytes(12) + b"hello",
        "truncated": forged(victim, (lan, port))[:20],
        "huge_tlv": sig_only + b"\xe0\xff\xff" + b"A" * 4000,
        "twice": forged(victim, (lan, port)) * 2 + b"hello",
        "mid_stream": b"hi" + forged(("127.0.0.3", 9), (lan, port)),
    }

    async def main() -> None:
        upstream = Recorder()
        up_port = await upstream.start()
        local = LocalState(tmp_path)
        door = StationDoor(str(tmp_path), "S001", (loopback, lan), port, stale_after=5.0, lan_host=lan,
                           pool_key=KEY)  # fmt: skip
        task = asyncio.ensure_future(door.run())
        local.write_pool(view(7, "S002", up_port))
        await until(lambda: lan in door.proxy.listening_on)
        forwarded = 0
        for name, payload in payloads.items():
            before = len(upstream.got)
            me = await asyncio.to_thread(attacker_dials, lan, port, payload)
            await until(lambda: not door.proxy.pairs)  # the door let the connection go
            if payload.startswith(SIGNATURE):
                # A header of its own: the door verifies one (another member's door may send it)
                # and a forged one never verifies: not a byte of that connection goes up (the
                # door may have dialled the relay already, and hangs up having said nothing).
                await until(lambda before=before: upstream.ended == len(upstream.got))
                assert [bytes(d) for _, d in upstream.got[before:]] in ([], [b""]), name
                continue
            forwarded += 1
            await until(
                lambda before=before: len(upstream.got) > before and upstream.ended == len(upstream.got)
            )
            peer, data = upstream.got[-1]
            reading = HeaderReader(KEY, peer)
            seen = reading.feed(bytes(data))
            assert isinstance(seen, Verified), (name, seen)
            assert seen.src == me, f"{name}: the relay was told {seen.src}, the attacker is {me}"
            assert reading.rest == payload, f"{name}: the attacker's bytes were changed"
            assert not isinstance(HeaderReader(KEY, peer).feed(reading.rest), Verified), name
        headers = door.proxy.snapshot()["headers"]
        assert headers["sent"] == forwarded == 1 and headers["verified"] == 0
        assert headers["refused"] >= 3  # bad MAC, none, a huge TLV, twice (a cut-short one may end as EOF)
        await shut(door, task)
        upstream.server.close()

    asyncio.run(main())


def test_silent_connections_the_relay_has_closed_do_not_fill_the_door(tmp_path: Path):
    """Slowloris: LAN hosts open connections to the door and never say a word nor close. The relay
    turns them away (its per-address and pre-auth caps, its register timeout: a stand-in that closes
    at once here), and the door must let go too, within its `fin_timeout`, not hold each half-closed
    pair (two descriptors) until what LAN clients may hold is full and a commander is refused."""
    loopback, lan = "127.0.0.83", "127.0.0.84"
    port = free_pair(loopback, lan)

    async def main() -> None:
        async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        relay_ = await asyncio.start_server(refuse, "127.0.0.1", 0)
        local = LocalState(tmp_path)
        door = StationDoor(str(tmp_path), "S001", (loopback, lan), port, stale_after=30.0, lan_host=lan)
        door.proxy.max_connections = 24
        door.proxy.fin_timeout = 0.3
        task = asyncio.ensure_future(door.run())
        local.write_pool(view(7, "S002", relay_.sockets[0].getsockname()[1]))
        await until(lambda: lan in door.proxy.listening_on)
        silent = []
        for n in range(door.proxy.max_lan):  # 18: all the LAN may hold
            sock = socket.socket()
            sock.bind((f"127.0.0.{90 + n % 4}", 0))
            silent.append(await connected(sock, (lan, port)))
        await until(lambda: door.proxy.accepted == 18)
        await until(lambda: not door.proxy.pairs, timeout=10)
        assert door.proxy.snapshot()["closed"].get("fin_timeout") == 18, door.proxy.snapshot()
        sock = socket.socket()  # a commander on the LAN: reaches the relay (which closes it, as it does all)
        sock.bind(("127.0.0.95", 0))
        reader, writer = await asyncio.open_connection(sock=await connected(sock, (lan, port)))
        assert await asyncio.wait_for(reader.read(10), 5) == b""
        await until(lambda: door.proxy.accepted == 19)
        assert not door.proxy.refused, door.proxy.refused
        await shut(door, task, writer, *silent)
        relay_.close()

    asyncio.run(main())


def test_a_lan_flood_that_fills_the_door_leaves_room_for_this_pcs_stations(tmp_path: Path):
    """Many LAN addresses (each under its per-address cap) open idle connections to the NODE_IP door
    and the relay holds them (pre-auth, until its register timeout): the door's pairs fill up to
    what LAN clients may hold (`lan_share` of `max_connections`), counted ``lan_share``, and a
    station on this PC's loopback still reaches the relay."""
    loopback, lan = "127.0.0.85", "127.0.0.86"
    port = free_pair(loopback, lan)

    async def main() -> None:
        relay_, relay_port = await relay(b"S002")
        local = LocalState(tmp_path)
        door = StationDoor(str(tmp_path), "S001", (loopback, lan), port, stale_after=30.0, lan_host=lan)
        door.proxy.max_connections = 40
        task = asyncio.ensure_future(door.run())
        local.write_pool(view(7, "S002", relay_port))
        await until(lambda: lan in door.proxy.listening_on)
        flood = []
        for n in range(60):
            sock = socket.socket()
            sock.bind((f"127.0.1.{1 + n % 10}", 0))
            flood.append(await connected(sock, (lan, port)))
        await until(lambda: door.proxy.accepted + sum(door.proxy.refused.values()) == 60)
        assert len(door.proxy.pairs) < 40, door.proxy.snapshot()
        reader, writer = await asyncio.open_connection(loopback, port)  # a station on this PC
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"S002"
        snap = door.proxy.snapshot()
        assert snap["refused"].get("lan_share") == 30 and snap["lan_connections"] == 30, snap
        assert snap["max_lan"] == 30, snap
        await shut(door, task, writer, *flood)
        relay_.close()

    asyncio.run(main())


def test_no_pairs_bytes_cross_into_another_through_the_shared_splice_pipe():
    """One splice pipe for all the proxy's pairs: many in full flow at once, one whose client stops
    reading mid-stream (its splices taken in part, the rest held), one reset mid-splice. Every
    client gets its own bytes and nothing else; the stalled one a prefix of its own."""
    size = 2 << 20

    async def main() -> None:
        upstream, _, proxy = await rig()
        assert proxy.pipe is not None
        loop = asyncio.get_running_loop()

        async def dial() -> socket.socket:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
            return await connected(sock, proxy.addresses["json"])

        async def flowing(seed: int) -> bytes:
            reader, writer = await asyncio.open_connection(sock=await dial())
            writer.write(pattern(seed, size))
            got = await asyncio.wait_for(reader.readexactly(size), 30)
            writer.close()
            return got

        async def stalled(seed: int) -> bytes:
            sock = await dial()
            data = pattern(seed, size)
            await loop.sock_sendall(sock, data[: 512 << 10])
            got = await loop.sock_recv(sock, 64 << 10)  # then it stops reading while the others flow
            await asyncio.sleep(1.0)
            while len(got) < 512 << 10:
                got += await asyncio.wait_for(loop.sock_recv(sock, 64 << 10), 10)
            sock.close()
            return got

        async def reset(seed: int) -> None:
            sock = await dial()
            await loop.sock_sendall(sock, pattern(seed, 1 << 20))
            await loop.sock_recv(sock, 1000)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # an RST while its pair's bytes are in flight

        jobs = [flowing(seed) for seed in range(8)] + [stalled(8), reset(9), reset(10)]
        results = await asyncio.gather(*jobs)
        for seed in range(8):
            assert results[seed] == pattern(seed, size), f"pair {seed} got bytes that are not its own"
        assert results[8] == pattern(8, len(results[8])) and len(results[8]) == 512 << 10
        assert proxy.spliced > size, proxy.snapshot()  # the pipe was in use all along
        assert proxy.pipe is not None and proxy.pipe.pending == 0
        await until(lambda: not proxy.pairs)
        upstream.close()

    asyncio.run(main())


def test_a_door_in_full_flow_forwards_nothing_10_ms_past_its_views_freshness_nor_accepts(tmp_path: Path):
    """The worker stops writing pool.json while a station streams through the door (by splice) and
    others dial: from 10 ms past the view's freshness not one more byte is forwarded either way
    (the door's own counters, sampled on its loop) and a dial is closed without a byte."""
    loopback = "127.0.0.78"
    port = free_pair(loopback)

    async def main() -> None:
        upstream, _, proxy_ = await rig()  # an echoing relay stand-in (its own proxy unused)
        proxy_.lose_leadership()
        local = LocalState(tmp_path)
        door = StationDoor(str(tmp_path), "S001", (loopback,), port, stale_after=1.0)
        task = asyncio.ensure_future(door.run())
        fresh_until = time.monotonic() + 0.6
        local.write_pool(view(7, "S002", upstream.ports[0], updated=fresh_until - 1.0))
        await until(lambda: door.gate.target is not None)
        reader, writer = await asyncio.open_connection(loopback, port)

        async def stream() -> None:
            block = b"s" * (256 << 10)
            try:
                while True:
                    writer.write(block)
                    await writer.drain()
                    await reader.read(1 << 20)
            except ConnectionError:
                pass

        streaming = asyncio.ensure_future(stream())
        loop = asyncio.get_running_loop()
        samples = []
        while loop.time() < fresh_until + 0.3:
            samples.append((loop.time(), door.proxy.bytes["up"] + door.proxy.bytes["down"]))
            await asyncio.sleep(0.001)
        late = [(t, b) for (t0, b0), (t, b) in itertools.pairwise(samples)
                if t0 >= fresh_until + 0.010 and b != b0]  # fmt: skip
        assert not late, f"forwarded after the view went stale: {late[:3]}"
        assert any(t < fresh_until and b > (1 << 20) for t, b in samples), "it never was in full flow"
        dial_reader, dial_writer = await asyncio.open_connection(loopback, port)
        assert await asyncio.wait_for(dial_reader.read(10), 2) == b""
        assert door.proxy.refused.get("stale_view", 0) >= 1
        streaming.cancel()
        await shut(door, task, writer, dial_writer)
        upstream.close()

    asyncio.run(main())


def test_a_door_on_node_ip_alone_leaves_no_share_for_a_loopback_it_does_not_listen_on(tmp_path: Path):
    both = StationDoor(str(tmp_path), "S001", ("127.0.0.1", "10.0.0.1"), 9530, 2.0, lan_host="10.0.0.1")
    alone = StationDoor(str(tmp_path), "S001", ("10.0.0.1",), 9530, 2.0, lan_host="10.0.0.1")
    loopback = StationDoor(str(tmp_path), "S001", ("127.0.0.1",), 9530, 2.0)
    assert both.proxy.max_lan == int(both.proxy.max_connections * 0.75)
    assert alone.proxy.max_lan == alone.proxy.max_connections == loopback.proxy.max_lan
