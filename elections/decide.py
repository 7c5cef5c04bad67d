"""The election core: pure functions over what a node has observed.

`track(memory, read, now)` folds one read of the lease into what this node
remembers; `decide(memory, read, now, ...)` says what to do next and why. No
I/O, no clock reads: `now` is this node's monotonic clock, passed in.

Expiry is timed as client-go does: from the moment *this* node saw the lease's
(holder, epoch, renew_seq) change, on its own monotonic clock. `lease_until`
(another machine's wall clock) is never read here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from .lease import LeaseRead

# A record may not make followers wait longer than this, whatever it claims.
MAX_TTL_S = 300.0


class Verdict(enum.Enum):
    FOLLOW = "follow"  # someone else holds a live lease
    WAIT = "wait"  # no evidence either way; keep timing the last valid lease
    CONTEND = "contend"  # no live lease: try to take it
    RENEW = "renew"  # leader: rewrite the lease
    HOLD = "hold"  # leader: all is well, nothing to write now
    STEP_DOWN = "step_down"  # leader no more: stop everything at once
    HAND_OFF = "hand_off"  # leader that became ineligible: release to a successor
    IDLE = "idle"  # not eligible: never contend


@dataclass(frozen=True)
class Timing:
    ttl: float = 10.0
    renew: float = 3.0
    poll: float = 2.0
    deadline: float = 7.0


@dataclass(frozen=True)
class Memory:
    """What one node remembers between cycles."""

    node: str
    seen_key: tuple[str, int, int] | None = None  # last valid lease (holder, epoch, seq)
    seen_at: float | None = None  # monotonic time seen_key last changed
    seen_ttl: float = 0.0
    seen_released: bool = False
    seen_handoff: str | None = None
    max_epoch: int = 0  # highest epoch this node knows of
    leader_epoch: int | None = None  # set while this node is leader
    renewed_at: float | None = None  # monotonic start of our last good write
    renew_seq: int = 0  # our own last written renew_seq


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    wake_in: float | None = None  # when the next look is worth taking, if soon
    handoff: bool = False  # CONTEND for a lease handed to this very node

    def __str__(self) -> str:
        return f"{self.verdict.value}: {self.reason}"


def _stale(memory: Memory, read: LeaseRead) -> bool:
    """A validly signed record older than an epoch we already know is a replay or
    a write from a leader that woke up late: no evidence, never obeyed."""
    return read.record is not None and read.record.epoch < memory.max_epoch


def track(memory: Memory, read: LeaseRead, now: float, default_ttl: float) -> Memory:
    """Fold one read into memory: restart the expiry timer when the record changed."""
    rec = read.record
    if read.status == "valid" and rec is not None and not _stale(memory, read):
        max_epoch = max(memory.max_epoch, rec.epoch)
        if rec.key != memory.seen_key or rec.released != memory.seen_released:
            return replace(
                memory,
                seen_key=rec.key,
                seen_at=now,
                seen_ttl=min(float(rec.ttl_s), MAX_TTL_S) if not rec.released else default_ttl,
                seen_released=rec.released,
                seen_handoff=rec.handoff_to,
                max_epoch=max_epoch,
            )
        return replace(memory, max_epoch=max_epoch)
    if memory.seen_at is None and read.status != "missing":
        # First look finds no evidence: someone may hold a lease whose file is
        # damaged. Time a full TTL from now before contending.
        return replace(memory, seen_at=now, seen_ttl=default_ttl)
    return memory


def _no_evidence(read: LeaseRead, memory: Memory) -> str:
    if _stale(memory, read):
        assert read.record is not None
        return f"stale lease ignored ({read.record.describe()} < known epoch {memory.max_epoch})"
    return read.detail or read.status


def decide(
    memory: Memory,
    read: LeaseRead | None,
    now: float,
    timing: Timing,
    *,
    renewing: bool,
    eligible: bool = True,
    ineligible_why: str = "",
    paused: bool = False,
) -> Decision:
    """One cycle's decision. `read` is None when the store was unreachable.
    `renewing` is True on the leader's renew tick (poll ticks only check).
    An ineligible follower never contends; while the pool is `paused` only a
    lease handed to this node is taken (a planned switchover)."""
    if memory.leader_epoch is not None:
        return _decide_leader(memory, read, now, timing, renewing, eligible, ineligible_why)
    decision = _decide_follower(memory, read, now, timing)
    if decision.verdict is Verdict.CONTEND:
        if not eligible:
            return Decision(Verdict.IDLE, f"not eligible: {ineligible_why} ({decision.reason})")
        if paused and not decision.handoff:
            return Decision(Verdict.IDLE, f"pool paused, automatic failover off ({decision.reason})")
    return decision


def _decide_leader(
    memory: Memory,
    read: LeaseRead | None,
    now: float,
    timing: Timing,
    renewing: bool,
    eligible: bool,
    ineligible_why: str,
) -> Decision:
    epoch = memory.leader_epoch
    age = now - (memory.renewed_at if memory.renewed_at is not None else now)
    if age > timing.deadline:
        return Decision(
            Verdict.STEP_DOWN,
            f"deadline: last renewal of epoch {epoch} {age:.1f} s ago > {timing.deadline:g} s",
        )
    if not eligible:
        return Decision(Verdict.HAND_OFF, f"no longer eligible: {ineligible_why}")
    if read is None:
        left = timing.deadline - age
        return Decision(
            Verdict.HOLD,
            f"leader of epoch {epoch}: lease store unreachable, stepping down in {left:.1f} s",
            wake_in=min(timing.renew, left + 0.05),
        )
    rec = read.record
    if read.status == "valid" and rec is not None and not _stale(memory, read):
        if rec.node != memory.node or rec.epoch > (epoch or 0):
            return Decision(Verdict.STEP_DOWN, f"lost: the lease names {rec.describe()}")
        if rec.released:
            return Decision(Verdict.STEP_DOWN, f"released epoch {epoch}")
        if renewing:
            return Decision(Verdict.RENEW, f"leader: renewing epoch {epoch} (last renewal {age:.1f} s ago)")
        return Decision(Verdict.HOLD, f"leader: {memory.node} holds epoch {epoch}, renewed {age:.1f} s ago")
    # Our record is gone, damaged, forged or a stale replay: no evidence that
    # anyone else leads. Rewrite our own valid record (same epoch) at once.
    return Decision(
        Verdict.RENEW, f"leader of epoch {epoch}: {_no_evidence(read, memory)}; rewriting own record"
    )


def _decide_follower(memory: Memory, read: LeaseRead | None, now: float, timing: Timing) -> Decision:
    if read is None:
        return Decision(Verdict.WAIT, "lease store unreachable: cannot contend")
    if read.status == "missing" and memory.seen_key is None:
        return Decision(Verdict.CONTEND, "no lease file and no leader ever seen")
    if memory.seen_at is None:  # pragma: no cover - track() always sets it by now
        return Decision(Verdict.CONTEND, "no leader seen")
    elapsed = now - memory.seen_at
    left = memory.seen_ttl - elapsed
    rec = read.record
    valid = read.status == "valid" and rec is not None and not _stale(memory, read)
    if valid and rec is not None and rec.released:
        if rec.handoff_to == memory.node:
            return Decision(Verdict.CONTEND, f"{rec.node} handed epoch {rec.epoch} to me", handoff=True)
        if rec.handoff_to is None:
            return Decision(Verdict.CONTEND, f"released by {rec.node} (epoch {rec.epoch})")
        if left <= 0:
            return Decision(
                Verdict.CONTEND,
                f"handoff to {rec.handoff_to} not taken within {memory.seen_ttl:g} s",
            )
        return Decision(
            Verdict.FOLLOW,
            f"handoff from {rec.node} to {rec.handoff_to}; waiting {left:.1f} s",
            wake_in=left,
        )
    holder = f"{memory.seen_key[0]} epoch {memory.seen_key[1]}" if memory.seen_key else "no one"
    if left <= 0:
        what = "" if valid else f" ({_no_evidence(read, memory)})"
        return Decision(
            Verdict.CONTEND,
            f"lease of {holder} expired: not renewed for {elapsed:.1f} s ≥ {memory.seen_ttl:g} s{what}",
        )
    if valid and rec is not None:
        return Decision(
            Verdict.FOLLOW,
            f"follower: {rec.node} holds epoch {rec.epoch}, renewed {elapsed:.1f} s ago",
            wake_in=left,
        )
    return Decision(
        Verdict.WAIT,
        f"no evidence: {_no_evidence(read, memory)}; lease of {holder} times out in {left:.1f} s",
        wake_in=left,
    )
