"""Forwarded clients keep their own address (issue 40 finding 4): the relay and the fencing proxy
believe a keyed PROXY v2 header made for the very socket it arrives on, and nothing else.

Real sockets on 127.0.0.14x (each address a host), the relay and the proxy on their own loops;
the process-level must-hold (an entry member, 1,000 connections) is tests/test_forwarded_site.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import struct

from harness import wait_until
from test_proxy import until
from test_relay_server import KMSN, TOKEN, Wire
from test_relay_trust import thread_relay  # noqa: F401  (a fixture)

from relay.server.fencing_proxy import FencingProxy
from relay.server.limits import Caps
from relay.wire.framing import FrameDecoder
from relay.wire.legacy import LegacySettings
from relay.wire.proxy_header import encode

FORWARDER, OTHER = "127.0.0.141", "127.0.0.142"
CLIENT = ("198.51.100.7", 50123)
OLD_MAGIC = "STK-OLD-MAGIC-7"


class ForwardedWire(Wire):
    """A `Wire` from `source` whose first bytes are a header naming `client` (made with `key`,
    for this socket unless `via` says another)."""

    def __init__(
        self,
        addr: tuple[str, int],
        client: tuple[str, int] | None = CLIENT,
        source: str = FORWARDER,
        key: str = TOKEN,
        via: tuple[str, int] | None = None,
    ) -> None:
        self.sock = socket.socket()
        self.sock.settimeout(5.0)
        self.sock.bind((source, 0))
        self.sock.connect(addr)
        self.buf, self.decoder = bytearray(), FrameDecoder(64 << 20)
        self.hello: dict | None = None
        if client is not None:
            self.sock.sendall(encode(client, addr, via or self.sock.getsockname()[:2], key))


def is_closed(wire: Wire) -> bool:
    """Has the relay closed `wire` (reading and dropping whatever came before)?"""
    wire.sock.setblocking(False)
    try:
        while wire.sock.recv(1 << 16):
            pass
        return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        wire.sock.settimeout(5.0)


def closed_after_hello(wire: Wire) -> bool:
    assert wire.greet()["type"] == "hello"
    return wire.frame_or_none() is None


def test_a_forwarded_client_registers_and_is_shown_by_its_own_address_via_the_forwarder(thread_relay):  # noqa: F811
    relay = thread_relay()
    wire = ForwardedWire(relay.json)
    assert wire.register("agent", "S002")["type"] == "registered"
    (shown,) = relay.snapshot()["clients"]
    host, port = wire.sock.getsockname()[:2]
    assert shown["peer"] == f"198.51.100.7:50123 via {host}:{port}"
    assert relay.snapshot()["admission"]["addresses"] == 1
    direct = relay.client("commander", "C01")  # a client that sends no header is untouched
    direct.send("hi", to="S002", id=1)
    assert wire.frame()["data"] == "hi"


def test_the_per_address_cap_counts_the_client_a_header_names_not_the_forwarder(thread_relay):  # noqa: F811
    relay = thread_relay(caps=Caps(total=100, preauth=60, per_address=5))
    many = [ForwardedWire(relay.json, (f"198.51.100.{n}", 1000 + n)) for n in range(20)]  # a burst
    for w in many:  # past the forwarder's own 5, the rest waited for their headers: none refused
        assert w.greet()["type"] == "hello"
    wait_until(lambda: relay.snapshot()["admission"]["addresses"] == 20, 5, "20 clients, 20 addresses")
    assert relay.snapshot()["admission"]["refused"]["per_address"] == 0
    same = [ForwardedWire(relay.json, ("203.0.113.50", 2000 + n)) for n in range(6)]
    wait_until(lambda: relay.snapshot()["admission"]["refused"]["per_address"] == 1, 5, "one refusal")
    wait_until(lambda: relay.snapshot()["connections"] == 25, 5, "the other five of that client stay")
    assert sorted(is_closed(w) for w in same) == [False] * 5 + [True]
    assert ForwardedWire(relay.json, client=None).register("agent", "S009")["type"] == "registered"


def test_a_header_without_the_pool_key_is_refused_closed_and_counted(thread_relay):  # noqa: F811
    relay = thread_relay(pool_key="the-pool-key")
    assert closed_after_hello(ForwardedWire(relay.json, key=TOKEN))  # the site token is not the pool key
    assert closed_after_hello(ForwardedWire(relay.json, key="a-guess"))
    wait_until(lambda: relay.snapshot()["drops"].get("header_forged") == 2, 5, "2 forged headers counted")
    assert relay.snapshot()["connections"] == 0
    assert ForwardedWire(relay.json, key="the-pool-key").register("agent", "S002")["type"] == "registered"


def test_a_header_replayed_on_another_socket_is_refused(thread_relay):  # noqa: F811
    relay = thread_relay()
    first = ForwardedWire(relay.json)
    made_for = first.sock.getsockname()[:2]
    assert closed_after_hello(ForwardedWire(relay.json, via=made_for))  # same host, another port
    assert closed_after_hello(ForwardedWire(relay.json, source=OTHER, via=made_for))  # another host
    wait_until(lambda: relay.snapshot()["drops"].get("header_replayed") == 2, 5, "2 replays counted")
    assert first.register("agent", "S002")["type"] == "registered"  # the socket it was made for is fine


def test_junk_after_the_signature_is_refused_and_never_reaches_the_protocol(thread_relay):  # noqa: F811
    relay = thread_relay()
    wire = ForwardedWire(relay.json, client=None)
    wire.sock.sendall(b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x01\x00" + b"x" * 300)  # 256 + 16 bytes: too long
    assert closed_after_hello(wire)
    wait_until(lambda: relay.snapshot()["drops"].get("header_too_long") == 1, 5, "counted")
    assert "protocol_error" not in relay.snapshot()["drops"]


def test_a_legacy_relay_takes_an_old_station_and_greets_a_modern_client_behind_a_forwarder(thread_relay):  # noqa: F811
    relay = thread_relay(legacy=LegacySettings(OLD_MAGIC, 0.3))
    modern = ForwardedWire(relay.json)  # the header is not "speaking first": the hello still comes
    assert modern.register("agent", "S002")["type"] == "registered"
    old = ForwardedWire(relay.json, ("198.51.100.8", 7))
    payload = json.dumps({"type": "register", "magic": OLD_MAGIC, "role": "commander", "kmsn": KMSN,
                          "station": "C01", "token": TOKEN}).encode()  # fmt: skip
    old.sock.sendall(struct.pack(">I", len(payload)) + payload)
    assert old.frame()["type"] == "registered"  # no hello first: it spoke first
    clients = {c["station"]: c for c in relay.snapshot()["clients"]}
    assert clients["C01"]["legacy"] is True and clients["C01"]["peer"].startswith("198.51.100.8:7 via ")


# -- the fencing proxy ---------------------------------------------------------------------------------


class Upstream:
    """A stand-in external relay: records what each connection sent, says ``hi`` first."""

    def __init__(self) -> None:
        self.got: list[bytearray] = []

    async def start(self) -> tuple[str, int]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            mine = bytearray()
            self.got.append(mine)
            writer.write(b"hi")
            while data := await reader.read(1000):
                mine += data
            writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.143", 0)
        return self.server.sockets[0].getsockname()[:2]


async def dial(address: tuple[str, int], source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*address, local_addr=(source, 0))


def test_the_exec_proxy_strips_a_verified_header_and_counts_the_client_by_its_address():
    async def main() -> None:
        up = Upstream()
        upstream = await up.start()
        proxy = FencingProxy(gate=lambda: True, upstream=upstream, header_key="pk", max_per_address=2)
        await proxy.start("127.0.0.144", 0)
        listen = proxy.addresses["json"]
        reader, writer = await dial(listen, FORWARDER)
        writer.write(
            encode(CLIENT, listen, writer.get_extra_info("sockname")[:2], "pk") + b"old station bytes"
        )
        assert await asyncio.wait_for(reader.readexactly(2), 5) == b"hi"
        await until(
            lambda: bytes(up.got[0]) == b"old station bytes"
        )  # the header stripped, the rest untouched
        assert proxy.per_address == {CLIENT[0]: 1} and proxy.snapshot()["headers"]["verified"] == 1
        more = []
        for n in range(3):  # the forwarder's own address is free again; the client's holds 2
            r, w = await dial(listen, FORWARDER)
            w.write(encode(("203.0.113.9", n + 1), listen, w.get_extra_info("sockname")[:2], "pk"))
            more.append((r, w))
        await until(lambda: proxy.closes.get("per_address") == 1)
        _, direct_w = await dial(listen, FORWARDER)  # no header: its bytes pass untouched
        direct_w.write(b"\x00\x00\x00\x02{}")
        await until(lambda: len(up.got) >= 4 and any(bytes(g) == b"\x00\x00\x00\x02{}" for g in up.got))
        forged_r, forged_w = await dial(listen, OTHER)
        forged_w.write(encode(CLIENT, listen, forged_w.get_extra_info("sockname")[:2], "guess") + b"x")
        await until(lambda: proxy.closes.get("header_forged") == 1)
        assert await asyncio.wait_for(forged_r.read(), 5) in (b"", b"hi")
        assert not any(bytes(g) == b"x" for g in up.got)  # nothing of it went up
        for w in (writer, direct_w, forged_w, *(w for _, w in more)):
            w.close()
        proxy.lose_leadership()
        up.server.close()

    asyncio.run(main())


def test_the_exec_proxy_takes_a_forwarders_burst_and_still_caps_an_address_without_headers():
    async def main() -> None:
        up = Upstream()
        upstream = await up.start()
        proxy = FencingProxy(gate=lambda: True, upstream=upstream, header_key="pk", max_per_address=2)
        await proxy.start("127.0.0.146", 0)
        listen = proxy.addresses["json"]
        burst = [await dial(listen, FORWARDER) for _ in range(10)]  # all accepted before any header is read
        for n, (_, w) in enumerate(burst):
            via = w.get_extra_info("sockname")[:2]
            w.write(encode((f"198.51.100.{n}", 9), listen, via, "pk") + b"%d" % n)
        await until(lambda: sorted(bytes(g) for g in up.got) == sorted(b"%d" % n for n in range(10)))
        assert "per_address" not in proxy.closes and proxy.holding == 0
        assert len(proxy.per_address) == 10 and FORWARDER not in proxy.per_address
        plain = [await dial(listen, OTHER) for _ in range(4)]  # no header: two of them are too many
        for _, w in plain:
            w.write(b"plain")
        await until(lambda: proxy.closes.get("per_address") == 2)
        await until(lambda: sum(1 for g in up.got if bytes(g) == b"plain") == 2)
        assert proxy.per_address[OTHER] == 2 and proxy.holding == 0
        for _, w in burst + plain:
            w.close()
        proxy.lose_leadership()
        up.server.close()

    asyncio.run(main())


def test_a_proxy_with_forward_header_names_its_client_to_a_real_relay(thread_relay):  # noqa: F811
    relay = thread_relay(pool_key="pk")

    async def main() -> None:
        proxy = FencingProxy(gate=lambda: True, upstream=relay.json,
                             forward_header=lambda c, d, v: encode(c, d, v, "pk"))  # fmt: skip
        await proxy.start("127.0.0.145", 0)

        def register() -> Wire:
            wire = ForwardedWire(proxy.addresses["json"], client=None, source=OTHER)
            assert wire.register("agent", "S002")["type"] == "registered"
            return wire

        wire = await asyncio.to_thread(register)
        (shown,) = relay.snapshot()["clients"]
        host, port = wire.sock.getsockname()[:2]
        assert shown["peer"].startswith(f"{host}:{port} via ")
        assert proxy.snapshot()["headers"]["sent"] == 1
        wire.sock.close()
        proxy.lose_leadership()

    asyncio.run(main())


def test_a_door_forwarding_to_another_door_gives_the_relay_one_header_naming_the_station():
    """A member's station door may forward to another member's NODE_IP while that member's door
    still holds it (its lease read a moment earlier there): that door verifies and strips the
    first header and sends its own naming the same station, so the external relay behind the last
    proxy gets the station's bytes untouched."""

    async def main() -> None:
        got = bytearray()

        async def relay(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(1000):
                got.extend(data)
                w.write(data)
            w.close()

        server = await asyncio.start_server(relay, "127.0.0.1", 0)
        header = functools.partial(encode, key="pk")
        leader = FencingProxy(
            gate=lambda: True, upstream=server.sockets[0].getsockname()[:2], header_key="pk"
        )
        await leader.start("127.0.0.146", 0)
        second = FencingProxy(gate=lambda: True, upstream=leader.addresses["json"], header_key="pk",
                              forward_header=header)  # fmt: skip
        await second.start("127.0.0.147", 0)
        first = FencingProxy(gate=lambda: True, upstream=second.addresses["json"], header_key="pk",
                             forward_header=header)  # fmt: skip
        await first.start("127.0.0.148", 0)
        reader, writer = await asyncio.open_connection(*first.addresses["json"])
        writer.write(b"\x00\x00\x00\x02hi")
        assert await asyncio.wait_for(reader.readexactly(6), 5) == b"\x00\x00\x00\x02hi"
        assert bytes(got) == b"\x00\x00\x00\x02hi"
        assert (first.headers["sent"], second.headers["verified"], leader.headers["verified"]) == (1, 1, 1)
        writer.close()
        for proxy in (first, second, leader):
            proxy.lose_leadership()
        server.close()

    asyncio.run(main())
