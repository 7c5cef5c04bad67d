"""The relay's in-process routing table (docs/design.md §8): who receives what.

Pure: no sockets, no asyncio, no clock. The transport (`relay.server.connections`) owns
the sessions; the `Router` only holds references to registered ones, keyed by
``(kmsn, station, role)``, and calls three methods on them:

- ``deliver(frame: bytes)``: one complete, encoded ``message`` frame (JSON port);
- ``deliver_raw(data: bytes)``: passthrough bytes (viewers);
- ``close(code: str, message: str)``: the router dropped this session because a
  newer one took its place (a JSON session sends the error frame first).

None of them may raise, nor call back into the router synchronously.

Rules:

- A commander's ``send`` goes to the agent of its KMSN registered with station
  ``to``, or with ``to == "*"`` to every agent of its KMSN.
- An agent's ``send`` goes to every commander of its KMSN; ``to`` narrows it to
  the commander of that station (``"*"`` means every commander, like no ``to``).
- The ``message`` is encoded once and the same bytes go to every recipient:
  ``{"type":"message","from":{"role":..,"station":..},"data":..,"id":..}``
  (``id`` is null when the ``send`` had none).
- Nothing crosses KMSNs, stations or roles: commanders never reach commanders,
  agents never reach agents, and the only recipients are the ones above.
- Duplicate registration: the newer connection replaces the older. The same
  ``(kmsn, station, role)`` of the JSON port, and the publisher of a
  ``(kmsn, station)``, is held by one session at a time; when a second one
  registers, the first is unregistered and closed with
  ``error bad_request "replaced by a newer connection"`` (a publisher, already
  in raw mode, is just closed). Rationale: a client that reconnects after a
  network blip must win over its own half-open ghost at once, not wait for the
  ghost's silence timeout. Viewers are not unique: any number may watch.
- Who may replace whom (`refusal`, asked before the newcomer is told
  ``registered``): a session that authenticated with its station's
  credential (``station_key`` true) may replace any holder; one that used the
  site token may replace only another site-token holder. So a client that
  knows the site token cannot take a station, and its messages, from the
  credential holder; a credential holder still wins over its own ghost.
  (A session without a ``station_key`` attribute counts as a site-token one.)
- Passthrough: bytes from the current publisher of ``(kmsn, station)`` go to
  all viewers of that pair, in order. Viewers may register before the
  publisher and outlive it (a new publisher feeds them again); bytes with no
  viewer are dropped (counted).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Protocol

from relay.wire.framing import BAD_REQUEST, DEFAULT_MAX_FRAME, PayloadError, encode_frame

AGENT = "agent"
COMMANDER = "commander"
PUBLISHER = "publisher"
VIEWER = "viewer"
WILDCARD = "*"
REPLACED = "replaced by a newer connection"
HELD = "{station} is held by a client with its station credential; the site token cannot replace it"


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def message_prefix(role: str, station: str) -> str:
    """The constant head of every ``message`` frame from (`role`, `station`)."""
    origin = _JSON({"role": role, "station": station})
    return f'{{"type":"message","from":{origin},"data":'


def encode_message(
    role: str, station: str, data: object, id: object, max_frame: int, prefix: str = ""
) -> bytes:
    """``encode_frame({"type": "message", "from": {...}, "data": data, "id": id})``,
    byte for byte, faster: the constant head (`prefix`, from `message_prefix`)
    is encoded once per sender and the encoder is reused (the relay's hot
    path). Raises `PayloadError` like `encode_frame`."""
    try:
        head = prefix or message_prefix(role, station)
        payload = f'{head}{_JSON(data)},"id":{_JSON(id)}}}'.encode()
    except UnicodeEncodeError:  # lone surrogates: encode_frame escapes them all
        message = {"type": "message", "from": {"role": role, "station": station}, "data": data, "id": id}
        return encode_frame(message, max_frame=max_frame)
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadError(f"not serializable as JSON: {exc}") from exc
    if len(payload) > max_frame:
        raise PayloadError(f"frame of {len(payload)} bytes exceeds the limit of {max_frame}")
    return len(payload).to_bytes(4, "big") + payload


class RoutedSession(Protocol):
    kmsn: str
    station: str
    role: str
    station_key: bool  # registered with its station's credential, not the site token

    def deliver(self, frame: bytes) -> None: ...

    def deliver_raw(self, data: bytes) -> None: ...

    def close(self, code: str, message: str) -> None: ...


@dataclass
class RouteCounters:
    messages: int = 0  # sends that reached at least one recipient
    deliveries: int = 0  # message frames handed to recipients
    bytes: int = 0  # bytes of those frames
    no_route: int = 0  # sends that found no recipient
    replaced: int = 0  # sessions closed by a newer duplicate
    raw_in: int = 0  # passthrough bytes received from publishers
    raw_out: int = 0  # passthrough bytes handed to viewers
    raw_unwatched: int = 0  # passthrough bytes with no viewer to go to

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Router:
    """Routing table of one relay: register, unregister, send, publish."""

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self.counters = RouteCounters()
        # (kmsn, role) -> station -> session, for agents and commanders
        self._json: dict[tuple[str, str], dict[str, RoutedSession]] = {}
        self._publishers: dict[tuple[str, str], RoutedSession] = {}
        # (kmsn, station) -> viewers, as an insertion-ordered set
        self._viewers: dict[tuple[str, str], dict[RoutedSession, None]] = {}
        self._prefix: dict[RoutedSession, str] = {}  # the head of its message frames, per sender

    # -- membership ------------------------------------------------------------
    def refusal(self, role: str, kmsn: str, station: str, station_key: bool) -> str | None:
        """Why a registration of (`role`, `kmsn`, `station`) may not replace the
        current holder (see the rules above), or None."""
        if station_key:
            return None
        if role in (AGENT, COMMANDER):
            old = self._json.get((kmsn, role), {}).get(station)
        elif role == PUBLISHER:
            old = self._publishers.get((kmsn, station))
        else:
            return None  # viewers replace nobody
        if old is None or not old.station_key:
            return None
        return HELD.format(station=station)

    def register(self, session: RoutedSession) -> RoutedSession | None:
        """Add `session`; return the older duplicate it replaced (already closed), if any."""
        role, kmsn, station = session.role, session.kmsn, session.station
        old: RoutedSession | None = None
        if role in (AGENT, COMMANDER):
            table = self._json.setdefault((kmsn, role), {})
            old = table.get(station)
            table[station] = session
            self._prefix[session] = message_prefix(role, station)
            if old is not None and old is not session:
                self._prefix.pop(old, None)
        elif role == PUBLISHER:
            old = self._publishers.get((kmsn, station))
            self._publishers[(kmsn, station)] = session
        elif role == VIEWER:
            self._viewers.setdefault((kmsn, station), {})[session] = None
        else:
            raise ValueError(f"unknown role {role!r}")
        if old is None or old is session:
            return None
        self.counters.replaced += 1
        old.close(BAD_REQUEST, REPLACED)
        return old

    def unregister(self, session: RoutedSession) -> bool:
        """Remove `session` if it is registered (a replaced one no longer is)."""
        role, kmsn, station = session.role, session.kmsn, session.station
        if role in (AGENT, COMMANDER):
            table = self._json.get((kmsn, role))
            if not table or table.get(station) is not session:
                return False
            del table[station]
            self._prefix.pop(session, None)
            if not table:
                del self._json[(kmsn, role)]
            return True
        if role == PUBLISHER:
            if self._publishers.get((kmsn, station)) is not session:
                return False
            del self._publishers[(kmsn, station)]
            return True
        viewers = self._viewers.get((kmsn, station))
        if not viewers or session not in viewers:
            return False
        del viewers[session]
        if not viewers:
            del self._viewers[(kmsn, station)]
        return True

    def sessions(self) -> list[RoutedSession]:
        """Every registered session: agents and commanders, publishers, viewers."""
        out: list[RoutedSession] = [s for table in self._json.values() for s in table.values()]
        out.extend(self._publishers.values())
        out.extend(s for viewers in self._viewers.values() for s in viewers)
        return out

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{kmsn: {station: {role: n}}}`` of the registered sessions."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for s in self.sessions():
            roles = out.setdefault(s.kmsn, {}).setdefault(s.station, {})
            roles[s.role] = roles.get(s.role, 0) + 1
        return out

    # -- traffic ---------------------------------------------------------------
    def recipients(self, sender: RoutedSession, to: object) -> tuple[RoutedSession, ...]:
        """Who a ``send`` from `sender` with this `to` reaches (see the rules above)."""
        if sender.role == COMMANDER:
            table = self._json.get((sender.kmsn, AGENT))
            wildcard = to == WILDCARD
        elif sender.role == AGENT:
            table = self._json.get((sender.kmsn, COMMANDER))
            wildcard = to is None or to == WILDCARD
        else:
            raise ValueError(f"a {sender.role} does not send messages")
        if not table:
            return ()
        if wildcard:
            return tuple(table.values())
        target = table.get(to) if isinstance(to, str) else None
        return () if target is None else (target,)

    def send(self, sender: RoutedSession, obj: dict) -> int:
        """Deliver a validated ``send`` frame of `sender`; return how many got it.

        Zero means no recipient: the caller answers ``no_route``. Raises
        `PayloadError` (nobody receives anything) if the ``message`` would
        exceed `max_frame` once its ``from`` is added.
        """
        targets = self.recipients(sender, obj.get("to"))
        if not targets:
            self.counters.no_route += 1
            return 0
        head = self._prefix.get(sender, "")
        data, id = obj["data"], obj.get("id")
        frame = encode_message(sender.role, sender.station, data, id, self.max_frame, head)
        for target in targets:
            target.deliver(frame)
        c = self.counters
        c.messages += 1
        c.deliveries += len(targets)
        c.bytes += len(frame) * len(targets)
        return len(targets)

    def publish(self, publisher: RoutedSession, data: bytes) -> int:
        """Hand passthrough bytes of `publisher` to its viewers; return how many got them."""
        key = (publisher.kmsn, publisher.station)
        if self._publishers.get(key) is not publisher:
            return 0  # replaced, or never registered: its bytes go nowhere
        self.counters.raw_in += len(data)
        viewers = self._viewers.get(key)
        if not viewers:
            self.counters.raw_unwatched += len(data)
            return 0
        targets = tuple(viewers)
        for viewer in targets:
            viewer.deliver_raw(data)
        self.counters.raw_out += len(data) * len(targets)
        return len(targets)
