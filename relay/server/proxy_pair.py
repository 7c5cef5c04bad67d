"""One forwarded connection of the fencing proxy: a client and its connection to the external relay.

Each `Direction` holds at most one chunk (`CHUNK`) the other side has not
taken; the gate is asked before every send, and a shut gate closes the pair
(docs/design.md §16; the proxy's decisions are in `relay.server.fencing_proxy`).

Where the proxy has a `relay.server.splice_pipe.SplicePipe` (Linux), bytes go socket → pipe →
socket with `os.splice`, never into Python, and the gate is asked before each of the two
splices, in the same callback with nothing between them; what the destination does not take
at once is read out of the pipe and held as the rest of a short `send()` is. Without one (or
once the kernel refuses to splice a socket) the pair copies with `recv()`/`send()`.

Waiting for the upstream (the proxy's `redial_within`, 0 for none): a connect that is refused or
times out is tried again every `REDIAL_EVERY`, to whatever the proxy's upstream is by then, until
`redial_within` after the accept; so does a pair while the proxy is not `ready()` (its external
relay is starting) or `held_back()` (the station door: the leader's beacons went silent; at the
bound it dials all the same). A pair that is not connected yet sent nothing anywhere, so a
re-pointed proxy leads it to the new upstream (`redirect`) instead of closing it.

Forwarded clients (`relay.wire.proxy_header`): with the proxy's `header_key`, the
client's first bytes go through a `HeaderReader` before anything is sent up (a
verified header is stripped, one that does not verify closes the pair); with its
`forward_header`, the pair's first bytes upstream are the header it makes.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from typing import Protocol

from relay.server.splice_pipe import SplicePipe, Unsupported
from relay.wire.proxy_header import (
    NEED_MORE,
    NOT_A_HEADER,
    TRUNCATED,
    Address,
    HeaderReader,
    HeaderRefused,
    Verified,
)

CHUNK = 64 << 10
ROUNDS = 8  # full chunks one callback splices at most, then the loop's other sockets have their turn
BULK = CHUNK  # a read that filled a chunk: a stream in full flow, the next read splices (a station's
# frames, read a few at a time, cost less copied: bench/door.py's msg/s)
REDIAL_EVERY = 0.05  # seconds between two connects of a waiting pair

# forward_header(client, dialled, local): what a pair sends upstream first (relay.wire.proxy_header.encode)
HeaderMaker = Callable[[Address, Address, Address], bytes]


class PairOwner(Protocol):
    """What a pair needs of its proxy (`relay.server.fencing_proxy.FencingProxy`)."""

    upstream: tuple[str, int]
    connect_timeout: float
    redial_within: float
    fin_timeout: float
    header_key: str | None
    forward_header: HeaderMaker | None
    headers: dict[str, int]
    pipe: SplicePipe | None  # None: copy with recv()/send()

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def gate_open(self) -> bool: ...

    def upstream_for(self, port: str) -> tuple[str, int]: ...

    def ready(self) -> bool: ...

    def held_back(self) -> bool: ...

    def counted(self, way: str, sent: int, spliced: bool = False) -> None: ...

    def forget(self, pair: Pair, cause: str) -> None: ...

    def readdress(self, pair: Pair, client: Address) -> bool: ...

    def unhold(self, pair: Pair, address: str) -> bool: ...

    def header_refused(self, pair: Pair, cause: str, detail: str) -> None: ...

    def no_splice(self, why: OSError) -> None: ...


class Direction:
    """One way of a pair: bytes read from `src`, sent to `dst`, at most one chunk held."""

    __slots__ = ("bulk", "dst", "ended", "held", "name", "src")

    def __init__(self, src: socket.socket, dst: socket.socket, name: str) -> None:
        self.src, self.dst, self.name = src, dst, name
        self.held: bytes | memoryview = b""  # read, not yet taken by dst
        self.ended = False  # src said EOF and dst was told
        self.bulk = False  # its last read was `BULK` or more: the next one splices (where it can)


class Pair:
    """A client connection and its connection to the external relay."""

    def __init__(self, proxy: PairOwner, client: socket.socket, peer: Address, port: str) -> None:
        self.proxy, self.client, self.port = proxy, client, port
        self.client_address = peer  # the client socket's peer: a forwarder, or the client itself
        self.address: str | None = peer[0]  # what the proxy's per-address count counts it under
        self.held: asyncio.TimerHandle | None = None  # over its address's cap, waiting for a header
        self.peer = f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"
        # Its first bytes, until decided (with the proxy's header_key); the client a header named.
        self.first = HeaderReader(proxy.header_key, peer) if proxy.header_key else None
        self.source = peer
        self.closed = False
        self.connected = False
        self.dials = 0  # connects begun (more than one: it waited for its upstream)
        self._timer: asyncio.Handle | None = None  # the connect's timeout, or the next try
        self._wait_until = proxy.loop.time() + proxy.redial_within
        self._new_upstream(proxy.upstream)

    def _new_upstream(self, address: tuple[str, int]) -> None:
        self.upstream = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET)
        self.upstream.setblocking(False)
        self.up = Direction(self.client, self.upstream, "up")
        self.down = Direction(self.upstream, self.client, "down")

    # -- connect ----------------------------------------------------------------
    @property
    def waiting(self) -> bool:
        """Accepted, not connected upstream yet: nothing of it went anywhere."""
        return not self.connected and not self.closed

    def start(self) -> None:
        """Connect to the proxy's upstream for this pair's port, now or once it may."""
        self._try()

    def _try(self) -> None:
        self._timer = None
        if self.closed:
            return
        proxy = self.proxy
        if not proxy.gate_open():  # a re-point under way, or no leader: wait (its closing is the proxy's)
            self._wait("gate_shut")
        elif not proxy.ready():  # the external relay is not accepting (yet)
            self._wait("relay_down")
        elif proxy.held_back() and self._may_wait():  # the station door: its leader went silent
            self._wait("held_back")
        else:
            self.connect(proxy.upstream_for(self.port))

    def _may_wait(self) -> bool:
        return self.proxy.loop.time() < self._wait_until

    def _wait(self, cause: str) -> None:
        """Try again in `REDIAL_EVERY` while the pair may wait for its upstream, else close it."""
        if not self._may_wait():
            self.close(cause)
            return
        self._timer = self.proxy.loop.call_later(REDIAL_EVERY, self._try)

    def connect(self, address: tuple[str, int]) -> None:
        loop = self.proxy.loop
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        if self.dials or self.upstream.family != family:  # a socket that failed to connect cannot again
            self._drop_upstream()
            self._new_upstream(address)
        self.dials += 1
        code = self.upstream.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            self._wait("upstream_refused")
            return
        loop.add_writer(self.upstream.fileno(), self._connected)
        self._timer = loop.call_later(self.proxy.connect_timeout, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        self.proxy.loop.remove_writer(self.upstream.fileno())
        self._wait("upstream_timeout")

    def _drop_upstream(self) -> None:
        fd = self.upstream.fileno()
        if fd >= 0:
            self.proxy.loop.remove_writer(fd)
        self.upstream.close()

    def redirect(self) -> None:
        """The proxy was re-pointed: a waiting pair dials the new upstream now (its connect to the
        old one, if any, is abandoned: nothing was sent there)."""
        if not self.waiting:
            return
        if self._timer is not None:
            self._timer.cancel()
        if self.dials:
            self.proxy.loop.remove_writer(self.upstream.fileno())
        self._timer = self.proxy.loop.call_soon(self._try)

    def _connected(self) -> None:
        loop = self.proxy.loop
        loop.remove_writer(self.upstream.fileno())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        code = self.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._wait("upstream_refused")
            return
        if not self.proxy.gate_open():  # nothing sent: wait for a re-point, or close at the bound
            self._wait("gate_shut")
            return
        self.connected = True
        self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        loop.add_reader(self.client.fileno(), self._readable, self.up)
        loop.add_reader(self.upstream.fileno(), self._readable, self.down)
        if self.first is None:
            header = self._header()
            if header:
                self._send(self.up, header)

    # -- forwarded clients ----------------------------------------------------------
    def hold(self, seconds: float) -> None:
        """Counted nowhere yet: its first bytes (a header naming its client, or not) decide where,
        within `seconds`; then it is judged by its own address (the proxy's `unhold`)."""
        self.address = None
        self.held = self.proxy.loop.call_later(seconds, self._held_long_enough)

    def unhold(self, address: str) -> bool:
        """Decided: counted under `address` if it has room (else False: the pair is to close)."""
        if self.held is None:
            return True
        self.held.cancel()
        self.held = None
        return self.proxy.unhold(self, address)

    def _held_long_enough(self) -> None:
        if self.held is None or self.closed:
            return
        if self.first is not None and self.first.held:  # a header begun and not ended in time
            self.proxy.header_refused(self, TRUNCATED, "a header that did not end in time")
            self.close(f"header_{TRUNCATED}")
            return
        if not self.unhold(self.client_address[0]):
            self.close("per_address")

    def _header(self) -> bytes:
        """The header this pair sends upstream first (none without the proxy's forward_header)."""
        make = self.proxy.forward_header
        if make is None:
            return b""
        try:
            header = make(self.source, self.client.getsockname()[:2], self.upstream.getsockname()[:2])
        except (OSError, ValueError):  # an address that is no IP address: the client goes unnamed
            return b""
        self.proxy.headers["sent"] += 1
        return header

    def _first_bytes(self, data: bytes) -> None:
        """The client's first bytes (the proxy has a header_key): a forwarded client's header, or not."""
        reader = self.first
        assert reader is not None
        if data:
            reading = reader.feed(data)
            if reading is NEED_MORE:
                return
        elif reader.held:  # it ended in the middle of a header
            reading = HeaderRefused(TRUNCATED, "the connection ended in a header")
        else:  # it ended without a byte
            reading = NOT_A_HEADER
        self.first = None
        if isinstance(reading, HeaderRefused):
            self.proxy.header_refused(self, reading.cause, reading.detail)
            self.close(f"header_{reading.cause}")
            return
        if isinstance(reading, Verified):
            if not self.proxy.readdress(self, reading.src):
                self.close("per_address")
                return
            self.source = reading.src
        elif not self.unhold(self.client_address[0]):  # no header: judged by its own address
            self.close("per_address")
            return
        out = self._header() + reader.rest
        if out:
            self._send(self.up, out)

    # -- forwarding: a gate check before every send ------------------------------
    def _readable(self, way: Direction) -> None:
        if self.closed:
            return
        if not self.proxy.gate_open():
            self.close("gate_shut")
            return
        pipe = self.proxy.pipe
        bulk = way.bulk and (way is self.down or self.first is None)  # a header is read by recv()
        if bulk and pipe is not None and self._spliced(way, pipe):
            return
        try:
            data = way.src.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close("reset")
            return
        way.bulk = len(data) >= BULK
        if way is self.up and self.first is not None:  # a forwarded client's header, or not
            self._first_bytes(data)
            if self.closed or data:
                return
        if not data:
            self.proxy.loop.remove_reader(way.src.fileno())
            self._end(way)
            return
        self._send(way, data)

    def _spliced(self, way: Direction, pipe: SplicePipe) -> bool:
        """`src` → pipe → `dst` with the gate asked (by `_readable`, then here) before each splice,
        chunk after chunk while `src` has full ones and `dst` takes them all (`ROUNDS` at most);
        False: the kernel cannot splice these sockets, copy them (nothing was moved)."""
        for round_ in range(ROUNDS):
            if round_ and not self.proxy.gate_open():  # before the next fill (the first: _readable's)
                self.close("gate_shut")
                return True
            try:
                got = pipe.fill(way.src.fileno(), CHUNK)
            except (BlockingIOError, InterruptedError):
                return True
            except Unsupported as exc:
                self.proxy.no_splice(exc)
                return round_ > 0  # copy the rest, unless this callback moved some already
            except OSError:
                self.close("reset")
                return True
            way.bulk = got >= BULK
            if not got:
                self.proxy.loop.remove_reader(way.src.fileno())
                self._end(way)
                return True
            if not self.proxy.gate_open():  # asked again before the splice that moves the bytes on
                pipe.clear()
                self.close("gate_shut")
                return True
            try:
                sent = pipe.drain(way.dst.fileno())
            except Unsupported as exc:  # the bytes are still in the pipe: held as a short send's rest
                self._keep_rest(way, pipe)
                self.proxy.no_splice(exc)
                return True
            except OSError:
                pipe.clear()
                self.close("reset")
                return True
            self.proxy.counted(way.name, sent, spliced=True)
            if pipe.pending:
                self._keep_rest(way, pipe)
                return True
            if got < CHUNK:  # `src` had no more: back to the loop
                return True
        return True

    def _keep_rest(self, way: Direction, pipe: SplicePipe) -> None:
        """What `dst` did not take leaves the pipe (empty for the next splice) to be held."""
        try:
            rest = pipe.take()
        except OSError:
            self.close("reset")
            return
        self._hold(way, rest)

    def _send(self, way: Direction, data: bytes | memoryview) -> None:
        try:
            sent = way.dst.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close("reset")
            return
        self.proxy.counted(way.name, sent)
        if sent < len(data):
            self._hold(way, memoryview(data)[sent:])  # no copy of the rest

    def _hold(self, way: Direction, rest: bytes | memoryview) -> None:
        """`dst` did not take `rest`: hold it, and read no more this way until `dst` takes it."""
        way.held = rest
        loop = self.proxy.loop
        loop.remove_reader(way.src.fileno())
        loop.add_writer(way.dst.fileno(), self._writable, way)

    def _writable(self, way: Direction) -> None:
        if self.closed:
            return
        if not self.proxy.gate_open():
            self.close("gate_shut")
            return
        held, way.held = way.held, b""
        loop = self.proxy.loop
        loop.remove_writer(way.dst.fileno())
        self._send(way, held)
        if not self.closed and not way.held:
            loop.add_reader(way.src.fileno(), self._readable, way)

    def _end(self, way: Direction) -> None:
        """`src` said EOF: pass it on; both ways ended: the pair is done. The relay ended and the
        client has not: it has `fin_timeout` to end too (a silent client never would, and its pair
        would hold two descriptors of the proxy's for ever: tests/test_door_attacks.py)."""
        way.ended = True
        try:
            way.dst.shutdown(socket.SHUT_WR)
        except OSError:
            self.close("reset")
            return
        if self.up.ended and self.down.ended:
            self.close("ended")
        elif way is self.down and self._timer is None:
            self._timer = self.proxy.loop.call_later(self.proxy.fin_timeout, self.close, "fin_timeout")

    # -- the end ------------------------------------------------------------------
    def close(self, cause: str) -> None:
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.held is not None:
            self.held.cancel()  # the proxy's forget() counts it out of the held ones
        loop = self.proxy.loop
        for sock in (self.client, self.upstream):
            fd = sock.fileno()
            if fd >= 0:
                loop.remove_reader(fd)
                loop.remove_writer(fd)
            sock.close()
        self.up.held = self.down.held = b""
        self.proxy.forget(self, cause)
