"""The elector: one node's election loop around the pure core.

Each cycle it gathers one `Observation` (a read of the lease, the clock, the
policy's facts about the pool, its own sit-out window), asks `decide()`, and
acts on the answer through the `LeaseStore`: contend (after the decision's
delay), renew, step down, hand off to the decision's successor, release, and
write the member's heartbeat (each act's outcome an `Attempt`). It decides
nothing itself. Every transition goes to the `TransitionSink` (an election
carries its cause and gap as data) and calls the leader-duty hooks. It holds no
Django and no Celery: the Celery tasks, the contender script and the in-process
tests drive the same class.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from elections.core.decide import PLANNED, Decision, Observation, Timing, Verdict, decide, evidence_subject
from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.lease_memory import (
    Memory,
    accepts,
    blind_gap,
    current,
    recalled,
    track,
    vouched,
    vouches_spent,
    writes_still,
)
from elections.core.serving_book import Serving
from elections.core.untrusted import REPLAYED
from elections.core.witness import WitnessClaims
from elections.errors import StoreUnavailable
from elections.ports.store.store import LEASE_NAME, LeaseStore, WriteOutcome
from elections.ports.store.stores import NullSink, TransitionSink
from elections.runtime.lease_reads import read_trouble
from elections.runtime.lease_writes import CONTEND_ATTEMPTS, Identity, make_record, release_lease
from elections.runtime.policy import OpenPolicy, Policy
from stkhost.clock import Clock

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
# (epoch, seconds) -> whether a leader beacon of an epoch above `epoch` came (waiting at most that
# long for one): the winner of a race this node lost (runtime.beacon_link)
WinnerHeard = Callable[[int, float], bool]


@dataclass(frozen=True)
class Attempt:
    """What one attempt of a cycle came to: its decision, and the verdict whose act
    lost a race (`lost`: attempt it again; `busy`: the lock was held) if it did."""

    decision: Decision
    lost: Verdict | None = None
    busy: bool = False


Hook = Callable[[int], None]


class Elector:
    """One node's election loop: it reads, asks `decide()`, and carries the decision out on the store."""

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
        winner_heard: WinnerHeard | None = None,
    ) -> None:
        self.store = store
        self.winner_heard = winner_heard
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
        # restarted at a read that was no evidence after this node's own blindness ("blind") or at a
        # record an older epoch's holder wrote since ("older_writer"): pool.json.
        self.deferred: dict[str, int] = {}

    # -- public ----------------------------------------------------------------
    def know(
        self, epoch: int, seen_key: tuple[str, int, int] | None = None,
        writers: tuple[tuple[str, int, int], ...] = (),
    ) -> None:  # fmt: skip
        """What this node knew before it (re)started, or reads in the pool's
        events: epochs it may never take again, the last lease it saw (older
        copies of it are replays), the newest record of each holder it saw
        (`lease_memory.recalled`). Never lowers anything; starts no timer."""
        mem = self.memory
        if seen_key is not None and mem.seen_key is None:
            mem = replace(mem, seen_key=seen_key)
        mem = recalled(mem, writers)
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
        known = self.memory.max_epoch  # a leader beacon above it after a lost claim: the race's winner
        attempt = self.attempt(renewing)
        acts = 1
        while attempt.lost is not None:
            lost = attempt.lost
            if lost is Verdict.CONTEND:
                self._back_off(known)
            elif attempt.busy:
                self.sleep(self.rng.uniform(*BUSY_PAUSE))
            attempt = self.attempt(lost is Verdict.RENEW, again=lost, act=acts < ATTEMPTS[lost])
            acts += 1
        self._note(attempt.decision)
        return attempt.decision

    def _back_off(self, known: int) -> None:
        """A lost claim's pause (`BACKOFF`), ended by the winner's first leader beacon (an epoch
        above `known`, sent once its lease was written): the next attempt reads that lease at
        once and follows it, and this member's pool view (its station door) names the new
        leader then, not up to a second later (issue 36's cut cable: the losing contender's door
        re-pointed 0.9-1.0 s after the winner's). Only a pause is shortened: the attempt
        reads and claims under the lock as before."""
        pause = self.rng.uniform(*BACKOFF)
        if self.winner_heard is None:
            self.sleep(pause)
        else:
            self.winner_heard(known, pause)

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
            older_writer = writes_still(self.memory, read) and read.record is not None
            spent_before = self.memory.older_spent
            self.memory = track(self.memory, read, now, self.timing.ttl, self.timing.blind_after)
            if older_writer and self.memory.older_spent and self.memory.leader_epoch is None:
                older_writer = False  # past the bound (issue 37): the TTL runs, its takeover by acks
                if not spent_before and read.record is not None:
                    self.deferred["older_writer_spent"] = self.deferred.get("older_writer_spent", 0) + 1
                    self._report(f"lease timer not restarted: {read.record.node} wrote its epoch "
                                 f"{read.record.epoch} again, past the bound of one TTL of such "
                                 f"restarts; a takeover on the TTL will serve by acks",
                                 logging.WARNING)  # fmt: skip
            if gap is not None:  # counted beside the deferrals (pool.json), logged once per kind of read
                self.deferred["blind"] = self.deferred.get("blind", 0) + 1
                self._report(f"lease timer restarted: no read of the lease for more than "
                             f"{self.timing.blind_after:g} s (TTL - RENEW_DEADLINE) and the first read "
                             f"after was {read.status}, no evidence; the holder may have renewed "
                             f"unseen", logging.WARNING, key=read.status)  # fmt: skip
            if older_writer and read.record is not None:  # counted beside the deferrals, as above
                rec = read.record
                if self.memory.leader_epoch is not None and self.serving is not None:
                    # unbounded, unlike a follower's restarts (docs/election.md "Renewing without the lock")
                    self.serving.overwritten(self.memory.leader_epoch, self.clock.monotonic())
                self.deferred["older_writer"] = self.deferred.get("older_writer", 0) + 1
                self._report(f"lease timer restarted: {rec.node} wrote its epoch {rec.epoch} again, below "
                             f"the known epoch {self.memory.max_epoch}: that holder still writes, so the "
                             f"TTL counts from its write", logging.WARNING)  # fmt: skip
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

    # -- the acts: each carries out one decision on the store (its outcome an `Attempt`) --------
    def _hand_off(self, decision: Decision) -> Decision:
        epoch, target = self.memory.leader_epoch, decision.handoff_to
        self.release(handoff_to=target, reason=decision.reason, abstain=True, kind="handoff")
        if decision.cause == PLANNED:
            return Decision(Verdict.STEP_DOWN, f"handed epoch {epoch} to {target}: {decision.reason}")
        return Decision(Verdict.STEP_DOWN, f"{decision.reason}: handed off to {target or 'anyone'}")

    def release(
        self, handoff_to: str | None = None, reason: str = "shutdown", abstain: bool = False,
        kind: str = "released",
    ) -> bool:  # fmt: skip
        """Stop leading at once and tell the pool (`ttl_s: 0`), so that a
        follower takes over without waiting out the TTL. With `abstain`, this
        node then sits out the next election (one TTL), if the release was
        written: one that was not (the share unreachable, a cable cut, the lease
        already another's) handed nothing over, and the pool may need this node
        in the next election (issue 22: two members sitting out after releases
        never written left a silent leader's takeover waiting 3.5 s). True if written."""
        epoch = self.memory.leader_epoch
        if epoch is None:
            return False
        if kind == "handoff" and not handoff_to:
            # Handed to no one (no successor eligible, the agent stopping): a release, and the
            # history says so whichever process wrote it (the worker's cycle or the supervisor).
            kind = "released"
        if self.on_fence is not None:
            # The target (or, released to no one, any member) may take the next epoch, and serve,
            # the moment the release is on the share: this node stops serving first (its relay's
            # gate shut, and confirmed), and names the target meanwhile, for its relay to tell its
            # clients. Its resign, which members obey at once, comes after (an attacker's review:
            # a release to no one written before the relay stopped let a new majority form beside it).
            self.handed = (handoff_to, epoch + 1) if handoff_to else None
            self._duty(self.on_fence, epoch)
        written = release_lease(
            self.store,
            self.me,
            epoch,
            self._record,
            handoff_to,
            min_seq=self.memory.renew_seq,
            sleep=self.sleep,
        )
        if abstain and written:
            self._abstain_until = self.clock.monotonic() + self.timing.ttl
        # Whom the share now names as the only member that may take epoch + 1 at once: the
        # agent's leadership state says so as this node steps down (its relay tells its clients).
        self.handed = (handoff_to, epoch + 1) if written and handoff_to else None
        said = f"released ({reason})" + (f", handoff to {handoff_to}" if handoff_to else "")
        if not written:
            # Nothing handed over: the lease already released (the supervisor's release on
            # shutdown, which writes that row), another's, or the store not answering. A step-down,
            # and the history says so: one release, one `released` row.
            said = f"{said}: not written (the lease not this node's to release, or the store not answering)"
            kind = "stepped_down"
        self._step_down(said, kind=kind)
        return written

    def _member_doc(self, **fields: Any) -> dict[str, Any]:
        self._beat += 1
        return {
            "node": self.me.node,
            "ip": self.me.ip,
            "seq": self._beat,
            "epoch": self.memory.max_epoch,
            "drain": False,
            "health": "ok",
            "version": 1,
            **self._member_fields,
            **fields,
        }

    def heartbeat(self, **fields: Any) -> None:
        """Write this member's heartbeat: carries the highest epoch it knows.
        `fields` (drain, priority, health...) are kept for later claims too."""
        self._member_fields = fields
        try:
            self.store.write_member(self._member_doc(**fields))
        except StoreUnavailable as exc:
            log.warning("heartbeat not written: %s", exc)

    def _record(self, epoch: int, seq: int, ttl: float, handoff_to: str | None = None) -> LeaseRecord:
        return make_record(self.me, self.clock, epoch, seq, ttl, handoff_to)

    def _write(
        self, record: LeaseRecord, read: LeaseRead, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        try:
            return self.store.write(record, expect=read.revision, fence=fence)
        except StoreUnavailable as exc:
            self._report(f"lease not written: {exc}", logging.ERROR)
            return WriteOutcome.BUSY

    def _contend(self, read: LeaseRead | None, decision: Decision, first: bool) -> Attempt:
        """One claim of the lease (after the decision's delay, on a first attempt)."""
        decided_at = self.clock.monotonic()  # decision.gap runs to here; the wait below counts too
        if (
            first and decision.delay > 0
        ):  # lower priority waits: a higher one that contends too gets there first
            self.sleep(decision.delay)
        if read is None:
            return Attempt(decision)
        start = self.clock.monotonic()
        # Every contention is judged on the newest epoch this node knows (an early takeover's on the
        # holder's epoch in this read, a TTL's on the lease it timed out). A store that knows a fresher
        # one (a claim's member record, the counter) holds a lease this node never saw, and perhaps a
        # holder that serves: write nothing, start over (the claim's compare-and-set cannot tell: a
        # missing file's revision is "" whoever's lease was deleted or moved aside since).
        judged = self.memory.max_epoch
        fresher: list[int] = []
        claimed = False
        rec = read.record if read.status == "valid" else None
        if (
            decision.cause == "silent"
            and self.witness is not None
            and rec is not None
            and self.witness.claims(rec.node, rec.epoch)
        ):
            # A pool of two (issue 38, W4): the share's witness is the third vote; claim it first
            # (compare-and-set), or take nothing and let the TTL decide.
            why_not = self.witness.claim(rec.node, rec.epoch, judged + 1)
            if why_not is not None:
                return Attempt(Decision(Verdict.WAIT, f"no early takeover: {why_not}; the TTL decides"))
            claimed = True

        def make(epoch: int) -> LeaseRecord | None:
            if epoch > judged + 1:
                fresher.append(epoch - 1)
                return None
            return self._record(epoch, 0, self.timing.ttl)

        try:
            outcome, record = self.store.acquire(make, read.revision, self.memory.max_epoch,
                                                 self._member_doc())  # fmt: skip
        except StoreUnavailable as exc:
            return Attempt(Decision(Verdict.WAIT, f"cannot contend: {exc}"))
        if fresher:
            self._fresher(fresher[-1], judged)
        if outcome is not WriteOutcome.WRITTEN or record is None:
            return Attempt(decision, lost=Verdict.CONTEND)
        epoch = record.epoch
        self._renewed_boot = self._on_gate_clock(start)
        if self.serving is not None:  # before anything can read the new epoch's gate
            over = read.record if read.status == "valid" else None  # the lease this claim replaced
            after = (over.node, over.epoch) if over is not None and over.released else None
            self.serving.taken(epoch, decision.cause, start, after)
        self.memory = replace(
            self.memory,
            leader_epoch=epoch,
            renewed_at=start,
            renew_seq=0,
            seen_key=record.key,
            seen_at=start,
            seen_ttl=self.timing.ttl,
            seen_released=False,
            seen_handoff=None,
            max_epoch=epoch,
        )
        self.last_read = LeaseRead("valid", record)  # what the view shows: the lease we hold now
        self.accepted = self.last_read
        why = f"elected: took epoch {epoch} ({decision.reason})"
        log.warning("%s", why)
        gap = None if decision.gap is None else round(decision.gap + start - decided_at, 3)
        # The duties first (the leadership state, the first leader beacon, the relay's plan on a
        # thread of its own), the history after: its database row and share line took ~10 ms of
        # a planned switchover's 0.1 s while the target's relay waited (issue 22).
        self._duty(self.on_elected, epoch)
        self.events.record("elected", epoch, decision.reason, cause=decision.cause, gap_s=gap)
        if self.witness is not None and not claimed:
            self.witness.name(epoch)  # W1: the record names the new epoch (a claim already did)
        return Attempt(Decision(Verdict.HOLD, why))

    def _fresher(self, epoch: int, judged: int) -> None:
        """A claim found `epoch`, fresher than any this node knew: a lease it never saw. It knows
        that epoch from now on, times it as a lease seen now (its TTL starts: no takeover of a
        holder it never timed), and a leader of an older epoch steps down."""
        self.deferred["fresher"] = self.deferred.get("fresher", 0) + 1
        self._report(f"claim started over: the store knows epoch {epoch}, fresher than the epoch {judged} "
                     f"it was judged on", logging.WARNING)  # fmt: skip
        self.know(epoch)
        self.memory = replace(self.memory, seen_at=self.clock.monotonic(), seen_ttl=self.timing.ttl)
        if self.is_leader:
            self._step_down(f"lost: the store knows epoch {epoch}")

    def _renew(self, read: LeaseRead, start: float) -> Attempt:
        """One write of the renewal, fenced by the renew deadline."""
        epoch = self.memory.leader_epoch
        assert epoch is not None
        renewed_at = self.memory.renewed_at or start
        renewed_boot = self._renewed_on_gate_clock()
        start_boot = self._on_gate_clock(start)

        def fence() -> bool:
            """Checked at the last moment before the write: never act after the deadline,
            on either clock (a machine that slept meanwhile: the gate's clock says so)."""
            late = renewed_boot is not None and self.gate_clock() - renewed_boot > self.timing.deadline
            return self.clock.monotonic() - renewed_at <= self.timing.deadline and not late

        rec = read.record
        base = rec.renew_seq if rec is not None and rec.node == self.me.node and rec.epoch == epoch else 0
        seq = max(self.memory.renew_seq, base) + 1
        record = self._record(epoch, seq, self.timing.ttl)
        outcome = self._write(record, read, fence)
        if outcome is WriteOutcome.WRITTEN:
            self._renewed_boot = start_boot
            self.memory = replace(
                self.memory,
                renewed_at=start,
                renew_seq=seq,
                seen_key=record.key,
                seen_at=start,
                seen_released=False,
            )
            self.last_read = self.accepted = LeaseRead("valid", record)
            return Attempt(Decision(Verdict.HOLD, f"leader: renewed epoch {epoch} (seq {seq})"))
        if outcome is WriteOutcome.FENCED:
            why = f"deadline passed before the write of epoch {epoch}"
            self._step_down(why)
            return Attempt(Decision(Verdict.STEP_DOWN, why))
        if outcome is WriteOutcome.LOST:
            why = f"lost: the store took the hold of epoch {epoch} away (its etcd lease is gone)"
            self._step_down(why)
            return Attempt(Decision(Verdict.STEP_DOWN, why))
        return Attempt(Decision(Verdict.RENEW, f"renewal of epoch {epoch} not written: {outcome.value}"),
                       lost=Verdict.RENEW, busy=outcome is WriteOutcome.BUSY)  # fmt: skip

    def _renew_failed(self) -> Attempt:
        epoch = self.memory.leader_epoch
        assert epoch is not None
        self.events.record("renew_failed", epoch, "renewal not written this round")
        return Attempt(Decision(Verdict.HOLD, f"leader of epoch {epoch}: renewal not written this round"))

    def _step_down(self, reason: str, kind: str = "stepped_down") -> None:
        epoch = self.memory.leader_epoch
        if epoch is None:
            return
        held_until = self._held_until()
        self.memory = replace(self.memory, leader_epoch=None, renewed_at=None)
        self._renewed_boot = None
        log.warning("stepping down from epoch %s: %s", epoch, reason)
        # The duties first (the leadership state that shuts the relay's gate, the `resign` beacon that
        # sends a handoff's target to the store, the demotion plan on a thread of its own), the history
        # after: its share line and database row took 10-35 ms of a planned switchover (issue 22).
        self._duty(self.on_demoted, epoch)
        self.events.record(kind, epoch, reason, held_until=held_until)

    def _held_until(self) -> str | None:
        """Until when this node may have acted as leader (its renew deadline, or now if
        sooner), as a wall time of this machine: a late step-down (a frozen process, a
        hung store) did not lead past it, for the history and for tests to see."""
        valid = self.leader_valid_until_boot
        if valid is None:
            return None
        now = self.gate_clock()
        return (self.clock.wall() - timedelta(seconds=max(0.0, now - valid))).isoformat()

    def _duty(self, hook: Hook, epoch: int) -> None:
        try:
            hook(epoch)
        except Exception:  # a broken duty must not break the election loop
            log.exception("leader duty hook failed for epoch %s", epoch)

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
