"""The fencing proxy (relay/server/fencing_proxy.py) on real loopback sockets, with a gate the test holds."""

import asyncio
import socket

import pytest
from harness import free_port

from relay.server.fencing_proxy import FencingProxy
from relay.server.proxy_pair import CHUNK


class Gate:
    def __init__(self) -> None:
        self.open = True

    def __call__(self) -> bool:
        return self.open


class Upstream:
    """A plain asyncio server standing for the external relay: echoes, or (`reads=False`) never reads."""

    def __init__(self, reads: bool = True) -> None:
        self.reads = reads
        self.received = 0
        self.connections = 0
        self.servers: list[asyncio.Server] = []
        self.ports: list[int] = []

    async def start(self) -> None:
        for _ in range(2):
            server = await asyncio.start_server(self.client, "127.0.0.1", 0)
            self.servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if not self.reads:
                await asyncio.sleep(3600)
            while data := await reader.read(65536):
                self.received += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        for server in self.servers:
            server.close()


async def rig(reads: bool = True, **kw):  # type: ignore[no-untyped-def]
    upstream = Upstream(reads)
    await upstream.start()
    gate = Gate()
    proxy = FencingProxy(gate=gate, upstream=("127.0.0.1", upstream.ports[0]),
                         upstream_passthrough=upstream.ports[1], **kw)  # fmt: skip
    await proxy.start("127.0.0.1", free_port(), 0)
    return upstream, gate, proxy


async def closed(reader: asyncio.StreamReader) -> bool:
    """The proxy ended the connection: EOF, or a reset (it closed with bytes unread)."""
    try:
        return await asyncio.wait_for(reader.read(100), 5) == b""
    except ConnectionResetError:
        return True


async def until(cond, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_both_ports_forward_both_ways_and_count_bytes():
    async def main() -> None:
        upstream, _, proxy = await rig()
        for name in ("json", "passthrough"):
            reader, writer = await asyncio.open_connection(*proxy.addresses[name])
            writer.write(b"x" * 200_000)
            got = await asyncio.wait_for(reader.readexactly(200_000), 5)
            assert got == b"x" * 200_000
            writer.close()
        snap = proxy.snapshot()
        assert snap["bytes_up"] == snap["bytes_down"] == 400_000 and upstream.received == 400_000
        assert snap["accepted"] == 2
        await until(lambda: proxy.snapshot()["connections"] == 0)
        assert proxy.snapshot()["closed"].get("ended") == 2
        upstream.close()

    asyncio.run(main())


def test_a_shut_gate_forwards_nothing_more_even_before_anyone_closes_the_connections():
    """The gate flips and nobody calls lose_leadership(): the next chunk finds it shut (the
    check is per send, not per accept), so the external relay gets not one byte more."""

    async def main() -> None:
        upstream, gate, proxy = await rig()
        reader, writer = await asyncio.open_connection(*proxy.addresses["json"])
        writer.write(b"before")
        assert await asyncio.wait_for(reader.readexactly(6), 5) == b"before"
        gate.open = False
        before = upstream.received
        writer.write(b"after the gate shut")
        assert await closed(reader)  # closed by the proxy
        assert upstream.received == before
        assert proxy.snapshot()["closed"] == {"gate_shut": 1}
        # And a newcomer is refused at once.
        reader, writer = await asyncio.open_connection(*proxy.addresses["json"])
        assert await closed(reader)
        assert proxy.snapshot()["refused"] == {"gate_shut": 1} and upstream.connections == 1
        upstream.close()

    asyncio.run(main())


def test_losing_leadership_closes_every_forwarded_connection_and_the_listeners():
    async def main() -> None:
        upstream, _, proxy = await rig()
        names = ("json", "passthrough", "json")
        streams = [await asyncio.open_connection(*proxy.addresses[n]) for n in names]
        await until(lambda: upstream.connections == 3)
        proxy.lose_leadership()
        for reader, _ in streams:
            assert await closed(reader)
        assert not proxy.listening and proxy.snapshot()["connections"] == 0
        with pytest.raises(OSError):
            await asyncio.open_connection(*proxy.addresses["json"])
        upstream.close()

    asyncio.run(main())


def test_a_relay_that_does_not_accept_yet_or_refuses_gets_no_client():
    async def main() -> None:
        ready = [False]
        upstream, _, proxy = await rig(ready=lambda: ready[0])
        reader, _ = await asyncio.open_connection(*proxy.addresses["json"])
        assert await closed(reader)
        assert proxy.snapshot()["refused"] == {"relay_down": 1}
        ready[0] = True
        upstream.close()
        for server in upstream.servers:
            await server.wait_closed()
        reader, _ = await asyncio.open_connection(*proxy.addresses["json"])
        assert await closed(reader)
        assert proxy.snapshot()["closed"] == {"upstream_refused": 1}

    asyncio.run(main())


def test_a_relay_that_stops_reading_holds_at_most_one_chunk_in_the_proxy():
    """Backpressure: the client's sends stall in TCP, not in the proxy's memory."""

    async def main() -> None:
        upstream, _, proxy = await rig(reads=False)
        client = socket.create_connection(proxy.addresses["json"])
        client.setblocking(False)
        pushed = 0
        loop = asyncio.get_running_loop()
        stalled_at = loop.time() + 3
        while loop.time() < stalled_at:
            try:
                pushed += client.send(b"y" * 65536)
            except BlockingIOError:
                await asyncio.sleep(0.05)
                continue
            if pushed > 200 << 20:
                break
        snap = proxy.snapshot()
        assert pushed < 200 << 20, "200 MiB went in: nothing pushed back"
        assert snap["held_bytes"] <= CHUNK, snap
        assert snap["bytes_up"] + snap["held_bytes"] < pushed + 1  # the rest waits in the kernel's buffers
        client.close()
        upstream.close()

    asyncio.run(main())


def test_connections_past_the_cap_are_refused_and_counted():
    async def main() -> None:
        upstream, _, proxy = await rig(max_connections=2)
        kept = [await asyncio.open_connection(*proxy.addresses["json"]) for _ in range(2)]
        await until(lambda: upstream.connections == 2)
        reader, _ = await asyncio.open_connection(*proxy.addresses["json"])
        assert await closed(reader)
        assert proxy.snapshot()["refused"] == {"total": 1}
        kept[0][1].write(b"ok")
        assert await asyncio.wait_for(kept[0][0].readexactly(2), 5) == b"ok"
        upstream.close()

    asyncio.run(main())


def test_one_address_cannot_take_more_than_its_share():
    async def main() -> None:
        upstream, _, proxy = await rig(max_per_address=2)
        kept = [await asyncio.open_connection(*proxy.addresses["json"]) for _ in range(2)]
        await until(lambda: upstream.connections == 2)
        reader, _ = await asyncio.open_connection(*proxy.addresses["json"])
        assert await closed(reader)
        assert proxy.snapshot()["refused"] == {"per_address": 1}
        kept[0][1].close()  # one leaves: room again
        await until(lambda: proxy.snapshot()["connections"] == 1)
        reader, writer = await asyncio.open_connection(*proxy.addresses["json"])
        writer.write(b"in")
        assert await asyncio.wait_for(reader.readexactly(2), 5) == b"in"
        upstream.close()

    asyncio.run(main())


def test_with_redial_within_a_connection_waits_for_a_relay_that_starts_and_is_closed_at_the_bound():
    """The new leader's external relay is still starting when the first station arrives: the
    connection waits for it (nothing is refused), then flows; one it never serves is closed at the
    bound, counted by why."""

    async def main() -> None:
        ready = [False]
        upstream, _, proxy = await rig(ready=lambda: ready[0], redial_within=1.0)
        reader, writer = await asyncio.open_connection(*proxy.addresses["json"])
        writer.write(b"register")
        await until(lambda: proxy.snapshot()["waiting"] == 1)
        await asyncio.sleep(0.2)
        assert upstream.connections == 0 and proxy.snapshot()["refused"] == {}
        ready[0] = True
        assert await asyncio.wait_for(reader.readexactly(8), 5) == b"register"
        assert proxy.snapshot()["waiting"] == 0
        writer.close()
        ready[0] = False
        loop = asyncio.get_running_loop()
        began = loop.time()
        reader, _ = await asyncio.open_connection(*proxy.addresses["json"])
        assert await closed(reader)
        assert 0.9 <= loop.time() - began < 3.0
        assert proxy.snapshot()["closed"].get("relay_down") == 1
        upstream.close()

    asyncio.run(main())


def test_a_refused_connect_is_tried_again_until_the_upstream_listens():
    async def main() -> None:
        port = free_port()
        proxy = FencingProxy(gate=Gate(), upstream=("127.0.0.1", port), redial_within=2.0)
        await proxy.start("127.0.0.1", free_port(), 0)
        reader, writer = await asyncio.open_connection(*proxy.addresses["json"])
        writer.write(b"hello")
        await until(lambda: any(p.dials >= 3 for p in proxy.pairs))  # refused, and tried again

        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(await r.read(100))
            await w.drain()
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", port)
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
        server.close()

    asyncio.run(main())


def test_a_repoint_leads_a_waiting_connection_to_the_new_upstream_and_closes_a_forwarded_one():
    """A connection held back (its leader went quiet) sent nothing anywhere: the re-point leads it
    to the new leader, where its first bytes arrive; one already forwarded to the old one is closed
    (its session was that relay's), and the old one gets nothing more."""

    async def main() -> None:
        old, new = Upstream(), Upstream()
        await old.start()
        await new.start()
        held = [False]
        proxy = FencingProxy(gate=Gate(), upstream=("127.0.0.1", old.ports[0]),
                             upstream_passthrough=old.ports[1], held_back=lambda: held[0],
                             redial_within=2.0)  # fmt: skip
        await proxy.start("127.0.0.1", free_port(), 0)
        r1, w1 = await asyncio.open_connection(*proxy.addresses["json"])
        w1.write(b"one")
        assert await asyncio.wait_for(r1.readexactly(3), 5) == b"one"
        held[0] = True
        r2, w2 = await asyncio.open_connection(*proxy.addresses["json"])
        w2.write(b"two")
        await until(lambda: proxy.snapshot()["waiting"] == 1)
        await asyncio.sleep(0.2)
        assert old.connections == 1 and old.received == 3
        held[0] = False
        assert proxy.repoint(("127.0.0.1", new.ports[0]), new.ports[1]) == (1, 1)
        assert await closed(r1)
        assert await asyncio.wait_for(r2.readexactly(3), 5) == b"two"
        assert old.received == 3 and new.received == 3 and new.connections == 1
        assert proxy.snapshot()["closed"] == {"repointed": 1}
        w2.close()
        old.close()
        new.close()

    asyncio.run(main())
