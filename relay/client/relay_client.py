"""The relay client library (docs/design.md §9): find the leader, register, stay, follow.

An asyncio shell over the sans-I/O `relay.wire.client_connection.ClientConnection`. Typical use::

    discovery = Discovery.build(kmsn=KMSN, lease=lease_file("W:/socket", TOKEN, KMSN),
                                agents=["http://192.168.1.11:8000"], fallbacks=[("192.168.1.10", 9530)])
    async with RelayClient(role="agent", kmsn=KMSN, station="S002", token=TOKEN,
                           discovery=discovery) as client:
        await client.send({"temp": 21})            # agent -> every commander of the KMSN
        async for item in client.messages():       # Received, or ServerError (e.g. no_route)
            ...

This module's job is the public API and the wiring; the parts, one module
each, never import it (everything public is importable from here):

- `relay.client.follow`: how the client finds the leader and follows it
  (discovery, ``leader_changed`` hints, epochs, the lease poller, backoff),
  and when it gives up (`start()` raises `Refused`). Given a `FollowerHooks`.
- `relay.client.session`: one connection (register, keepalives, silence).
  Given a `SessionConfig` and a `SessionOwner` (outbox, inbox, counters, callbacks).
- `relay.client.outbox`: the queue, the unconfirmed window, settle-window retries;
  `relay.client.inbox`: the bounded inbox and duplicate suppression;
  `relay.client.events`: exceptions, `Received`, `Status`, `Counters`.

Delivery semantics, as a caller sees them (the details are in `relay.client.outbox`):

- **At least once, across failovers; duplicates are possible after one.**
  Every message carries an id (the caller's, else a fresh ``"<8 hex>-<n>"``).
  `send()` writes at once when it can (``"sent"``), else queues (``"queued"``).
  A written message stays *unconfirmed* until the relay certainly routed it;
  when a connection ends, the unconfirmed ones are written again after the
  next registration, in their order, before anything sent later.
- A receiver drops a message whose (sender role, sender station, id) it saw
  among the last `dedup_size` (4096), counted in ``counters["duplicates"]``:
  callers that pass their own ids must keep them unique per sender.
- *Settle window*: for `settle` seconds (5) after each registration a
  ``no_route`` is retried (after `retry_delay`, 0.25 s, doubling), keeping the
  order per destination; after it, ``no_route`` comes out of `messages()` as a
  `ServerError`. ``settle=0`` disables it.
- Bound: the queue and the window hold at most `queue_size` messages. While
  not registered, `overflow` decides when full: ``"drop_oldest"`` (default;
  `send()` returns ``"queued"``), ``"drop_newest"`` (``"dropped"``) or
  ``"raise"`` (`QueueFull`), each discard counted in ``counters["dropped"]``.
  While registered, `send()` waits for room instead.
- `send_confirmed()` returns once its message is confirmed, raises the
  ``no_route`` (never retried) and `ConnectionLost` (never sent again).
- `messages()` / `receive()` yield `Received` and non-fatal `ServerError` in
  arrival order through a bounded inbox (`inbox_size`, oldest dropped,
  counted in ``counters["inbox_dropped"]``).
- Trust (protocol 1.1): every connection sends a ``cnonce``; a relay that does
  not prove it knows the client's key is dropped, its epochs and
  ``leader_changed`` ignored, and the next candidate tried. How far a
  server's word may move the epoch is in `relay.client.follow`.
- Receipts: `on_confirmed` is called with the id of every message the relay
  confirmed (in confirmation order; once per message), whether it came from
  `send()` or `send_confirmed()`: what a caller may count as acknowledged.
- Observability: `on_status` gets a `Status` at every transition; `state`,
  `leader`, `epoch`, `node`, `pending`, `unconfirmed` and `counters` can be
  read at any time. Exceptions: `relay.client.events`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from relay.client.discovery import Discovery, Leader

# Callers import the public names of the client_* modules from here.
from relay.client.events import (
    OVERFLOW_POLICIES,
    ClientClosed,
    ClientError,
    ConnectionLost,
    Counters,
    NoLeader,
    Overflow,
    QueueFull,
    Received,
    SendOutcome,
    ServerError,
    Status,
    StatusKind,
)
from relay.client.follow import (
    Follower,
    FollowerHooks,
    Redial,
)
from relay.client.inbox import Inbox
from relay.client.outbox import DEDUP_SIZE, QUEUED, RETRY_DELAY, SETTLE, Outbox, Outgoing
from relay.client.session import CONNECT_TIMEOUT, Session, SessionConfig, SessionOwner
from relay.wire.events import JSON_ROLES, KEEPALIVE_INTERVAL
from relay.wire.framing import DEFAULT_MAX_FRAME, encode_frame

log = logging.getLogger("stkrelay.client")

LEASE_POLL = 0.5


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
    (`relay.client.discovery.Discovery`). The client authenticates with `credential`
    (its station's, from ``relayctl credential STATION``) when given, else with
    the site `token`, and demands that the relay prove it knows that key
    (protocol 1.1). See the module docstring for the delivery, queue, backoff
    and reconnect policies.
    """

    def __init__(
        self,
        *,
        role: str,
        kmsn: str,
        station: str,
        token: str = "",
        discovery: Discovery,
        credential: str = "",
        queue_size: int = 1000,
        overflow: Overflow = "drop_oldest",
        keepalive: float = KEEPALIVE_INTERVAL,
        backoff: Redial | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        lease_poll: float = LEASE_POLL,
        inbox_size: int = 10_000,
        max_frame: int = DEFAULT_MAX_FRAME,
        settle: float = SETTLE,
        retry_delay: float = RETRY_DELAY,
        dedup_size: int = DEDUP_SIZE,
        on_status: Callable[[Status], None] | None = None,
        on_confirmed: Callable[[Any], None] | None = None,
    ) -> None:
        if role not in JSON_ROLES:
            raise ValueError(f"role must be one of {', '.join(sorted(JSON_ROLES))}, not {role!r}")
        if not (kmsn and station and (token or credential)):
            raise ValueError("kmsn, station and token (or credential) must not be empty")
        if overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}, not {overflow!r}")
        if queue_size < 1 or inbox_size < 1:
            raise ValueError("queue_size and inbox_size must be at least 1")
        if keepalive <= 0 or connect_timeout <= 0 or lease_poll <= 0:
            raise ValueError("keepalive, connect_timeout and lease_poll must be positive")
        self.role, self.kmsn, self.station = role, kmsn, station
        self.discovery = discovery
        self.queue_size, self.overflow = queue_size, overflow
        self.keepalive, self.silence = keepalive, 3 * keepalive
        self.backoff = backoff or Redial()
        self.connect_timeout, self.lease_poll = connect_timeout, lease_poll
        self.inbox_size, self.max_frame = inbox_size, max_frame
        self.on_status = on_status
        self.on_confirmed = on_confirmed
        self.counters = Counters()
        self.state: Literal["idle", StatusKind] = "idle"
        self.status: Status | None = None
        self._outbox = Outbox(queue_size, overflow, settle, retry_delay)
        self._inbox = Inbox(inbox_size, dedup_size, self.counters)
        key = credential or token  # the station's credential, when given, is the key we prove
        config = SessionConfig(role, kmsn, station, key, max_frame, connect_timeout, keepalive)
        owner = SessionOwner(
            self._outbox, self._inbox.deliver, self.counters, self._notify, self._registered, self._ended,
            self._confirmed,
        )  # fmt: skip
        connect = functools.partial(Session, config, owner)
        hooks = FollowerHooks(self._emit, self._notify, lambda: self._closed, self._count_unproven)
        self._follower = Follower(discovery, self.backoff, lease_poll, connect, hooks, f"{kmsn}/{station}")
        self._live: Session | None = None  # registered session
        self._closed = False
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -- public: what a caller can read at any time -------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def known_epoch(self) -> int | None:
        """The highest epoch seen (registrations, leases, leader_changed)."""
        return self._follower.known_epoch

    @property
    def last_reason(self) -> str:
        """Why the last attempt or session ended ("" before the first)."""
        return self._follower.last_reason

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
        """Messages waiting in the send queue (not written yet)."""
        return len(self._outbox.queue)

    @property
    def unconfirmed(self) -> int:
        """Messages written but not confirmed yet (they count against `queue_size` too)."""
        return len(self._outbox.window)

    # -- public: lifecycle -------------------------------------------------------------
    async def start(self, timeout: float | None = None) -> None:
        """Run the client; return once registered with a leader.

        Raises `Refused` on a definitive refusal before the first registration,
        `NoLeader` if `timeout` passes first (the client is then closed).
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        if not self._tasks:
            follower = self._follower
            self._tasks.append(asyncio.create_task(follower.run(), name=f"relay-client-{self.station}"))
            if self.discovery.lease is not None:
                self._tasks.append(asyncio.create_task(follower.poll_lease(), name="relay-client-lease"))
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
                if self._follower.fatal is not None:
                    raise self._follower.fatal
                if self._closed:
                    raise ClientClosed("the client is closed")
                live = self._live
                if live is not None and live.epoch is not None:
                    return live.epoch
                await self._changed.wait()

        async with asyncio.timeout(timeout):
            return await until()

    async def close(self) -> None:
        """Stop: close the connection, end `messages()`, discard what is still queued or unconfirmed."""
        if self._closed:
            return
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            await _cancel(task)
        gone = self._outbox.clear()
        for msg in gone:
            if msg.done is not None and not msg.done.done():
                msg.done.set_exception(ClientClosed("the client is closed"))
        self._inbox.close()
        self._emit("closed", reason=f"{len(gone)} unsent or unconfirmed messages discarded" if gone else "")

    async def __aenter__(self) -> RelayClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- public: traffic -----------------------------------------------------------------
    async def send(self, data: Any, *, to: str | None = None, id: Any = None) -> SendOutcome:
        """Send `data` (to station `to`; a commander must name one, or ``"*"``).

        `id` defaults to a fresh unique string. Returns ``"sent"`` (written to
        the relay; kept until confirmed), ``"queued"`` (written later: not
        registered, or held back during the settle window) or ``"dropped"``
        (outbox full, overflow="drop_newest"). While registered, waits for
        room in a full outbox. Raises `QueueFull` (overflow="raise"),
        `ClientClosed`, `ValueError` for a commander without `to`, and
        `relay.wire.framing.PayloadError` for data that is not JSON or too large.
        """
        return await self._admit(self._make(data, to, id, retry=True))

    async def send_confirmed(
        self, data: Any, *, to: str | None = None, id: Any = None, timeout: float = 5.0
    ) -> Any:
        """Send once registered and wait until the relay confirms it routed it; return the id used.

        Raises `ServerError` (e.g. ``no_route``, never retried) if the relay
        refused it, `TimeoutError`, or `ConnectionLost` (outcome unknown; the
        client will not send it again).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.wait_registered(timeout)
        msg = self._make(data, to, id, retry=False)
        done = msg.done = loop.create_future()
        try:
            async with asyncio.timeout_at(deadline):
                outcome = await self._admit(msg)
                if outcome == "dropped":
                    raise ConnectionLost("the connection ended and the outbox is full")
                await done
        finally:
            if self._outbox.withdraw(msg):
                self._notify()
        return msg.id

    def _make(self, data: Any, to: str | None, id: Any, *, retry: bool) -> Outgoing:
        if self._closed:
            raise ClientClosed("the client is closed")
        if self.role == "commander" and not to:
            raise ValueError("a commander's send needs to= (a station, or '*')")
        msg = self._outbox.make(data, to, id, retry=retry)
        frame = {"type": "send", "to": to, "data": data, "id": msg.id}
        encode_frame(frame, max_frame=self.max_frame)  # refuse now what could never be written
        return msg

    async def _admit(self, msg: Outgoing) -> SendOutcome:
        outbox = self._outbox
        while outbox.full and self._live is not None:
            await self._changed.wait()  # registered: confirmations make room within a round trip
            if self._closed:
                raise ClientClosed("the client is closed")
        if outbox.full:
            queued, discarded = outbox.overflow_admit(msg)
            if discarded is not None:
                self.counters.dropped += 1
                if discarded.done is not None and not discarded.done.done():
                    discarded.done.set_exception(QueueFull("discarded by the overflow policy"))
            if not queued:
                return "dropped"
        else:
            outbox.append(msg)
        live = self._live
        if live is not None:
            live.flush()
            if msg.phase != QUEUED and live.writer is not None:
                with contextlib.suppress(ConnectionError):
                    await live.writer.drain()  # backpressure; a dead connection is the reader's business
                return "sent"
        self.counters.queued += 1
        return "queued"

    async def ping(self, timeout: float = 5.0) -> float:
        """One keepalive round trip on the live connection, in seconds."""
        live = self._live
        if live is None:
            raise ConnectionLost("not registered")
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        live.keepalive(fut)
        async with asyncio.timeout(timeout):
            return await fut

    async def messages(self) -> AsyncIterator[Received | ServerError]:
        """Received messages and error frames, in order, until the client is closed."""
        while True:
            try:
                item = await self._inbox.get()
            except ClientClosed:
                return
            yield item

    async def receive(self, timeout: float | None = None) -> Received | ServerError:
        """The next item of `messages()`; `ClientClosed` once closed, `TimeoutError`."""
        return await self._inbox.get(timeout)

    # -- callbacks of the session and the follower ---------------------------------------
    def _registered(self, session: Session, reason: str) -> None:
        assert session.epoch is not None  # a registered session knows its epoch
        if self._follower.registered(session.epoch):
            self.counters.reconnects += 1
        self._live = session
        self._emit("registered", leader=session.leader, epoch=session.epoch, node=session.node, reason=reason)

    def _confirmed(self, msgs: list[Outgoing]) -> None:
        if self.on_confirmed is None:
            return
        for msg in msgs:
            try:
                self.on_confirmed(msg.id)
            except Exception:
                log.exception("relay client on_confirmed callback failed")

    def _ended(self, session: Session) -> None:
        if self._live is session:
            self._live = None
        self._notify()

    def _count_unproven(self) -> None:
        self.counters.unproven += 1

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
