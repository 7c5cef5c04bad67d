"""The cloud's WEB_PORT (docs/design.md §14): status JSON, metrics, WebSocket clients.

- ``GET /status``: `relay.cloud.server.CloudServer.status()` as JSON (pools,
  epochs, tunnels with their age, refusals, counters). No secret is in it.
- ``GET /metrics``: Prometheus text (`prometheus_client`, a registry of its
  own whose values are read from the server at each scrape).
- ``/ws/relay/``: a remote client over WebSocket, one protocol v1 message per
  text message (docs/design.md §8): the same `relay.cloud.remote_peers.RemotePeer` as the TCP
  port, over a `WsTransport` that frames what it reads and cuts what it writes
  back into messages.

Built on the ``websockets`` package's asyncio server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from relay.cloud.remote_peers import RemotePeer
from relay.cloud.server import CloudServer
from relay.wire.framing import HEADER_SIZE, PayloadError, frame_payload, read_header

log = logging.getLogger("stkrelay.cloud")

WS_PATH = "/ws/relay/"


class _Collector:
    def __init__(self, server: CloudServer) -> None:
        self.server = server

    def collect(self) -> Any:
        s = self.server
        now = s.loop.time()
        epoch = GaugeMetricFamily("stkcloud_epoch", "highest accepted tunnel epoch", labels=["kmsn"])
        up = GaugeMetricFamily("stkcloud_tunnel_up", "1 while the KMSN has a tunnel", labels=["kmsn"])
        age = GaugeMetricFamily("stkcloud_tunnel_age_seconds", "age of the current tunnel", labels=["kmsn"])
        clients = GaugeMetricFamily("stkcloud_remote_clients", "registered remote clients", labels=["kmsn"])
        for kmsn in sorted(s.cfg.tokens):
            record = s.book.current.get(kmsn)
            epoch.add_metric([kmsn], s.fence.epochs.get(kmsn, 0))
            up.add_metric([kmsn], 1 if record else 0)
            age.add_metric([kmsn], now - record.opened if record else 0)
            clients.add_metric(
                [kmsn], sum(1 for r in s.remotes if r.kmsn == kmsn and r.registered and not r.dead)
            )
        refused = CounterMetricFamily("stkcloud_refused", "refused connections by code", labels=["code"])
        for code, n in sorted(s.refusals.items()):
            refused.add_metric([code], n)
        tunnels = CounterMetricFamily("stkcloud_tunnel_refused", "refused tunnels by cause", labels=["cause"])
        for cause, n in sorted(s.tunnel_refusals.items()):
            tunnels.add_metric([cause], n)
        leases = CounterMetricFamily(
            "stkcloud_lease_refused", "tunnels whose lease MAC failed", labels=["kmsn", "cause"]
        )
        for kmsn, causes in sorted(s.lease_refusals.items()):
            for cause, n in sorted(causes.items()):
                leases.add_metric([kmsn, cause], n)
        events = CounterMetricFamily("stkcloud_events", "cloud relay events by kind", labels=["kind"])
        for kind, n in sorted(s.counters.items()):
            events.add_metric([kind], n)
        discarded = CounterMetricFamily("stkcloud_discarded_bytes", "bytes from replaced tunnels, dropped")
        discarded.add_metric([], sum(r.discarded for r in [*s.book.closed, *s.book.current.values()]))
        yield from (epoch, up, age, clients, refused, tunnels, leases, events, discarded)


class WsTransport(asyncio.Transport):
    """A WebSocket connection as the transport of a `RemotePeer`."""

    def __init__(self, ws: ServerConnection, max_frame: int) -> None:
        super().__init__()
        self.ws, self.max_frame = ws, max_frame
        self.out: asyncio.Queue[str | None] = asyncio.Queue()
        self.queued = 0
        self.buf = bytearray()
        self.high, self.low = 1 << 20, 1 << 18
        self.protocol: RemotePeer | None = None
        self.reading = asyncio.Event()
        self.reading.set()
        self.closing = False
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.ws.remote_address if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high, self.low = high or self.high, low or self.low

    def get_write_buffer_size(self) -> int:
        return self.queued

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing:
            return
        self.buf += data
        while len(self.buf) >= HEADER_SIZE:
            size = read_header(self.buf[:HEADER_SIZE], 1 << 32)
            if not isinstance(size, int) or len(self.buf) < HEADER_SIZE + size:
                break
            text = bytes(self.buf[HEADER_SIZE : HEADER_SIZE + size]).decode("utf-8", "replace")
            del self.buf[: HEADER_SIZE + size]
            self.queued += len(text)
            self.out.put_nowait(text)
        if not self.paused and self.queued > self.high and self.protocol is not None:
            self.paused = True
            self.protocol.pause_writing()

    def sent(self, n: int) -> None:
        self.queued -= n
        if self.paused and self.queued <= self.low and self.protocol is not None:
            self.paused = False
            self.protocol.resume_writing()

    def pause_reading(self) -> None:
        self.reading.clear()

    def resume_reading(self) -> None:
        self.reading.set()

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.out.put_nowait(None)

    def abort(self) -> None:
        self.closing = True
        self.ws.transport.abort()


async def _bridge(server: CloudServer, ws: ServerConnection) -> None:
    transport = WsTransport(ws, server.cfg.max_frame)
    peer = RemotePeer(server)
    transport.protocol = peer
    peer.connection_made(transport)

    async def pump_out() -> None:
        while (text := await transport.out.get()) is not None:
            await ws.send(text)
            transport.sent(len(text))
        await ws.close()

    sender = asyncio.create_task(pump_out())
    try:
        async for message in ws:
            if not isinstance(message, str):
                break
            try:
                # never raises: a lone surrogate goes on as bytes that the greeting refuses (bad_json)
                payload = message.encode("utf-8", "surrogatepass")
                frame = frame_payload(payload, max_frame=server.cfg.max_frame)
            except PayloadError:
                break
            await transport.reading.wait()
            peer.data_received(frame)
            if peer.dead:
                break
    except ConnectionClosed:
        pass
    finally:
        transport.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                await sender
        sender.cancel()
        peer.connection_lost(None)


def _respond(status: int, body: bytes, kind: str) -> Response:
    headers = Headers(
        [("Content-Type", kind), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
    )
    return Response(status, "OK" if status == 200 else "Not Found", headers, body)


async def serve_web(server: CloudServer) -> Any:
    """Start WEB_PORT on LISTEN_IP; returns the websockets server (close() it to stop)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Collector(server))

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == "/status":
            return _respond(200, json.dumps(server.status(), indent=1).encode(), "application/json")
        if path == "/metrics":
            return _respond(200, generate_latest(registry), "text/plain; version=0.0.4")
        if path == WS_PATH:
            return None
        return _respond(404, b'{"error": "not found"}', "application/json")

    async def handler(ws: ServerConnection) -> None:
        await _bridge(server, ws)

    cfg = server.cfg
    return await serve(handler, cfg.listen_ip, cfg.web_port, process_request=process_request,
                       max_size=cfg.max_frame, compression=None)  # fmt: skip
