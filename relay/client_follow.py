"""How a relay client finds the leader and follows it (DESIGN.md §9).

- Discovery (`relay.discovery`): signed lease file, else agents' HTTP API,
  else configured fallbacks. A ``leader_changed`` frame's address is used as a
  hint for the next attempts (up to `HINT_TRIES`) unless discovery knows a
  leader with an epoch at least as high (`choose_leader`).
- Registration sends the epoch the client believes in: the highest it has seen
  from registrations, ``leader_changed`` frames and valid leases (or the
  candidate's, if higher). A server with a lower epoch refuses with
  ``stale_epoch``: it is stale, and the client looks elsewhere.
- Following the leader: ``leader_changed``, a closed or reset socket, silence,
  ``not_leader``/``stale_epoch`` at registration, or (with a lease dir) a lease
  polled every `lease_poll` seconds that names a newer epoch or another node
  (`lease_says_move`) → reconnect, after a full-jitter exponential backoff
  delay (`Backoff`; the delay restarts from `initial` after each successful
  registration, and for each new target). A lease change seen while waiting
  cuts the wait short (to one `initial`-bounded jittered delay). The client
  never gives up while running, with one exception: before the *first*
  registration, a definitive refusal (`FINAL_REFUSALS`) stops it and `start()`
  raises `Refused`: a wrong token will not fix itself. After a first
  registration such refusals are reported (status ``refused``) and retried
  like any other failure.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elections.core.lease import LeaseRecord
from relay.client_session import Outcome, Session, max_epoch
from relay.discovery import Leader, LeaseFile
from relay.protocol import BAD_AUTH, BAD_JSON, BAD_MAGIC, BAD_REQUEST, FRAME_TOO_LARGE, WRONG_KMSN

if TYPE_CHECKING:
    from relay.client import RelayClient

log = logging.getLogger("stkrelay.client")

# Refusals that another attempt will not fix (before the first registration, they stop the client).
FINAL_REFUSALS = frozenset({BAD_AUTH, WRONG_KMSN, BAD_MAGIC, BAD_REQUEST, BAD_JSON, FRAME_TOO_LARGE})
HINT_TRIES = 3


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


# -- the loops -------------------------------------------------------------------------
class Follower:
    """The client's two tasks: the session loop (`run`) and the lease watcher (`watch_lease`)."""

    def __init__(self, client: RelayClient) -> None:
        self.client = client
        self.hint: Leader | None = None
        self.hint_tries = 0
        self.target: tuple[Any, ...] | None = None  # (node, epoch, address) of the last attempt
        self.wake = asyncio.Event()

    async def run(self) -> None:
        client = self.client
        attempt = 0
        last_target = None
        while not client._closed:
            try:
                outcome = await self._try_once()
            except Exception as exc:  # a bug must not end the client: log it, back off, go on
                log.exception("relay client %s/%s: attempt failed", client.kmsn, client.station)
                outcome = Outcome(False, f"internal error: {exc!r}")
            if outcome.refusal is not None and outcome.refusal is client._fatal:
                return
            if outcome.registered or self.target != last_target:
                attempt = 0  # a new leader: start the backoff afresh, it may just be coming up
            last_target = self.target
            client.last_reason = outcome.reason
            delay = client.backoff.delay(attempt)
            attempt += 1
            client._emit("reconnecting", epoch=client.known_epoch, reason=outcome.reason, delay=delay)
            await self._pause(delay)

    async def _try_once(self) -> Outcome:
        """Find the leader, then connect, register and serve until the session ends."""
        client = self.client
        leader = await self._next_leader()
        self.target = None if leader is None else (leader.node, leader.epoch, leader.address)
        if leader is None:
            return Outcome(False, f"no leader found ({client.discovery.describe()})")
        outcome = await Session(client, leader).run()
        refusal = outcome.refusal
        if refusal is not None:
            client._emit("refused", leader=leader, node=refusal.node, reason=outcome.reason)
            if refusal.code in FINAL_REFUSALS and not client._ever_registered:
                client._fatal = refusal  # stops the run loop; start() raises it
                client._notify()
        return outcome

    async def _next_leader(self) -> Leader | None:
        client = self.client
        found = await client.discovery.find()
        if found is not None and found.source == "lease":
            client.known_epoch = max_epoch(client.known_epoch, found.epoch)
        hint = self.hint
        if hint is not None:
            self.hint_tries += 1
            superseded = found is not None and choose_leader(hint, found) is found
            if superseded or self.hint_tries >= HINT_TRIES:
                self.hint = None
        return choose_leader(hint, found)

    def set_hint(self, leader: Leader) -> None:
        self.hint, self.hint_tries = leader, 0

    async def _pause(self, delay: float) -> None:
        """Wait `delay`, or less if the lease names a new leader meanwhile."""
        self.wake.clear()
        try:
            await asyncio.wait_for(self.wake.wait(), delay)
        except TimeoutError:
            return
        await asyncio.sleep(self.client.backoff.delay(0))  # still jittered: the whole pool saw the lease

    async def watch_lease(self) -> None:
        client = self.client
        lease = client.discovery.lease
        assert lease is not None
        seen: tuple[str, int] | None = None
        while not client._closed:
            await asyncio.sleep(client.lease_poll)
            try:
                seen = await self._check_lease(lease, seen)
            except Exception:  # keep watching whatever happened
                log.exception("relay client %s/%s: lease check failed", client.kmsn, client.station)

    async def _check_lease(self, lease: LeaseFile, seen: tuple[str, int] | None) -> tuple[str, int] | None:
        """One poll: move a registered session the lease outdates, or cut a backoff wait short."""
        client = self.client
        record = await lease.read_record()
        if record is None:
            return seen  # no evidence: nothing to act on
        client.known_epoch = max_epoch(client.known_epoch, record.epoch)
        key = (record.node, record.epoch)
        s = client._attempt
        if s is not None and s.registered and s.epoch is not None:
            reason = lease_says_move(record, s.epoch, s.node)
            if reason is not None:
                self.set_hint(Leader(record.ip, record.port, record.epoch, record.node, "lease"))
                log.info("relay client %s/%s: %s: moving", client.kmsn, client.station, reason)
                s.leave(reason)  # the reader sees EOF; the run loop reconnects
        elif key != seen:
            self.wake.set()  # waiting to retry: the lease names someone new, go now
        return key
