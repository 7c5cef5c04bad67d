"""WebSocket routes of the relay (docs/design.md §8), as bridges into the relay.

`/ws/relay/` carries the same JSON messages as the TCP port, one per text
message, without the length prefix, same handshake. The consumer is a
transparent pipe to the current leader's relay port: each browser becomes one
more client of the one in-process routing table, so a browser commander and a
TCP agent talk to each other, and no data frame goes through a channel layer.

`/ws/stream/<station>/` (login required) registers as a passthrough `viewer`
of that station on the operator's behalf and sends the bytes as binary
messages.

The browser keeps its own address at the relay (issue 40): the first bytes of every
connection a bridge opens are a keyed PROXY v2 header naming the browser's address
(`relay.wire.proxy_header`, made with the pool key), so the relay's per-address and
pre-auth caps count each browser, not this web process.

What the web server holds for one connection is bounded (`relay.web.ws_flow`,
`WEB_WS_MAX_BUFFER` bytes and `WEB_WS_MAX_MESSAGES` messages): a reader that
cannot keep up is closed (`SLOW`), logged and counted, and nobody else waits
for it; so is a client that sends faster than the relay takes its messages.

The bridges use no channel layer (`channel_layer_alias` names none): a consumer
with the default one waits on this agent's Redis for layer messages the bridges
are never sent, so every WebSocket closed at once while Redis was away. Without
it they work whether Redis answers or not.

Interface: the Channels consumers `RelayBridge` and `StreamBridge` (routed in
`stkrelay.asgi`), and `relay_address()`. Frames are made and read with the
codec of `relay.wire.server_connection`; the JSON bridge does not parse what it carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from elections.errors import StoreUnavailable
from elections.ports.local.localstate import LocalState
from elections.ports.store.stores import PoolPlace, open_store
from relay.web.ws_flow import INBOUND_BACKLOG, SCOPE_KEY, SLOW, SendBound, note_slow
from relay.wire.auth import new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import Registered, is_name
from relay.wire.framing import (
    HEADER_SIZE,
    PayloadError,
    ProtocolError,
    RawData,
    encode_payload,
    frame_payload,
    read_header,
)
from relay.wire.proxy_header import encode
from stkhost.clock import SystemClock
from stkhost.pool_keys import station_credential

log = logging.getLogger("stkrelay.ws")

READ_CHUNK = 1 << 16
DRAIN_ABOVE = 1 << 20
DRAIN_LOOK = 0.1  # seconds: while the relay takes nothing, how often the client's backlog is looked at


def _lease_address() -> tuple[str, int] | None:
    """The leader named by a valid lease on the share (blocking, within SHARE_TIMEOUT)."""
    stk = settings.STK
    try:
        read = open_store(PoolPlace.of(stk), stk.node, SystemClock()).read()
    except StoreUnavailable:
        return None
    rec = read.record if read.status == "valid" else None
    return (rec.ip, rec.port) if rec is not None and not rec.released else None


async def relay_address() -> tuple[str, int]:
    """Where the relay runs now: the leader named by the signed lease, read off
    the event loop with the share's deadline; if the share does not answer, the
    leader of this agent's pool view; else this agent."""
    stk = settings.STK
    found = await asyncio.to_thread(_lease_address)
    if found is not None:
        return found
    lease = LocalState(stk.data_dir).pool().lease or {}
    ip, port = lease.get("ip"), lease.get("port")
    if not lease.get("released") and isinstance(ip, str) and isinstance(port, int):
        return ip, port
    return stk.node_ip, stk.relay_port


# An alias no CHANNEL_LAYERS entry has: `get_channel_layer` gives None, and the consumer waits on
# its WebSocket only (Channels' `AsyncConsumer.__call__`).
NO_CHANNEL_LAYER = "none: the bridges take no layer messages"


class _Bridge(AsyncWebsocketConsumer):
    channel_layer_alias = NO_CHANNEL_LAYER
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    pump: asyncio.Task[None] | None = None
    port_offset = 0
    route = "relay"
    _bound: SendBound | None = None

    @property
    def bound(self) -> SendBound:
        if self._bound is None:
            stk = settings.STK
            self._bound = SendBound(self.scope.get(SCOPE_KEY), stk.web_ws_max_buffer, stk.web_ws_max_messages)
        return self._bound

    async def forward(self, text_data: str | None = None, bytes_data: bytes | None = None) -> bool:
        """Send one message to the peer unless the server already holds too much for it;
        then close it as too slow (logged, counted) and say False."""
        size = len(bytes_data) if bytes_data is not None else len((text_data or "").encode())
        why = self.bound.before_send(size)
        if why is not None:
            await self.too_slow(why)
            return False
        await self.send(text_data=text_data, bytes_data=bytes_data)
        return True

    async def too_slow(self, why: str) -> None:
        note_slow(self.route, why, (self.scope.get("client") or ["?"])[0], self.bound)
        await self.close(code=SLOW)

    async def open_relay(self) -> bool:
        ip, port = await relay_address()
        try:
            async with asyncio.timeout(3):
                self.reader, self.writer = await asyncio.open_connection(ip, port + self.port_offset)
        except (TimeoutError, OSError) as exc:
            log.warning("websocket bridge: relay %s:%s unreachable: %s", ip, port + self.port_offset, exc)
            await self.close(code=1013)  # try again later
            return False
        self.writer.write(self.forwarded_header())
        return True

    def forwarded_header(self) -> bytes:
        """The header naming the browser to the relay (b"" where its address is unknown)."""
        assert self.writer is not None
        client, server = self.scope.get("client"), self.scope.get("server")
        local = self.writer.get_extra_info("sockname")
        key = settings.STK.pool_key
        try:
            return encode((client[0], int(client[1])), (server[0], int(server[1])), local[:2], key)
        except (TypeError, ValueError, IndexError):  # no address (a unix socket, a test's scope), or no key
            return b""

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()


class RelayBridge(_Bridge):
    """Text message <-> framed JSON, byte-transparent in both directions."""

    async def connect(self) -> None:
        if await self.open_relay():
            await self.accept()
            self.pump = asyncio.create_task(self._from_relay())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data is None or self.writer is None:
            await self.close(code=1003)  # text only
            return
        try:  # a lone surrogate cannot come from a valid text message; if one does, the relay says bad_json
            payload = text_data.encode("utf-8", "surrogatepass")
            frame = frame_payload(payload, max_frame=settings.STK.relay_max_frame)
        except PayloadError:
            await self.close(code=1009)  # too big
            return
        self.writer.write(frame)
        # Backpressure only when the relay falls behind; meanwhile the client's messages wait
        # in the server's queue, up to the bound.
        while self.writer.transport.get_write_buffer_size() > DRAIN_ABOVE:
            if self.bound.inbound_full():
                await self.too_slow(INBOUND_BACKLOG)
                return
            try:
                async with asyncio.timeout(DRAIN_LOOK):
                    await self.writer.drain()
            except TimeoutError:
                continue
            except ConnectionError:
                return

    async def _from_relay(self) -> None:
        assert self.reader is not None
        limit = settings.STK.relay_max_frame
        try:
            while True:
                size = read_header(await self.reader.readexactly(HEADER_SIZE), limit)
                if isinstance(size, ProtocolError):
                    break
                payload = await self.reader.readexactly(size)
                if not await self.forward(text_data=payload.decode("utf-8", "replace")):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        await self.close()


class StreamBridge(_Bridge):
    """A logged-in browser watches a station's passthrough bytes."""

    port_offset = 1
    route = "stream"

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        station = self.scope["url_route"]["kwargs"]["station"]
        if not is_name(station):  # the relay would refuse it (bad_request): no connection to it
            await self.close(code=4400)
            return
        if not await self.open_relay():
            return
        stk = settings.STK
        # The station's credential, not the site token: it works with RELAY_STATION_KEYS_ONLY too.
        key = station_credential(stk.pool_key, stk.kmsn, station)
        self.conn = ClientConnection(role="viewer", kmsn=stk.kmsn, station=station, token=key,
                                     raw_mode=True, cnonce=new_nonce())  # fmt: skip
        await self.accept()
        self.pump = asyncio.create_task(self._from_relay())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        pass  # viewers only watch

    async def _from_relay(self) -> None:
        assert self.reader is not None and self.writer is not None
        try:
            while data := await self.reader.read(READ_CHUNK):
                self.conn.receive_data(data)
                out = self.conn.data_to_send()
                if out:
                    self.writer.write(out)
                for event in self.conn.events_received():
                    if isinstance(event, RawData):
                        if not await self.forward(bytes_data=event.data):
                            return
                    elif isinstance(event, Registered):
                        registered = encode_payload({"type": "registered", "epoch": event.epoch})
                        await self.send(text_data=registered.decode())
                if self.conn.close_expected():
                    break
        except ConnectionError:
            pass
        await self.close()
