"""Relay wire protocol v1 (DESIGN.md §8) as a sans-I/O core.

No sockets, no asyncio, no clock reads, no Django: bytes in, events out, in
the manner of python-websockets' ``protocol.py``. A transport feeds what it
reads to `receive_data()`, acts on `events_received()`, writes
`data_to_send()` and closes the socket once `close_expected()` says so.
Time is the transport's: it owns the clock and the timers, and calls
`ServerConnection.timeout()` when the connection's `register_timeout` passes
without `Registered`, or when an open connection has been silent for its
`silence_timeout` (any received bytes count as traffic); the core decides what
that means (an error frame and a close, or only a close in raw mode).

The byte level (frame codec, `FramedConnection`) lives in `relay.framing`;
its public names are re-exported here.

Bad input from the peer never raises out of `receive_data()`: it always maps
to an error code, an error frame and a `ProtocolError` event. Exceptions::

    RelayError
     +-- PayloadError (also ValueError)  output: not a JSON object, not
     |                                   serializable, or over max_frame
     +-- InvalidState                    output method not allowed now
     |                                   (e.g. send() before OPEN)
     +-- Reject                          raised by frame handlers, caught by
                                         receive_data(); never escapes

Decisions worth knowing:

- The server queues ``hello`` on construction; the nonce and session id are
  injectable so tests are byte-exact.
- ``keepalive`` is answered with ``keepalive_ack`` inside the core; no event.
  On the client side, ``keepalive_ack`` is absorbed silently unless the
  connection is built with ``keepalive_acks=True``: then each one is a
  `KeepaliveAck` event (the relay client times round trips and confirms
  delivery with them).
- An error frame caused by the peer's input also yields a `ProtocolError`
  event (for logging); `fail()`, `timeout()` and `leader_changed()` do not.
- After registration, a frame whose ``type`` is unknown (or not valid in the
  OPEN state, such as a second ``register``) gets a non-fatal ``bad_request``
  (the offending ``id`` is echoed when present). A frame without a string
  ``type``, or a ``send`` lacking a required field (``data``; ``to`` for a
  commander), gets a fatal one, as §8 says.
- In `raw_mode` (passthrough port) everything after the ``registered`` frame
  is raw bytes: bytes that arrived in the same chunk as ``register`` are kept
  and surfaced as `RawData`; error frames can no longer be sent, so `fail()`
  and friends only close.
- A ``gate`` callable that raises counts as "not leader" (fail closed).
- Auth hex is compared case-insensitively and in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass

from relay.framing import (  # noqa: F401  (re-exported: one import site for transports)
    BAD_AUTH,
    BAD_JSON,
    BAD_MAGIC,
    BAD_REQUEST,
    DEFAULT_MAX_FRAME,
    ERROR_CODES,
    FRAME_TOO_LARGE,
    HEADER_SIZE,
    NO_ROUTE,
    NOT_LEADER,
    STALE_EPOCH,
    TIMEOUT,
    WRONG_KMSN,
    FramedConnection,
    FrameDecoder,
    InvalidState,
    PayloadError,
    ProtocolError,
    RawData,
    Reject,
    RelayError,
    State,
    encode_frame,
    encode_payload,
    frame_payload,
    read_header,
)

MAGIC = "STKRELAY/1"
REGISTER_TIMEOUT = 5.0
KEEPALIVE_INTERVAL = 10.0
SILENCE_TIMEOUT = 3 * KEEPALIVE_INTERVAL
JSON_ROLES = frozenset({"agent", "commander"})
PASSTHROUGH_ROLES = frozenset({"publisher", "viewer"})


@dataclass(frozen=True, slots=True)
class Hello:
    node: str
    epoch: int
    nonce: str


@dataclass(frozen=True, slots=True)
class Registered:
    role: str
    kmsn: str
    station: str
    epoch: int  # the server's epoch, which fences the session
    session: str


@dataclass(frozen=True, slots=True)
class Message:
    obj: dict


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    code: str
    message: str
    id: object = None


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    epoch: int | None
    ip: str | None
    port: int | None


@dataclass(frozen=True, slots=True)
class KeepaliveAck:
    """The server answered a keepalive (client side, with ``keepalive_acks=True``).

    The server frames the answer while parsing the keepalive, so every frame the
    client wrote before that keepalive has been read by then.
    """


Event = Hello | Registered | Message | RawData | ProtocolError | ErrorReceived | LeaderChanged | KeepaliveAck


def new_nonce(randbytes: Callable[[int], bytes] = os.urandom) -> str:
    """32 lowercase hex characters from 16 bytes of `randbytes`."""
    return randbytes(16).hex()


def new_session_id(randbytes: Callable[[int], bytes] = os.urandom) -> str:
    return randbytes(8).hex()


def auth_digest(token: str, nonce: str, role: str, kmsn: str, station: str) -> str:
    """Hex HMAC-SHA256 keyed with `token` over ``nonce|role|kmsn|station`` (UTF-8)."""
    message = f"{nonce}|{role}|{kmsn}|{station}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def verify_auth(token: str, nonce: str, role: str, kmsn: str, station: str, auth: str) -> bool:
    """Constant-time check of `auth` (hex, either case) against `auth_digest`."""
    expected = auth_digest(token, nonce, role, kmsn, station).encode()
    return hmac.compare_digest(expected, auth.encode("utf-8", "surrogatepass").lower())


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and value != ""


class ServerConnection(FramedConnection):
    """Server side of one relay connection (JSON port, or passthrough with `raw_mode`).

    `gate` (a bool, or a callable asked at registration time) says whether this
    node may register clients now; `nonce` and `session` default to fresh
    random hex and are injected by tests. `roles` is `JSON_ROLES` on the JSON
    port and `PASSTHROUGH_ROLES` on the passthrough port. `register_timeout`
    and `silence_timeout` are the transport's deadlines, named in the error
    that `timeout()` sends; the core never reads a clock.
    """

    def __init__(
        self,
        *,
        node: str,
        epoch: int,
        kmsn: str,
        token: str,
        roles: Collection[str] = JSON_ROLES,
        gate: bool | Callable[[], bool] = True,
        max_frame: int = DEFAULT_MAX_FRAME,
        nonce: str | None = None,
        session: str | None = None,
        raw_mode: bool = False,
        register_timeout: float = REGISTER_TIMEOUT,
        silence_timeout: float = SILENCE_TIMEOUT,
    ) -> None:
        if not token:
            raise ValueError("token must not be empty")
        nonce = new_nonce() if nonce is None else nonce
        if len(nonce) != 32 or any(c not in "0123456789abcdef" for c in nonce):
            raise ValueError(f"nonce must be 32 lowercase hex characters, got {nonce!r}")
        super().__init__(max_frame=max_frame, raw_mode=raw_mode, state=State.AWAIT_REGISTER)
        self.node, self.epoch, self.kmsn = node, epoch, kmsn
        self.roles = frozenset(roles)
        self.nonce = nonce
        self.session = new_session_id() if session is None else session
        self.registration: Registered | None = None
        self.register_timeout, self.silence_timeout = register_timeout, silence_timeout
        self._token, self._gate = token, gate
        hello = {"type": "hello", "magic": MAGIC, "epoch": epoch, "node": node, "nonce": nonce}
        self._frame(hello)

    def fail(self, code: str, message: str, *, id: object = None) -> None:
        """Send an error frame (when framing is still possible), then close."""
        if self.state is State.CLOSED:
            return
        if self._can_frame():
            self._frame(_error(code, message, id))
        self.state = State.CLOSED

    def send_error(self, code: str, message: str, *, id: object = None) -> None:
        """Send a non-fatal error frame; the connection stays open."""
        self.send(_error(code, message, id))

    def no_route(self, id: object = None) -> None:
        """Tell a registered sender that its ``send`` found no recipient."""
        self.send({"type": "error", "code": NO_ROUTE, "message": "no recipient", "id": id})

    def timeout(self) -> None:
        """The transport's deadline passed: `register_timeout` before registration,
        `silence_timeout` of silence after. Closes with ``timeout``."""
        if self.state is State.AWAIT_REGISTER:
            self.fail(TIMEOUT, f"no register within {self.register_timeout:g} s")
        elif self.state is State.OPEN:
            self.fail(TIMEOUT, f"silent for {self.silence_timeout:g} s")

    def leader_changed(
        self, epoch: int | None = None, ip: str | None = None, port: int | None = None
    ) -> None:
        """This server lost leadership: tell the client where to go, then close."""
        if self.state is State.CLOSED:
            return
        if self._can_frame():
            self._frame({"type": "leader_changed", "epoch": epoch, "ip": ip, "port": port})
        self.state = State.CLOSED

    def _reject(self, exc: Reject, id: object = None) -> None:
        super()._reject(exc)
        if exc.fatal:
            self.fail(exc.code, exc.message, id=id)
        else:
            self._frame(_error(exc.code, exc.message, id))

    def _handle(self, obj: dict) -> None:
        if self.state is State.AWAIT_REGISTER:
            self._register(obj)
            return
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise Reject(BAD_REQUEST, "frame lacks a string 'type'")
        if kind == "keepalive":
            self._frame({"type": "keepalive_ack"})
        elif kind == "send":
            self._check_send(obj)
            self._events.append(Message(obj))
        else:
            raise Reject(BAD_REQUEST, f"unknown message type {kind[:64]!r}", fatal=False)

    def _check_send(self, obj: dict) -> None:
        if "data" not in obj:
            raise Reject(BAD_REQUEST, "send lacks 'data'")
        to = obj.get("to")
        if self.registration and self.registration.role == "commander" and not _nonempty_str(to):
            raise Reject(BAD_REQUEST, "a commander's send needs 'to' (a station or '*')")
        if to is not None and not _nonempty_str(to):
            raise Reject(BAD_REQUEST, "'to' must be a non-empty string")

    def _register(self, obj: dict) -> None:
        if obj.get("type") != "register":
            raise Reject(BAD_REQUEST, "expected a register frame")
        if obj.get("magic") != MAGIC:
            raise Reject(BAD_MAGIC, f"magic must be {MAGIC}")
        role, kmsn, station = obj.get("role"), obj.get("kmsn"), obj.get("station")
        if not isinstance(role, str) or role not in self.roles:
            raise Reject(BAD_REQUEST, f"role must be one of {', '.join(sorted(self.roles))}")
        if not (_nonempty_str(kmsn) and _nonempty_str(station)):
            raise Reject(BAD_REQUEST, "kmsn and station must be non-empty strings")
        auth, claimed = obj.get("auth"), obj.get("epoch")
        if not isinstance(auth, str):
            raise Reject(BAD_REQUEST, "auth must be a hex string")
        if claimed is not None and not _is_int(claimed):
            raise Reject(BAD_REQUEST, "epoch must be an integer")
        if kmsn != self.kmsn:
            raise Reject(WRONG_KMSN, f"this relay serves KMSN {self.kmsn}")
        if not verify_auth(self._token, self.nonce, role, kmsn, station, auth):
            raise Reject(BAD_AUTH, "authentication failed")
        if claimed is not None and claimed > self.epoch:
            raise Reject(STALE_EPOCH, f"server epoch {self.epoch} < client epoch {claimed}")
        if not self._gate_open():
            raise Reject(NOT_LEADER, f"{self.node} is not the leader")
        self._frame({"type": "registered", "epoch": self.epoch, "session": self.session})
        self.state = State.OPEN
        self.registration = Registered(role, kmsn, station, self.epoch, self.session)
        self._events.append(self.registration)

    def _gate_open(self) -> bool:
        if not callable(self._gate):
            return bool(self._gate)
        try:
            return bool(self._gate())
        except Exception:  # fail closed: no proof of leadership, no session
            return False


class ClientConnection(FramedConnection):
    """Client side: answers hello with register, then exchanges messages.

    Errors detected in the server's frames yield a `ProtocolError` event and
    close the connection; nothing is sent back. An ``error`` frame closes it
    before registration; after, it stays open (a fatal one is followed by the
    server's close: the transport reports it with `receive_eof()`).
    With `keepalive_acks`, each ``keepalive_ack`` of an open connection is a
    `KeepaliveAck` event; without, it is absorbed silently.
    """

    def __init__(
        self,
        *,
        role: str,
        kmsn: str,
        station: str,
        token: str,
        epoch: int | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        raw_mode: bool = False,
        keepalive_acks: bool = False,
    ) -> None:
        super().__init__(max_frame=max_frame, raw_mode=raw_mode, state=State.AWAIT_HELLO)
        self.role, self.kmsn, self.station = role, kmsn, station
        self.epoch = epoch
        self.keepalive_acks = keepalive_acks
        self._token = token

    def keepalive(self) -> None:
        self.send({"type": "keepalive"})

    def send_message(self, data: object, *, to: str | None = None, id: object = None) -> None:
        obj: dict = {"type": "send"}
        if to is not None:
            obj["to"] = to
        obj["data"] = data
        if id is not None:
            obj["id"] = id
        self.send(obj)

    def _reject(self, exc: Reject, id: object = None) -> None:
        super()._reject(exc)
        self.state = State.CLOSED

    def _handle(self, obj: dict) -> None:
        kind = obj.get("type")
        if kind == "error":
            code, message = obj.get("code"), obj.get("message")
            self._events.append(ErrorReceived(str(code), str(message or ""), obj.get("id")))
            if self.state is not State.OPEN:
                self.state = State.CLOSED
        elif kind == "leader_changed":
            epoch, ip, port = obj.get("epoch"), obj.get("ip"), obj.get("port")
            self._events.append(
                LeaderChanged(
                    epoch if _is_int(epoch) else None,
                    ip if isinstance(ip, str) else None,
                    port if _is_int(port) else None,
                )
            )
            self.state = State.CLOSED
        elif self.state is State.AWAIT_HELLO:
            self._hello(obj)
        elif self.state is State.AWAIT_REGISTER:
            epoch, session = obj.get("epoch"), obj.get("session")
            if kind != "registered" or not _is_int(epoch) or not isinstance(session, str):
                raise Reject(BAD_REQUEST, "expected a registered frame")
            self.state = State.OPEN
            self._events.append(Registered(self.role, self.kmsn, self.station, epoch, session))
        elif kind == "keepalive_ack":
            if self.keepalive_acks:
                self._events.append(KeepaliveAck())
        else:
            self._events.append(Message(obj))

    def _hello(self, obj: dict) -> None:
        epoch, node, nonce = obj.get("epoch"), obj.get("node"), obj.get("nonce")
        if obj.get("type") != "hello":
            raise Reject(BAD_REQUEST, "expected a hello frame")
        if obj.get("magic") != MAGIC:
            raise Reject(BAD_MAGIC, f"server does not speak {MAGIC}")
        if not (_is_int(epoch) and isinstance(node, str) and _nonempty_str(nonce)):
            raise Reject(BAD_REQUEST, "hello lacks epoch, node or nonce")
        auth = auth_digest(self._token, nonce, self.role, self.kmsn, self.station)
        register = {
            "type": "register",
            "magic": MAGIC,
            "role": self.role,
            "kmsn": self.kmsn,
            "station": self.station,
            "epoch": self.epoch,
            "auth": auth,
        }
        if self.epoch is None:
            del register["epoch"]
        self._frame(register)
        self.state = State.AWAIT_REGISTER
        self._events.append(Hello(node, epoch, nonce))


def _error(code: str, message: str, id: object = None) -> dict:
    obj = {"type": "error", "code": code, "message": message}
    if id is not None:
        obj["id"] = id
    return obj
