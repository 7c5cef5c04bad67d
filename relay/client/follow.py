"""How a relay client finds the leader and follows it (docs/design.md §9).

- Discovery (`relay.client.discovery`): signed lease file, else agents' HTTP API,
  else configured fallbacks. A ``leader_changed`` frame's address is used as a
  hint for the next attempts (up to `HINT_TRIES`) unless discovery knows a
  leader with an epoch at least as high (`choose_leader`). A planned
  switchover's ``leader_changed`` names the target before its relay listens:
  for `HINT_FRESH` seconds after one, its address is dialed at once and again
  every `HINT_RETRY` (jittered) while it does not answer yet, without a look
  at discovery (a lease change seen meanwhile shortens nothing and delays
  nothing beyond that); then as above.
- Registration sends the epoch the client believes in (`known_epoch`). A
  server with a lower epoch refuses with ``stale_epoch``: it is stale, and the
  client looks elsewhere.
- **Whose word raises that epoch** (someone hostile is on the LAN: a rogue
  fallback address, an unsigned ``/api/v1/leader`` answer, a man in the
  middle). If a rogue could make the client believe in epoch 10^15, the real
  leader would refuse it with ``stale_epoch`` forever. So:

  1. *Evidence* (`confirmed`): a lease whose signature verifies with the pool
     key, and the epoch of a ``registered`` frame whose ``sauth`` proved the
     server knows our key (the proof covers that epoch). Only these raise
     `confirmed`, without bound.
  2. *Claims*: a ``leader_changed`` on a proven session. Frames after the
     proof are not signed one by one (a man in the middle could inject one),
     so its epoch raises `known_epoch` only up to `confirmed` +
     `MAX_EPOCH_JUMP`; the claim is dropped when a valid lease is read (the
     signed lease always wins) or when a server refuses us with
     ``stale_epoch`` while we believed a claim. The fencing that matters is
     the server's own gate; the client's epoch is the second lock.
  3. *Hearsay*: everything else (an agent's unsigned answer, a fallback, a
     ``hello``, a ``leader_changed`` from a server that proved nothing).
     It never raises the epoch; an agent's epoch only orders candidates.

  A server that fails to prove itself (``registered`` without a valid
  ``sauth``, ``leader_changed`` before the proof) is dropped and its address
  avoided for `DISTRUST_FOR` seconds: discovery offers the next candidate
  (never skipping the signed lease's).
- Following the leader: ``leader_changed``, a closed or reset socket, silence,
  ``not_leader``/``stale_epoch`` at registration, or (with a lease dir) a lease
  polled every `lease_poll` seconds that names a newer epoch or another node
  (`lease_says_move`) → reconnect, after a full-jitter exponential backoff
  (an attempt still under way at a leader the lease has replaced, connecting or
  waiting for its hello, is given up at once: a frozen host's kernel accepts and
  never answers, a cut one answers no SYN, for up to `connect_timeout`)
  delay (`Redial`; the delay restarts from `initial` after each successful
  registration, and for each new target). A leader the signed lease names
  above the epoch last registered with is a relay coming up (its gate opens,
  its standby listens, within a second or so of its lease): for `COMING_UP`
  seconds from the first attempt at it, the delay stays at the first step
  (`coming_up`), instead of growing to seconds while it starts to listen. A lease change seen while waiting
  cuts the wait short (to one `initial`-bounded jittered delay). The client
  never gives up while running, with one exception: before the *first*
  registration, a definitive refusal (`FINAL_REFUSALS`) stops it and `start()`
  raises `Refused`: a wrong token will not fix itself. After a first
  registration such refusals are reported (status ``refused``) and retried
  like any other failure.

Interface: `Follower(discovery, backoff, lease_poll, connect, hooks, name)`
runs two tasks, `run()` and `poll_lease()`. `connect(leader, epoch)` makes
the next `relay.client.session.Session`; `hooks` (`FollowerHooks`) are the
three callbacks it needs from its client, which tells it of each
registration (`registered()`). It owns what following decides: the epoch
believed in (`known_epoch`, from `confirmed` and `claim`), the avoided
addresses (`distrusted`), the hint, the current attempt (`session`), the
definitive refusal (`fatal`) and `last_reason`. The pure decisions
(`choose_leader`, `lease_says_move`, `Redial`) are plain functions and data.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elections.core.lease import LeaseRecord
from relay.client.discovery import Discovery, Leader, LeaseFile
from relay.client.events import Refused
from relay.client.session import Session, SessionEnd
from relay.wire.framing import (
    BAD_AUTH,
    BAD_JSON,
    BAD_MAGIC,
    BAD_REQUEST,
    FRAME_TOO_LARGE,
    STALE_EPOCH,
    WRONG_KMSN,
)
from stkhost.retry import Backoff

log = logging.getLogger("stkrelay.client")

# Refusals that another attempt will not fix (before the first registration, they stop the client).
FINAL_REFUSALS = frozenset({BAD_AUTH, WRONG_KMSN, BAD_MAGIC, BAD_REQUEST, BAD_JSON, FRAME_TOO_LARGE})
HINT_TRIES = 3
HINT_FRESH = 0.5  # seconds a leader_changed's address is dialed first, and soon again, before discovery
HINT_RETRY = 0.01  # at most this long between dials of a fresh hint (a relay coming up), jittered
MAX_EPOCH_JUMP = 16  # how far above the confirmed epoch a proven session's leader_changed may lead us
DISTRUST_FOR = 15.0  # seconds an address that failed to prove itself is skipped by discovery
# Seconds a leader newly named by the signed lease is redialled at the backoff's first step (uniform
# within `initial`): a relay coming up listens once its gate opens, ~0.1-1 s after its lease (a pool
# of two's claim may wait D, docs/serving-right.md W5); its refused connects cost it nothing.
COMING_UP = 3.0


@dataclass
class Redial:
    """A client's waits between attempts, full jitter: attempt n waits uniform(0, cap(n)),
    the caps exponential by the project's one `stkhost.retry.Backoff`."""

    initial: float = 0.1
    maximum: float = 5.0
    factor: float = 2.0
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if not (0 < self.initial <= self.maximum and self.factor >= 1):
            raise ValueError("backoff needs 0 < initial <= maximum and factor >= 1")
        self._caps = Backoff(tries=1 << 30, first=self.initial, factor=self.factor, cap=self.maximum)

    def cap(self, attempt: int) -> float:
        return self._caps.delay(min(attempt, 64))

    def delay(self, attempt: int) -> float:
        return self.rng.uniform(0, self.cap(attempt))


# -- pure decisions ------------------------------------------------------------------
def max_epoch(*epochs: int | None) -> int | None:
    known = [e for e in epochs if e is not None]
    return max(known) if known else None


def claimed_epoch(confirmed: int | None, claim: int | None) -> int | None:
    """What a ``leader_changed`` claim may add to the `confirmed` epoch: at most `MAX_EPOCH_JUMP`."""
    if claim is None or confirmed is None:
        return None  # nothing proven to measure the jump from: hearsay
    return min(claim, confirmed + MAX_EPOCH_JUMP) if claim > confirmed else None


def choose_leader(hint: Leader | None, found: Leader | None) -> Leader | None:
    """The hint (from ``leader_changed``) wins only if it is newer than what discovery found."""
    if hint is None or found is None:
        return found or hint
    if hint.epoch is not None and (found.epoch is None or hint.epoch > found.epoch):
        return hint
    return found


def coming_up(leader: Leader | None, registered_epoch: int | None) -> bool:
    """A leader the signed lease names above the epoch this client last registered with (or
    before its first registration): its relay may be starting to listen now."""
    if leader is None or leader.source != "lease" or leader.epoch is None:
        return False
    return registered_epoch is None or leader.epoch > registered_epoch


def lease_says_move(record: LeaseRecord, epoch: int, node: str | None) -> str | None:
    """Why the lease tells a client registered at (`epoch`, `node`) to move, or None."""
    if record.epoch > epoch:
        return f"the lease names {record.node} epoch {record.epoch}, newer than epoch {epoch}"
    if record.epoch == epoch and node is not None and record.node != node:
        return f"the lease names {record.node}, not {node}, at epoch {epoch}"
    return None


# -- the loops -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FollowerHooks:
    """What a `Follower` needs from its client."""

    status: Callable[..., None]  # a transition: status(kind, **Status fields)
    changed: Callable[[], None]  # wake the client's waiters (`fatal` was set)
    closed: Callable[[], bool]  # the client was closed: stop
    unproven: Callable[[], None] = lambda: None  # a server failed the authenticated handshake (counted)


class Follower:
    """The client's two tasks: the session loop (`run`) and the lease poller (`poll_lease`)."""

    def __init__(
        self,
        discovery: Discovery,
        backoff: Redial,
        lease_poll: float,
        connect: Callable[[Leader, int | None], Session],
        hooks: FollowerHooks,
        name: str,
    ) -> None:
        self.discovery, self.backoff, self.lease_poll = discovery, backoff, lease_poll
        self.connect, self.hooks, self.name = connect, hooks, name
        self.confirmed: int | None = (
            None  # the highest epoch with evidence: signed lease, proven registration
        )
        self.claim: int | None = None  # a proven session's leader_changed, bounded (see the module docstring)
        self.distrusted: dict[tuple[str, int], float] = {}  # address -> until (loop time)
        self.session: Session | None = None  # the attempt under way
        self.fatal: Refused | None = None  # a definitive refusal before the first registration
        self.ever_registered = False
        self.last_reason = ""
        self.hint: Leader | None = None
        self.hint_tries = 0
        self.hint_until = float("-inf")  # loop time until which a leader_changed's hint is fresh
        self.target: tuple[Any, ...] | None = None  # (node, epoch, address) of the last attempt
        self.registered_epoch: int | None = None  # the epoch of the last registration
        # (target, loop time of the first attempt at it) of a leader coming up (`coming_up`)
        self.newly_named: tuple[tuple[Any, ...], float] | None = None
        self.wake = asyncio.Event()

    @property
    def known_epoch(self) -> int | None:
        """The epoch believed in: the confirmed one, or a bounded claim above it."""
        return max_epoch(self.confirmed, self.claim)

    def saw_epoch(self, epoch: int | None) -> None:
        """Evidence of `epoch` (a proven registration, a signed lease)."""
        self.confirmed = max_epoch(self.confirmed, epoch)
        if self.claim is not None and self.confirmed is not None and self.claim <= self.confirmed:
            self.claim = None

    def saw_lease(self, epoch: int) -> None:
        """A validly signed lease: evidence, and it outranks any claim."""
        self.claim = None
        self.saw_epoch(epoch)

    def registered(self, epoch: int) -> bool:
        """A session registered at `epoch` (proven); True if an earlier one had (a reconnect)."""
        again, self.ever_registered = self.ever_registered, True
        self.registered_epoch = epoch
        self.saw_epoch(epoch)
        return again

    def distrust(self, address: tuple[str, int]) -> None:
        now = asyncio.get_running_loop().time()
        self.distrusted[address] = now + DISTRUST_FOR
        if self.hint is not None and self.hint.address == address:
            self.hint = None

    def avoided(self) -> set[tuple[str, int]]:
        now = asyncio.get_running_loop().time()
        self.distrusted = {a: until for a, until in self.distrusted.items() if until > now}
        return set(self.distrusted)

    async def run(self) -> None:
        hooks = self.hooks
        attempt = 0
        last_target = None
        while not hooks.closed():
            try:
                outcome = await self._try_once()
            except Exception as exc:  # a bug must not end the client: log it, back off, go on
                log.exception("relay client %s: attempt failed", self.name)
                outcome = SessionEnd(False, f"internal error: {exc!r}")
            if outcome.refusal is not None and outcome.refusal is self.fatal:
                return
            if outcome.registered or self.target != last_target:
                attempt = 0  # a new leader: start the backoff afresh, it may just be coming up
            last_target = self.target
            self.last_reason = outcome.reason
            if self.hint_fresh():  # a planned switchover named the target: go now, again soon
                delay = self.backoff.rng.uniform(0, HINT_RETRY)
            elif not outcome.registered and self.still_coming_up():
                delay = self.backoff.delay(0)  # its relay is starting: the first step, not a growing one
            else:
                delay = self.backoff.delay(attempt)
                attempt += 1
            hooks.status("reconnecting", epoch=self.known_epoch, reason=outcome.reason, delay=delay)
            await self._pause(delay)

    async def _try_once(self) -> SessionEnd:
        """Find the leader, then connect, register and serve until the session ends."""
        hooks = self.hooks
        leader = await self._next_leader()
        self.target = None if leader is None else (leader.node, leader.epoch, leader.address)
        named, target = self.newly_named, self.target
        if (
            target is not None
            and coming_up(leader, self.registered_epoch)
            and (named is None or named[0] != target)
        ):
            self.newly_named = (target, asyncio.get_running_loop().time())
        if leader is None:
            return SessionEnd(False, f"no leader found ({self.discovery.describe()})")
        believed = self.known_epoch  # never a candidate's unsigned epoch (see the module docstring)
        hooks.status("connecting", leader=leader, epoch=believed, node=leader.node)
        self.session = self.connect(leader, believed)
        try:
            outcome = await self.session.run()
        finally:
            self.session = None
        if outcome.unproven:
            hooks.unproven()
            log.warning("relay client %s: %s; avoiding it for %g s", self.name, outcome.reason, DISTRUST_FOR)
            self.distrust(leader.address)
        moved = outcome.moved
        if moved is not None:  # a proven leader_changed: a bounded claim, and its address next
            self.claim = max_epoch(self.claim, claimed_epoch(self.confirmed, moved.epoch))
            if moved.ip and moved.port:
                self.set_hint(Leader(moved.ip, moved.port, moved.epoch, None, "leader_changed"))
                self.hint_until = asyncio.get_running_loop().time() + HINT_FRESH
        refusal = outcome.refusal
        if refusal is not None and refusal.code == STALE_EPOCH and self.claim is not None:
            self.claim = None  # the claim may have been a lie; the servers' gates still fence
        if refusal is not None:
            hooks.status("refused", leader=leader, node=refusal.node, reason=outcome.reason)
            if refusal.code in FINAL_REFUSALS and not self.ever_registered:
                self.fatal = refusal  # stops the run loop; start() raises it
                hooks.changed()
        return outcome

    def still_coming_up(self) -> bool:
        """The last attempt was at a leader the lease newly named, first tried under `COMING_UP` ago."""
        named = self.newly_named
        if named is None or named[0] != self.target:
            return False
        return asyncio.get_running_loop().time() - named[1] < COMING_UP

    def hint_fresh(self) -> bool:
        """A leader_changed named its address moments ago: dial it before anything else."""
        return self.hint is not None and asyncio.get_running_loop().time() < self.hint_until

    async def _next_leader(self) -> Leader | None:
        if self.hint_fresh():
            return self.hint
        found = await self.discovery.find(self.avoided())
        if found is not None and found.source == "lease" and found.epoch is not None:
            self.saw_lease(found.epoch)
        hint = self.hint
        if hint is not None:
            self.hint_tries += 1
            superseded = found is not None and choose_leader(hint, found) is found
            if superseded or self.hint_tries >= HINT_TRIES:
                self.hint = None
        return choose_leader(hint, found)

    def set_hint(self, leader: Leader) -> None:
        self.hint, self.hint_tries, self.hint_until = leader, 0, float("-inf")

    async def _pause(self, delay: float) -> None:
        """Wait `delay`, or less if the lease names a new leader meanwhile."""
        self.wake.clear()
        try:
            async with asyncio.timeout(delay):
                await self.wake.wait()
        except TimeoutError:
            return
        await asyncio.sleep(self.after_wake())

    def after_wake(self) -> float:
        """The wait after a lease change cut a pause short: still jittered, the whole pool
        saw the lease. While a fresh hint is dialed, no longer than its own redials
        (`HINT_RETRY`): the lease a planned switchover rewrites under them (the release,
        then the target's) is no news to a client already dialing the target, and waiting
        up to the backoff's `initial` there cost up to 0.1 s of the switchover (issue 22)."""
        if self.hint_fresh():
            return self.backoff.rng.uniform(0, HINT_RETRY)
        return self.backoff.delay(0)

    async def poll_lease(self) -> None:
        lease = self.discovery.lease
        assert lease is not None
        seen: tuple[str, int] | None = None
        while not self.hooks.closed():
            await asyncio.sleep(self.lease_poll)
            try:
                seen = await self._check_lease(lease, seen)
            except Exception:  # keep polling whatever happened
                log.exception("relay client %s: lease check failed", self.name)

    async def _check_lease(self, lease: LeaseFile, seen: tuple[str, int] | None) -> tuple[str, int] | None:
        """One poll: move a registered session the lease outdates, or cut a backoff wait short."""
        record = await lease.read_record()
        if record is None:
            return seen  # no evidence: nothing to act on
        self.saw_lease(record.epoch)
        key = (record.node, record.epoch)
        s = self.session
        if s is not None and s.registered and s.epoch is not None:
            reason = lease_says_move(record, s.epoch, s.node)
            if reason is not None:
                self.set_hint(Leader(record.ip, record.port, record.epoch, record.node, "lease"))
                log.info("relay client %s: %s: moving", self.name, reason)
                s.leave(reason)  # the reader sees EOF; the run loop reconnects
        elif s is not None and not s.registered:
            # An attempt under way (connecting, or waiting to be registered) at a leader the
            # lease has replaced: a frozen host's kernel accepts and never answers, a cut one
            # answers no SYN; waiting out `connect_timeout` there is seconds lost for nothing.
            reason = lease_says_move(record, s.leader.epoch or 0, s.leader.node)
            if reason is not None:
                self.set_hint(Leader(record.ip, record.port, record.epoch, record.node, "lease"))
                log.info("relay client %s: %s: giving up the attempt at %s", self.name, reason, s.addr)
                s.leave(reason)
        elif key != seen:
            self.wake.set()  # waiting to retry: the lease names someone new, go now
        return key
