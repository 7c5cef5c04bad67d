"""The send side of a relay client: queue, unconfirmed window, settle-window retries.

Sans-I/O like `relay.wire.server_connection`: no sockets, no clock reads, no asyncio. The
client (`relay.client.session`) tells it the time, what it wrote, and how many
keepalives it sent and had answered on the live connection; the outbox says
what may be written now and what is confirmed.

Delivery is **at least once** across failovers; duplicates are possible after
one, and a receiving `relay.client.relay_client.RelayClient` suppresses them (same sender
and id among the last `DEDUP_SIZE`). In detail:

- Every message has an id: the caller's, or a fresh ``"<8 hex>-<n>"`` (a random
  prefix per client, then a counter), so that a ``no_route`` can name it and a
  receiver can recognize a second copy. A caller's own ids must therefore be
  unique per sender (among its last `DEDUP_SIZE` messages at least).
- A written message stays in the *unconfirmed window* until the relay has
  certainly routed it: the relay answers a keepalive while parsing it, after
  every frame written before it, and routes the sends of the same read right
  after, in the same step; any ``no_route`` for them follows that answer. So a
  message is *routed* once a keepalive sent after it is answered, and
  *confirmed* (no ``no_route`` can still come) once a keepalive sent after that
  answer arrived is answered too. The client sends a keepalive right after a
  burst of writes, and another on each answer while the window is not empty,
  but never while one is already unanswered: at most one extra keepalive in
  flight.
- When the connection ends, the window goes back into the queue, in the
  original send order, ahead of what was sent later; it is written again after
  the next registration. "Confirmed" means routed by a relay to the recipients
  registered there: a relay killed right after confirming may still lose what
  it had not yet handed to the kernel.
- The queue and the window together hold at most `size` messages. While not
  registered, a full outbox applies the overflow policy (``drop_oldest``
  discards the oldest message, ``drop_newest`` the new one, ``raise`` raises
  `QueueFull`); while registered it empties by itself, and `send()` waits for
  room instead (backpressure, like a socket's drain: acknowledgements take a
  round trip; a relay that stopped answering is given up after the keepalive
  silence, and then the policy applies).
- *Settle window*: after each registration, for `settle` seconds, a recipient
  may not be back yet. A ``no_route`` received in that window puts the message
  back into the queue, to be written again after `retry_delay` (doubling at
  each retry, but never later than the end of the window: the last retry's
  ``no_route`` comes after it and is surfaced). To keep the order per
  destination (``to``), only one message per destination is written until one
  to that destination is confirmed in this session (the *probe*); the others
  wait behind it, and behind a message waiting to be retried. Outside the
  window nothing is held back and a ``no_route`` is surfaced at once;
  ``settle=0`` turns all of this off. Messages of `send_confirmed()`
  (``retry=False``) are never retried, and never carried over to another
  connection.
"""

from __future__ import annotations

import math
import secrets
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

from relay.client.events import OVERFLOW_POLICIES, Overflow, QueueFull

if TYPE_CHECKING:
    import asyncio

SETTLE = 5.0
RETRY_DELAY = 0.25
DEDUP_SIZE = 4096

QUEUED, WRITTEN, ROUTED = 0, 1, 2  # Outgoing.phase


class IdSource:
    """Message ids unique to one client: ``"<random 8 hex>-<counter>"``."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = secrets.token_hex(4) if prefix is None else prefix
        self._count = count(1)

    def next(self) -> str:
        return f"{self.prefix}-{next(self._count)}"


@dataclass(eq=False)
class Outgoing:
    """One message on its way; `seq` is its place in the client's send order."""

    data: Any
    to: str | None
    id: Any
    retry: bool = True  # False: send_confirmed(), which reports no_route and connection loss itself
    done: asyncio.Future[None] | None = None  # send_confirmed()'s waiter
    seq: int = 0
    phase: int = QUEUED
    mark: int = 0  # the count of answered keepalives that moves it to its next phase
    attempts: int = 0  # settle-window retries so far
    not_before: float = 0.0  # retry: not written before this time


class Outbox:
    """Queue (not written yet, in send order) + unconfirmed window (written, in write order)."""

    def __init__(
        self,
        size: int,
        overflow: Overflow = "drop_oldest",
        settle: float = SETTLE,
        retry_delay: float = RETRY_DELAY,
        ids: IdSource | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("the outbox size must be at least 1")
        if overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}, not {overflow!r}")
        if settle < 0 or retry_delay <= 0:
            raise ValueError("settle must be >= 0 and retry_delay > 0")
        self.size, self.overflow = size, overflow
        self.settle, self.retry_delay = settle, retry_delay
        self.ids = ids or IdSource()
        self.queue: deque[Outgoing] = deque()
        self.window: deque[Outgoing] = deque()
        self.settle_until = -math.inf  # end of the live session's settle window
        self.reachable: set[str | None] = set()  # destinations confirmed in this session
        self.probing: dict[str | None, Outgoing] = {}  # destination -> its probe in flight
        self._seq = count(1)

    def __len__(self) -> int:
        return len(self.queue) + len(self.window)

    @property
    def full(self) -> bool:
        return len(self) >= self.size

    def make(self, data: Any, to: str | None, id: Any = None, *, retry: bool = True) -> Outgoing:
        return Outgoing(data, to, self.ids.next() if id is None else id, retry)

    # -- admission ------------------------------------------------------------------
    def append(self, msg: Outgoing) -> None:
        """Queue `msg` (the caller made room); it takes the next place in the send order."""
        msg.seq, msg.phase = next(self._seq), QUEUED
        self.queue.append(msg)

    def overflow_admit(self, msg: Outgoing) -> tuple[bool, Outgoing | None]:
        """Apply the overflow policy to a full outbox: (was `msg` queued, the message discarded).

        Raises `QueueFull` for ``overflow="raise"`` (nothing changes).
        """
        if not self.full:
            self.append(msg)
            return True, None
        if self.overflow == "raise":
            raise QueueFull(f"{len(self)} messages already in the outbox (bound {self.size})")
        if self.overflow == "drop_newest":
            return False, msg
        oldest = self._oldest()
        self.withdraw(oldest)
        self.append(msg)
        return True, oldest

    def _oldest(self) -> Outgoing:
        candidates = [q[0] for q in (self.queue, self.window) if q]
        return min(candidates, key=lambda m: m.seq)

    def withdraw(self, msg: Outgoing) -> bool:
        """Forget `msg` wherever it is; False if it was not there."""
        for place in (self.queue, self.window):
            try:
                place.remove(msg)
            except ValueError:
                continue
            if self.probing.get(msg.to) is msg:
                del self.probing[msg.to]
            return True
        return False

    def clear(self) -> list[Outgoing]:
        gone = [*self.window, *self.queue]
        self.queue.clear()
        self.window.clear()
        self.probing.clear()
        return gone

    # -- the live session -------------------------------------------------------------
    def open(self, now: float) -> None:
        """A session registered: its settle window starts; pending retries may go at once."""
        self.settle_until = now + self.settle if self.settle > 0 else -math.inf
        self.reachable.clear()
        self.probing.clear()
        for msg in self.queue:
            msg.not_before, msg.attempts = 0.0, 0

    def settling(self, now: float) -> bool:
        return now < self.settle_until

    def take(self, now: float) -> list[Outgoing]:
        """Remove and return, in send order, what may be written now (see the module doc)."""
        if not self.queue:
            return []
        settling = self.settling(now)
        out: list[Outgoing] = []
        keep: deque[Outgoing] = deque()
        held: set[str | None] = set()  # destinations with an earlier message still waiting
        for msg in self.queue:
            to = msg.to
            if to in held or msg.not_before > now:
                held.add(to)
                keep.append(msg)
                continue
            if settling and to not in self.reachable:
                held.add(to)
                if to in self.probing:
                    keep.append(msg)
                    continue
                self.probing[to] = msg
            out.append(msg)
        self.queue = keep
        return out

    def written(self, msg: Outgoing, mark: int) -> None:
        """`msg` was written; `mark` = keepalives sent so far on this connection + 1."""
        msg.phase, msg.mark = WRITTEN, mark
        self.window.append(msg)

    def acked(self, acked: int, sent: int) -> list[Outgoing]:
        """The `acked`-th keepalive of this connection was answered (`sent` sent so far).

        Returns the messages confirmed by it, in write order. The window is a
        run of routed messages followed by written ones, each in mark order.
        """
        confirmed: list[Outgoing] = []
        window = self.window
        while window and window[0].phase == ROUTED and window[0].mark <= acked:
            msg = window.popleft()
            confirmed.append(msg)
            if self.probing.get(msg.to) is msg:
                del self.probing[msg.to]
                self.reachable.add(msg.to)
        for msg in window:
            if msg.phase == ROUTED:
                continue
            if msg.mark > acked:
                break
            msg.phase, msg.mark = ROUTED, sent + 1  # needs a keepalive sent after this answer
        return confirmed

    def no_route(self, id: Any, now: float) -> tuple[Outgoing | None, bool]:
        """A ``no_route`` naming `id`: (the unconfirmed message it is about, or None; retried?)."""
        msg = next((m for m in self.window if m.id == id), None)
        if msg is None:
            return None, False
        self.window.remove(msg)
        if self.probing.get(msg.to) is msg:
            del self.probing[msg.to]
        self.reachable.discard(msg.to)  # gone, or never there: probe again while settling
        if not (msg.retry and self.settling(now)):
            return msg, False
        delay = self.retry_delay * 2**msg.attempts
        msg.attempts += 1
        msg.not_before = min(now + delay, self.settle_until)
        msg.phase = QUEUED
        self._merge([msg])
        return msg, True

    def lost(self) -> tuple[int, list[Outgoing]]:
        """The connection ended: the window goes back into the queue, in send order.

        Returns (how many went back, the `retry=False` messages withdrawn instead:
        their `done` must fail).
        """
        withdrawn = [m for m in (*self.window, *self.queue) if not m.retry]
        back = [m for m in self.window if m.retry]
        self.window.clear()
        self.queue = deque(m for m in self.queue if m.retry)
        for msg in back:
            msg.phase, msg.mark = QUEUED, 0
        self._merge(back)
        self.settle_until = -math.inf
        self.reachable.clear()
        self.probing.clear()
        return len(back), withdrawn

    def next_wake(self, now: float) -> float | None:
        """When `take()` may have something new to give without any other event."""
        if not self.queue:
            return None
        times = [m.not_before for m in self.queue if m.not_before > now]
        if self.settling(now):
            times.append(self.settle_until)
        return min(times) if times else None

    def _merge(self, msgs: Iterable[Outgoing]) -> None:
        msgs = list(msgs)
        if msgs:
            self.queue = deque(sorted((*self.queue, *msgs), key=lambda m: m.seq))
