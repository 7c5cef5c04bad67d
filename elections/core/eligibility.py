"""Eligibility of a member (ADR 0011, docs/design.md §6): a pure function.

A member may lead only if it is not drained, its heartbeat is fresh, its
health checks pass, its priority is above 0, and (where configured) the gate
signal says master. Freshness is timed on the *judge's* monotonic clock from
the moment the judge saw the member's heartbeat `seq` change; a member's own
timestamps are never compared with the judge's clock. A heartbeat counts as
stale only after `heartbeat_ttl + promotion_hold` (anti-flap); drain is
immediate. Each verdict names the failing condition and by how much.

Heartbeats say a member was alive a few seconds ago; its beacons say so every
interval. `unheard()` names the members whose beacons have stopped, or that no
member hears at all: they are never chosen as successors (issue 42: a drain
handed the lease to a member killed 3 s before, and nobody served for a TTL),
and a handoff to one is abandoned (`core.decide`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from elections.core.gate import MASTER_SIGNAL


@dataclass(frozen=True)
class Freshness:
    """What a judge remembers about one member's heartbeat."""

    seq: Any = None
    seen_at: float | None = None  # judge's monotonic time seq last changed


@dataclass(frozen=True)
class Judgement:
    node: str
    eligible: bool
    reasons: tuple[str, ...] = field(default_factory=tuple)  # failing conditions, with numbers
    age: float | None = None  # heartbeat age on the judge's clock
    priority: int = 50

    def __str__(self) -> str:
        return "eligible" if self.eligible else "; ".join(self.reasons)


def observe(fresh: Freshness, seq: Any, now: float) -> Freshness:
    """Restart a member's freshness timer when its heartbeat seq changed."""
    if seq != fresh.seq or fresh.seen_at is None:
        return replace(fresh, seq=seq, seen_at=now)
    return fresh


def judge(
    node: str, doc: dict[str, Any] | None, fresh: Freshness, now: float, heartbeat_ttl: float,
    promotion_hold: float, gate: bool | str | None = None,
) -> Judgement:  # fmt: skip
    """Eligibility of `node` from its last heartbeat document `doc`. `gate`: None
    when the member has no gate; else True / `core.gate.MASTER_SIGNAL` (master),
    False, or the reason its gate is not master (`core.gate.gate_of(doc)`)."""
    if doc is None:
        return Judgement(node, False, ("no heartbeat ever seen",))
    reasons: list[str] = []
    priority = doc.get("priority", 50)
    priority = priority if isinstance(priority, int) and not isinstance(priority, bool) else 50
    if doc.get("drain"):
        reasons.append("drained")
    age = None if fresh.seen_at is None else now - fresh.seen_at
    limit = heartbeat_ttl + promotion_hold
    if age is None:
        reasons.append("heartbeat not yet timed")
    elif age > limit:
        reasons.append(f"heartbeat {age:.1f} s old > {heartbeat_ttl:g} + {promotion_hold:g}")
    health = doc.get("health", "ok")
    if health != "ok":
        reasons.append(f"health: {health}")
    if priority <= 0:
        reasons.append("priority 0 (never leader)")
    if gate is False:
        reasons.append("gate signal: not master")
    elif isinstance(gate, str) and gate != MASTER_SIGNAL:
        reasons.append(f"gate: {gate}")
    return Judgement(node, not reasons, tuple(reasons), age, priority)


class Candidate(Protocol):
    @property
    def eligible(self) -> bool: ...

    @property
    def priority(self) -> int: ...


def successor(
    members: Mapping[str, Candidate], excluding: str | None = None, unheard: Collection[str] = ()
) -> str | None:
    """The pool's one successor rule, used by a leader that hands off and by
    every preview: the eligible member with the highest priority, then the
    lowest node id (a stable tie-break every agent computes alike); never one
    that is `unheard` (see `unheard()`)."""
    ranked = sorted(
        (-m.priority, node)
        for node, m in members.items()
        if m.eligible and node != excluding and node not in unheard
    )
    return ranked[0][1] if ranked else None


UNHEARD_INTERVALS = 10.0  # a member's beacons silent this many intervals (2 s at 0.2 s): not chosen


def unheard(
    me: str, heard: Mapping[str, tuple[float, float]], hears: Mapping[str, Collection[str] | None],
    interval: float, listening: float,
) -> dict[str, str]:  # fmt: skip
    """The members not to hand the lease to, and why, as this member's beacons tell:

    - one it heard (`heard`: node -> (seconds since its last beacon, its smoothed gap))
      whose beacons stopped for `UNHEARD_INTERVALS` × max(`interval`, its gap);
    - one it never heard, that beacons (its heartbeat says whom it `hears`: `hears`
      maps each member to that list, None when it says nothing: beacons off there)
      and that no other member's heartbeat says it hears, once this member has
      listened (`listening` seconds) that long itself.

    Only ever a member left out: the choice falls to the next one, or the lease is
    released to no one and every member contends, so a member wrongly judged (its
    beacons lost on the way here alone) costs a plain release, never safety."""
    window = UNHEARD_INTERVALS * interval
    out: dict[str, str] = {}
    for node, says in hears.items():
        if node == me:
            continue
        if node in heard:
            age, gap = heard[node]
            limit = UNHEARD_INTERVALS * max(interval, gap)
            if age > limit:
                out[node] = f"beacons not heard for {age:.1f} s > {limit:.1f} s"
        elif says is not None and listening > window and not _heard_by_any(node, me, hears):
            out[node] = "no member hears its beacons"
    return out


def _heard_by_any(node: str, me: str, hears: Mapping[str, Collection[str] | None]) -> bool:
    return any(node in (h or ()) for n, h in hears.items() if n not in (node, me))
