"""The tunnel's stream multiplexer (docs/design.md §14): many byte streams over one connection.

Pure, sans-I/O like `relay.wire.server_connection`: no sockets, asyncio or clock. Each end of
a tunnel holds one `Mux`; the transport feeds it the bytes it reads
(`receive_data`), acts on `events_received()` and writes `data_to_send()`.

A mux frame is ``kind`` (1 byte), ``stream`` (4 bytes, big-endian) and the
payload length (4 bytes, big-endian), then the payload:

=========  ======  ===============================================================
kind       value   payload
=========  ======  ===============================================================
OPEN       1       JSON object: ``{"kind": "json"|"raw", "nonce": .., "peer": ..}``
                   (the cloud opens a stream for each remote client)
DATA       2       bytes of the stream, at most `MAX_CHUNK`
CREDIT     3       4-byte increment of the sender's window
CLOSE      4       JSON object ``{"reason": ..}``; the stream is over both ways
PING/PONG  5/6     empty (keepalive; stream 0)
CONTROL    7       JSON object on stream 0 (``leader_changed`` from the cloud)
=========  ======  ===============================================================

Flow control is per stream and credit-based: a sender may have at most the
window (`INITIAL_WINDOW` at OPEN, raised by each CREDIT) of DATA not yet
credited back. `write()` never blocks and never refuses: what the window does
not allow yet waits in that stream's queue (`buffered()`); the transport
compares it with its own limit and drops a stream that does not keep up, so a
slow reader stalls neither the other streams nor the writer. A receiver
credits what it has handed on (`consumed()`), in batches of a quarter window.

Hostile input never raises: a frame of an unknown kind, a length over
`MAX_PAYLOAD`, DATA beyond the window, an OPEN that reuses or goes back on an
id, a CREDIT of 0 or one that would raise the sender's window above the window
(a receiver credits back only bytes it was sent, so an honest one never
does; a 4-byte increment cannot be negative, and ``0xFFFFFFFF`` is simply
huge), bad JSON (a lone surrogate included: `relay.wire.framing.decode_payload` reads every
JSON payload): each is a fatal `MuxError` event, after which the mux
refuses further input (the transport closes the tunnel). So a peer can never
make this end queue more than one window per stream in flight. Frames
for a stream that was closed meanwhile (a CLOSE crossing DATA) are dropped and
counted in `stale_frames`.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from relay.wire.framing import JsonObject, ProtocolError, decode_payload

OPEN, DATA, CREDIT, CLOSE, PING, PONG, CONTROL = 1, 2, 3, 4, 5, 6, 7
KINDS = frozenset({OPEN, DATA, CREDIT, CLOSE, PING, PONG, CONTROL})
HEADER = 9
MAX_CHUNK = 64 << 10
MAX_PAYLOAD = MAX_CHUNK  # no frame of any kind carries more
INITIAL_WINDOW = 256 << 10
MAX_WINDOW = (1 << 31) - 1
STREAM_KINDS = frozenset({"json", "raw"})


@dataclass(frozen=True, slots=True)
class StreamOpened:
    stream: int
    meta: JsonObject


@dataclass(frozen=True, slots=True)
class StreamData:
    stream: int
    data: bytes


@dataclass(frozen=True, slots=True)
class StreamClosed:
    stream: int
    reason: str


@dataclass(frozen=True, slots=True)
class Writable:
    """CREDIT came for `stream`: its queue may have shrunk (`buffered()`)."""

    stream: int


@dataclass(frozen=True, slots=True)
class Control:
    obj: JsonObject


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class MuxError:
    message: str


MuxEvent = StreamOpened | StreamData | StreamClosed | Writable | Control | Pong | MuxError


@dataclass
class _Stream:
    send_window: int = INITIAL_WINDOW  # bytes we may still send
    recv_window: int = INITIAL_WINDOW  # bytes the peer may still send us
    owed: int = 0  # consumed but not yet credited back
    queue: deque[bytes] = field(default_factory=deque)
    queued: int = 0
    sent: int = 0
    received: int = 0


def frame(kind: int, stream: int, payload: bytes = b"") -> bytes:
    return bytes([kind]) + stream.to_bytes(4, "big") + len(payload).to_bytes(4, "big") + payload


def _json(obj: JsonObject) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Mux:
    """One end of a tunnel. `opener` is the end that opens streams (the cloud)."""

    def __init__(self, *, opener: bool, window: int = INITIAL_WINDOW) -> None:
        if not 1 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be in 1..{MAX_WINDOW}")
        self.opener, self.window = opener, window
        self.streams: dict[int, _Stream] = {}
        self.last_id = 0  # the highest stream id opened (by us or the peer)
        self.failed: str | None = None
        self.stale_frames = 0
        self.bytes_in = self.bytes_out = 0
        self._buf = bytearray()
        self._out = bytearray()
        self._events: list[MuxEvent] = []

    # -- output ----------------------------------------------------------------------
    def open(self, meta: JsonObject) -> int:
        """Open a new stream (opener only); returns its id."""
        if not self.opener:
            raise ValueError("only the opening end opens streams")
        self.last_id += 1
        self.streams[self.last_id] = _Stream(self.window, self.window)
        self._out += frame(OPEN, self.last_id, _json(meta))
        return self.last_id

    def write(self, stream: int, data: bytes) -> None:
        """Queue `data` on `stream`; it goes out as the window allows. A closed
        stream swallows it."""
        s = self.streams.get(stream)
        if s is None or not data:
            return
        s.queue.append(bytes(data))
        s.queued += len(data)
        self._pump(stream, s)

    def buffered(self, stream: int) -> int:
        """Bytes of `stream` waiting for window (0 for a closed stream)."""
        s = self.streams.get(stream)
        return 0 if s is None else s.queued

    def consumed(self, stream: int, n: int) -> None:
        """`n` bytes received on `stream` were handed on: credit them (in batches)."""
        s = self.streams.get(stream)
        if s is None or n <= 0:
            return
        s.owed += n
        if s.owed >= max(1, self.window // 4) or s.recv_window == 0:
            s.recv_window += s.owed
            self._out += frame(CREDIT, stream, s.owed.to_bytes(4, "big"))
            s.owed = 0

    def close(self, stream: int, reason: str = "") -> None:
        """End `stream` now; what is still queued is dropped."""
        if self.streams.pop(stream, None) is not None:
            self._out += frame(CLOSE, stream, _json({"reason": reason[:200]}))

    def control(self, obj: JsonObject) -> None:
        self._out += frame(CONTROL, 0, _json(obj))

    def ping(self) -> None:
        self._out += frame(PING, 0)

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        self.bytes_out += len(out)
        return out

    def events_received(self) -> list[MuxEvent]:
        events, self._events = self._events, []
        return events

    def stats(self, stream: int) -> dict[str, int] | None:
        s = self.streams.get(stream)
        if s is None:
            return None
        return {"sent": s.sent, "received": s.received, "queued": s.queued, "window": s.send_window}

    # -- input -----------------------------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the tunnel. Never raises on any input."""
        if self.failed is not None:
            return
        self.bytes_in += len(data)
        self._buf += data
        view = memoryview(self._buf)
        pos = 0
        try:
            while self.failed is None and len(view) - pos >= HEADER:
                kind = view[pos]
                stream = int.from_bytes(view[pos + 1 : pos + 5], "big")
                length = int.from_bytes(view[pos + 5 : pos + 9], "big")
                if kind not in KINDS:
                    self._fail(f"unknown frame kind {kind}")
                    break
                if length > MAX_PAYLOAD:
                    self._fail(f"frame of {length} bytes exceeds {MAX_PAYLOAD}")
                    break
                if len(view) - pos - HEADER < length:
                    break
                payload = bytes(view[pos + HEADER : pos + HEADER + length])
                pos += HEADER + length
                self._handle(kind, stream, payload)
        finally:
            view.release()
        if self.failed is not None:
            self._buf.clear()
        else:
            del self._buf[:pos]

    def _handle(self, kind: int, stream: int, payload: bytes) -> None:
        if kind == PING:
            self._out += frame(PONG, 0)
        elif kind == PONG:
            self._events.append(Pong())
        elif kind == CONTROL:
            obj = self._object(payload)
            if obj is not None:
                self._events.append(Control(obj))
        elif kind == OPEN:
            self._on_open(stream, payload)
        elif kind == DATA:
            self._on_data(stream, payload)
        elif kind == CREDIT:
            self._on_credit(stream, payload)
        elif kind == CLOSE:
            obj = self._object(payload)
            if obj is None:
                return
            if self.streams.pop(stream, None) is not None:
                reason = obj.get("reason")
                self._events.append(StreamClosed(stream, reason if isinstance(reason, str) else ""))

    def _on_open(self, stream: int, payload: bytes) -> None:
        if self.opener:
            self._fail("the cloud's end does not accept OPEN")
            return
        if stream <= self.last_id:
            self._fail(f"OPEN of stream {stream} does not follow {self.last_id}")
            return
        meta = self._object(payload)
        if meta is None:
            return
        if meta.get("kind") not in STREAM_KINDS:
            self._fail("OPEN lacks a kind (json or raw)")
            return
        self.last_id = stream
        self.streams[stream] = _Stream(self.window, self.window)
        self._events.append(StreamOpened(stream, meta))

    def _on_data(self, stream: int, payload: bytes) -> None:
        s = self._known(stream)
        if s is None:
            return
        if len(payload) > s.recv_window:
            self._fail(f"stream {stream}: {len(payload)} bytes beyond the window of {s.recv_window}")
            return
        s.recv_window -= len(payload)
        s.received += len(payload)
        if payload:
            self._events.append(StreamData(stream, payload))

    def _on_credit(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            self._fail("CREDIT carries 4 bytes")
            return
        s = self._known(stream)
        if s is None:
            return
        increment = int.from_bytes(payload, "big")
        if increment == 0 or s.send_window + increment > self.window:
            self._fail(f"stream {stream}: credit {increment} is out of range (beyond what was sent)")
            return
        s.send_window += increment
        self._pump(stream, s)
        self._events.append(Writable(stream))

    def _known(self, stream: int) -> _Stream | None:
        s = self.streams.get(stream)
        if s is None:
            if stream == 0 or stream > self.last_id:
                self._fail(f"frame for stream {stream}, which was never opened")
            else:
                self.stale_frames += 1  # closed meanwhile: a CLOSE crossed it
        return s

    def _object(self, payload: bytes) -> JsonObject | None:
        obj = decode_payload(payload)  # the frames' parser: a lone surrogate is no object either
        if isinstance(obj, ProtocolError):
            self._fail(f"a control payload is not a JSON object ({obj.message[:120]})")
            return None
        return obj

    def _pump(self, stream: int, s: _Stream) -> None:
        while s.queue and s.send_window > 0:
            chunk = s.queue[0]
            take = min(len(chunk), s.send_window, MAX_CHUNK)
            if take == len(chunk):
                s.queue.popleft()
            else:
                s.queue[0] = chunk[take:]
                chunk = chunk[:take]
            s.queued -= take
            s.send_window -= take
            s.sent += take
            self._out += frame(DATA, stream, chunk)

    def _fail(self, message: str) -> None:
        self.failed = message
        self._events.append(MuxError(message))
