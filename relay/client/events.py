"""What the relay client hands its caller: exceptions, received items, statuses, counters.

Callers import them from here (one import path per name)::

    ClientError
     +-- Refused         the relay refused registration (code: bad_auth, ...)
     +-- NoLeader        start(timeout=...) found no relay that registered us in time
     |                   (also a TimeoutError)
     +-- QueueFull       send() with overflow="raise" and a full outbox
     +-- ClientClosed    the client was closed (send, receive, wait)
     +-- ConnectionLost  ping() / send_confirmed() lost their connection midway
     +-- ServerError     an error frame after registration (no_route, ...):
                         yielded by messages(), raised only by send_confirmed()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from relay.client.discovery import Leader

OVERFLOW_POLICIES = ("drop_oldest", "drop_newest", "raise")
Overflow = Literal["drop_oldest", "drop_newest", "raise"]
SendOutcome = Literal["sent", "queued", "dropped"]
StatusKind = Literal["connecting", "registered", "reconnecting", "refused", "closed"]


# -- exceptions ------------------------------------------------------------------
class ClientError(Exception):
    """Base of the relay client's exceptions."""


class Refused(ClientError):
    """The relay answered the registration with an error frame."""

    def __init__(self, code: str, message: str, leader: Leader | None = None, node: str | None = None):
        where = f" by {node or '?'} at {leader.ip}:{leader.port}" if leader else ""
        super().__init__(f"refused{where}: {code} ({message})")
        self.code, self.message, self.leader, self.node = code, message, leader, node


class NoLeader(ClientError, TimeoutError):
    """No relay registered the client before the deadline."""


class QueueFull(ClientError):
    """overflow="raise" and the outbox (queue + unconfirmed window) is at its bound."""


class ClientClosed(ClientError):
    """The client is closed."""


class ConnectionLost(ClientError):
    """The connection ended before the awaited answer came."""


class ServerError(ClientError):
    """A non-fatal error frame after registration; `id` echoes the send's id."""

    def __init__(self, code: str, message: str, id: object = None) -> None:
        super().__init__(f"{code}: {message}" + (f" (id {id!r})" if id is not None else ""))
        self.code, self.message, self.id = code, message, id

    def as_dict(self) -> dict[str, Any]:
        return {"type": "error", "code": self.code, "message": self.message, "id": self.id}


# -- values ------------------------------------------------------------------------
@dataclass(frozen=True)
class Received:
    """A ``message`` frame: `data` from (`sender_role`, `sender_station`)."""

    data: Any
    sender_role: str | None
    sender_station: str | None
    id: Any = None

    @classmethod
    def from_frame(cls, obj: dict) -> Received:
        sender = obj.get("from")
        sender = sender if isinstance(sender, dict) else {}
        return cls(obj.get("data"), sender.get("role"), sender.get("station"), obj.get("id"))

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "message",
            "from": {"role": self.sender_role, "station": self.sender_station},
            "data": self.data,
            "id": self.id,
        }


@dataclass(frozen=True)
class Status:
    """One transition. `epoch` is the server's once registered, else the one believed in."""

    kind: StatusKind
    leader: Leader | None = None
    epoch: int | None = None
    node: str | None = None
    reason: str = ""
    delay: float | None = None  # reconnecting: the backoff delay about to be waited

    def describe(self) -> str:
        parts: list[str] = [self.kind]
        if self.node or self.leader:
            where = f"{self.leader.ip}:{self.leader.port}" if self.leader else "?"
            parts.append(f"{self.node or '?'} at {where}")
        if self.epoch is not None:
            parts.append(f"epoch {self.epoch}")
        if self.delay is not None:
            parts.append(f"in {self.delay:.2f} s")
        if self.reason:
            parts.append(f"({self.reason})")
        return " ".join(parts)


@dataclass
class Counters:
    """What the client did so far; also readable as ``counters["sent"]``."""

    reconnects: int = 0  # registrations after the first one
    queued: int = 0  # messages that send() could not write at once (they went into the queue)
    dropped: int = 0  # messages discarded by the overflow policy
    sent: int = 0  # frames written to a relay (first writes, re-sends and retries)
    confirmed: int = 0  # messages a relay confirmed having routed (see relay.client.outbox)
    resent: int = 0  # unconfirmed messages put back into the queue when a connection ended
    retried: int = 0  # no_route answers within the settle window: the message was queued again
    received: int = 0  # message frames received (duplicates included)
    duplicates: int = 0  # received messages dropped as already seen (same sender and id)
    errors: int = 0  # error frames received after registration (no_route, ...)
    inbox_dropped: int = 0  # received items discarded because the inbox was full
    unproven: int = 0  # servers that did not prove the key in the handshake (then avoided a while)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def __getitem__(self, name: str) -> int:
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)
