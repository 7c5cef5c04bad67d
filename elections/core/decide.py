"""The election core: pure functions over what a node has observed.

`decide(memory, observation, now, timing)` says what to do next and why,
over what this node remembers of the lease (`core.lease_memory`: `Memory`,
folded one read at a time by `track`).
The `Observation` carries everything one cycle looked at: the lease read,
this node's eligibility, whether the pool is paused, a planned handoff of the
epoch it holds, the successor the pool's rule names, until when this node
sits out after releasing, and positive evidence that the holder's agent is
gone (its host answered and its beacons stopped: `core.liveness`) or a
majority's silence about a holder that serves by acks (`core.serving`), either
of which lets a follower contend before the TTL runs out, and, for a leader,
whether its serving right lapsed (it then takes a new epoch for itself).
The answer is the whole decision: the verdict, the handoff target, how long
to wait before contending (lower priority waits longer, and everyone defers
to a promoted member), and for a takeover its cause and gap as data. No I/O,
no clock reads: `now` is this node's monotonic clock, passed in.

Expiry is timed as client-go does: from the moment *this* node saw the lease's
(holder, epoch, renew_seq) change, on its own monotonic clock (`track`).
`lease_until` (another machine's wall clock) is never read here. Time this
node did not look (frozen, cut off) is no silence of the holder's: a read that
is no evidence after a gap longer than `Timing.blind_after` starts the timer
again (`lease_memory.blind_gap`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from elections.core.lease import LeaseRead
from elections.core.lease_memory import Memory, knows_a_pool, outdated

PRIORITY_SPREAD = 0.5  # seconds between priority 100 (no wait) and priority 0 before contending
PROMOTE_DEFERENCE = 1.0  # others wait this much longer when a promote names someone else
DEFER_LOOK = 0.25  # seconds: an early takeover deferred for want of a valid read looks again this soon

# Why a follower contends (`Decision.cause`, recorded on its `elected` event).
FIRST, EXPIRED, RELEASED, HANDOFF, HANDOFF_LAPSED, GONE, SILENT, REQUALIFY, OLDER_WRITER = (
    "first",
    "expired",
    "released",
    "handoff",
    "handoff_lapsed",
    "gone",  # positive evidence that the holder's agent is gone (core.liveness)
    "silent",  # a majority has not heard a holder that serves by acks for S (core.serving)
    "requalify",  # a leader whose acks lapsed takes a new epoch, serving by the lease (core.serving)
    # the TTL ran out past the bound of an older epoch's holder's restarts (`lease_memory.older_restart`):
    # that holder may still write, its gate open by acks: the new epoch serves by acks (rule 5)
    "older_writer",
)
CAUSES = (FIRST, EXPIRED, RELEASED, HANDOFF, HANDOFF_LAPSED, GONE, SILENT, REQUALIFY, OLDER_WRITER)
EARLY = (GONE, SILENT)  # takeovers before the TTL of the last valid lease seen (`early_refusal`)
# Why a leader hands off (`Decision.cause` of HAND_OFF).
PLANNED, INELIGIBLE = "planned", "ineligible"


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

    @property
    def blind_after(self) -> float:
        """The longest gap between two of a follower's completed reads of the lease that counts
        toward the TTL of the last valid one (`blind_gap`): TTL − RENEW_DEADLINE, the lease's margin
        between a takeover timed from a renewal and that renewal's deadline (docs/design.md §5.1)."""
        return self.ttl - self.deadline


@dataclass(frozen=True)
class Observation:
    """What one cycle looked at, gathered by the elector (no I/O here)."""

    read: LeaseRead | None  # None: the store was unreachable
    renewing: bool = False  # the leader's renew tick (poll ticks only check)
    eligible: bool = True
    ineligible_why: str = ""
    paused: bool = False  # automatic failover off: only a lease handed to this node is taken
    planned_handoff: tuple[str, str] | None = None  # (target, why): a promote of the held epoch
    successor: str | None = None  # whom a leader that must leave hands the lease to
    sit_out_until: float | None = None  # after a release this node does not contend until then
    priority: int = 50  # 0..100: lower waits longer before contending
    rival_priority: int = 100  # the highest priority of the other members that may contend
    promote_elsewhere: bool = False  # a pending promote names another node: defer to it
    # Positive evidence that the agent holding (node, epoch) is gone, and why
    # (core.liveness): its host said so and its beacons stopped. Counts only for
    # the very lease read this cycle; silence alone never gets here.
    gone: tuple[str, int, str] | None = None
    # A majority's silence about the holder (node, epoch), and why (core.serving.silent_holder):
    # it serves by acks, so its gate shut before anyone could open one. Same rules as `gone`.
    silent: tuple[str, int, str] | None = None
    # Leader: its serving right lapsed (no majority within W) and no earlier holder can still
    # serve (core.serving.ServingRight.lapsed): take a new epoch, serving by the lease.
    serving_lapsed: str | None = None
    # Members known gone or that no one hears, and why (core.eligibility.unheard): never chosen as
    # successors, and a handoff to one is abandoned at once (issue 42).
    unheard: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    wake_in: float | None = None  # when the next look is worth taking, if soon
    handoff: bool = False  # CONTEND for a lease handed to this very node
    handoff_to: str | None = None  # HAND_OFF: the successor (None: anyone)
    delay: float = 0.0  # CONTEND: wait this long first
    cause: str | None = None  # CONTEND: one of CAUSES; HAND_OFF: PLANNED or INELIGIBLE
    gap: float | None = None  # CONTEND: seconds since this node last saw the lease alive
    # WAIT: an early takeover (GONE, SILENT) this cycle's read gave no evidence for, and what that read
    # was ("missing", "corrupt", "forged", "stale", "unreachable"): counted, shown, looked at again soon.
    deferred: str | None = None

    def __str__(self) -> str:
        return f"{self.verdict.value}: {self.reason}"


def _no_evidence(read: LeaseRead, memory: Memory) -> str:
    if outdated(memory, read):
        rec = read.record
        assert rec is not None
        if rec.epoch < memory.max_epoch:
            return f"stale lease ignored ({rec.describe()} < known epoch {memory.max_epoch})"
        assert memory.seen_key is not None
        return f"replayed lease ignored ({rec.describe()} < seen seq {memory.seen_key[2]})"
    return read.detail or read.status


def decide(memory: Memory, obs: Observation, now: float, timing: Timing) -> Decision:
    """One cycle's decision from one observation (see `Observation`)."""
    if memory.leader_epoch is not None:
        decision = _decide_leader(memory, obs, now, timing)
        if obs.planned_handoff is not None and decision.verdict in (Verdict.HOLD, Verdict.RENEW):
            target, why = obs.planned_handoff
            return Decision(Verdict.HAND_OFF, why, handoff_to=target, cause=PLANNED)
        return decision
    decision = _decide_follower(memory, obs.read, now, timing, obs.unheard)
    decision = _by_acks_past_older_writers(memory, decision)
    if decision.verdict in (Verdict.FOLLOW, Verdict.WAIT):
        decision = (_holder_gone(memory, obs.gone, obs.read, now, GONE)
                    or _holder_gone(memory, obs.silent, obs.read, now, SILENT) or decision)  # fmt: skip
    if decision.verdict is not Verdict.CONTEND:
        return decision
    if not obs.eligible:
        return Decision(Verdict.IDLE, f"not eligible: {obs.ineligible_why} ({decision.reason})")
    if obs.paused and not decision.handoff:
        return Decision(Verdict.IDLE, f"pool paused, automatic failover off ({decision.reason})")
    if obs.sit_out_until is not None and now < obs.sit_out_until and not decision.handoff:
        left = obs.sit_out_until - now
        return Decision(Verdict.IDLE, f"sitting out after a release for {left:.1f} s ({decision.reason})")
    delay = contend_delay(obs.priority, decision.handoff, obs.promote_elsewhere, obs.rival_priority)
    return replace(decision, delay=delay)


def evidence_subject(memory: Memory, read: LeaseRead | None) -> tuple[str, int] | None:
    """Whose death positive evidence would be about this cycle: the holder of the
    record read now, if it is fresh evidence; else — the read is a replay, damaged,
    forged or missing, none of which is evidence of life — the holder of the last
    record seen, unless that one was released (issue 28: two old signed copies
    swapped in turned the fast path off and the pool waited out the TTL)."""
    if read is None:
        return None
    rec = read.record
    if read.status == "valid" and rec is not None and not outdated(memory, read):
        return None if rec.released else (rec.node, rec.epoch)
    if memory.seen_key is None or memory.seen_released:
        return None
    return memory.seen_key[0], memory.seen_key[1]


def early_refusal(memory: Memory, read: LeaseRead | None, node: str, epoch: int) -> tuple[str, str] | None:
    """Why this cycle's read is no evidence for taking `node`'s `epoch` over before its TTL, as
    (what the read was, why), or None when it is evidence: a validly signed record of that very
    holder and epoch — the one the silence or the death was judged on — not released, of no epoch
    below what this node knows. An older copy of it (a lower `renew_seq`: issue 28, two old signed
    copies swapped in) is evidence too: it shows the lease in place, naming whom we judged, and
    the claim compares on those very bytes. A missing file (perhaps moved aside by another
    member's claim in progress: docs/design.md §5.1), a damaged, forged or refused one, a record of an
    epoch below what we know, or no read at all say nothing of who holds the lease now: the
    takeover waits for a later look, and the TTL of the last valid lease runs on meanwhile."""
    if read is None:
        return "unreachable", "lease store unreachable"
    rec = read.record
    if read.status != "valid" or rec is None:
        return read.status, read.detail or read.status
    if rec.epoch < memory.max_epoch:
        return "stale", f"stale lease ({rec.describe()} < known epoch {memory.max_epoch})"
    if rec.released or (rec.node, rec.epoch) != (node, epoch):
        return "other", f"the lease names {rec.describe()}"
    return None


def _holder_gone(
    memory: Memory, gone: tuple[str, int, str] | None, read: LeaseRead | None, now: float, cause: str
) -> Decision | None:
    """A live-looking lease whose holder is positively gone, or silent to a
    majority while serving by acks: contend now. Only for the holder
    `evidence_subject` names this cycle (evidence about an older holder, or
    about one a fresh record no longer names, is no evidence), and only on a
    read that is evidence (`early_refusal`); on any other the takeover is
    deferred to a look `DEFER_LOOK` later (a WAIT that says so)."""
    if gone is None or memory.seen_at is None:
        return None
    node, epoch, why = gone
    if evidence_subject(memory, read) != (node, epoch):
        return None
    refused = early_refusal(memory, read, node, epoch)
    if refused is not None:
        what, why_not = refused
        left = memory.seen_ttl - (now - memory.seen_at)
        return Decision(
            Verdict.WAIT, f"early takeover of {node} epoch {epoch} deferred, no evidence: {why_not} "
            f"({why}); lease of {node} epoch {epoch} times out in {left:.1f} s",
            wake_in=max(0.0, min(DEFER_LOOK, left)), deferred=what,
        )  # fmt: skip
    return Decision(Verdict.CONTEND, why, cause=cause, gap=now - memory.seen_at)


def _by_acks_past_older_writers(memory: Memory, decision: Decision) -> Decision:
    """A takeover on the TTL (expired, first, a handoff lapsed) after an older epoch's holder's
    record was refused a restart for its bound (`Memory.older_spent`): cause `older_writer`, whose
    epoch serves by acks (`core.serving.ACKED_FROM_START`, rule 5). That holder may still renew
    without the lock, its gate open by acks: the lease path's premise (nobody wrote for a TTL) does
    not hold, the serving right's rules 1 and 2 do (docs/election.md "Renewing without the lock")."""
    if not memory.older_spent or decision.verdict is not Verdict.CONTEND:
        return decision
    if decision.cause not in (EXPIRED, FIRST, HANDOFF_LAPSED):
        return decision
    return replace(
        decision, cause=OLDER_WRITER, reason=f"{decision.reason}; an older epoch's holder may still write"
    )


def contend_delay(priority: int, handoff: bool, promote_elsewhere: bool, rival: int = 100) -> float:
    """Seconds to wait before contending: a higher priority that contends too
    gets there first, and everyone defers to a member a promote names. `rival`:
    the highest priority of the other members that may contend (100 when unknown):
    the member with the highest contends at once, the others wait for the gap
    (equal ones race, and the store's compare-and-set picks one, as before)."""
    if handoff:
        return 0.0
    own = max(0, min(100, priority))
    delay = max(0, max(0, min(100, rival)) - own) / 100 * PRIORITY_SPREAD
    return delay + (PROMOTE_DEFERENCE if promote_elsewhere else 0.0)


def _decide_leader(memory: Memory, obs: Observation, now: float, timing: Timing) -> Decision:
    read = obs.read
    epoch = memory.leader_epoch
    age = now - (memory.renewed_at if memory.renewed_at is not None else now)
    if age > timing.deadline:
        return Decision(
            Verdict.STEP_DOWN,
            f"deadline: last renewal of epoch {epoch} {age:.1f} s ago > {timing.deadline:g} s",
        )
    rec = obs.read.record if obs.read is not None else None
    fresh = read is not None and read.status == "valid" and rec is not None and not outdated(memory, read)
    if fresh and rec is not None and (rec.node != memory.node or rec.epoch > (epoch or 0)):
        # Before any hand-off: there is nothing left to hand (a leader woken from a freeze, or
        # back on the LAN, whose relay has stopped meanwhile). It steps down and does not sit out
        # the next election as a releaser would: the pool may need it again within a TTL.
        return Decision(Verdict.STEP_DOWN, f"lost: the lease names {rec.describe()}")
    if not obs.eligible:
        return Decision(
            Verdict.HAND_OFF, f"no longer eligible: {obs.ineligible_why}", handoff_to=obs.successor,
            cause=INELIGIBLE,
        )  # fmt: skip
    if read is None:
        left = timing.deadline - age
        return Decision(
            Verdict.HOLD,
            f"leader of epoch {epoch}: lease store unreachable, stepping down in {left:.1f} s",
            wake_in=min(timing.renew, left + 0.05),
        )
    rec = read.record
    if read.status == "valid" and rec is not None and not outdated(memory, read):
        if rec.node != memory.node or rec.epoch > (epoch or 0):
            return Decision(Verdict.STEP_DOWN, f"lost: the lease names {rec.describe()}")
        if rec.released:
            return Decision(Verdict.STEP_DOWN, f"released epoch {epoch}")
        if obs.serving_lapsed is not None:
            return Decision(
                Verdict.CONTEND, f"serving right of epoch {epoch} lapsed ({obs.serving_lapsed}): "
                f"taking a new epoch, serving by the lease", handoff=True, cause=REQUALIFY,
            )  # fmt: skip
        if obs.renewing:
            return Decision(Verdict.RENEW, f"leader: renewing epoch {epoch} (last renewal {age:.1f} s ago)")
        return Decision(Verdict.HOLD, f"leader: {memory.node} holds epoch {epoch}, renewed {age:.1f} s ago")
    # Our record is gone, damaged, forged or a stale replay: no evidence that
    # anyone else leads. Rewrite our own valid record (same epoch) at once.
    return Decision(
        Verdict.RENEW, f"leader of epoch {epoch}: {_no_evidence(read, memory)}; rewriting own record"
    )


def _decide_follower(
    memory: Memory, read: LeaseRead | None, now: float, timing: Timing, unheard: Mapping[str, str]
) -> Decision:
    if read is None:
        return Decision(Verdict.WAIT, "lease store unreachable: cannot contend")
    if read.status == "missing" and not knows_a_pool(memory):
        return Decision(Verdict.CONTEND, "no lease file and no leader ever seen", cause=FIRST)
    if memory.seen_at is None:  # pragma: no cover - track() always sets it by now
        return Decision(Verdict.CONTEND, "no leader seen", cause=FIRST)
    elapsed = now - memory.seen_at
    left = memory.seen_ttl - elapsed
    rec = read.record
    valid = read.status == "valid" and rec is not None and not outdated(memory, read)
    if valid and rec is not None and rec.released:
        if rec.handoff_to == memory.node:
            return Decision(
                Verdict.CONTEND, f"{rec.node} handed epoch {rec.epoch} to me", handoff=True, cause=HANDOFF,
                gap=elapsed,
            )  # fmt: skip
        if rec.handoff_to is None:
            return Decision(
                Verdict.CONTEND, f"released by {rec.node} (epoch {rec.epoch})", cause=RELEASED, gap=elapsed
            )
        if left <= 0:
            return Decision(
                Verdict.CONTEND,
                f"handoff to {rec.handoff_to} not taken within {memory.seen_ttl:g} s",
                cause=HANDOFF_LAPSED,
                gap=elapsed,
            )
        if rec.handoff_to in unheard:
            # Its target is gone or cut off: the lease is as good as released to no one (the releaser
            # fenced its relay before writing it), and the compare-and-set picks one taker (issue 42).
            return Decision(
                Verdict.CONTEND,
                f"handoff to {rec.handoff_to} abandoned: {unheard[rec.handoff_to]}",
                cause=HANDOFF_LAPSED,
                gap=elapsed,
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
            cause=EXPIRED if memory.seen_key is not None else FIRST,
            gap=elapsed if memory.seen_key is not None else None,
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
