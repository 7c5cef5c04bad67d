"""The elector: one node's election loop around the pure core.

Each cycle it gathers one `Observation` (a read of the lease, the clock, the
policy's facts about the pool, its own sit-out window), asks `decide()`, and
acts on the answer through the `LeaseStore` (the acts are `runtime.elector_acts`):
contend (after the decision's delay), renew, step down, hand off to the
decision's successor. It decides nothing itself. Every transition goes to the
`TransitionSink` (an election carries its cause and gap as data) and calls the
leader-duty hooks. It holds no Django and no Celery: the Celery tasks, the
contender script and the in-process tests drive the same class.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from elections.core.decide import Decision, Observation, Timing, Verdict, decide, evidence_subject
from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead
from elections.core.lease_memory import Memory, accepts, blind_gap, current, track, vouched, vouches_spent
from elections.core.serving_book import Serving
from elections.core.untrusted import REPLAYED
from elections.core.witness import WitnessClaims
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.store import LEASE_NAME, LeaseStore
from elections.ports.stores import NullSink, TransitionSink
from elections.runtime.elector_acts import Attempt, ElectorActs, Hook
from elections.runtime.lease_reads import read_trouble
from elections.runtime.lease_writes import CONTEND_ATTEMPTS, Identity
from elections.runtime.policy import OpenPolicy, Policy

log = logging.getLogger("stkrelay.elector")

BACKOFF = (0.2, 1.0)  # losers of a race wait this long (seconds, uniform)
BUSY_PAUSE = (0.02, 0.1)  # a renewal that found the lock busy waits this long (seconds, uniform)
# Acts a cycle makes at the most, by the verdict whose act lost a race and is attempted again.
ATTEMPTS = {Verdict.CONTEND: CONTEND_ATTEMPTS, Verdict.RENEW: CONTEND_ATTEMPTS * 2}


# (holder, epoch) -> why that holder's agent is positively gone, or None (runtime.beacons)
Evidence = Callable[[str, int], "str | None"]
# (holder, epoch, renew_seq) -> when a leader beacon first named that lease (runtime.beacon_link)
HeardAt = Callable[[tuple[str, int, int]], "float | None"]
# (holder, epoch) -> the newest renewal its leader beacons named: (renew_seq, first heard at)
RenewalHeard = Callable[[str, int], "tuple[int, float] | None"]


class Elector(ElectorActs):
    def __init__(
        self,
        store: LeaseStore,
        clock: Clock,
        me: Identity,
        timing: Timing,
        events: TransitionSink | None = None,
        on_elected: Hook | None = None,
        on_demoted: Hook | None = None,
        policy: Policy | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        refusals: Refusals | None = None,
        evidence: Evidence | None = None,
        serving: Serving | None = None,
        heard_at: HeardAt | None = None,
        renewal_heard: RenewalHeard | None = None,
        on_fence: Hook | None = None,
        witness: WitnessClaims | None = None,
    ) -> None:
        self.store = store
        self.evidence = evidence
        self.heard_at = heard_at
        self.renewal_heard = renewal_heard
        self.serving = serving
        self.witness = witness  # the share's witness in a pool of two (issue 38)
        self.refusals = refusals if refusals is not None else Refusals()
        self.clock = clock
        # The gate's clock (`Clock.boottime`: it counts a suspend), for every deadline after
        # which this node must not serve.
        self.gate_clock: Callable[[], float] = clock.boottime
        self._renewed_boot: float | None = None  # the last renewal (or the election) on the gate's clock
        self.me = replace(me, pid=me.pid or os.getpid())
        self.timing = timing
        self.events = events or NullSink()
        self.on_elected = on_elected or (lambda epoch: None)
        self.on_demoted = on_demoted or (lambda epoch: None)
        self.policy: Policy = policy or OpenPolicy()
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.memory = Memory(node=me.node)
        self.last: Decision | None = None
        self.last_read: LeaseRead | None = None
        # The last read this node's memory took as the lease (`lease_memory.accepts`), or its own
        # write: what it publishes (pool.json, which its entry follows), never a refused replay.
        self.accepted: LeaseRead | None = None
        self._reported: set[str] = set()
        self._abstain_until: float | None = None
        self._member_fields: dict[str, Any] = {}
        self.handed: tuple[str, int] | None = None  # (target, epoch) of this node's last written handoff
        # Called with the epoch before a handoff is written: stop serving it now (the agent's gate).
        self.on_fence = on_fence
        self._beat = int(clock.monotonic() * 1000)  # member seq: grows across restarts
        # Early takeovers deferred for want of a valid read (`Decision.deferred`), by what was read,
        # claims started over for an epoch fresher than the one judged on ("fresher"), and TTL timers
        # restarted at a read that was no evidence after this node's own blindness ("blind"): pool.json.
        self.deferred: dict[str, int] = {}

    # -- public ----------------------------------------------------------------
    def know(self, epoch: int, seen_key: tuple[str, int, int] | None = None) -> None:
        """What this node knew before it (re)started, or reads in the pool's
        events: epochs it may never take again, the last lease it saw (older
        copies of it are replays). Never lowers anything; starts no timer."""
        mem = self.memory
        if seen_key is not None and mem.seen_key is None:
            mem = replace(mem, seen_key=seen_key)
        self.memory = replace(mem, max_epoch=max(mem.max_epoch, epoch, seen_key[1] if seen_key else 0))

    @property
    def is_leader(self) -> bool:
        return self.memory.leader_epoch is not None

    @property
    def leader_valid_until(self) -> float | None:
        """Monotonic instant after which this node must not act as leader: its renew
        deadline, or sooner where its serving right (docs/design.md §15) ends sooner. The
        same instant on the gate's clock is `leader_valid_until_boot`, which a suspend
        brings closer; this one is that, as seen on the monotonic clock now."""
        boot = self.leader_valid_until_boot
        if boot is None:
            return None
        return boot - self.gate_clock() + self.clock.monotonic()

    @property
    def leader_valid_until_boot(self) -> float | None:
        """The instant on the gate's clock (`Clock.boottime`, which runs on while the
        machine sleeps) after which this node must not act as leader: the renew
        deadline counted from the renewal on that clock, bounded by the serving right
        (whose window is kept on it too: `BeaconService`). A leader PC that resumes
        from a suspend longer than what was left finds this passed, its gate shut."""
        epoch = self.memory.leader_epoch
        renewed = self._renewed_on_gate_clock()
        if epoch is None or renewed is None:
            return None
        until = renewed + self.timing.deadline
        bound = self.serving.bound(epoch, self.gate_clock()) if self.serving is not None else None
        return until if bound is None else min(until, bound)

    def _renewed_on_gate_clock(self) -> float | None:
        renewed = self.memory.renewed_at
        if renewed is None:
            return None
        if self._renewed_boot is not None:
            return self._renewed_boot
        # Not taken through this elector's write (a memory set by hand): the monotonic instant, moved
        # to the gate's clock by today's offset (never later than it was: the offset only grows).
        return renewed + self.gate_clock() - self.clock.monotonic()

    def _on_gate_clock(self, start: float) -> float:
        """Monotonic instant `start` (just read) on the gate's clock: the offset now, never later."""
        return self.gate_clock() - (self.clock.monotonic() - start)

    def cycle(self, renewing: bool = False) -> Decision:
        """Look once and act on what is seen. Never raises for store trouble.

        One `attempt` reads once, decides once and acts once. A contend or a
        renewal that lost a race (or found the lock busy) is attempted again
        here, around it, after a pause — like client-go's acquire/renew around
        tryAcquireOrRenew — up to `ATTEMPTS` acts in all."""
        attempt = self.attempt(renewing)
        acts = 1
        while attempt.lost is not None:
            lost = attempt.lost
            if lost is Verdict.CONTEND:
                self.sleep(self.rng.uniform(*BACKOFF))
            elif attempt.busy:
                self.sleep(self.rng.uniform(*BUSY_PAUSE))
            attempt = self.attempt(lost is Verdict.RENEW, again=lost, act=acts < ATTEMPTS[lost])
            acts += 1
        self._note(attempt.decision)
        return attempt.decision

    def attempt(self, renewing: bool = False, again: Verdict | None = None, act: bool = True) -> Attempt:
        """Read once, decide once, act once. `again`: this attempt follows one whose
        `again` lost a race; it acts only on that verdict (and a renewal's step-down),
        and only with `act`: a last look that acts no more is what the cycle returns."""
        before = self.clock.monotonic()
        read = self._read()
        now = before if again is Verdict.RENEW else self.clock.monotonic()
        decision = self._decide(read, now, renewing)
        verdict = decision.verdict
        if again is not None and verdict is not again:
            if again is Verdict.RENEW and verdict is Verdict.STEP_DOWN:
                self._step_down(decision.reason)
            return Attempt(decision)
        if verdict is Verdict.CONTEND:
            if act:
                return self._contend(read, decision, first=again is None)
            return Attempt(decision)
        if verdict is Verdict.RENEW:
            if act and read is not None:
                return self._renew(read, before if again is not None else self.clock.monotonic())
            return self._renew_failed()
        if verdict is Verdict.STEP_DOWN:
            self._step_down(decision.reason)
        elif verdict is Verdict.HAND_OFF:
            decision = self._hand_off(decision)
        return Attempt(decision)

    # -- steps -----------------------------------------------------------------
    def _read(self) -> LeaseRead | None:
        try:
            read = self.store.read()
        except StoreUnavailable as exc:
            self._report(f"lease store unreachable: {exc}", logging.ERROR)
            self.last_read = None
            return None
        except Exception as exc:  # a reader that raised on what it read: no evidence, never a dead cycle
            self._report(f"lease read failed, taken as no evidence: {type(exc).__name__}: {str(exc)[:200]!r}",
                         logging.ERROR, key=type(exc).__name__)  # fmt: skip
            self.last_read = None
            return None
        self.last_read = read
        message, level, replay = read_trouble(read, self.memory, self.store.describe)
        if replay is not None:
            at = self.clock.wall().isoformat(timespec="seconds")
            self.refusals.note(LEASE_NAME, REPLAYED, replay, at, self.clock.monotonic())
        if message:
            self._report(message, level, key=read.revision)
        return read

    def observe(self, read: LeaseRead | None, renewing: bool) -> Observation:
        """Everything `decide()` needs from this cycle, in one value."""
        lease_epoch = read.record.epoch if read is not None and read.record is not None else None
        facts = self.policy.facts(self.memory.leader_epoch, lease_epoch)
        gone = silent = lapsed = None
        subject = evidence_subject(self.memory, read)
        if self.evidence is not None and subject is not None and self.memory.leader_epoch is None:
            why = self.evidence(*subject)
            gone = (*subject, why) if why else None
        if self.serving is not None and subject is not None and self.memory.leader_epoch is None and not gone:
            why = self.serving.silent(*subject)
            silent = (*subject, why) if why else None
        if self.serving is not None and self.memory.leader_epoch is not None:
            lapsed = self.serving.lapsed(self.memory.leader_epoch, self.clock.monotonic())
        return Observation(read, renewing, sit_out_until=self._abstain_until, gone=gone, silent=silent,
                           serving_lapsed=lapsed, **vars(facts))  # fmt: skip

    def _decide(self, read: LeaseRead | None, now: float, renewing: bool) -> Decision:
        if read is not None:
            before = self.memory.seen_key
            if accepts(self.memory, read):
                self.accepted = read
            gap = blind_gap(self.memory, read, now, self.timing.blind_after)
            self.memory = track(self.memory, read, now, self.timing.ttl, self.timing.blind_after)
            if gap is not None:  # counted beside the deferrals (pool.json), logged once per kind of read
                self.deferred["blind"] = self.deferred.get("blind", 0) + 1
                self._report(f"lease timer restarted: no read of the lease for more than "
                             f"{self.timing.blind_after:g} s (TTL - RENEW_DEADLINE) and the first read "
                             f"after was {read.status}, no evidence; the holder may have renewed "
                             f"unseen", logging.WARNING, key=read.status)  # fmt: skip
            self._timed_from_beacon(before)
            self._vouched(read)
        return decide(self.memory, self.observe(read, renewing), now, self.timing)

    def _timed_from_beacon(self, before: tuple[str, int, int] | None) -> None:
        """A lease this node reads for the first time, which a leader beacon named
        earlier (a quiet follower reads no renewal: the beacons vouch for them):
        its timer starts when the beacon came. The leader wrote it before it sent
        that beacon, so the timer never starts before the write, never early."""
        mem = self.memory
        if self.heard_at is None or mem.seen_key is None or mem.seen_key == before or mem.seen_at is None:
            return
        at = self.heard_at(mem.seen_key)
        if at is not None and at < mem.seen_at:
            self.memory = replace(mem, seen_at=at)

    def _vouched(self, read: LeaseRead) -> None:
        """A read that is no evidence while the holder's beacons named a newer renewal: the
        timer restarts when that beacon came (`core.lease_memory.vouched`), one TTL past where
        the last valid read left it at the most (then the TTL runs); counted beside the
        deferrals, logged once per kind of read."""
        mem = self.memory
        if self.renewal_heard is None or mem.seen_key is None or mem.leader_epoch is not None:
            return
        renewal = self.renewal_heard(mem.seen_key[0], mem.seen_key[1])
        self.memory = vouched(mem, read, renewal, self.timing.ttl)
        holder, epoch = mem.seen_key[:2]
        if self.memory is not mem:
            self.deferred["vouched"] = self.deferred.get("vouched", 0) + 1
            self._report(f"lease timer restarted: the lease read was {read.status}, no evidence, "
                         f"and {holder}'s beacons name a newer renewal of epoch {epoch}",
                         logging.WARNING)  # fmt: skip
        elif not accepts(mem, read) and vouches_spent(mem, renewal, self.timing.ttl):
            self.deferred["vouches_spent"] = self.deferred.get("vouches_spent", 0) + 1
            self._report(f"lease timer not restarted: {holder}'s beacons name a newer renewal of epoch "
                         f"{epoch}, but they moved it a TTL ({self.timing.ttl:g} s) since the last valid "
                         f"read already; the TTL runs", logging.WARNING, key=f"{holder}/{epoch}")  # fmt: skip

    def heard(self) -> None:
        """Between reads (a quiet follower): the renewal this node remembers kept up with its
        holder's leader beacons (`core.lease_memory.current`), so a replay of an older one is
        never news, after a restart too (leadership.json's `seen`)."""
        mem = self.memory
        if self.renewal_heard is None or mem.seen_key is None or mem.leader_epoch is not None:
            return
        self.memory = current(mem, self.renewal_heard(mem.seen_key[0], mem.seen_key[1]))

    # -- logging -----------------------------------------------------------------
    def _note(self, decision: Decision) -> None:
        if decision.deferred is not None:  # counted at every look, logged once per kind of read
            self.deferred[decision.deferred] = self.deferred.get(decision.deferred, 0) + 1
            self._report(f"early takeover deferred: the lease read was {decision.deferred}, no evidence "
                         f"of who holds it now; looking again", logging.WARNING)  # fmt: skip
        last, self.last = self.last, decision
        if last is None or last.verdict is not decision.verdict:
            log.info("%s", decision)
        else:
            log.debug("%s", decision)

    def _report(self, message: str, level: int, key: str = "") -> None:
        """Log a trouble once per distinct cause, not every cycle."""
        tag = f"{message}|{key}" if key else message
        if tag not in self._reported:
            self._reported.add(tag)
            if len(self._reported) > 256:
                self._reported = {tag}
            log.log(level, "%s", message)
