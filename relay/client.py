"""The relay client library (DESIGN.md §9): find the leader, register, stay, follow.

An asyncio shell over the sans-I/O `relay.protocol.ClientConnection`: this
module owns the socket, the timers and the queue; framing, the handshake and
auth live in the core. Typical use::

    discovery = Discovery.build(token=TOKEN, kmsn=KMSN, lease_dir="W:/socket",
                                agents=["http://192.168.1.11:8000"], fallbacks=[("192.168.1.10", 9530)])
    async with RelayClient(role="agent", kmsn=KMSN, station="S002", token=TOKEN,
                           discovery=discovery) as client:
        await client.send({"temp": 21})            # agent -> every commander of the KMSN
        async for item in client.messages():       # Received, or ServerError (e.g. no_route)
            ...

Behaviour:

- Discovery (`relay.discovery`): signed lease file, else agents' HTTP API,
  else configured fallbacks. A ``leader_changed`` frame's address is used as a
  hint for the next attempts (up to `HINT_TRIES`) unless discovery knows a
  leader with an epoch at least as high.
- Registration sends the epoch the client believes in: the highest it has seen
  from registrations, ``leader_changed`` frames and valid leases (or the
  candidate's, if higher). A server with a lower epoch refuses with
  ``stale_epoch``: it is stale, and the client looks elsewhere.
- Keepalive every `keepalive` seconds once registered; the connection is
  considered dead after 3 × `keepalive` without a byte from the server.
- Following the leader: ``leader_changed``, a closed or reset socket, silence,
  ``not_leader``/``stale_epoch`` at registration, or (with a lease dir) a lease
  polled every `lease_poll` seconds that names a newer epoch or another node
  → reconnect, after a full-jitter exponential backoff delay (`Backoff`; the
  delay restarts from `initial` after each successful registration). A lease
  change seen while waiting cuts the wait short (to one `initial`-bounded
  jittered delay). The client never gives up while running, with one
  exception: before the *first* registration, a definitive refusal
  (``bad_auth``, ``wrong_kmsn``, ``bad_magic``, ``bad_request``, ``bad_json``,
  ``frame_too_large``) stops it and `start()` raises `Refused`: a wrong token
  will not fix itself. After a first registration such refusals are reported
  (status ``refused``) and retried like any other failure.
- `send()` while registered writes at once; otherwise the message is queued
  (bounded by `queue_size`) and flushed in order right after the next
  registration, before any later `send()`. When the queue is full, `overflow`
  decides:

  - ``"drop_oldest"`` (default): the oldest queued message is discarded and
    the new one queued (`send()` returns ``"queued"``): after a long outage the
    freshest `queue_size` messages go out.
  - ``"drop_newest"``: the new message is discarded (`send()` returns
    ``"dropped"``): the first `queue_size` messages of the outage go out.
  - ``"raise"``: `send()` raises `QueueFull` and nothing changes; the caller
    decides.

  Every discarded message counts in `counters.dropped`. Delivery is at most
  once: a message written just before a connection dies is lost, and a queued
  message flushed before its recipient re-registered gets ``no_route``.
- Received ``message`` frames and non-fatal error frames (``no_route`` ...)
  come out of `messages()` / `receive()` in arrival order, as `Received` and
  `ServerError` objects. The inbox is bounded (`inbox_size`, oldest dropped,
  counted in `counters.inbox_dropped`) so a consumer that stops reading cannot
  exhaust memory.
- Observability: `on_status` is called with a `Status` at every transition
  (connecting, registered, reconnecting with the delay and the reason,
  refused, closed); `state`, `leader`, `epoch`, `node` and `counters` can be
  read at any time.

Exceptions::

    ClientError
     +-- Refused         the relay refused registration (code: bad_auth, ...)
     +-- NoLeader        start(timeout=...) found no relay that registered us in time
     |                   (also a TimeoutError)
     +-- QueueFull       send() with overflow="raise" and a full queue
     +-- ClientClosed    the client was closed (send, receive, wait)
     +-- ConnectionLost  ping() / send_confirmed() lost their connection midway
     +-- ServerError     an error frame after registration (no_route, ...):
                         yielded by messages(), raised only by send_confirmed()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from elections.lease import LeaseRecord
from relay.discovery import Discovery, Leader, LeaseFile
from relay.protocol import (
    BAD_AUTH,
    BAD_JSON,
    BAD_MAGIC,
    BAD_REQUEST,
    DEFAULT_MAX_FRAME,
    FRAME_TOO_LARGE,
    JSON_ROLES,
    KEEPALIVE_INTERVAL,
    WRONG_KMSN,
    ClientConnection,
    ErrorReceived,
    Hello,
    LeaderChanged,
    Message,
    ProtocolError,
    Registered,
    State,
    encode_frame,
)

log = logging.getLogger("stkrelay.client")

OVERFLOW_POLICIES = ("drop_oldest", "drop_newest", "raise")
Overflow = Literal["drop_oldest", "drop_newest", "raise"]
SendOutcome = Literal["sent", "queued", "dropped"]
# Refusals that another attempt will not fix (before the first registration, they stop the client).
FINAL_REFUSALS = frozenset({BAD_AUTH, WRONG_KMSN, BAD_MAGIC, BAD_REQUEST, BAD_JSON, FRAME_TOO_LARGE})
HINT_TRIES = 3
LEASE_POLL = 0.5
CONNECT_TIMEOUT = 5.0
READ_SIZE = 1 << 16


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
    """overflow="raise" and the send queue is at its bound."""


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


StatusKind = Literal["connecting", "registered", "reconnecting", "refused", "closed"]


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
        parts = [self.kind]
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
    reconnects: int = 0  # registrations after the first one
    queued: int = 0  # messages that went into the send queue
    dropped: int = 0  # messages discarded by the overflow policy
    sent: int = 0  # messages written to a relay (directly or flushed from the queue)
    received: int = 0  # message frames received
    errors: int = 0  # error frames received after registration (no_route, ...)
    inbox_dropped: int = 0  # received items discarded because the inbox was full

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class Backoff:
    """Full-jitter exponential backoff: attempt n waits uniform(0, min(maximum, initial·factorⁿ))."""

    initial: float = 0.1
    maximum: float = 5.0
    factor: float = 2.0
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if not (0 < self.initial <= self.maximum and self.factor >= 1):
            raise ValueError("backoff needs 0 < initial <= maximum and factor >= 1")

    def cap(self, attempt: int) -> float:
        return min(self.maximum, self.initial * self.factor ** min(attempt, 64))

    def delay(self, attempt: int) -> float:
        return self.rng.uniform(0, self.cap(attempt))


# -- pure decisions ------------------------------------------------------------------
def choose_leader(hint: Leader | None, found: Leader | None) -> Leader | None:
    """The hint (from ``leader_changed``) wins only if it is newer than what discovery found."""
    if hint is None or found is None:
        return found or hint
    if hint.epoch is not None and (found.epoch is None or hint.epoch > found.epoch):
        return hint
    return found


def lease_says_move(record: LeaseRecord, epoch: int, node: str | None) -> str | None:
    """Why the lease tells a client registered at (`epoch`, `node`) to move, or None."""
    if record.epoch > epoch:
        return f"the lease names {record.node} epoch {record.epoch}, newer than epoch {epoch}"
    if record.epoch == epoch and node is not None and record.node != node:
        return f"the lease names {record.node}, not {node}, at epoch {epoch}"
    return None


def _max_epoch(*epochs: int | None) -> int | None:
    known = [e for e in epochs if e is not None]
    return max(known) if known else None


# -- the connection ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeepaliveAck:
    """Event: the server answered a keepalive."""


class _Connection(ClientConnection):
    """`ClientConnection` that reports ``keepalive_ack`` as an event (the core
    swallows it silently), so that `RelayClient.ping()` can time round trips."""

    def _handle(self, obj: dict) -> None:
        if obj.get("type") == "keepalive_ack" and self.state is State.OPEN:
            self._events.append(KeepaliveAck())
            return
        super()._handle(obj)


@dataclass
class _Outcome:
    registered: bool
    reason: str
    refusal: Refused | None = None


@dataclass
class _Session:
    leader: Leader
    conn: _Connection
    writer: asyncio.StreamWriter
    last_rx: float
    deadline: float  # registration deadline
    registered: bool = False
    node: str | None = None
    epoch: int | None = None
    session: str = ""
    next_keepalive: float = 0.0
    acks: deque[tuple[float, asyncio.Future[float] | None]] = field(default_factory=deque)
    switch: str = ""  # set when the client itself ends the session to move elsewhere

    def write(self) -> None:
        out = self.conn.data_to_send()
        if out and not self.writer.is_closing():
            self.writer.write(out)


_CLOSED = object()


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait for it to end, cancelling again if it swallowed one.

    Python 3.11's `asyncio.wait_for` returns the inner result instead of
    raising CancelledError when both happen in the same loop iteration, so one
    `cancel()` is not always enough; the loops also check `_closed`.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if not task.cancelled() and task.exception() is not None:
        log.error("relay client task %s failed", task.get_name(), exc_info=task.exception())


class RelayClient:
    """One relay client: a role and station of one KMSN, following the leader.

    `discovery` is the chain that says where the leader is
    (`relay.discovery.Discovery`). See the module docstring for the queue,
    backoff and reconnect policies.
    """

    def __init__(
        self,
        *,
        role: str,
        kmsn: str,
        station: str,
        token: str,
        discovery: Discovery,
        queue_size: int = 1000,
        overflow: Overflow = "drop_oldest",
        keepalive: float = KEEPALIVE_INTERVAL,
        backoff: Backoff | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        lease_poll: float = LEASE_POLL,
        inbox_size: int = 10_000,
        max_frame: int = DEFAULT_MAX_FRAME,
        on_status: Callable[[Status], None] | None = None,
    ) -> None:
        if role not in JSON_ROLES:
            raise ValueError(f"role must be one of {', '.join(sorted(JSON_ROLES))}, not {role!r}")
        if not (kmsn and station and token):
            raise ValueError("kmsn, station and token must not be empty")
        if overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}, not {overflow!r}")
        if queue_size < 1 or inbox_size < 1:
            raise ValueError("queue_size and inbox_size must be at least 1")
        if keepalive <= 0 or connect_timeout <= 0 or lease_poll <= 0:
            raise ValueError("keepalive, connect_timeout and lease_poll must be positive")
        self.role, self.kmsn, self.station = role, kmsn, station
        self._token = token
        self.discovery = discovery
        self.queue_size, self.overflow = queue_size, overflow
        self.keepalive, self.silence = keepalive, 3 * keepalive
        self.backoff = backoff or Backoff()
        self._target: tuple[Any, ...] | None = None  # (node, epoch, address) of the last attempt
        self.connect_timeout, self.lease_poll = connect_timeout, lease_poll
        self.inbox_size, self.max_frame = inbox_size, max_frame
        self.on_status = on_status
        self.counters = Counters()
        self.known_epoch: int | None = None  # the highest epoch seen (registrations, leases, leader_changed)
        self.state: Literal["idle", StatusKind] = "idle"
        self.status: Status | None = None
        self.last_reason = ""
        self._queue: deque[tuple[Any, str | None, Any]] = deque()
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._live: _Session | None = None  # registered session
        self._attempt: _Session | None = None  # session being set up or live
        self._hint: Leader | None = None
        self._hint_tries = 0
        self._ever_registered = False
        self._fatal: Refused | None = None
        self._closed = False
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._confirm: dict[Any, asyncio.Future[ServerError]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # -- public: lifecycle -------------------------------------------------------------
    async def start(self, timeout: float | None = None) -> None:
        """Run the client; return once registered with a leader.

        Raises `Refused` on a definitive refusal before the first registration,
        `NoLeader` if `timeout` passes first (the client is then closed).
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        if not self._tasks:
            self._tasks.append(asyncio.create_task(self._run(), name=f"relay-client-{self.station}"))
            if self.discovery.lease is not None:
                self._tasks.append(asyncio.create_task(self._watch_lease(), name="relay-client-lease"))
        try:
            await self.wait_registered(timeout)
        except TimeoutError:
            await self.close()
            raise NoLeader(
                f"no relay registered us within {timeout:g} s; last: {self.last_reason or 'nothing tried'}; "
                f"{self.discovery.describe()}"
            ) from None
        except ClientError:
            await self.close()
            raise

    async def wait_registered(self, timeout: float | None = None) -> int:
        """Wait until registered (now or later); return the server's epoch.

        Raises `TimeoutError`, `Refused` (the client stopped) or `ClientClosed`.
        """

        async def until() -> int:
            while True:
                if self._fatal is not None:
                    raise self._fatal
                if self._closed:
                    raise ClientClosed("the client is closed")
                live = self._live
                if live is not None and live.epoch is not None:
                    return live.epoch
                await self._changed.wait()

        return await asyncio.wait_for(until(), timeout)

    async def close(self) -> None:
        """Stop: close the connection, end `messages()`, discard what is still queued."""
        if self._closed:
            return
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            await _cancel(task)
        for fut in self._confirm.values():
            if not fut.done():
                fut.cancel()
        self._inbox.put_nowait(_CLOSED)
        self._emit("closed", reason=f"{len(self._queue)} queued messages discarded" if self._queue else "")
        self._queue.clear()

    async def __aenter__(self) -> RelayClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- public: traffic -----------------------------------------------------------------
    async def send(self, data: Any, *, to: str | None = None, id: Any = None) -> SendOutcome:
        """Send `data` (to station `to`; a commander must name one, or ``"*"``).

        Returns ``"sent"`` (written to the relay), ``"queued"`` (not registered:
        flushed after the next registration) or ``"dropped"`` (queue full,
        overflow="drop_newest"). Raises `QueueFull` (overflow="raise"),
        `ClientClosed`, `ValueError` for a commander without `to`, and
        `relay.protocol.PayloadError` for data that is not JSON or too large.
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        if self.role == "commander" and not to:
            raise ValueError("a commander's send needs to= (a station, or '*')")
        live = self._live
        if live is not None and not live.writer.is_closing() and live.conn.state is State.OPEN:
            live.conn.send_message(data, to=to, id=id)
            live.write()
            self.counters.sent += 1
            with contextlib.suppress(ConnectionError):
                await live.writer.drain()  # backpressure; a dead connection is the reader's business
            return "sent"
        frame = {"type": "send", "to": to, "data": data, "id": id}
        encode_frame(frame, max_frame=self.max_frame)  # refuse now what could never be flushed
        if len(self._queue) >= self.queue_size:
            if self.overflow == "raise":
                raise QueueFull(f"{len(self._queue)} messages already queued (bound {self.queue_size})")
            self.counters.dropped += 1
            if self.overflow == "drop_newest":
                return "dropped"
            self._queue.popleft()
        self._queue.append((data, to, id))
        self.counters.queued += 1
        return "queued"

    async def send_confirmed(
        self, data: Any, *, to: str | None = None, id: Any = None, timeout: float = 5.0
    ) -> Any:
        """Send once registered and wait until the relay has routed it; return the id used.

        Raises `ServerError` (e.g. ``no_route``) if the relay refused it,
        `TimeoutError`, or `ConnectionLost` (outcome unknown). Two keepalive round
        trips follow the send: the server answers a keepalive as soon as it
        parses it but routes sends afterwards, so only the second ack is sure to
        come after any error about the send.
        """
        id = uuid.uuid4().hex[:16] if id is None else id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.wait_registered(timeout)
        fut: asyncio.Future[ServerError] = loop.create_future()
        self._confirm[id] = fut
        try:
            if await self.send(data, to=to, id=id) != "sent":
                raise ConnectionLost("the connection ended before the message could be written")
            for _ in range(2):
                await self.ping(max(deadline - loop.time(), 0.001))
            if fut.done() and not fut.cancelled():
                raise fut.result()
        finally:
            self._confirm.pop(id, None)
        return id

    async def ping(self, timeout: float = 5.0) -> float:
        """One keepalive round trip on the live connection, in seconds."""
        live = self._live
        if live is None:
            raise ConnectionLost("not registered")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[float] = loop.create_future()
        self._keepalive(live, fut)
        return await asyncio.wait_for(fut, timeout)

    async def messages(self) -> AsyncIterator[Received | ServerError]:
        """Received messages and error frames, in order, until the client is closed."""
        while True:
            item = await self._inbox.get()
            if item is _CLOSED:
                self._inbox.put_nowait(_CLOSED)  # end every other iterator too
                return
            yield item

    async def receive(self, timeout: float | None = None) -> Received | ServerError:
        """The next item of `messages()`; `ClientClosed` once closed, `TimeoutError`."""
        item = await asyncio.wait_for(self._inbox.get(), timeout)
        if item is _CLOSED:
            self._inbox.put_nowait(_CLOSED)
            raise ClientClosed("the client is closed")
        return item

    # -- public: state -------------------------------------------------------------------
    @property
    def registered(self) -> bool:
        return self._live is not None

    @property
    def leader(self) -> Leader | None:
        return self._live.leader if self._live else None

    @property
    def epoch(self) -> int | None:
        """The server's epoch of the live session (None while not registered)."""
        return self._live.epoch if self._live else None

    @property
    def node(self) -> str | None:
        return self._live.node if self._live else None

    @property
    def session_id(self) -> str | None:
        return self._live.session if self._live else None

    @property
    def pending(self) -> int:
        """Messages waiting in the send queue."""
        return len(self._queue)

    # -- the run loop --------------------------------------------------------------------
    async def _run(self) -> None:
        attempt = 0
        last_target = None
        while not self._closed:
            try:
                outcome = await self._try_once()
            except Exception as exc:  # a bug must not end the client: log it, back off, go on
                log.exception("relay client %s/%s: attempt failed", self.kmsn, self.station)
                outcome = _Outcome(False, f"internal error: {exc!r}")
            if outcome.refusal is not None and outcome.refusal is self._fatal:
                return
            if outcome.registered or self._target != last_target:
                attempt = 0  # a new leader: start the backoff afresh, it may just be coming up
            last_target = self._target
            self.last_reason = outcome.reason
            delay = self.backoff.delay(attempt)
            attempt += 1
            self._emit("reconnecting", epoch=self.known_epoch, reason=outcome.reason, delay=delay)
            await self._pause(delay)

    async def _try_once(self) -> _Outcome:
        """Find the leader, then connect, register and serve until the session ends."""
        leader = await self._next_leader()
        self._target = None if leader is None else (leader.node, leader.epoch, leader.address)
        if leader is None:
            return _Outcome(False, f"no leader found ({self.discovery.describe()})")
        outcome = await self._session(leader)
        refusal = outcome.refusal
        if refusal is not None:
            self._emit("refused", leader=leader, node=refusal.node, reason=outcome.reason)
            if refusal.code in FINAL_REFUSALS and not self._ever_registered:
                self._fatal = refusal  # stops the run loop; start() raises it
                self._notify()
        return outcome

    async def _next_leader(self) -> Leader | None:
        found = await self.discovery.find()
        if found is not None and found.source == "lease":
            self.known_epoch = _max_epoch(self.known_epoch, found.epoch)
        hint = self._hint
        if hint is not None:
            self._hint_tries += 1
            superseded = found is not None and choose_leader(hint, found) is found
            if superseded or self._hint_tries >= HINT_TRIES:
                self._hint = None
        return choose_leader(hint, found)

    def _set_hint(self, leader: Leader) -> None:
        self._hint, self._hint_tries = leader, 0

    async def _pause(self, delay: float) -> None:
        """Wait `delay`, or less if the lease names a new leader meanwhile."""
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except TimeoutError:
            return
        await asyncio.sleep(self.backoff.delay(0))  # still jittered: the whole pool saw the lease

    async def _session(self, leader: Leader) -> _Outcome:
        loop = asyncio.get_running_loop()
        believed = _max_epoch(leader.epoch, self.known_epoch)
        self._emit("connecting", leader=leader, epoch=believed, node=leader.node)
        addr = f"{leader.ip}:{leader.port}"
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(leader.ip, leader.port), self.connect_timeout
            )
        except TimeoutError:
            return _Outcome(False, f"connecting to {addr} took over {self.connect_timeout:g} s")
        except OSError as exc:
            return _Outcome(False, f"cannot connect to {addr}: {exc.strerror or exc}")
        conn = _Connection(
            role=self.role,
            kmsn=self.kmsn,
            station=self.station,
            token=self._token,
            epoch=believed,
            max_frame=self.max_frame,
        )
        now = loop.time()
        s = _Session(leader, conn, writer, last_rx=now, deadline=now + self.connect_timeout)
        self._attempt = s
        try:
            outcome = await self._pump(s, reader)
        except (ConnectionError, OSError) as exc:
            outcome = _Outcome(s.registered, f"connection to {addr} lost: {exc.strerror or exc}")
        finally:
            self._end(s)
        if s.switch:
            outcome.reason = s.switch
        return outcome

    async def _pump(self, s: _Session, reader: asyncio.StreamReader) -> _Outcome:
        loop = asyncio.get_running_loop()
        addr = f"{s.leader.ip}:{s.leader.port}"
        while True:
            now = loop.time()
            if not s.registered:
                wait = s.deadline - now
                if wait <= 0:
                    return _Outcome(False, f"{addr} did not register us within {self.connect_timeout:g} s")
            else:
                if now - s.last_rx >= self.silence:
                    return _Outcome(True, f"{addr} silent for {now - s.last_rx:.1f} s")
                if now >= s.next_keepalive:
                    self._keepalive(s, None)
                wait = min(s.next_keepalive, s.last_rx + self.silence) - now
            try:
                chunk = await asyncio.wait_for(reader.read(READ_SIZE), max(wait, 0.0))
            except TimeoutError:
                continue
            if not chunk:
                s.conn.receive_eof()
                return _Outcome(s.registered, f"{addr} closed the connection")
            s.last_rx = loop.time()
            s.conn.receive_data(chunk)
            outcome = self._on_events(s, s.conn.events_received())
            s.write()
            if outcome is not None:
                return outcome
            if s.conn.close_expected():
                return _Outcome(s.registered, f"{addr} ended the session")

    def _on_events(self, s: _Session, events: list) -> _Outcome | None:
        addr = f"{s.leader.ip}:{s.leader.port}"
        for event in events:
            if isinstance(event, Message):
                self._deliver(Received.from_frame(event.obj))
                self.counters.received += 1
            elif isinstance(event, KeepaliveAck):
                if s.acks:
                    sent_at, fut = s.acks.popleft()
                    if fut is not None and not fut.done():
                        fut.set_result(asyncio.get_running_loop().time() - sent_at)
            elif isinstance(event, Hello):
                s.node = event.node
            elif isinstance(event, Registered):
                self._registered(s, event)
            elif isinstance(event, ErrorReceived):
                if not s.registered:
                    refusal = Refused(event.code, event.message, s.leader, s.node)
                    return _Outcome(False, str(refusal), refusal)
                self._server_error(ServerError(event.code, event.message, event.id))
            elif isinstance(event, LeaderChanged):
                epoch, ip, port = event.epoch, event.ip, event.port
                self.known_epoch = _max_epoch(self.known_epoch, epoch)
                if ip and port:
                    self._set_hint(Leader(ip, port, epoch, None, "leader_changed"))
                return _Outcome(s.registered, f"{addr} says the leader changed: epoch={epoch} {ip}:{port}")
            elif isinstance(event, ProtocolError):
                return _Outcome(s.registered, f"{addr} broke the protocol: {event.code} ({event.message})")
        return None

    def _registered(self, s: _Session, event: Registered) -> None:
        now = asyncio.get_running_loop().time()
        s.registered, s.epoch, s.session = True, event.epoch, event.session
        s.next_keepalive = now + self.keepalive
        self.known_epoch = _max_epoch(self.known_epoch, event.epoch)
        if self._ever_registered:
            self.counters.reconnects += 1
        self._ever_registered = True
        flushed = 0
        while self._queue:  # in order, before any later send() can write
            data, to, id = self._queue.popleft()
            s.conn.send_message(data, to=to, id=id)
            flushed += 1
        self.counters.sent += flushed
        s.write()
        self._live = s
        reason = f"flushed {flushed} queued messages" if flushed else ""
        self._emit("registered", leader=s.leader, epoch=event.epoch, node=s.node, reason=reason)

    def _keepalive(self, s: _Session, fut: asyncio.Future[float] | None) -> None:
        now = asyncio.get_running_loop().time()
        s.conn.keepalive()
        s.acks.append((now, fut))
        s.next_keepalive = now + self.keepalive
        s.write()

    def _end(self, s: _Session) -> None:
        if self._live is s:
            self._live = None
        if self._attempt is s:
            self._attempt = None
        for _, fut in s.acks:
            if fut is not None and not fut.done():
                fut.set_exception(ConnectionLost("the connection ended before the keepalive answer"))
        s.acks.clear()
        s.writer.close()
        self._notify()

    def _deliver(self, item: Received | ServerError) -> None:
        if self._inbox.qsize() >= self.inbox_size:
            self._inbox.get_nowait()
            self.counters.inbox_dropped += 1
        self._inbox.put_nowait(item)

    def _server_error(self, error: ServerError) -> None:
        self.counters.errors += 1
        fut = self._confirm.get(error.id) if error.id is not None else None
        if fut is not None and not fut.done():
            fut.set_result(error)  # claimed by send_confirmed(): raised there, not yielded
        else:
            self._deliver(error)

    # -- the lease watcher ---------------------------------------------------------------
    async def _watch_lease(self) -> None:
        lease = self.discovery.lease
        assert lease is not None
        seen: tuple[str, int] | None = None
        while not self._closed:
            await asyncio.sleep(self.lease_poll)
            try:
                seen = await self._check_lease(lease, seen)
            except Exception:  # keep watching whatever happened
                log.exception("relay client %s/%s: lease check failed", self.kmsn, self.station)

    async def _check_lease(self, lease: LeaseFile, seen: tuple[str, int] | None) -> tuple[str, int] | None:
        """One poll: move a registered session the lease outdates, or cut a backoff wait short."""
        record = await lease.read_record()
        if record is None:
            return seen  # no evidence: nothing to act on
        self.known_epoch = _max_epoch(self.known_epoch, record.epoch)
        key = (record.node, record.epoch)
        s = self._attempt
        if s is not None and s.registered and s.epoch is not None:
            reason = lease_says_move(record, s.epoch, s.node)
            if reason is not None:
                self._set_hint(Leader(record.ip, record.port, record.epoch, record.node, "lease"))
                s.switch = reason
                log.info("relay client %s/%s: %s: moving", self.kmsn, self.station, reason)
                s.writer.close()  # the reader sees EOF; the run loop reconnects
        elif key != seen:
            self._wake.set()  # waiting to retry: the lease names someone new, go now
        return key

    # -- status ----------------------------------------------------------------------------
    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _emit(self, kind: StatusKind, **kw: Any) -> None:
        status = Status(kind, **kw)
        self.state, self.status = kind, status
        log.info("relay client %s %s/%s: %s", self.role, self.kmsn, self.station, status.describe())
        self._notify()
        if self.on_status is not None:
            try:
                self.on_status(status)
            except Exception:
                log.exception("relay client on_status callback failed")
