"""The fencing proxy's fast path (issue 36: `os.splice` through one pipe of the proxy's,
relay/server/splice_pipe.py) on real loopback sockets: bytes arrive whole and each pair's
to its own client, a gate shut mid-stream stops the splices at once (also between the two
splices of one chunk), and the pipe alone: empty between uses, refused where the kernel
cannot splice."""

import asyncio
import os
import socket
import threading

import pytest
from harness import free_port
from test_proxy import Gate, closed, rig, until

from relay.server.fencing_proxy import FencingProxy
from relay.server.proxy_pair import BULK
from relay.server.splice_pipe import SplicePipe, Unsupported

pytestmark = pytest.mark.skipif(SplicePipe.open() is None, reason="no os.splice on this system")


def pattern(seed: int, size: int) -> bytes:
    """Bytes no other pair sends: a shared pipe that mixed two pairs would show."""
    block = bytes((seed * 31 + i) % 251 for i in range(4096))
    return (block * (size // len(block) + 1))[:size]


def test_streams_move_by_splice_whole_each_to_its_own_client_on_both_ports():
    async def main() -> None:
        upstream, _, proxy = await rig()
        assert proxy.pipe is not None
        size = 4 << 20

        async def echo(name: str, seed: int) -> bytes:
            sock = socket.socket()
            if seed >= 2:  # a slow reader with a small window: its pair's splices are taken in part
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 10)
            sock.connect(proxy.addresses[name])
            reader, writer = await asyncio.open_connection(sock=sock)
            data = pattern(seed, size)
            writer.write(data)
            if seed < 2:
                got = await asyncio.wait_for(reader.readexactly(size), 20)
            else:
                got = b""
                while len(got) < size:
                    got += await asyncio.wait_for(reader.read(32 << 10), 20)
                    await asyncio.sleep(0.002)
            writer.close()
            return got

        held = [0]

        async def watch() -> None:
            while True:
                held[0] = max(held[0], proxy.snapshot()["held_bytes"])
                await asyncio.sleep(0.001)

        watching = asyncio.ensure_future(watch())
        names = ("json", "passthrough") * 2
        results = await asyncio.gather(*(echo(name, seed) for seed, name in enumerate(names)))
        watching.cancel()
        assert held[0] > 0  # some splices were taken in part: their rest read out and held
        for seed, got in enumerate(results):
            assert got == pattern(seed, size), f"pair {seed} got bytes that are not its own"
        snap = proxy.snapshot()
        assert snap["bytes_up"] == snap["bytes_down"] == 4 * size
        assert snap["bytes_spliced"] > size, snap  # the bulk of it went by splice, not recv/send
        await until(lambda: proxy.snapshot()["connections"] == 0)
        assert proxy.snapshot()["closed"] == {"ended": 4}
        upstream.close()

    asyncio.run(main())


def test_small_exchanges_are_copied_and_splice_off_copies_everything():
    async def main() -> None:
        for splice in (True, False):
            upstream, _, proxy = await rig(splice=splice)
            reader, writer = await asyncio.open_connection(*proxy.addresses["json"])
            for _ in range(20):  # frames as a station sends them: each read is small, so copied
                writer.write(b"f" * 100)
                assert await asyncio.wait_for(reader.readexactly(100), 5) == b"f" * 100
            assert proxy.snapshot()["bytes_spliced"] == 0
            writer.write(b"b" * (4 << 20))
            assert await asyncio.wait_for(reader.readexactly(4 << 20), 10) == b"b" * (4 << 20)
            assert (proxy.snapshot()["bytes_spliced"] > 0) is splice
            writer.close()
            upstream.close()

    asyncio.run(main())


class Sink:
    """The external relay, reading and counting, never answering."""

    def __init__(self) -> None:
        self.received = 0
        self.ended = asyncio.Event()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.client, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 20):
                self.received += len(data)
        except ConnectionError:
            pass
        self.ended.set()
        writer.close()


class Pusher(threading.Thread):
    """A station that sends as fast as the proxy takes, until its connection is closed."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(address)
        self.sent = 0

    def run(self) -> None:
        chunk = pattern(7, 256 << 10)
        try:
            while True:
                self.sent += self.sock.send(chunk)
        except OSError:
            pass


class ShutsAfter(Gate):
    """Open until armed; then `answers` more yeses, then no for good."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: int | None = None

    def __call__(self) -> bool:
        if self.answers is not None:
            if self.answers == 0:
                self.open = False
            self.answers -= 1
        return self.open


@pytest.mark.parametrize("yeses", [0, 1], ids=["before-the-fill", "between-the-two-splices"])
def test_a_gate_shut_mid_stream_stops_the_spliced_pair_and_not_one_byte_more_goes_up(yeses: int):
    """A stream in full flight on the fast path; the gate says no at the next ask (`yeses` = 0),
    or lets one chunk into the pipe and says no before it would leave it (`yeses` = 1): the
    proxy sends nothing more, the pair closes (gate_shut), and the relay has exactly what the
    proxy had sent when the gate shut."""

    async def main() -> None:
        sink = Sink()
        gate = ShutsAfter()
        proxy = FencingProxy(gate=gate, upstream=("127.0.0.1", await sink.start()))
        await proxy.start("127.0.0.1", free_port(), 0)
        pusher = Pusher(proxy.addresses["json"])
        pusher.start()
        await until(lambda: proxy.snapshot()["bytes_spliced"] > 4 * BULK)  # mid-stream, spliced
        pair = next(iter(proxy.pairs))
        await until(lambda: pair.up.bulk and not pair.up.held)  # the next ask is a splice's
        gate.answers = yeses
        sent_then = proxy.snapshot()["bytes_up"]
        await until(lambda: not proxy.pairs)
        assert proxy.snapshot()["closed"] == {"gate_shut": 1}
        assert proxy.snapshot()["bytes_up"] == sent_then, "bytes went up after the gate said no"
        await asyncio.wait_for(sink.ended.wait(), 5)
        assert sink.received == sent_then
        assert pusher.sent > sent_then  # the station had more to send: the gate, not the stream, stopped it
        reader, _ = await asyncio.open_connection(*proxy.addresses["json"])  # and a newcomer is refused
        assert await closed(reader)
        pusher.sock.close()
        sink.server.close()

    asyncio.run(main())


def test_the_pipe_is_empty_between_uses_and_refuses_what_the_kernel_cannot_splice():
    pipe = SplicePipe.open()
    assert pipe is not None
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    for sock in (a, b, c, d):
        sock.setblocking(False)
    try:
        with pytest.raises(BlockingIOError):  # nothing to read yet
            pipe.fill(b.fileno(), 1 << 16)
        a.send(b"x" * 1000)
        assert pipe.fill(b.fileno(), 1 << 16) == 1000 and pipe.pending == 1000
        assert pipe.drain(c.fileno()) == 1000 and pipe.pending == 0
        assert d.recv(2000) == b"x" * 1000
        a.send(b"rest")
        assert pipe.fill(b.fileno(), 1 << 16) == 4
        assert pipe.take() == b"rest" and pipe.pending == 0  # read out: nothing left for the next use
        a.send(b"dropped")
        pipe.fill(b.fileno(), 1 << 16)
        pipe.clear()
        a.send(b"next")
        assert pipe.fill(b.fileno(), 1 << 16) == 4 and pipe.take() == b"next"
        counter = os.eventfd(1, os.EFD_NONBLOCK)  # no splice from an eventfd: the kernel says EINVAL
        try:
            with pytest.raises(Unsupported):
                pipe.fill(counter, 8)
        finally:
            os.close(counter)
        a.close()
        assert pipe.fill(b.fileno(), 1 << 16) == 0  # EOF
    finally:
        pipe.close()
        for sock in (a, b, c, d):
            sock.close()
