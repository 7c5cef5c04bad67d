"""Relay wire protocol v1 and 1.1 (docs/design.md §8) as a sans-I/O core.

No sockets, no asyncio, no clock reads, no Django: bytes in, events out, in
the manner of python-websockets' ``protocol.py``. A transport feeds what it
reads to `receive_data()`, acts on `events_received()`, writes
`data_to_send()` and closes the socket once `close_expected()` says so.
Time is the transport's: it owns the clock and the timers, and calls
`ServerConnection.timeout()` when the connection's `register_timeout` passes
without `Registered`, or when an open connection has been silent for its
`silence_timeout` (any received bytes count as traffic); the core decides what
that means (an error frame and a close, or only a close in raw mode).

The byte level (frame codec, `FramedConnection`) lives in `relay.wire.framing`,
the events and constants in `relay.wire.events`, the client's half of the
handshake in `relay.wire.client_connection` and the HMACs in `relay.wire.auth`. This
module is the server's half.

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
- Order of the checks: shape, then authentication (``bad_auth``), and only then
  the KMSN (``wrong_kmsn``), the epoch and the gate: an unauthenticated client
  gets ``bad_auth`` whatever else is wrong, so it is never told this relay's
  KMSN; ``wrong_kmsn`` answers only a client that holds this site's key (the
  token, or a credential derived from the pool key) but names another KMSN.
- Protocol 1.1 (mutual auth): a ``register`` may carry ``cnonce`` (32 hex);
  the ``registered`` answer then carries ``sauth`` = HMAC(key, cnonce|session|
  epoch), key being the one the client's ``auth`` was made with. Without
  ``cnonce`` the answer is byte for byte protocol 1.
- Keys: the station's credential (HMAC of the pool key, `stkhost.pool_keys`) is tried
  first, then the site token; with `station_keys_only` the site token is
  refused with ``bad_auth`` and a message saying why. `Registered.station_key`
  says which key it was.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from relay.wire.auth import is_nonce, new_nonce, new_session_id, server_proof, verify_auth
from relay.wire.events import (
    JSON_ROLES,
    MAGIC,
    NAME_RULE,
    REGISTER_TIMEOUT,
    SILENCE_TIMEOUT,
    Message,
    Registered,
    error_frame,
    is_int,
    is_name,
    nonempty_str,
)
from relay.wire.framing import (
    BAD_AUTH,
    BAD_MAGIC,
    BAD_REQUEST,
    DEFAULT_MAX_FRAME,
    NO_ROUTE,
    NOT_LEADER,
    STALE_EPOCH,
    TIMEOUT,
    WRONG_KMSN,
    FramedConnection,
    JsonObject,
    Reject,
    State,
)
from stkhost.pool_keys import station_credential

# Asked before a registration takes effect: None to admit it, else why not (``bad_auth``).
Admit = Callable[[Registered], "str | None"]
STATION_KEYS_ONLY = (
    "this relay accepts station credentials only (RELAY_STATION_KEYS_ONLY=1), not the site token: "
    "authenticate with the credential of station {station} (relayctl credential {station})"
)


class ServerConnection(FramedConnection):
    """Server side of one relay connection (JSON port, or passthrough with `raw_mode`).

    `gate` (a bool, or a callable asked at registration time) says whether this
    node may register clients now; `nonce` and `session` default to fresh
    random hex and are injected by tests. `roles` is `JSON_ROLES` on the JSON
    port and `PASSTHROUGH_ROLES` on the passthrough port. `register_timeout`
    and `silence_timeout` are the transport's deadlines, named in the error
    that `timeout()` sends; the core never reads a clock.

    Keys: ``auth`` may be made with the station's credential (derived from
    `pool_key`, which defaults to `token` like ``POOL_KEY`` does) or with the
    site `token`, unless `station_keys_only`. `admit`, asked once the rest of
    the registration checked out, may still refuse it (``bad_auth``): the relay
    uses it to keep a station held by its credential from being replaced with
    the site token.
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
        pool_key: str | None = None,
        station_keys_only: bool = False,
        admit: Admit | None = None,
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
        self._pool_key = pool_key or token
        self.station_keys_only, self._admit = station_keys_only, admit
        hello = {"type": "hello", "magic": MAGIC, "epoch": epoch, "node": node, "nonce": nonce}
        self._frame(hello)

    def fail(self, code: str, message: str, *, id: object = None) -> None:
        """Send an error frame (when framing is still possible), then close."""
        if self.state is State.CLOSED:
            return
        if self._can_frame():
            self._frame(error_frame(code, message, id))
        self.state = State.CLOSED

    def send_error(self, code: str, message: str, *, id: object = None) -> None:
        """Send a non-fatal error frame; the connection stays open."""
        self.send(error_frame(code, message, id))

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
            self._frame(error_frame(exc.code, exc.message, id))

    def _handle(self, obj: JsonObject) -> None:
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

    def _check_send(self, obj: JsonObject) -> None:
        if "data" not in obj:
            raise Reject(BAD_REQUEST, "send lacks 'data'")
        to = obj.get("to")
        if self.registration and self.registration.role == "commander" and not nonempty_str(to):
            raise Reject(BAD_REQUEST, "a commander's send needs 'to' (a station or '*')")
        if to is not None and not nonempty_str(to):
            raise Reject(BAD_REQUEST, "'to' must be a non-empty string")

    def _register(self, obj: JsonObject) -> None:
        if obj.get("type") != "register":
            raise Reject(BAD_REQUEST, "expected a register frame")
        if obj.get("magic") != MAGIC:
            raise Reject(BAD_MAGIC, f"magic must be {MAGIC}")
        role, kmsn, station = obj.get("role"), obj.get("kmsn"), obj.get("station")
        if not isinstance(role, str) or role not in self.roles:
            raise Reject(BAD_REQUEST, f"role must be one of {', '.join(sorted(self.roles))}")
        if not (is_name(kmsn) and is_name(station)):
            raise Reject(BAD_REQUEST, f"kmsn and station must be {NAME_RULE}")
        auth, claimed, cnonce = obj.get("auth"), obj.get("epoch"), obj.get("cnonce")
        if not isinstance(auth, str):
            raise Reject(BAD_REQUEST, "auth must be a hex string")
        if claimed is not None and not is_int(claimed):
            raise Reject(BAD_REQUEST, "epoch must be an integer")
        if cnonce is not None and not is_nonce(cnonce):
            raise Reject(BAD_REQUEST, "cnonce must be 32 hex characters")
        # Authentication first: a stranger learns nothing (not even this relay's KMSN) but
        # bad_auth. A client that proves this site's key for another KMSN (a typo in its
        # KMSN, or two sites sharing one token) is told which KMSN this relay serves.
        key, station_key = self._authenticate(role, kmsn, station, auth)
        if kmsn != self.kmsn:
            raise Reject(WRONG_KMSN, f"this relay serves KMSN {self.kmsn}")
        if claimed is not None and claimed > self.epoch:
            raise Reject(STALE_EPOCH, f"server epoch {self.epoch} < client epoch {claimed}")
        if not self._gate_open():
            raise Reject(NOT_LEADER, f"{self.node} is not the leader")
        registration = Registered(role, kmsn, station, self.epoch, self.session, station_key)
        refusal = self._admitted(registration)
        if refusal is not None:
            raise Reject(BAD_AUTH, refusal)
        registered = {"type": "registered", "epoch": self.epoch, "session": self.session}
        if cnonce is not None:  # protocol 1.1: prove that we know the key the client used
            registered["sauth"] = server_proof(key, cnonce, self.session, self.epoch)
        self._frame(registered)
        self.state = State.OPEN
        self.registration = registration
        self._events.append(self.registration)

    def _authenticate(self, role: str, kmsn: str, station: str, auth: str) -> tuple[str, bool]:
        """The key `auth` was made with, and whether it is the station's credential."""
        credential = station_credential(self._pool_key, kmsn, station)
        if verify_auth(credential, self.nonce, role, kmsn, station, auth):
            return credential, True
        if not verify_auth(self._token, self.nonce, role, kmsn, station, auth):
            raise Reject(BAD_AUTH, "authentication failed")
        if self.station_keys_only:
            raise Reject(BAD_AUTH, STATION_KEYS_ONLY.format(station=station[:64]))
        return self._token, False

    def _admitted(self, registration: Registered) -> str | None:
        if self._admit is None:
            return None
        try:
            return self._admit(registration)
        except Exception:  # fail closed, like the gate
            return "the relay could not check this registration"

    def _gate_open(self) -> bool:
        if not callable(self._gate):
            return bool(self._gate)
        try:
            return bool(self._gate())
        except Exception:  # fail closed: no proof of leadership, no session
            return False
