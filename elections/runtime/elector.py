"""The elector: one node's election loop around the pure core.

Each cycle it gathers one `Observation` (a read of the lease, the clock, the
policy's facts about the pool, its own sit-out window), asks `decide()`, and
acts on the answer through the `LeaseStore`: contend (after the decision's
delay), renew, step down, hand off to the decision's successor. It decides
nothing itself. Every transition goes to the `EventSink` (an election carries
its cause and gap as data) and calls the leader-duty hooks. It holds no
Django and no Celery: the Celery tasks, the contender script and the
in-process tests drive the same class.
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

from elections.core.decide import (
    PLANNED,
    Decision,
    Memory,
    Observation,
    Timing,
    Verdict,
    decide,
    evidence_subject,
    track,
)
from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.serving import Serving
from elections.core.untrusted import REPLAYED
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.store import LEASE_NAME, LeaseStore, WriteOutcome
from elections.ports.stores import EventSink, NullSink
from elections.runtime.lease_reads import read_trouble
from elections.runtime.lease_writes import CONTEND_ATTEMPTS, Identity, make_record, release_lease
from elections.runtime.policy import OpenPolicy, Policy

log = logging.getLogger("stkrelay.elector")

BACKOFF = (0.2, 1.0)  # losers of a race wait this long (seconds, uniform)
BUSY_PAUSE = (0.02, 0.1)  # a renewal that found the lock busy waits this long (seconds, uniform)
# Acts a cycle makes at the most, by the verdict whose act lost a race and is attempted again.
ATTEMPTS = {Verdict.CONTEND: CONTEND_ATTEMPTS, Verdict.RENEW: CONTEND_ATTEMPTS * 2}


@dataclass(frozen=True)
class Attempt:
    """What one attempt of a cycle came to: its decision, and the verdict whose act
    lost a race (`lost`: attempt it again; `busy`: the lock was held) if it did."""

    decision: Decision
    lost: Verdict | None = None
    busy: bool = False


Hook = Callable[[int], None]
# (holder, epoch) -> why that holder's agent is positively gone, or None (runtime.beacons)
Evidence = Callable[[str, int], "str | None"]


class Elector:
    def __init__(
        self,
        store: LeaseStore,
        clock: Clock,
        me: Identity,
        timing: Timing,
        events: EventSink | None = None,
        on_elected: Hook | None = None,
        on_demoted: Hook | None = None,
        policy: Policy | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        refusals: Refusals | None = None,
        evidence: Evidence | None = None,
        serving: Serving | None = None,
    ) -> None:
        self.store = store
        self.evidence = evidence
        # (holder, epoch, renew_seq) -> when a leader beacon first named that lease (runtime.beacon_link)
        self.heard_at: Callable[[tuple[str, int, int]], float | None] | None = None
        self.serving = serving
        self.refusals = refusals if refusals is not None else Refusals()
        self.clock = clock
        # The gate's clock (`Clock.boottime`: it counts a suspend), for every deadline after
        # which this node must not serve; a clock without one times them on monotonic.
        self.gate_clock: Callable[[], float] = getattr(clock, "boottime", clock.monotonic)
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
        self._reported: set[str] = set()
        self._abstain_until: float | None = None
        self._member_fields: dict[str, Any] = {}
        self.handed: tuple[str, int] | None = None  # (target, epoch) of this node's last written handoff
        # Called with the epoch before a handoff is written: stop serving it now (the agent's gate).
        self.on_fence: Hook | None = None
        self._beat = int(clock.monotonic() * 1000)  # member seq: grows across restarts

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
        deadline, or sooner where its serving right (DESIGN.md §15) ends sooner. The
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
        if handoff_to and self.on_fence is not None:
            # The target may take the next epoch, and serve, the moment the handoff is on the
            # share: this node stops serving first (its relay's gate shut, and confirmed), and
            # names the target meanwhile, for its relay to tell its clients.
            self.handed = (handoff_to, epoch + 1)
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
        self._step_down(
            f"released ({reason})" + (f", handoff to {handoff_to}" if handoff_to else ""), kind=kind
        )
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

    # -- steps -----------------------------------------------------------------
    def _read(self) -> LeaseRead | None:
        try:
            read = self.store.read()
        except StoreUnavailable as exc:
            self._report(f"lease store unreachable: {exc}", logging.ERROR)
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
            self.memory = track(self.memory, read, now, self.timing.ttl)
            self._timed_from_beacon(before)
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
        try:
            outcome, record = self.store.acquire(
                lambda epoch: self._record(epoch, 0, self.timing.ttl),
                read.revision,
                self.memory.max_epoch,
                self._member_doc(),
            )
        except StoreUnavailable as exc:
            return Attempt(Decision(Verdict.WAIT, f"cannot contend: {exc}"))
        if outcome is not WriteOutcome.WRITTEN or record is None:
            return Attempt(decision, lost=Verdict.CONTEND)
        epoch = record.epoch
        self._renewed_boot = self._on_gate_clock(start)
        if self.serving is not None:  # before anything can read the new epoch's gate
            self.serving.taken(epoch, decision.cause, start)
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
        why = f"elected: took epoch {epoch} ({decision.reason})"
        log.warning("%s", why)
        gap = None if decision.gap is None else round(decision.gap + start - decided_at, 3)
        # The duties first (the leadership state, the first leader beacon, the relay's plan on a
        # thread of its own), the history after: its database row and share line took ~10 ms of
        # a planned switchover's 0.1 s while the target's relay waited (issue 22).
        self._duty(self.on_elected, epoch)
        self.events.record("elected", epoch, decision.reason, cause=decision.cause, gap_s=gap)
        return Attempt(Decision(Verdict.HOLD, why))

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
            self.last_read = LeaseRead("valid", record)
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
