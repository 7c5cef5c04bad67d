"""The cloud's remote clients: the peers on its JSON and passthrough ports (docs/design.md §14).

`RemotePeer`: hello, then the client's first frame names its KMSN; with no
  tunnel yet it is parked up to PARK seconds (a new leader is coming; at most
  PARK_MAX per site, each holding at most `PARKED_LIMIT` bytes), else a
  stream is opened and the bytes piped. Flow control: the cloud credits the
  site's bytes only while the client's socket keeps up (asyncio's write
  limits), and stops reading a client whose stream's queue is over
  `READ_PAUSE_ABOVE`, so neither direction buffers without bound.
  When its tunnel goes (lost, or replaced), a JSON client is sent
  ``leader_changed`` (between two frames; else just closed), naming the
  cloud's own address: remote clients reconnect to the cloud, which routes
  them to the new leader.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from relay.cloud.peers import (
    LINGER,
    PARKED_LIMIT,
    READ_PAUSE_ABOVE,
    PeerServer,
    _keepalive,
    _peer_name,
)
from relay.cloud.remote import FrameCursor, Greeting
from relay.wire.events import REGISTER_TIMEOUT, error_frame
from relay.wire.framing import NOT_LEADER, decode_payload, encode_frame
from relay.wire.mux import INITIAL_WINDOW

log = logging.getLogger("stkrelay.cloud")


class StreamWindow(Protocol):
    """A carrier's flow control of one stream (`relay.wire.mux.Mux`)."""

    def buffered(self, stream: int) -> int: ...

    def consumed(self, stream: int, n: int) -> None: ...


class Carrier(Protocol):
    """What a remote client's stream rides on: its site's `TunnelPeer`, or on another cloud
    node a `relay.cloud.forward.PeerLink` to the node that holds that tunnel."""

    @property
    def mux(self) -> StreamWindow: ...

    def open_stream(self, remote: RemotePeer, kind: str, nonce: str, peer: str) -> int: ...

    def write(self, stream: int, data: bytes) -> None: ...

    def close_stream(self, stream: int, reason: str) -> None: ...

    def flush_soon(self) -> None: ...


class RemotePeer(asyncio.Protocol):
    """A remote client on the cloud's JSON port (`kind` json) or passthrough port (raw)."""

    kind = "json"
    forwarded = False  # came from another node (`relay.cloud.forward`): never forwarded again

    def __init__(self, server: PeerServer) -> None:
        self.server = server
        self.loop = server.loop
        self.greeting = Greeting()
        self.cursor = FrameCursor()
        self.transport: asyncio.Transport | None = None
        self.tunnel: Carrier | None = None  # a TunnelPeer, or a `relay.cloud.forward.PeerLink`
        self.stream = 0
        self.kmsn = ""
        self.registered = False
        self.dead = False
        self.paused_reading = self.paused_writing = False
        self.owed = 0  # site bytes written to the client but not credited yet
        self.peer = "?"
        self.address = ""
        self.since = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.address, self.peer = _peer_name(transport)
        if not self.server.admit(self, self.address):
            self.dead = True
            transport.abort()
            return
        _keepalive(transport)
        transport.set_write_buffer_limits(high=INITIAL_WINDOW, low=INITIAL_WINDOW // 4)
        transport.write(self.greeting.hello)
        self.timer = self.loop.call_later(REGISTER_TIMEOUT, self._expired)

    def data_received(self, data: bytes) -> None:
        if self.dead:
            return
        if self.tunnel is not None:
            self.tunnel.write(self.stream, data)
            if self.tunnel.mux.buffered(self.stream) > READ_PAUSE_ABOVE and not self.paused_reading:
                self.paused_reading = True
                assert self.transport is not None
                self.transport.pause_reading()
            return
        if self.kmsn:  # parked: keep what it sends (bounded), forward it with the register
            if len(self.greeting.buffer) + len(data) > PARKED_LIMIT:
                self.refuse("frame_too_large", "too much before registration")
                return
            self.greeting.buffer += data
            return
        greeting = self.greeting
        greeting.receive_data(data)
        if greeting.refusal is not None:
            self.refuse(*greeting.refusal)
        elif greeting.kmsn is not None:
            self.kmsn = greeting.kmsn
            if self.admissible():
                self.server.route(self)

    def admissible(self) -> bool:
        """May this client, its register read, be routed? (`relay.cloud.forward` checks more.)"""
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        if self.timer is not None:
            self.timer.cancel()
        if self.tunnel is not None:
            self.tunnel.close_stream(self.stream, "the remote client left")
            self.tunnel = None
        self.server.forget(self)

    def pause_writing(self) -> None:
        self.paused_writing = True

    def resume_writing(self) -> None:
        self.paused_writing = False
        if self.owed and self.tunnel is not None:
            owed, self.owed = self.owed, 0
            self.tunnel.mux.consumed(self.stream, owed)
            self.tunnel.flush_soon()

    # -- routing --------------------------------------------------------------------------
    def attach(self, tunnel: Carrier) -> None:
        """Open this client's stream on `tunnel` and forward what it sent so far."""
        if self.dead:
            return
        self.tunnel = tunnel
        self.stream = tunnel.open_stream(self, self.kind, self.greeting.nonce, self.peer)
        tunnel.write(self.stream, bytes(self.greeting.buffer))
        self.greeting.buffer.clear()

    def park_expired(self) -> None:
        if not self.dead and self.tunnel is None:
            self.server.count("park_expired")
            self.refuse(NOT_LEADER, f"no leader of {self.kmsn[:64]} is connected to this cloud")

    def from_site(self, data: bytes) -> None:
        if self.dead or self.transport is None:
            return
        if not self.registered and self.cursor.first is None:
            self.cursor.feed(data)
            first = self.cursor.first
            if first is not None:
                self._first_answer(first)
        elif self.kind == "json":
            self.cursor.feed(data)
        self.transport.write(data)
        if self.paused_writing:
            self.owed += len(data)
        elif self.tunnel is not None:
            self.tunnel.mux.consumed(self.stream, len(data))

    def _first_answer(self, payload: bytes) -> None:
        obj = decode_payload(payload)
        if isinstance(obj, dict) and obj.get("type") == "registered":
            self.registered = True
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self.server.joined(self)
            self.server.count("remote_registered")

    def writable(self) -> None:
        tunnel, transport = self.tunnel, self.transport
        if not (self.paused_reading and tunnel is not None and transport is not None):
            return
        if tunnel.mux.buffered(self.stream) <= READ_PAUSE_ABOVE // 2:
            self.paused_reading = False
            transport.resume_reading()

    def site_closed(self, reason: str) -> None:
        """The site ended the stream (it closed the session): close after what was sent."""
        self.tunnel = None
        self._close()

    def tunnel_gone(self, epoch: int | None) -> None:
        """The tunnel went (lost, or replaced by `epoch`): send the client back to the cloud."""
        self.tunnel = None
        if self.dead or self.transport is None:
            return
        if self.kind == "json" and self.registered and self.cursor.at_boundary:
            ip, port = self.server.client_address()
            self.transport.write(
                encode_frame({"type": "leader_changed", "epoch": epoch, "ip": ip, "port": port})
            )
        self.server.count("moved")
        self._close()

    def refuse(self, code: str, message: str) -> None:
        if self.dead or self.transport is None:
            return
        self.server.refused(code, self.peer)
        self.transport.write(encode_frame(error_frame(code, message)))
        self._close()

    def _expired(self) -> None:
        self.timer = None
        if not self.dead and not self.registered and self.tunnel is None and not self.kmsn:
            self.refuse("timeout", "no register within the deadline")

    def _close(self) -> None:
        self.dead = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()
            if self.transport.get_write_buffer_size():  # a client that stopped reading: do not wait forever
                self.loop.call_later(LINGER, self.transport.abort)

    def describe(self) -> dict[str, Any]:
        g = self.greeting
        return {"kmsn": self.kmsn, "role": g.role, "station": g.station, "peer": self.peer,
                "registered": self.registered, "since": round(self.since, 3), "kind": self.kind}  # fmt: skip


class RemoteViewer(RemotePeer):
    """A remote client of the passthrough port (publisher or viewer)."""

    kind = "raw"
