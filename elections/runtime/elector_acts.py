"""The elector's acts on the lease store: contend, renew, step down, hand off, release, heartbeat.

`ElectorActs` is mixed into `runtime.elector.Elector`: `attempt()` decides, and
these carry the decision out (one act each, its outcome an `Attempt`); every
transition goes to the `TransitionSink` and calls the leader-duty hooks. They use the
elector's `store`, `clock`, `me`, `timing`, `memory`, `events` and hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from elections.core.decide import PLANNED, Decision, Timing, Verdict
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.lease_memory import Memory
from elections.core.serving_book import Serving
from elections.core.witness import WitnessClaims
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.store import LeaseStore, WriteOutcome
from elections.ports.stores import TransitionSink
from elections.runtime.lease_writes import Identity, make_record, release_lease

log = logging.getLogger("stkrelay.elector")


@dataclass(frozen=True)
class Attempt:
    """What one attempt of a cycle came to: its decision, and the verdict whose act
    lost a race (`lost`: attempt it again; `busy`: the lock was held) if it did."""

    decision: Decision
    lost: Verdict | None = None
    busy: bool = False


Hook = Callable[[int], None]


class ElectorActs:
    """The acts half of `Elector`: each carries out one decision on the store."""

    # What it uses of the elector (set in `Elector.__init__`, or defined there).
    store: LeaseStore
    clock: Clock
    gate_clock: Callable[[], float]
    me: Identity
    timing: Timing
    memory: Memory
    events: TransitionSink
    on_elected: Hook
    on_demoted: Hook
    on_fence: Hook | None
    serving: Serving | None
    witness: WitnessClaims | None
    sleep: Callable[[float], None]
    deferred: dict[str, int]
    last_read: LeaseRead | None
    accepted: LeaseRead | None
    handed: tuple[str, int] | None
    _beat: int
    _abstain_until: float | None
    _member_fields: dict[str, Any]
    _renewed_boot: float | None

    if TYPE_CHECKING:  # defined by `Elector`

        @property
        def is_leader(self) -> bool: ...

        @property
        def leader_valid_until_boot(self) -> float | None: ...

        def know(self, epoch: int, seen_key: tuple[str, int, int] | None = None) -> None: ...

        def _report(self, message: str, level: int, key: str = "") -> None: ...

        def _on_gate_clock(self, start: float) -> float: ...

        def _renewed_on_gate_clock(self) -> float | None: ...

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
