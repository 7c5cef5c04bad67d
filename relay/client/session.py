"""One connection of a relay client: connect, register, pump bytes, keepalives, confirmations.

An asyncio shell over the sans-I/O `relay.wire.client_connection.ClientConnection` (built
with ``keepalive_acks=True``) and the client's `relay.client.outbox.Outbox`. A
`Session` lives from the TCP connect to the end of that connection; the
`relay.client.follow.Follower` makes a new one for each attempt.

Interface: `Session(config, owner, leader, epoch)`, then `await run()`, which
returns an `SessionEnd`. `config` (`SessionConfig`) is the client's identity and
timing; `owner` (`SessionOwner`) is all a session may touch of its client:
the outbox, the inbox's `deliver`, the counters and three callbacks
(`changed`, `registered`, `ended`). A session imports nothing of the client.

- Keepalive every `keepalive` seconds once registered; the connection is
  considered dead after 3 × `keepalive` without a byte from the server.
- Keepalive answers also confirm delivery (see `relay.client.outbox`): right after a
  burst of writes the session sends a keepalive unless one is unanswered, and
  on each answer another one while the unconfirmed window is not empty.
- When the session ends, whatever it left unconfirmed goes back into the
  client's queue, for the next session.
- Protocol 1.1: every session sends a fresh ``cnonce`` and believes nothing
  from a server that does not prove it knows the key: a ``registered``
  without a valid ``sauth``, or a ``leader_changed`` before the proof, ends
  the session with `SessionEnd.unproven` (and no `SessionEnd.moved`); the follower
  then avoids that address for a while (`relay.client.follow`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from relay.client.discovery import Leader
from relay.client.events import ConnectionLost, Counters, Received, Refused, ServerError
from relay.client.outbox import Outbox, Outgoing
from relay.wire.auth import new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import ErrorReceived, Hello, KeepaliveAck, LeaderChanged, Message, Registered
from relay.wire.framing import NO_ROUTE, ProtocolError, State

log = logging.getLogger("stkrelay.client")

CONNECT_TIMEOUT = 5.0
READ_SIZE = 1 << 16


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Who a client registers as, and its timing; the same for each of its sessions."""

    role: str
    kmsn: str
    station: str
    token: str  # the key this client authenticates with: the site token or its station credential
    max_frame: int
    connect_timeout: float
    keepalive: float  # a keepalive every `keepalive` s; dead after 3 x `keepalive` of silence

    @property
    def silence(self) -> float:
        return 3 * self.keepalive


@dataclass(frozen=True, slots=True)
class SessionOwner:
    """What a session may touch of the client that runs it."""

    outbox: Outbox
    deliver: Callable[[Received | ServerError], None]  # into the client's inbox
    counters: Counters
    changed: Callable[[], None]  # wake the client's waiters (room in the outbox, a settled message)
    registered: Callable[[Session, str], None]  # registered, queued messages flushed (the str says how many)
    ended: Callable[[Session], None]  # over; its unconfirmed messages are back in the queue
    confirmed: Callable[[list[Outgoing]], None] | None = None  # the messages a keepalive answer confirmed


@dataclass
class SessionEnd:
    """How a session ended: had it registered, why it ended, the refusal if any,
    the ``leader_changed`` that ended it, if one did (from a proven server only),
    and whether the server failed to prove it knows the key (`unproven`)."""

    registered: bool
    reason: str
    refusal: Refused | None = None
    moved: LeaderChanged | None = None
    unproven: bool = False


class Session:
    """One connection to `leader`, registering with `epoch` (the one the client believes in)."""

    def __init__(self, config: SessionConfig, owner: SessionOwner, leader: Leader, epoch: int | None) -> None:
        self.config, self.owner, self.leader = config, owner, leader
        self.believed = epoch
        self.addr = f"{leader.ip}:{leader.port}"
        self.conn: ClientConnection | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.registered = False
        self.node: str | None = None
        self.epoch: int | None = None
        self.session = ""
        self.last_rx = self.deadline = self.next_keepalive = 0.0
        self.acks: deque[tuple[float, asyncio.Future[float] | None]] = deque()
        self.ka_sent = self.ka_acked = 0  # keepalives sent / answered on this connection
        self.confirm_pending = False  # a confirmation keepalive is scheduled for after this burst
        self.switch = ""  # set when the client itself ends the session to move elsewhere
        self._left: asyncio.Event | None = None  # set by `leave()`: a connect under way gives up at once

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    @property
    def writable(self) -> bool:
        return (
            self.registered
            and self.conn is not None
            and self.conn.state is State.OPEN
            and self.writer is not None
            and not self.writer.is_closing()
        )

    # -- lifetime --------------------------------------------------------------------
    async def run(self) -> SessionEnd:
        c = self.config
        self._left = self._left or asyncio.Event()
        try:
            reader, self.writer = await self._connect()
        except TimeoutError:
            return SessionEnd(
                False, self.switch or f"connecting to {self.addr} took over {c.connect_timeout:g} s"
            )
        except OSError as exc:
            return SessionEnd(False, f"cannot connect to {self.addr}: {exc.strerror or exc}")
        if self.switch:  # left while connecting: a connect that just succeeded is not used
            self.writer.close()
            return SessionEnd(False, self.switch)
        self.conn = ClientConnection(
            role=c.role,
            kmsn=c.kmsn,
            station=c.station,
            token=c.token,
            epoch=self.believed,
            max_frame=c.max_frame,
            keepalive_acks=True,
            cnonce=new_nonce(),
        )
        now = self.loop.time()
        self.last_rx, self.deadline = now, now + c.connect_timeout
        try:
            outcome = await self._pump(reader)
        except (ConnectionError, OSError) as exc:
            outcome = SessionEnd(self.registered, f"connection to {self.addr} lost: {exc.strerror or exc}")
        finally:
            self._end()
        if self.switch:
            outcome.reason = self.switch
        return outcome

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The TCP connect, within `connect_timeout`, given up at once by `leave()`: a host
        whose cable is cut answers no SYN, and the lease may name another leader meanwhile."""
        assert self._left is not None
        connect = asyncio.ensure_future(asyncio.open_connection(self.leader.ip, self.leader.port))
        left = asyncio.ensure_future(self._left.wait())
        try:
            await asyncio.wait({connect, left}, timeout=self.config.connect_timeout,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            left.cancel()
            if not connect.done():
                connect.add_done_callback(_drop_connection)
                connect.cancel()
        if not connect.done():
            raise TimeoutError
        return connect.result()

    def leave(self, reason: str) -> None:
        """End this session to move elsewhere: a connect under way is given up, a
        connection is closed (the reader sees EOF), registered or not."""
        self.switch = reason
        if self._left is not None:
            self._left.set()
        if self.writer is not None:
            self.writer.close()

    def _end(self) -> None:
        owner = self.owner
        for _, fut in self.acks:
            if fut is not None and not fut.done():
                fut.set_exception(ConnectionLost("the connection ended before the keepalive answer"))
        self.acks.clear()
        if self.registered:
            back, withdrawn = owner.outbox.lost()
            owner.counters.resent += back
            for msg in withdrawn:
                _settle(msg, ConnectionLost("the connection ended before the relay confirmed the message"))
            if back:
                c = self.config
                log.info("relay client %s/%s: %d unconfirmed messages to send again", c.kmsn, c.station, back)
        if self.writer is not None:
            self.writer.close()
        owner.ended(self)

    async def _pump(self, reader: asyncio.StreamReader) -> SessionEnd:
        c, outbox = self.config, self.owner.outbox
        assert self.conn is not None
        while True:
            now = self.loop.time()
            if not self.registered:
                wait = self.deadline - now
                if wait <= 0:
                    return SessionEnd(
                        False, f"{self.addr} did not register us within {c.connect_timeout:g} s"
                    )
            else:
                if now - self.last_rx >= c.silence:
                    return SessionEnd(True, f"{self.addr} silent for {now - self.last_rx:.1f} s")
                if now >= self.next_keepalive:
                    self.keepalive(None)
                self.flush(now)  # retries that came due, holds that the settle window's end lifted
                wake = min(self.next_keepalive, self.last_rx + c.silence)
                outbox_wake = outbox.next_wake(now)
                if outbox_wake is not None:
                    wake = min(wake, outbox_wake)
                wait = wake - now
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    chunk = await reader.read(READ_SIZE)
            except TimeoutError:
                continue
            if not chunk:
                self.conn.receive_eof()
                return SessionEnd(self.registered, f"{self.addr} closed the connection")
            self.last_rx = self.loop.time()
            self.conn.receive_data(chunk)
            outcome = self._on_events(self.conn.events_received())
            self.write()
            if outcome is not None:
                return outcome
            if self.conn.close_expected():
                return SessionEnd(self.registered, f"{self.addr} ended the session")

    # -- output ------------------------------------------------------------------------
    def write(self) -> None:
        assert self.conn is not None and self.writer is not None
        out = self.conn.data_to_send()
        if out and not self.writer.is_closing():
            self.writer.write(out)

    def flush(self, now: float | None = None) -> int:
        """Write what the outbox lets go now; return how many messages."""
        if not self.writable:
            return 0
        outbox = self.owner.outbox
        assert self.conn is not None
        msgs = outbox.take(self.loop.time() if now is None else now)
        if not msgs:
            return 0
        mark = self.ka_sent + 1
        for msg in msgs:
            self.conn.send_message(msg.data, to=msg.to, id=msg.id)
            outbox.written(msg, mark)
        self.owner.counters.sent += len(msgs)
        self.write()
        if not self.confirm_pending:  # one keepalive after the whole burst, not one per message
            self.confirm_pending = True
            self.loop.call_soon(self._confirm)
        return len(msgs)

    def _confirm(self) -> None:
        self.confirm_pending = False
        if self.writable and self.owner.outbox.window and self.ka_sent == self.ka_acked:
            self.keepalive(None)

    def keepalive(self, fut: asyncio.Future[float] | None) -> None:
        assert self.conn is not None
        now = self.loop.time()
        self.conn.keepalive()
        self.ka_sent += 1
        self.acks.append((now, fut))
        self.next_keepalive = now + self.config.keepalive
        self.write()

    # -- input -------------------------------------------------------------------------
    def _on_events(self, events: list) -> SessionEnd | None:
        owner = self.owner
        for event in events:
            if isinstance(event, Message):
                owner.counters.received += 1
                owner.deliver(Received.from_frame(event.obj))
            elif isinstance(event, KeepaliveAck):
                self._on_ack()
            elif isinstance(event, Hello):
                self.node = event.node
            elif isinstance(event, Registered):
                self._registered(event)
            elif isinstance(event, ErrorReceived):
                if not self.registered:
                    refusal = Refused(event.code, event.message, self.leader, self.node)
                    return SessionEnd(False, str(refusal), refusal)
                self._on_error(event)
            elif isinstance(event, LeaderChanged):
                said = f"epoch={event.epoch} {event.ip}:{event.port}"
                if not event.proven:
                    reason = f"{self.addr} sent leader_changed ({said}) without proving itself: ignored"
                    return SessionEnd(self.registered, reason, unproven=True)
                reason = f"{self.addr} says the leader changed: {said}"
                return SessionEnd(self.registered, reason, moved=event)  # the follower acts on it
            elif isinstance(event, ProtocolError):
                if self.conn is not None and self.conn.unproven:
                    reason = f"{self.addr} did not prove that it knows our key: not a relay we trust"
                    return SessionEnd(False, reason, unproven=True)
                return SessionEnd(
                    self.registered, f"{self.addr} broke the protocol: {event.code} ({event.message})"
                )
        return None

    def _registered(self, event: Registered) -> None:
        outbox = self.owner.outbox
        now = self.loop.time()
        self.registered, self.epoch, self.session = True, event.epoch, event.session
        self.next_keepalive = now + self.config.keepalive
        outbox.open(now)
        waiting = len(outbox.queue)
        flushed = self.flush(now)  # in order, before any later send() can write
        reason = ""
        if waiting:
            reason = f"flushed {flushed} queued messages"
            if flushed < waiting:
                reason = f"flushed {flushed} of {waiting} queued messages; the rest follow their probes"
        self.owner.registered(self, reason)  # the client's live session from now on

    def _on_ack(self) -> None:
        owner = self.owner
        self.ka_acked += 1
        if self.acks:
            sent_at, fut = self.acks.popleft()
            if fut is not None and not fut.done():
                fut.set_result(self.loop.time() - sent_at)
        confirmed = owner.outbox.acked(self.ka_acked, self.ka_sent)
        if confirmed:
            owner.counters.confirmed += len(confirmed)
            for msg in confirmed:
                _settle(msg, None)
            if owner.confirmed is not None:
                owner.confirmed(confirmed)
            owner.changed()  # room in the outbox for a waiting send()
            self.flush()  # a confirmed probe lets its destination's queue go
        if owner.outbox.window and self.ka_sent == self.ka_acked and self.writable:
            self.keepalive(None)

    def _on_error(self, event: ErrorReceived) -> None:
        owner = self.owner
        owner.counters.errors += 1
        error = ServerError(event.code, event.message, event.id)
        if event.code == NO_ROUTE and event.id is not None:
            msg, retried = owner.outbox.no_route(event.id, self.loop.time())
            if retried:
                owner.counters.retried += 1
                return  # written again after its delay: see the pump's wake-up
            if msg is not None:
                owner.changed()
                if msg.done is not None:
                    _settle(msg, error)  # claimed by send_confirmed(): raised there, not yielded
                    return
        owner.deliver(error)


def _drop_connection(connect: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    """A connect given up: whatever it came to is dropped (a late connection closed, an error read)."""
    if connect.cancelled() or connect.exception() is not None:
        return
    connect.result()[1].close()


def _settle(msg: Outgoing, error: Exception | None) -> None:
    """Resolve `msg`'s send_confirmed() waiter, if it has one still waiting."""
    if msg.done is not None and not msg.done.done():
        if error is None:
            msg.done.set_result(None)
        else:
            msg.done.set_exception(error)
