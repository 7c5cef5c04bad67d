"""Old stations on the built-in relay (``RELAY_LEGACY = 1``, issue 19): the pure half.

The site's Harbour agents and commanders speak ``relay_client.prg``'s framing:
the same 4-byte big-endian length and one JSON object per frame as protocol v1
(docs/design.md §8), with the old relay's MAGIC and no HMAC handshake. The exchange
below is our reading of the seed (000 §2, §5), written down in docs/relay.md
("Legacy stations") as an ASSUMPTION to confirm on a real site:

1. The station connects and speaks first; it never waits for a greeting.
   While ``RELAY_LEGACY = 1`` the relay holds its ``hello`` for
   ``RELAY_LEGACY_WAIT`` seconds: a client whose bytes arrive first is never
   greeted (modern clients cannot speak first: they need the hello's nonce).
2. Its first frame: ``{"type": "register", "magic": RELAY_LEGACY_MAGIC,
   "role": "agent"|"commander" (or "publisher"|"viewer" on the passthrough
   port), "kmsn": ..., "station": ..., "token": RELAY_TOKEN}``. The token is
   the site token in clear, or the station's credential (`stkhost.pool_keys`).
3. The relay checks, in this order and never short-circuiting the secret
   compares: the shape (``bad_request``); the token against the site token
   and against the station's credential, both in constant time over SHA-256
   digests (so not even the length leaks) -> ``bad_auth``; the KMSN pairing,
   also in constant time -> ``wrong_kmsn`` (told only to a token holder, as in
   v1); the gate -> ``not_leader``; the station bindings -> ``bad_auth``.
   ``RELAY_STATION_KEYS_ONLY = 1`` refuses the site token here too.
4. Answer: ``{"type": "registered", "epoch": E, "session": S}`` (v1's frame
   without ``sauth``), or ``{"type": "error", "code": C, "message": M}`` then
   close. From then on the session is v1's: ``send``/``message``/
   ``keepalive``/``keepalive_ack``/``no_route``/``leader_changed``, the same
   routing, the same fencing by epoch, the same limits.

A register carrying the legacy magic is accepted whether or not the hello was
sent (with ``RELAY_LEGACY_WAIT = 0`` the hello goes out at once and an old
client is assumed to skip a frame type it does not know).

Pure: no sockets, asyncio, clock or Django. `relay.server.legacy_peer` is the
transport half; `LegacyDesk` is what the server keeps (settings, counters).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from relay.wire.events import MAGIC, NAME_RULE, Registered, is_name, nonempty_str
from relay.wire.framing import BAD_AUTH, BAD_REQUEST, NOT_LEADER, WRONG_KMSN, JsonObject, Reject, State
from relay.wire.server_connection import STATION_KEYS_ONLY, ServerConnection
from stkhost.pool_keys import station_credential

DEFAULT_WAIT = 0.3  # seconds the relay holds its hello for a station that speaks first
MAX_WAIT = 2.0
MAX_MAGIC = 64


@dataclass(frozen=True)
class LegacySettings:
    """``RELAY_LEGACY_MAGIC`` and ``RELAY_LEGACY_WAIT`` (only built while ``RELAY_LEGACY = 1``)."""

    magic: str
    wait: float = DEFAULT_WAIT

    def __post_init__(self) -> None:
        if not self.magic or self.magic == MAGIC or len(self.magic) > MAX_MAGIC:
            raise ValueError(f"the legacy magic must be 1..{MAX_MAGIC} characters and not {MAGIC}")
        if not 0 <= self.wait <= MAX_WAIT:
            raise ValueError(f"the legacy wait must be 0..{MAX_WAIT:g} s")


def same_secret(expected: str, given: str) -> bool:
    """Constant-time equality of two texts, their lengths included (SHA-256 of each first)."""
    a = hashlib.sha256(expected.encode()).digest()
    b = hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest()
    return hmac.compare_digest(a, b)


class LegacyServerConnection(ServerConnection):
    """`ServerConnection` that also admits an old station's register (module docstring).

    The hello is held from construction: `greet()` queues it, `heard()` says
    the client spoke first (then it is never greeted). `legacy` is true once a
    frame carried the legacy magic; `spoke_first` once bytes came before the
    hello. Both let the transport count refusals as legacy ones.
    """

    def __init__(self, *, legacy: LegacySettings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.legacy_magic = legacy.magic
        self._hello = self.data_to_send()  # held until greet()
        self.greeted = self.spoke_first = self.legacy = False

    def greet(self) -> None:
        """Send the held hello (the wait is over and the client said nothing)."""
        if self.greeted or self.spoke_first or self.state is not State.AWAIT_REGISTER:
            return
        self.greeted = True
        self._out[:0] = self._hello

    @property
    def partial(self) -> bool:
        """A frame has begun and not ended (the client may be cut off mid-frame)."""
        return self._decoder.buffered > 0

    def heard(self) -> None:
        """Bytes arrived before the hello: this client is not waiting for one."""
        if not self.greeted:
            self.spoke_first = True

    def fail(self, code: str, message: str, *, id: object = None) -> None:
        self._greet_a_listener()
        super().fail(code, message, id=id)

    def leader_changed(
        self, epoch: int | None = None, ip: str | None = None, port: int | None = None
    ) -> None:
        self._greet_a_listener()
        super().leader_changed(epoch, ip, port)

    def _greet_a_listener(self) -> None:
        """A client that has said nothing may be a modern one waiting for the hello: it reads
        the hello before a last frame (eviction, leader_changed). One that spoke first is not."""
        if not self.spoke_first:
            self.greet()

    def _register(self, obj: JsonObject) -> None:
        magic = obj.get("magic")
        if isinstance(magic, str) and same_secret(self.legacy_magic, magic):
            self.legacy = True
            self._register_legacy(obj)
        else:
            super()._register(obj)

    def _register_legacy(self, obj: JsonObject) -> None:
        if obj.get("type") != "register":
            raise Reject(BAD_REQUEST, "expected a register frame")
        role, kmsn, station, token = (obj.get(k) for k in ("role", "kmsn", "station", "token"))
        if not isinstance(role, str) or role not in self.roles:
            raise Reject(BAD_REQUEST, f"role must be one of {', '.join(sorted(self.roles))}")
        if not (is_name(kmsn) and is_name(station)):
            raise Reject(BAD_REQUEST, f"kmsn and station must be {NAME_RULE}")
        if not nonempty_str(token):
            raise Reject(BAD_REQUEST, "token must be a non-empty string (the site's RELAY_TOKEN)")
        assert isinstance(kmsn, str) and isinstance(station, str) and isinstance(token, str)
        # Both compares always run: which key matched must not show in the time taken.
        by_credential = same_secret(station_credential(self._pool_key, kmsn, station), token.lower())
        by_token = same_secret(self._token, token)
        if not (by_credential or by_token):
            raise Reject(BAD_AUTH, "the token is not this site's RELAY_TOKEN nor the station's credential")
        if not by_credential and self.station_keys_only:
            raise Reject(BAD_AUTH, STATION_KEYS_ONLY.format(station=station[:64]))
        if not same_secret(self.kmsn, kmsn):  # the KMSN pairing of the old relay
            raise Reject(WRONG_KMSN, f"this relay serves KMSN {self.kmsn}")
        if not self._gate_open():
            raise Reject(NOT_LEADER, f"{self.node} is not the leader")
        registration = Registered(role, kmsn, station, self.epoch, self.session, by_credential)
        refusal = self._admitted(registration)
        if refusal is not None:
            raise Reject(BAD_AUTH, refusal)
        self._frame({"type": "registered", "epoch": self.epoch, "session": self.session})
        self.state = State.OPEN
        self.registration = registration
        self._events.append(registration)


class CountedPeer(Protocol):
    """What the desk's snapshot reads of a server's peer (`relay.server.connections.JsonPeer`)."""

    @property
    def legacy(self) -> bool: ...  # registered with the legacy magic

    @property
    def registered(self) -> bool: ...

    @property
    def dead(self) -> bool: ...


@dataclass
class LegacyDesk:
    """What the relay keeps about old stations: the settings and the counters.

    `registered` counts legacy registrations since the relay started;
    `refused` counts, by wire code, refusals of a connection that carried the
    legacy magic or spoke before the hello (so: an old station, or something
    posing as one).
    """

    settings: LegacySettings
    registered: int = 0
    refused: dict[str, int] = field(default_factory=dict)

    def connection(self, **kwargs: Any) -> LegacyServerConnection:
        return LegacyServerConnection(legacy=self.settings, **kwargs)

    def refusal(self, code: str) -> int:
        """Count one refusal; returns the count of all refusals so far (for log throttling)."""
        self.refused[code] = self.refused.get(code, 0) + 1
        return sum(self.refused.values())

    def snapshot(self, peers: Iterable[CountedPeer]) -> dict[str, Any]:
        live = sum(1 for p in peers if p.legacy and p.registered and not p.dead)
        return {
            "enabled": True,
            "wait_s": self.settings.wait,
            "sessions": live,
            "registered": self.registered,
            "refused": dict(sorted(self.refused.items())),
        }
