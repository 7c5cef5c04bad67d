"""Relay wire protocol v1/1.1 (docs/design.md §8): the constants and the events of the core.

Pure data shared by both ends of `relay.wire.server_connection` (`ServerConnection`) and
`relay.wire.client_connection` (`ClientConnection`); `relay.wire.server_connection` re-exports all
of it. No sockets, asyncio, clock or Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from elections.core.stations import MAX_NAME, station_name
from relay.wire.framing import JsonObject, ProtocolError, RawData

MAGIC = "STKRELAY/1"
REGISTER_TIMEOUT = 5.0
KEEPALIVE_INTERVAL = 10.0
SILENCE_TIMEOUT = 3 * KEEPALIVE_INTERVAL
JSON_ROLES = frozenset({"agent", "commander"})
PASSTHROUGH_ROLES = frozenset({"publisher", "viewer"})
TUNNEL_ROLE = "tunnel"  # a site's leader registering its tunnel at the cloud (docs/design.md §14)
# Every name a register carries (station, KMSN; the tunnel's node) is a name as the pool's station
# book takes it (`elections.core.stations.station_name`): 1..MAX_NAME characters, each printable
# (`str.isprintable()`: no control, format, separator other than the space, or lone surrogate). The
# relay keeps and reports the names it admits, so their size is its to bound, at registration.
NAME_RULE = f"1..{MAX_NAME} printable characters"


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
    station_key: bool = False  # server side: authenticated with the station's credential, not the site token


@dataclass(frozen=True, slots=True)
class Message:
    obj: JsonObject


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    code: str
    message: str
    id: object = None


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """The server says the leader moved. `proven`: it arrived on a connection whose
    server proved it knows the key (protocol 1.1 ``sauth``); otherwise it is hearsay."""

    epoch: int | None
    ip: str | None
    port: int | None
    proven: bool = False


@dataclass(frozen=True, slots=True)
class KeepaliveAck:
    """The server answered a keepalive (client side, with ``keepalive_acks=True``).

    The server frames the answer while parsing the keepalive, so every frame the
    client wrote before that keepalive has been read by then.
    """


Event = Hello | Registered | Message | RawData | ProtocolError | ErrorReceived | LeaderChanged | KeepaliveAck


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def nonempty_str(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def is_name(value: object) -> TypeGuard[str]:
    """A name the wire admits: a string of 1..`MAX_NAME` characters (code points), all printable."""
    return station_name(value) is not None


def error_frame(code: str, message: str, id: object = None) -> JsonObject:
    obj: JsonObject = {"type": "error", "code": code, "message": message}
    if id is not None:
        obj["id"] = id
    return obj
