"""The relay's connections: `asyncio.Protocol`s over the sans-I/O core.

`JsonPeer` (JSON port) and `PassthroughPeer` (passthrough port) feed the bytes
they read to a `relay.wire.server_connection.ServerConnection`, act on its events, write
what it has to send, and own the clock: when a deadline passes (handshake,
silence) they call the core's `timeout()`, which decides what to send. Once
registered, a peer is a `relay.server.routing.RoutedSession` of its host's `Router`.

Interface: a peer is built with a `relay.server.host.Host`, the few things it needs
from the server that accepted it (`relay.server.relay_server.RelayServer` is one); it never
sees the server itself. `relay.server.host.Batch` collects the frames routed while one
chunk is handled. The policies (buffer caps, batching, silence, crashes) are
described in `relay.server.relay_server`; the connection caps in `relay.server.limits`: a peer
asks `Host.admit()` first thing, and is closed without a word if refused.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import Callable
from typing import Any

from relay.server.host import Host
from relay.server.routing import PUBLISHER
from relay.wire.events import JSON_ROLES, PASSTHROUGH_ROLES, Message, Registered
from relay.wire.framing import FRAME_TOO_LARGE, TIMEOUT, PayloadError, ProtocolError, RawData
from relay.wire.server_connection import ServerConnection

# After ``leader_changed`` the relay half-closes and reads on, discarding, until the client
# closes (it does as soon as it has read the frame), for this long at most. A socket closed
# outright answers a streaming client's next bytes with a reset, and a reset may discard the
# unread frame: the client then finds the new leader by discovery, not at once (issue 22).
LINGER_S = 0.5

log = logging.getLogger("stkrelay.relay")


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a transport callback; an exception is logged and closes that peer only."""

    @functools.wraps(method)
    def wrapper(self: JsonPeer, *args: Any) -> Any:
        try:
            return method(self, *args)
        except Exception:
            self.crashed(method.__name__)
            return None

    return wrapper


def _half_closes(transport: asyncio.Transport) -> bool:
    """A TCP socket's transport can send end-of-stream and read on; a tunnel's stream cannot."""
    try:
        return transport.can_write_eof()
    except NotImplementedError:  # asyncio's default, kept by transports that are no socket
        return False


class JsonPeer(asyncio.Protocol):
    """One connection; once registered, also a `relay.server.routing.RoutedSession`."""

    roles = JSON_ROLES
    raw_mode = False
    silence_applies = True
    nonce: str | None = None  # the hello's nonce: fresh, unless another relay greeted (relay.cloud)

    def __init__(self, host: Host[JsonPeer]) -> None:
        self.host = host
        self.loop = host.loop
        self.transport: asyncio.Transport | None = None
        self.conn: ServerConnection | None = None
        self.kmsn = self.station = self.role = self.session = ""
        self.peer = "?"
        self.registered = False
        self.station_key = False  # registered with its station's credential (see relay.server.routing)
        self.legacy = False  # registered with the legacy magic (relay.server.legacy_peer)
        self.dead = False  # closing or closed: nothing more is written
        self.since = self.last_rx = self.loop.time()
        self.rx = 0
        self.pending: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio callbacks -------------------------------------------------------
    @_guarded
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        host = self.host
        name = transport.get_extra_info("peername")
        self.peer = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        if not host.admit(self, name[0] if isinstance(name, tuple) else str(name)):
            self.dead = True  # over a connection cap (relay.server.limits): no frame, no hello
            transport.abort()
            return
        host.attach(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        transport.set_write_buffer_limits(high=host.buffer_limit)
        self.conn = host.new_connection(
            roles=self.roles, raw_mode=self.raw_mode, nonce=self.nonce, peer=self.peer
        )
        self.greet(transport, self.conn.data_to_send())
        successor = host.successor
        if successor is not None:  # accepted in the same loop turn as lose_leadership()
            self.leader_changed(*successor)
            return
        self.timer = self.loop.call_later(self.conn.register_timeout, self._handshake_expired)

    def greet(self, transport: asyncio.Transport, hello: bytes) -> None:
        """Send the core's ``hello`` (a tunnelled peer drops it: the cloud greeted)."""
        transport.write(hello)

    def data_received(self, data: bytes) -> None:
        if self.dead:
            return
        self.last_rx = self.loop.time()
        try:
            if self.registered and not self.host.serving():
                return  # the gate shut (the server is closing every connection): not one byte on
            if self.registered and self.raw_mode:
                if self.role == PUBLISHER:
                    self.host.router.publish(self, data)
                return
            self._feed(data)
        except Exception:
            self.crashed("data_received")

    @_guarded
    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        if self.timer is not None:
            self.timer.cancel()
        if self.registered:
            self.host.router.unregister(self)
            log.info("%s left (session %s)", self.who, self.session)
        self.host.detach(self)

    @_guarded
    def pause_writing(self) -> None:
        assert self.transport is not None
        self.drop(f"cannot keep up: {self.transport.get_write_buffer_size()} bytes unsent")

    def resume_writing(self) -> None:
        pass

    # -- input ---------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None and self.transport is not None
        if not self.registered:
            self.rx += len(data)
        conn.receive_data(data)
        events = conn.events_received()
        if events:
            host = self.host
            host.batch.active = True
            try:
                for event in events:
                    if type(event) is Message:
                        self._on_message(event.obj)
                    elif type(event) is RawData:
                        if self.role == PUBLISHER:
                            host.router.publish(self, event.data)
                    elif type(event) is Registered:
                        self._on_registered(event)
                    elif type(event) is ProtocolError:
                        self._on_protocol_error(event)
            finally:
                host.batch.flush()
        limit = self.host.handshake_limit
        if not (self.registered or conn.closed) and self.rx > limit:
            conn.fail(FRAME_TOO_LARGE, f"handshake larger than {limit} bytes")
        out = conn.data_to_send()
        if out:
            self.transport.write(out)
        if conn.close_expected():
            self._finish()

    def _on_message(self, obj: dict) -> None:
        conn = self.conn
        assert conn is not None
        try:
            delivered = self.host.router.send(self, obj)
        except PayloadError as exc:
            if not conn.closed:
                conn.send_error(FRAME_TOO_LARGE, f"message too large to relay: {exc}", id=obj.get("id"))
            return
        if not delivered and not conn.closed:
            conn.no_route(obj.get("id"))

    def _on_registered(self, event: Registered) -> None:
        self.kmsn, self.station, self.role, self.session = (
            event.kmsn,
            event.station,
            event.role,
            event.session,
        )
        self.registered, self.station_key = True, event.station_key
        self.host.joined(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.silence_applies:
            assert self.conn is not None
            self.timer = self.loop.call_later(self.conn.silence_timeout, self._silence_check)
        self.host.router.register(self)
        log.info("%s joined (session %s)", self.who, self.session)

    def _on_protocol_error(self, event: ProtocolError) -> None:
        if event.fatal:
            self.host.count("protocol_error")
        else:
            self.host.rejected_frame()
        self.host.refused(event.code, "%s: %s %s", self.who, event.code, event.message)

    # -- timers: the transport reads the clock, the core decides what a timeout means --
    @_guarded
    def _handshake_expired(self) -> None:
        self.timer = None
        if self.dead or self.registered or self.conn is None:
            return
        self.host.count("timeout")
        self._timeout()

    @_guarded
    def _silence_check(self) -> None:
        self.timer = None
        if self.dead or self.conn is None:
            return
        idle = self.loop.time() - self.last_rx
        silence = self.conn.silence_timeout
        if idle < silence:
            self.timer = self.loop.call_later(silence - idle, self._silence_check)
            return
        self.host.count("timeout")
        log.info("%s silent for %.1f s: closing", self.who, idle)
        self._timeout()

    def _timeout(self) -> None:
        assert self.conn is not None
        self.conn.timeout()
        self._flush_conn()
        self._finish()

    # -- output and closing ------------------------------------------------------
    def deliver(self, frame: bytes) -> None:
        if self.dead or self.host.batch.hold(self, frame):
            return
        assert self.transport is not None
        self.transport.write(frame)

    def deliver_raw(self, data: bytes) -> None:
        if not self.dead:
            assert self.transport is not None
            self.transport.write(data)

    def close(self, code: str, message: str) -> None:
        """Replaced by a newer duplicate (see `relay.server.routing`)."""
        if not self.dead:
            log.info("%s: %s", self.who, message)
            self.host.count("replaced")
            self._fail(code, message)

    def evict(self, message: str) -> None:
        """Close an unregistered connection to make room (relay.server.limits): ``timeout``."""
        if not self.dead and self.conn is not None:
            self.host.refused("evicted", "%s: %s", self.who, message)
            self._fail(TIMEOUT, message)

    def leader_changed(self, epoch: int | None, ip: str | None, port: int | None) -> None:
        if not self.dead and self.conn is not None:
            self.conn.leader_changed(epoch, ip, port)  # only closes in raw mode
            self._flush_conn()
            self._finish(linger=True)

    def drop(self, reason: str) -> None:
        """Abort at once, unsent bytes and all: a peer that does not keep up."""
        if self.dead:
            return
        self.dead = True
        self.pending.clear()
        self.host.count("slow_viewer" if self.raw_mode else "slow_peer")
        log.warning("dropping %s: %s", self.who, reason)
        assert self.transport is not None
        self.transport.abort()

    def crashed(self, where: str) -> None:
        log.exception("relay peer %s failed in %s; closing it", self.peer, where)
        self.host.count("internal_error")
        if self.transport is None:
            return
        self.dead = True
        self.transport.abort()

    def abort(self) -> None:
        """Close at once, unsent bytes and all (the server gave up waiting)."""
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, code: str, message: str) -> None:
        if self.conn is not None:
            self.conn.fail(code, message)
        self._flush_conn()
        self._finish()

    def _flush_conn(self) -> None:
        if self.conn is not None and self.transport is not None and not self.dead:
            out = self.conn.data_to_send()
            if out:
                self.transport.write(out)

    def _finish(self, linger: bool = False) -> None:
        """Graceful close: what is buffered is still sent. With `linger`, a half-close:
        the buffered bytes, then end of stream, and whatever the client still sends is
        read and dropped (`data_received` of a dead peer) until it closes, within LINGER_S."""
        self.dead = True
        self.pending.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        transport = self.transport
        assert transport is not None
        if linger and _half_closes(transport) and not transport.is_closing():
            try:
                transport.write_eof()  # the client's end-of-stream comes back: `eof_received` closes
            except OSError:  # the client is gone already (ENOTCONN): nothing to linger for
                transport.close()
                return
            self.timer = self.loop.call_later(LINGER_S, transport.close)
            return
        transport.close()

    @property
    def who(self) -> str:
        if self.registered:
            return f"{self.role} {self.kmsn}/{self.station} ({self.peer})"
        return f"unregistered peer ({self.peer})"

    def describe(self) -> dict[str, Any]:
        buffered = self.transport.get_write_buffer_size() if self.transport and not self.dead else 0
        return {
            "session": self.session,
            "kmsn": self.kmsn,
            "station": self.station,
            "role": self.role,
            "peer": self.peer,
            "since": round(self.since, 3),
            "idle_s": round(self.loop.time() - self.last_rx, 3),
            "buffered": buffered,
            "key": "station" if self.station_key else "token",
        }


class PassthroughPeer(JsonPeer):
    roles = PASSTHROUGH_ROLES
    raw_mode = True
    silence_applies = False

    def leader_changed(self, epoch: int | None, ip: str | None, port: int | None) -> None:
        if not self.dead:
            self._finish()  # raw bytes carry no frames: just close
