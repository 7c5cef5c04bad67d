"""The leader's outbound tunnel to the cloud relay (docs/design.md §14), in the relay's process.

`runrelay` runs only while its agent leads, and starts a `TunnelClient` as soon
as its listeners serve (when ``CLOUD_URL`` is set): so only the leader ever
dials out, and the tunnel ends with the relay, at the latest when the renew
deadline passes (the relay's gate). Before each dial the client asks the same
gate, and presents the signed lease of its own epoch with its ``cloud_sig``
(`relay.wire.lease_mac`), keyed with the site's K_cloud (`lease_key`, derived
from POOL_KEY) over the nonce of the cloud's ``hello``.

Remote clients become peers of the site's own `relay.server.relay_server.RelayServer`: each
stream the cloud opens is a `relay.server.connections.JsonPeer` (or `PassthroughPeer`)
over a `StreamTransport`, built with the cloud's nonce, so the site's core
verifies the remote client's ``register`` (and proves itself, protocol 1.1)
exactly as for a LAN client, and the same routing, caps, batching, silence
timeouts and slow-peer drops apply. `StreamTransport.write()` never blocks:
bytes wait in the stream's mux queue for the cloud's credit, and a stream
whose queue passes the relay's buffer limit is dropped like a slow LAN
viewer, so one slow remote viewer never stalls the publisher, the other
streams or the site. A remote peer told ``leader_changed`` (the site lost
leadership) is sent nulls for ip and port: its way back is the cloud.

Reconnection: a lost or refused tunnel is dialled again after a jittered
exponential delay (`stkhost.retry.Backoff`: 0.1 s doubling to 5 s, ±50 %),
restarting from the first delay after each accepted handshake.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from relay.server.relay_server import RelayServer
from relay.server.tunnel_streams import StreamTransport, TunnelledJsonPeer, TunnelledPassthroughPeer
from relay.wire.auth import is_nonce, new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import TUNNEL_ROLE, ErrorReceived, Registered
from relay.wire.framing import ProtocolError, RawData
from relay.wire.lease_mac import presented
from relay.wire.mux import Control, Mux, MuxError, Pong, StreamClosed, StreamData, StreamOpened, Writable
from stkhost.retry import Backoff

log = logging.getLogger("stkrelay.tunnel")

BACKOFF = Backoff(tries=1 << 30, first=0.1, factor=2.0, cap=5.0, jitter=0.5)
DIAL_TIMEOUT = 3.0

LeaseSource = Callable[[], Awaitable["dict | None"]]


class _TunnelProtocol(asyncio.Protocol):
    def __init__(self, client: TunnelClient) -> None:
        self.client = client
        self.done: asyncio.Future[str] = client.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.client.received(data)
        except Exception:
            log.exception("tunnel: failed on input; closing")
            self.client.abort("internal error")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result("connection lost" if exc is None else f"connection lost: {exc}")


class TunnelClient:
    """The one outbound tunnel of this leader, redialled while `gate()` says it leads."""

    def __init__(
        self,
        *,
        server: RelayServer,
        host: str,
        port: int,
        token: str,
        lease_key: str,
        kmsn: str,
        node: str,
        epoch: int,
        lease: LeaseSource,
        gate: Callable[[], bool],
        keepalive: float = 10.0,
        url: str = "",
        backoff: Backoff = BACKOFF,
        rng: random.Random | None = None,
        also: Sequence[tuple[str, int]] = (),
    ) -> None:
        self.server, self.host, self.port, self.token = server, host, port, token
        # (host, port) of every node of the cloud, this one first: a failed dial or handshake
        # moves to the next (a comma-separated CLOUD_URL), so a dead node's sites re-dial another
        self.targets = [(host, port), *also]
        self.lease_key = lease_key  # K_cloud: stkhost.pool_keys.cloud_key(POOL_KEY, kmsn)
        self.kmsn, self.node, self.epoch, self.lease, self.gate = kmsn, node, epoch, lease, gate
        self.keepalive, self.url, self.backoff = keepalive, url or f"tcp://{host}:{port}", backoff
        self.rng = rng or random.Random()
        self.loop = server.loop
        self.mux = Mux(opener=False)
        self.conn: ClientConnection | None = None
        self.transport: asyncio.Transport | None = None
        self.protocol: _TunnelProtocol | None = None
        self.streams: dict[int, StreamTransport] = {}
        self.state = "starting"
        self.since = self.loop.time()
        self.connected_at: float | None = None
        self.last_rx = self.loop.time()
        self.last_error = ""
        self.refusals: dict[str, int] = {}
        self.accepted = self.reconnects = 0
        self.replaced_by: object = None  # the epoch the cloud said replaced this tunnel, if it did
        self.bytes_in = self.bytes_out = 0
        self.streams_opened = 0
        self.stopping = False
        self._flush_soon = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = self.loop.create_task(self.run(), name="tunnel")

    async def stop(self) -> None:
        """Close the tunnel (after what the streams still hold) and stop dialling."""
        self.stopping = True
        self.flush()
        if self.transport is not None:
            self.transport.close()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._set("stopped")

    async def run(self) -> None:
        failures = 0
        while not self.stopping:
            if not self.gate():
                self._set("not leading")
                return
            registered = await self._session()
            if self.stopping:
                return
            failures = 0 if registered else failures + 1
            self.reconnects += 1
            if not registered and len(self.targets) > 1:
                self._next_target()
                if failures < len(self.targets):  # the other nodes are tried at once, once
                    continue
            delay = self.backoff.delay(failures, self.rng)
            self._set("backoff")
            await asyncio.sleep(delay)

    def _next_target(self) -> None:
        at = self.targets.index((self.host, self.port)) if (self.host, self.port) in self.targets else -1
        self.host, self.port = self.targets[(at + 1) % len(self.targets)]
        self.url = f"tcp://{self.host}:{self.port}"

    async def _session(self) -> bool:
        """One connection: dial, handshake, serve. True if the cloud accepted it."""
        self.mux = Mux(opener=False)
        self.connected_at = None
        self._set("connecting")
        lease = await self.lease()
        if lease is None:
            self.last_error = "the signed lease could not be read"
            return False
        key = self.lease_key
        self.conn = ClientConnection(role=TUNNEL_ROLE, kmsn=self.kmsn, station=self.node, token=self.token,
                                     epoch=self.epoch, raw_mode=True, cnonce=new_nonce(),
                                     extra=lambda nonce: {"lease": presented(lease, key, nonce)})  # fmt: skip
        protocol = self.protocol = _TunnelProtocol(self)
        try:
            async with asyncio.timeout(DIAL_TIMEOUT):
                await self.loop.create_connection(lambda: protocol, self.host, self.port)
        except (OSError, TimeoutError) as exc:
            self.last_error = f"cannot reach {self.url}: {getattr(exc, 'strerror', None) or exc or 'timeout'}"
            return False
        ticker = self.loop.create_task(self._keepalive())
        try:
            reason = await protocol.done
        finally:
            ticker.cancel()
            self._drop_streams()
        accepted = self.connected_at is not None
        if accepted:
            log.info("tunnel to %s closed: %s", self.url, reason)
        if not self.last_error or accepted:
            self.last_error = reason
        self.transport = None
        return accepted

    # -- input ------------------------------------------------------------------------
    def received(self, data: bytes) -> None:
        self.last_rx = self.loop.time()
        self.bytes_in += len(data)
        conn = self.conn
        assert conn is not None
        if self.connected_at is not None:
            self._mux_input(data)
            return
        conn.receive_data(data)
        out = conn.data_to_send()
        if out:
            self._write(out)
        raw = b""
        for event in conn.events_received():
            if isinstance(event, Registered):
                self.connected_at = self.loop.time()
                self.accepted += 1
                self.last_error = ""
                self._set("connected")
                log.info("tunnel to %s accepted: %s epoch %d", self.url, self.node, self.epoch)
            elif isinstance(event, RawData):
                raw += event.data
            elif isinstance(event, ErrorReceived):
                self.refusals[event.code] = self.refusals.get(event.code, 0) + 1
                self.last_error = f"refused: {event.code} ({event.message[:200]})"
                log.warning("tunnel to %s %s", self.url, self.last_error)
            elif isinstance(event, ProtocolError):
                self.last_error = f"the cloud broke the protocol: {event.code} ({event.message[:200]})"
        if conn.close_expected() and self.connected_at is None:
            self.abort(self.last_error or "handshake failed")
        elif raw:
            self._mux_input(raw)

    def _mux_input(self, data: bytes) -> None:
        mux = self.mux
        mux.receive_data(data)
        for event in mux.events_received():
            if type(event) is StreamData:
                stream = self.streams.get(event.stream)
                if stream is not None:
                    stream.protocol.data_received(event.data)
                mux.consumed(event.stream, len(event.data))
            elif type(event) is StreamOpened:
                self._open(event.stream, event.meta)
            elif type(event) is StreamClosed:
                stream = self.streams.get(event.stream)
                if stream is not None:
                    stream.gone()
            elif type(event) is Writable:
                stream = self.streams.get(event.stream)
                if stream is not None:
                    stream.writable()
            elif type(event) is Control:
                obj = event.obj
                if obj.get("type") == "leader_changed":
                    self.replaced_by = obj.get("epoch")
                    self.last_error = f"replaced at the cloud by epoch {obj.get('epoch')} ({obj.get('node')})"
                    log.warning("tunnel to %s: %s", self.url, self.last_error)
            elif type(event) is MuxError:
                self.last_error = f"the cloud broke the mux: {event.message}"
                self.abort(self.last_error)
                return
            elif type(event) is Pong:
                pass
        self.flush()

    def _open(self, stream: int, meta: dict) -> None:
        nonce, peer = meta.get("nonce"), meta.get("peer")
        if not is_nonce(nonce):
            self.mux.close(stream, "OPEN without a nonce")
            return
        cls = TunnelledJsonPeer if meta.get("kind") == "json" else TunnelledPassthroughPeer
        protocol = cls(self.server)
        protocol.nonce = nonce.lower()
        transport = StreamTransport(self, stream, peer if isinstance(peer, str) else "?", protocol)
        self.streams[stream] = transport
        self.streams_opened += 1
        protocol.connection_made(transport)

    # -- output -----------------------------------------------------------------------
    def flush_soon(self) -> None:
        if not self._flush_soon:
            self._flush_soon = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_soon = False
        out = self.mux.data_to_send()
        if out:
            self._write(out)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.bytes_out += len(data)
            self.transport.write(data)

    def abort(self, reason: str) -> None:
        if self.transport is not None:
            self.transport.abort()
        if self.protocol is not None and not self.protocol.done.done():
            self.protocol.done.set_result(reason)

    async def _keepalive(self) -> None:
        while True:
            await asyncio.sleep(self.keepalive)
            if self.connected_at is None:
                continue
            if self.loop.time() - self.last_rx > 3 * self.keepalive:
                self.abort(f"the cloud was silent for {3 * self.keepalive:g} s")
                return
            self.mux.ping()
            self.flush()

    def _drop_streams(self) -> None:
        for stream in list(self.streams.values()):
            stream.gone()
        self.streams.clear()

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state, self.since = state, self.loop.time()

    def snapshot(self) -> dict[str, Any]:
        """What the panel and relay.json show of the tunnel."""
        now = self.loop.time()
        remote = [s.protocol for s in self.streams.values()]
        return {
            "url": self.url,
            "state": self.state,
            "connected": self.state == "connected",
            "epoch": self.epoch,
            "age_s": round(now - self.connected_at, 3) if self.connected_at is not None else None,
            "since_s": round(now - self.since, 3),
            "streams": len(self.streams),
            "remote_clients": sum(1 for p in remote if p.registered and not p.dead),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "accepted": self.accepted,
            "reconnects": self.reconnects,
            "refusals": dict(sorted(self.refusals.items())),
            "last_error": self.last_error,
            "replaced_by": self.replaced_by if isinstance(self.replaced_by, int) else None,
        }
