"""Failover history and leadership segments, derived from ElectionEvent rows.

`derive(events)` is pure: given one pool's transitions (elected, stepped_down,
released, handoff, renew_failed, *_requested) it returns one `Failover` per
`elected` event: from whom to whom, why, who asked, and how long the pool had
no leader. Why, in this order of precedence:

  forced        a drain or promote with `force` was issued during the old epoch
  promoted      a promote naming the new leader was issued during the old epoch
  drained       a drain naming the old leader was issued during the old epoch
  handoff       the old leader handed the lease over (elected reason or its event)
  stepped down  the old leader released the lease or stepped down
  leader gone   the new leader took over on positive evidence that the old
                leader's agent was gone (docs/design.md §13), before the TTL ran out
  lease expired the new leader took over after the old lease was not renewed
  first election no leader before

The cause and the gap come as data on the `elected` event (`cause`, `gap_s`,
from `core.decide`): the gap is measured on one machine's clock, the new
leader's, as the time since it last saw the old lease alive. An event without
them (recorded before they existed) falls back to the old leader's end event:
the gap from it to the election (two machines' wall clocks, clamped at 0). No
reason text is ever parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elections.core.decide import GONE, HANDOFF, HANDOFF_LAPSED, RELEASED

REASONS = ("forced", "promoted", "drained", "handoff", "stepped down", "leader gone", "lease expired",
           "first election")  # fmt: skip
END_KINDS = ("stepped_down", "released", "handoff")
COMMAND_KINDS = (
    "drain_requested",
    "promote_requested",
    "undrain_requested",
    "pause_requested",
    "resume_requested",
)


@dataclass(frozen=True)
class Ev:
    """The fields of an ElectionEvent that the derivation needs."""

    id: int
    kmsn: str
    node: str
    epoch: int
    kind: str
    reason: str
    at: datetime
    detail: dict[str, Any]


@dataclass(frozen=True)
class Failover:
    kmsn: str
    epoch: int
    at: datetime
    from_node: str | None
    to_node: str
    reason: str
    actor: str
    gap_s: float | None
    detail: str  # the elected event's own reason text
    correlation: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kmsn": self.kmsn,
            "epoch": self.epoch,
            "at": self.at.isoformat(),
            "from": self.from_node,
            "to": self.to_node,
            "reason": self.reason,
            "actor": self.actor,
            "gap_s": None if self.gap_s is None else round(self.gap_s, 3),
            "detail": self.detail,
            "correlation": self.correlation,
        }


@dataclass(frozen=True)
class Tenure:
    node: str
    epoch: int
    start: datetime
    end: datetime | None  # None: still leading


def derive(events: list[Ev]) -> list[Failover]:
    """One Failover per elected event, oldest first (events of one pool, any order)."""
    events = sorted(events, key=lambda e: (e.at, e.id))
    elected = sorted((e for e in events if e.kind == "elected"), key=lambda e: (e.epoch, e.at, e.id))
    ends: dict[tuple[str, int], Ev] = {}
    commands: dict[int, list[Ev]] = {}
    for e in events:
        if e.kind in END_KINDS:
            ends.setdefault((e.node, e.epoch), e)
        elif e.kind in COMMAND_KINDS:
            commands.setdefault(e.epoch, []).append(e)
    out: list[Failover] = []
    prev: Ev | None = None
    for e in elected:
        if prev is not None and prev.epoch == e.epoch:
            continue  # the same election seen twice
        end = ends.get((prev.node, prev.epoch)) if prev else None
        asked = commands.get(prev.epoch, []) if prev else []
        reason, actor, corr = _why(e, prev, end, asked)
        out.append(
            Failover(
                kmsn=e.kmsn,
                epoch=e.epoch,
                at=e.at,
                from_node=prev.node if prev else None,
                to_node=e.node,
                reason=reason,
                actor=actor,
                gap_s=_gap(e, end),
                detail=e.reason,
                correlation=corr,
            )
        )
        prev = e
    return out


def _why(e: Ev, prev: Ev | None, end: Ev | None, asked: list[Ev]) -> tuple[str, str, str]:
    if prev is None:
        return "first election", "pool", ""
    mine = [c for c in asked if c.kind in ("drain_requested", "promote_requested")]
    for c in reversed(mine):
        if c.detail.get("force"):
            return "forced", _actor(c), str(c.detail.get("correlation") or "")
    for c in reversed(mine):
        if c.kind == "promote_requested" and c.detail.get("target") == e.node:
            return "promoted", _actor(c), str(c.detail.get("correlation") or "")
    for c in reversed(mine):
        if c.kind == "drain_requested" and c.detail.get("target") == prev.node:
            return "drained", _actor(c), str(c.detail.get("correlation") or "")
    cause = e.detail.get("cause")
    if cause in (HANDOFF, HANDOFF_LAPSED) or (end is not None and end.kind == "handoff"):
        return "handoff", "pool", ""
    if end is not None or cause == RELEASED:
        return "stepped down", "pool", ""
    if cause == GONE:
        return "leader gone", "pool", ""
    return "lease expired", "pool", ""


def _actor(c: Ev) -> str:
    return str(c.detail.get("actor") or c.node)


def _gap(e: Ev, end: Ev | None) -> float | None:
    gap = e.detail.get("gap_s")
    if isinstance(gap, (int, float)) and not isinstance(gap, bool) and gap >= 0:
        return float(gap)
    if end is not None:
        return max((e.at - end.at).total_seconds(), 0.0)
    return None


def segments(events: list[Ev], now: datetime, current_epoch: int | None) -> list[Tenure]:
    """Who led when: one segment per elected event, ended by its own end event,
    else by the next election, else still running if it is the current epoch."""
    events = sorted(events, key=lambda e: (e.at, e.id))
    elected = [e for e in events if e.kind == "elected"]
    ends: dict[tuple[str, int], datetime] = {}
    for e in events:
        if e.kind in END_KINDS:
            ends.setdefault((e.node, e.epoch), e.at)
    out = []
    for i, e in enumerate(elected):
        end = ends.get((e.node, e.epoch))
        later = elected[i + 1].at if i + 1 < len(elected) else None
        if end is None:
            if later is not None:
                end = later
            elif e.epoch != current_epoch:
                end = e.at  # ended, when unknown: shown as a sliver
        if end is not None and later is not None:
            end = min(end, later)
        out.append(Tenure(e.node, e.epoch, e.at, end if end is None else min(end, now)))
    return out
