"""Framing for relay wire protocol v1 (docs/design.md §8): the byte-level half.

A frame is a 4-byte unsigned big-endian length ``N`` followed by ``N`` bytes of
UTF-8 JSON whose top level is an object, with ``1 <= N <= max_frame``.

This module holds the frame codec (`encode_frame`, `FrameDecoder`; for a
transport that only moves frames, `encode_payload`, `frame_payload` and
`read_header`) and `FramedConnection`, the byte plumbing both ends of a
connection share.
`relay.wire.server_connection` gives the frames their meaning (hello, register, ...), and
re-exports the public names defined here; its docstring has the exception tree.
Pure code: no sockets, asyncio, subprocess, clock or Django; stdlib only.

Decoding never raises on bad input; each problem becomes a `ProtocolError`
event carrying one of the wire error codes:

- length > max_frame -> ``frame_too_large``, decided as soon as the 4 header
  bytes are in, before a single payload byte is buffered;
- length == 0 -> ``bad_request`` (an empty frame is not "too large"; it is a
  request that lacks everything);
- invalid UTF-8, invalid JSON (including ``NaN``/``Infinity``, numbers that
  overflow a double or exceed Python's integer digit limit, nesting deeper than
  the parser's recursion limit) -> ``bad_json``;
- valid JSON that is not an object -> ``bad_request``.

All of these are fatal: the decoder refuses further input afterwards.

Encoding problems are the caller's bug and raise `PayloadError` (see the
exception tree in `relay.wire.server_connection`).
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from typing import Any

from elections.core.untrusted import encodable, may_hold_surrogate

# A frame as decoded: a JSON object, whose values the connection checks field by field.
JsonObject = dict[str, Any]

DEFAULT_MAX_FRAME = 1 << 20
HEADER_SIZE = 4
_LENGTH_LIMIT = (1 << 32) - 1

# Wire error codes (the ``code`` of an ``error`` frame).
BAD_MAGIC = "bad_magic"
BAD_AUTH = "bad_auth"
WRONG_KMSN = "wrong_kmsn"
STALE_EPOCH = "stale_epoch"
NOT_LEADER = "not_leader"
FRAME_TOO_LARGE = "frame_too_large"
BAD_JSON = "bad_json"
BAD_REQUEST = "bad_request"
TIMEOUT = "timeout"
NO_ROUTE = "no_route"
ERROR_CODES = frozenset(
    {
        BAD_MAGIC,
        BAD_AUTH,
        WRONG_KMSN,
        STALE_EPOCH,
        NOT_LEADER,
        FRAME_TOO_LARGE,
        BAD_JSON,
        BAD_REQUEST,
        TIMEOUT,
        NO_ROUTE,
    }
)


class RelayError(Exception):
    """Base of the relay protocol's exceptions."""


class PayloadError(RelayError, ValueError):
    """An outgoing message is not a JSON object, is not serializable, or is too large."""


class InvalidState(RelayError):
    """An output method was called in a state that does not allow it."""


class Reject(RelayError):
    """Raised by a connection's frame handler to answer the frame with an error.

    Control flow only, like Channels' ``DenyConnection``: `receive_data()`
    catches it, so it never reaches the transport.
    """

    def __init__(self, code: str, message: str, *, fatal: bool = True) -> None:
        super().__init__(message)
        self.code, self.message, self.fatal = code, message, fatal


class State(enum.Enum):
    AWAIT_HELLO = "await_hello"  # client only: waiting for the server's hello
    AWAIT_REGISTER = "await_register"  # the register exchange is not finished
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """Event: the peer broke the protocol; `fatal` means the connection is over."""

    code: str
    message: str
    fatal: bool = True


@dataclass(frozen=True, slots=True)
class RawData:
    """Event: passthrough bytes received after registration in raw mode."""

    data: bytes


def encode_frame(obj: JsonObject, *, max_frame: int | None = None) -> bytes:
    """Frame `obj` as compact JSON (UTF-8, no whitespace, keys in insertion order).

    Strings holding lone surrogates, which UTF-8 cannot carry, are written as
    ``\\uXXXX`` escapes instead, so anything `FrameDecoder` produced can be
    re-encoded. Raises `PayloadError` if `obj` is not a dict, is not JSON
    serializable (``NaN`` and ``Infinity`` included), or exceeds `max_frame`.
    """
    payload = encode_payload(obj, max_frame=max_frame)
    return len(payload).to_bytes(HEADER_SIZE, "big") + payload


def encode_payload(obj: JsonObject, *, max_frame: int | None = None) -> bytes:
    """`encode_frame` without the length header: the JSON text of one message."""
    if not isinstance(obj, dict):
        raise PayloadError(f"a frame carries a JSON object, not {type(obj).__name__}")
    try:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        try:
            payload = text.encode("utf-8")
        except UnicodeEncodeError:
            payload = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii")
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadError(f"not serializable as JSON: {exc}") from exc
    limit = _LENGTH_LIMIT if max_frame is None else max_frame
    if len(payload) > limit:
        raise PayloadError(f"frame of {len(payload)} bytes exceeds the limit of {limit}")
    return payload


def frame_payload(payload: bytes, *, max_frame: int) -> bytes:
    """Frame a payload that is already JSON text, unparsed (the receiver judges
    it). Raises `PayloadError` if it exceeds `max_frame`."""
    if len(payload) > max_frame:
        raise PayloadError(f"frame of {len(payload)} bytes exceeds the limit of {max_frame}")
    return len(payload).to_bytes(HEADER_SIZE, "big") + payload


def read_header(header: bytes | bytearray, max_frame: int) -> int | ProtocolError:
    """The payload length a `HEADER_SIZE`-byte header announces, or the
    `ProtocolError` it deserves (0, or over `max_frame`)."""
    length = int.from_bytes(header, "big")
    if length == 0:
        return ProtocolError(BAD_REQUEST, "empty frame (length 0)")
    if length > max_frame:
        return ProtocolError(FRAME_TOO_LARGE, f"frame of {length} bytes exceeds the limit of {max_frame}")
    return length


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


# One decoder for every frame: json.loads() with hooks builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def decode_payload(payload: bytes) -> JsonObject | ProtocolError:  # the relay's hot path
    """Decode one frame's payload into a dict, or the `ProtocolError` it deserves."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ProtocolError(BAD_JSON, f"invalid UTF-8 at byte {exc.start}")
    try:
        obj = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        return ProtocolError(BAD_JSON, f"invalid JSON: {str(exc)[:200]}")
    if not isinstance(obj, dict):
        return ProtocolError(BAD_REQUEST, f"frame is a JSON {type(obj).__name__}, not an object")
    if may_hold_surrogate(payload) and not encodable(obj):
        return ProtocolError(BAD_JSON, "invalid JSON: text no UTF-8 can encode (a lone surrogate)")
    return obj


class FrameDecoder:
    """Incremental frame decoder: `feed()` bytes in, `events()` dicts and errors out.

    The buffer holds at most the header or one frame's payload, never more than
    `max_frame` bytes, and grows only as payload bytes arrive (an announced
    length is never allocated up front). After a `ProtocolError` the decoder
    is `failed` and ignores whatever it is fed.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if not 1 <= max_frame <= _LENGTH_LIMIT:
            raise ValueError(f"max_frame must be in 1..{_LENGTH_LIMIT}, got {max_frame}")
        self.max_frame = max_frame
        self.error: ProtocolError | None = None
        self._buf = bytearray()
        self._length: int | None = None  # payload length, once the header is read
        self._events: list[JsonObject | ProtocolError] = []

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def buffered(self) -> int:
        """Bytes held for the frame in progress (header or payload)."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview, max_frames: int | None = None) -> int:
        """Take bytes from `data`; return how many were consumed.

        Everything is consumed unless `max_frames` frames were completed first
        (the rest is left to the caller, e.g. raw bytes after a handshake) or a
        fatal error stopped decoding. Once failed, consumes nothing.
        """
        view = memoryview(data).cast("B")
        pos = done = 0
        while pos < len(view) and self.error is None:
            if max_frames is not None and done >= max_frames:
                break
            if self._length is None:
                take = min(HEADER_SIZE - len(self._buf), len(view) - pos)
                self._buf += view[pos : pos + take]
                pos += take
                if len(self._buf) < HEADER_SIZE:
                    break
                length = read_header(self._buf, self.max_frame)
                self._buf.clear()
                if isinstance(length, ProtocolError):
                    self._fail(length)
                else:
                    self._length = length
                continue
            take = min(self._length - len(self._buf), len(view) - pos)
            self._buf += view[pos : pos + take]
            pos += take
            if len(self._buf) == self._length:
                item = decode_payload(bytes(self._buf))
                self._buf.clear()
                self._length = None
                done += 1
                if isinstance(item, ProtocolError):
                    self._fail(item)
                else:
                    self._events.append(item)
        return pos

    def events(self) -> list[JsonObject | ProtocolError]:
        """Return and forget the frames (and the error, if any) decoded so far."""
        events, self._events = self._events, []
        return events

    def _fail(self, error: ProtocolError) -> None:
        self.error = error
        self._buf.clear()
        self._length = None
        self._events.append(error)


class FramedConnection:
    """Byte plumbing shared by both ends: frame-at-a-time input, events, output.

    Subclasses implement `_handle(obj)` for each decoded frame (raising `Reject`
    to answer it with an error) and `_reject()` to act on an error. In
    `raw_mode`, once the handshake has put the connection in OPEN, input is no
    longer parsed: it is surfaced as `RawData`, starting with whatever followed
    the frame that completed the handshake in the same chunk.
    """

    def __init__(self, *, max_frame: int, raw_mode: bool, state: State) -> None:
        self.max_frame = max_frame
        self.raw_mode = raw_mode
        self.state = state
        self._decoder = FrameDecoder(max_frame)
        self._events: list[object] = []  # relay.wire.events.Event (which imports this module)
        self._out = bytearray()

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the socket. Never raises on any input."""
        view = memoryview(data).cast("B")
        while view and self.state is not State.CLOSED:
            if self.state is State.OPEN and self.raw_mode:
                self._events.append(RawData(bytes(view)))
                return
            # One frame at a time, so that the bytes after the frame that ends
            # the handshake can be handed over raw instead of being parsed.
            used = self._decoder.feed(view, max_frames=1)
            view = view[used:]
            for item in self._decoder.events():  # at most one
                if isinstance(item, ProtocolError):
                    self._reject(Reject(item.code, item.message))
                    continue
                try:
                    self._handle(item)
                except Reject as exc:
                    self._reject(exc, item.get("id"))
            if used == 0:
                break

    def receive_eof(self) -> None:
        """The peer closed its side; nothing more will be accepted."""
        self.state = State.CLOSED

    def events_received(self) -> list[object]:
        """Return and forget the events produced since the last call."""
        events, self._events = self._events, []
        return events

    def data_to_send(self) -> bytes:
        """Return and forget the bytes queued for the peer."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def close_expected(self) -> bool:
        """True once the transport should flush `data_to_send()` and close."""
        return self.state is State.CLOSED

    def send(self, obj: JsonObject) -> None:
        """Frame `obj` for the peer (only while OPEN and not in raw mode)."""
        if self.state is not State.OPEN or self.raw_mode:
            raise InvalidState(f"cannot send frames in state {self.state.name}, raw={self.raw_mode}")
        self._out += encode_frame(obj, max_frame=self.max_frame)

    def send_raw(self, data: bytes) -> None:
        """Queue passthrough bytes (only while OPEN in raw mode)."""
        if self.state is not State.OPEN or not self.raw_mode:
            raise InvalidState(f"cannot send raw bytes in state {self.state.name}")
        self._out += data

    def _frame(self, obj: JsonObject) -> None:
        """Queue a control frame, whatever the state (callers check `_can_frame`)."""
        self._out += encode_frame(obj)

    def _can_frame(self) -> bool:
        return self.state is not State.CLOSED and not (self.state is State.OPEN and self.raw_mode)

    def _handle(self, obj: JsonObject) -> None:
        raise NotImplementedError

    def _reject(self, exc: Reject, id: object = None) -> None:
        """Record the error as an event; subclasses add the answer and the close."""
        self._events.append(ProtocolError(exc.code, exc.message, exc.fatal))
