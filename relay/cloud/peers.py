"""The cloud's connections from sites' leaders: their tunnels, and what the rest of the cloud shares.

Thin `asyncio.Protocol`s over the pure cores (`relay.cloud.handshake`,
`relay.wire.mux`, `relay.cloud.remote`); what they share (the fence, the
book, the tunnels by KMSN, the parked clients, the counters) is the
`relay.cloud.server.CloudServer` they are built with, seen through the few
methods they call on it.

- `TunnelPeer`: handshake (5 s from the connection, however slowly its bytes
  come), then mux frames. PING every keepalive; silent 3 × keepalive: closed.
  Replaced by a higher epoch: a ``leader_changed`` CONTROL frame, then closed;
  bytes that still arrive are discarded (counted), never delivered: nothing
  goes through a tunnel that is not its KMSN's current one. A site that stops
  reading while it keeps sending (PINGs whose PONGs pile up, say) is no longer
  read once `TUNNEL_WRITE_HIGH` bytes wait for it, so the cloud's buffer for
  it stays bounded; it falls silent and is closed after 3 × keepalive.
- `StreamEnd`: what a tunnel calls on the far end of each of its streams (a
  remote client, `relay.cloud.remote_peers.RemotePeer`, or a forwarded one).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Hashable
from typing import Any, Protocol

from relay.cloud.config import CloudConfig
from relay.cloud.fence import EpochFence, TunnelBook, TunnelRecord
from relay.cloud.handshake import TunnelAcceptor, TunnelRegistered
from relay.cloud.remote import GREETING_LIMIT
from relay.wire.events import REGISTER_TIMEOUT, error_frame
from relay.wire.framing import RawData, encode_frame
from relay.wire.mux import (
    INITIAL_WINDOW,
    Control,
    Mux,
    MuxError,
    StreamClosed,
    StreamData,
    Writable,
)

log = logging.getLogger("stkrelay.cloud")

READ_PAUSE_ABOVE = INITIAL_WINDOW
LINGER = 2.0  # seconds a closed client's unsent bytes may take to flush before it is aborted
HANDSHAKE_LIMIT = 64 << 10
PARKED_LIMIT = 2 * GREETING_LIMIT  # bytes a parked client may have sent in all (its register, and more)
TUNNEL_WRITE_HIGH = 4 * INITIAL_WINDOW  # bytes waiting for a site before the cloud stops reading it


class PeerServer(Protocol):
    """What the peers need of the server that accepted them (`relay.cloud.server.CloudServer`)."""

    cfg: CloudConfig
    fence: EpochFence
    book: TunnelBook

    @property
    def cluster(
        self,
    ) -> object | None: ...  # the etcd directory (`relay.cloud.cluster`), None for a node alone

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def admit(self, peer: Hashable, address: str) -> bool: ...  # False: over a cap, close without a word

    def release(self, peer: Hashable) -> None: ...

    def joined(self, peer: Hashable) -> None: ...  # registered: no longer an evictable newcomer

    def count(self, what: str) -> None: ...

    def refused(self, code: str, peer: str, detail: str = "") -> None: ...  # counted, logged within a budget

    def tunnel_refused(self, core: TunnelAcceptor, peer: str) -> None: ...  # counted by cause, logged

    def tunnel_accepted(self, tunnel: TunnelPeer) -> TunnelRecord: ...

    def claim_tunnel(self, tunnel: TunnelPeer, out: bytes) -> None: ...  # then claimed / claim_refused

    def tunnel_lost(self, tunnel: TunnelPeer, reason: str) -> None: ...

    def route(
        self, remote: Any
    ) -> None: ...  # a RemotePeer (relay.cloud.remote_peers): to its tunnel, or parked

    def forget(self, remote: Any) -> None: ...

    def client_address(self) -> tuple[str | None, int | None]: ...


def _peer_name(transport: asyncio.BaseTransport) -> tuple[str, str]:
    name = transport.get_extra_info("peername")
    if isinstance(name, tuple):
        return str(name[0]), f"{name[0]}:{name[1]}"
    return str(name), str(name)


def _keepalive(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        except OSError:
            pass


class StreamEnd(Protocol):
    """The far end of one of a tunnel's streams, as the tunnel drives it."""

    def from_site(self, data: bytes) -> None: ...

    def writable(self) -> None: ...

    def site_closed(self, reason: str) -> None: ...

    def tunnel_gone(self, epoch: int | None) -> None: ...


class TunnelPeer(asyncio.Protocol):
    def __init__(self, server: PeerServer) -> None:
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        cfg = server.cfg
        self.core = TunnelAcceptor(tokens=cfg.tokens, lease_keys=cfg.lease_keys, judge=server.fence.judge)
        self.mux = Mux(opener=True)
        self.record: TunnelRecord | None = None
        self.registration: TunnelRegistered | None = None
        self.streams: dict[int, StreamEnd] = {}
        self.dead = False
        self.peer = "?"
        self.rx = 0
        self.last_rx = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None
        self._flush_soon = False
        self.claiming = False  # waiting for the directory (`relay.cloud.cluster`)
        self.early = bytearray()
        self.lease = 0  # the etcd lease of this tunnel's directory entry

    # -- asyncio ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        address, self.peer = _peer_name(transport)
        if not self.server.admit(self, address):
            self.dead = True
            transport.abort()
            return
        _keepalive(transport)
        transport.set_write_buffer_limits(high=TUNNEL_WRITE_HIGH, low=TUNNEL_WRITE_HIGH // 4)
        transport.write(self.core.data_to_send())
        self.timer = self.loop.call_later(REGISTER_TIMEOUT, self._handshake_expired)

    def data_received(self, data: bytes) -> None:
        if self.dead:
            if self.record is not None:
                self.record.discarded += len(data)
            return
        self.last_rx = self.loop.time()
        if self.claiming:  # nothing is due before `registered`: keep a little, bounded
            if len(self.early) + len(data) > HANDSHAKE_LIMIT:
                self.server.refused("frame_too_large", self.peer)
                self.abort()
            else:
                self.early += data
            return
        try:
            if self.record is None:
                self._handshake(data)
            else:
                self._from_site(data)
        except Exception:
            log.exception("tunnel %s failed; closing it", self.peer)
            self.server.count("internal_error")
            self.abort()

    def pause_writing(self) -> None:
        """The site does not read what the cloud sends: stop reading it (see the module docstring)."""
        if self.transport is not None and not self.dead:
            self.server.count("tunnel_backpressure")
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.dead:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        if self.timer is not None:
            self.timer.cancel()
        self.server.release(self)
        if self.record is not None:
            self.server.tunnel_lost(self, "connection lost" if exc is None else f"connection lost: {exc}")
        for remote in list(self.streams.values()):
            remote.tunnel_gone(None)
        self.streams.clear()

    # -- handshake ----------------------------------------------------------------------
    def _handshake(self, data: bytes) -> None:
        assert self.transport is not None
        self.rx += len(data)
        core = self.core
        core.receive_data(data)
        raw = b""
        for event in core.events_received():
            if isinstance(event, TunnelRegistered):
                self.registration = event
            elif isinstance(event, RawData):
                raw += event.data
        out = core.data_to_send()
        if out and (self.registration is None or core.close_expected()):
            self.transport.write(out)
        if core.close_expected():
            self.server.tunnel_refused(core, self.peer)
            self.dead = True
            self.transport.close()
            return
        if self.registration is None:
            if self.rx > HANDSHAKE_LIMIT:
                self.server.refused("frame_too_large", self.peer)
                self.abort()
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.server.cluster is not None:  # `registered` waits for the directory's entry
            self.claiming = True
            self.early += raw
            self.server.claim_tunnel(self, out)
            return
        self.transport.write(out)
        self._accepted(raw)

    def _accepted(self, raw: bytes) -> None:
        self.record = self.server.tunnel_accepted(self)
        self.timer = self.loop.call_later(self.server.cfg.keepalive, self._tick)
        if raw:
            self._from_site(raw)

    def claimed(self, out: bytes, lease: int) -> None:
        """The directory's entry is this node's: send ``registered``, the tunnel serves."""
        self.claiming, self.lease = False, lease
        if self.dead or self.transport is None:
            return
        self.transport.write(out)
        raw, self.early = bytes(self.early), bytearray()
        self._accepted(raw)

    def claim_refused(self, code: str, message: str) -> None:
        self.claiming = False
        if self.dead or self.transport is None:
            return
        self.transport.write(encode_frame(error_frame(code, message)))
        self.dead = True
        self.transport.close()

    def _handshake_expired(self) -> None:
        self.timer = None
        if self.record is None and not self.dead:
            self.core.timeout()
            self.server.tunnel_refused(self.core, self.peer)
            if self.transport is not None:
                self.transport.write(self.core.data_to_send())
                self.transport.close()
            self.dead = True

    # -- the mux ------------------------------------------------------------------------
    def _from_site(self, data: bytes) -> None:
        record = self.record
        assert record is not None
        if not self.server.book.is_current(record):
            record.discarded += len(data)  # a replaced tunnel: never delivered
            return
        record.bytes_in += len(data)
        self.mux.receive_data(data)
        for event in self.mux.events_received():
            if type(event) is StreamData:
                remote = self.streams.get(event.stream)
                if remote is not None:
                    remote.from_site(event.data)
            elif type(event) is Writable:
                remote = self.streams.get(event.stream)
                if remote is not None:
                    remote.writable()
            elif type(event) is StreamClosed:
                remote = self.streams.pop(event.stream, None)
                if remote is not None:
                    remote.site_closed(event.reason)
            elif type(event) is MuxError:
                log.warning(
                    "tunnel %s of %s broke the mux: %s; closing it", self.peer, record.kmsn, event.message
                )
                self.server.count("mux_error")
                self.abort()
                return
            elif type(event) is Control:
                log.info("tunnel %s says %s", self.peer, str(event.obj)[:200])
        self.flush()

    def open_stream(self, remote: StreamEnd, kind: str, nonce: str, peer: str) -> int:
        stream = self.mux.open({"kind": kind, "nonce": nonce, "peer": peer})
        self.streams[stream] = remote
        assert self.record is not None
        self.record.streams += 1
        return stream

    def write(self, stream: int, data: bytes) -> None:
        if self.record is not None:
            self.record.bytes_out += len(data)
        self.mux.write(stream, data)
        self.flush_soon()

    def close_stream(self, stream: int, reason: str) -> None:
        if self.streams.pop(stream, None) is not None:
            self.mux.close(stream, reason)
            self.flush_soon()

    def flush_soon(self) -> None:
        if not self._flush_soon:
            self._flush_soon = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_soon = False
        out = self.mux.data_to_send()
        if out and self.transport is not None and not self.dead:
            self.transport.write(out)

    def _tick(self) -> None:
        self.timer = None
        if self.dead:
            return
        keepalive = self.server.cfg.keepalive
        if self.loop.time() - self.last_rx > 3 * keepalive:
            log.warning("tunnel %s silent for %.1f s: closing it", self.peer, self.loop.time() - self.last_rx)
            self.server.count("tunnel_timeout")
            self.abort()
            return
        self.mux.ping()
        self.flush()
        self.timer = self.loop.call_later(keepalive, self._tick)

    def replaced(self, epoch: int, node: str) -> None:
        """A higher epoch took the KMSN: tell the site, close, and move the clients."""
        self.mux.control({"type": "leader_changed", "epoch": epoch, "node": node})
        self.flush()
        self.dead = True
        if self.transport is not None:
            self.transport.close()
        for remote in list(self.streams.values()):
            remote.tunnel_gone(epoch)
        self.streams.clear()

    def abort(self) -> None:
        self.dead = True
        if self.transport is not None:
            self.transport.abort()
