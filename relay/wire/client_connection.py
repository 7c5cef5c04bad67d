"""Client side of relay wire protocol v1/1.1 (docs/design.md §8) as a sans-I/O core.

No sockets, no asyncio, no clock reads, no Django: `relay.wire.server_connection` has the
shape of the interface (and re-exports `ClientConnection`); this module has
the client's half of the handshake.

Protocol 1.1: built with a `cnonce` (32 hex), the client sends it in
``register`` and demands the server's proof in ``registered``: ``sauth`` =
HMAC(key, cnonce|session|epoch) (`relay.wire.auth.server_proof`), key being the one
this client authenticates with (`token`: the site token or its station
credential). A ``registered`` without a valid ``sauth`` is refused: no
`Registered` event, a `ProtocolError` ``bad_auth`` instead, the connection
closed, and `unproven` set so that the transport knows this server is not to
be believed. Only once the proof checked out is `proven` true; a
``leader_changed`` carries that flag (`LeaderChanged.proven`), so that the
caller can ignore one from a server that proved nothing. Without a `cnonce`
the client speaks protocol 1 byte for byte, and proves nothing either.
"""

from __future__ import annotations

from collections.abc import Callable

from relay.wire.auth import auth_digest, is_nonce, verify_proof
from relay.wire.events import (
    MAGIC,
    ErrorReceived,
    Hello,
    KeepaliveAck,
    LeaderChanged,
    Message,
    Registered,
    is_int,
    nonempty_str,
)
from relay.wire.framing import (
    BAD_AUTH,
    BAD_MAGIC,
    BAD_REQUEST,
    DEFAULT_MAX_FRAME,
    FramedConnection,
    JsonObject,
    Reject,
    State,
)


class ClientConnection(FramedConnection):
    """Client side: answers hello with register, then exchanges messages.

    Errors detected in the server's frames yield a `ProtocolError` event and
    close the connection; nothing is sent back. An ``error`` frame closes it
    before registration; after, it stays open (a fatal one is followed by the
    server's close: the transport reports it with `receive_eof()`).
    With `keepalive_acks`, each ``keepalive_ack`` of an open connection is a
    `KeepaliveAck` event; without, it is absorbed silently. With `cnonce`, the
    server must prove itself (see the module docstring). `extra` adds fields to
    ``register`` (never replacing one of its own): the cloud tunnel's ``lease``;
    a callable is given the server's nonce and returns them (a lease MAC bound
    to that nonce, `relay.wire.lease_mac`).
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
        cnonce: str | None = None,
        extra: JsonObject | Callable[[str], JsonObject] | None = None,
    ) -> None:
        if cnonce is not None and not is_nonce(cnonce):
            raise ValueError(f"cnonce must be 32 hex characters, got {cnonce!r}")
        super().__init__(max_frame=max_frame, raw_mode=raw_mode, state=State.AWAIT_HELLO)
        self.role, self.kmsn, self.station = role, kmsn, station
        self.epoch = epoch
        self.keepalive_acks = keepalive_acks
        self.cnonce = cnonce
        self.extra = extra if callable(extra) else dict(extra or {})  # further fields of ``register``
        self.proven = False  # the server proved it knows our key (protocol 1.1)
        self.unproven = False  # it answered registered without a valid proof
        self._token = token

    def keepalive(self) -> None:
        self.send({"type": "keepalive"})

    def send_message(self, data: object, *, to: str | None = None, id: object = None) -> None:
        obj: JsonObject = {"type": "send"}
        if to is not None:
            obj["to"] = to
        obj["data"] = data
        if id is not None:
            obj["id"] = id
        self.send(obj)

    def _reject(self, exc: Reject, id: object = None) -> None:
        super()._reject(exc)
        self.state = State.CLOSED

    def _handle(self, obj: JsonObject) -> None:
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
                    epoch if is_int(epoch) else None,
                    ip if isinstance(ip, str) else None,
                    port if is_int(port) else None,
                    self.proven,
                )
            )
            self.state = State.CLOSED
        elif self.state is State.AWAIT_HELLO:
            self._hello(obj)
        elif self.state is State.AWAIT_REGISTER:
            self._registered(kind, obj)
        elif kind == "keepalive_ack":
            if self.keepalive_acks:
                self._events.append(KeepaliveAck())
        else:
            self._events.append(Message(obj))

    def _registered(self, kind: object, obj: JsonObject) -> None:
        epoch, session = obj.get("epoch"), obj.get("session")
        if kind != "registered" or not is_int(epoch) or not isinstance(session, str):
            raise Reject(BAD_REQUEST, "expected a registered frame")
        if self.cnonce is not None:
            if not verify_proof(self._token, self.cnonce, session, epoch, obj.get("sauth")):
                self.unproven = True
                raise Reject(BAD_AUTH, "the server did not prove that it knows our key (no valid sauth)")
            self.proven = True
        self.state = State.OPEN
        self._events.append(Registered(self.role, self.kmsn, self.station, epoch, session))

    def _hello(self, obj: JsonObject) -> None:
        epoch, node, nonce = obj.get("epoch"), obj.get("node"), obj.get("nonce")
        if obj.get("type") != "hello":
            raise Reject(BAD_REQUEST, "expected a hello frame")
        if obj.get("magic") != MAGIC:
            raise Reject(BAD_MAGIC, f"server does not speak {MAGIC}")
        if not (is_int(epoch) and isinstance(node, str) and nonempty_str(nonce)):
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
        if self.cnonce is not None:
            register["cnonce"] = self.cnonce
        extra = self.extra(nonce) if callable(self.extra) else self.extra
        register.update({k: v for k, v in extra.items() if k not in register})
        self._frame(register)
        self.state = State.AWAIT_REGISTER
        self._events.append(Hello(node, epoch, nonce))
