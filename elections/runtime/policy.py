"""The pool's policy for one agent's elector (ADR 0011): the facts about the
pool that go into each cycle's `Observation` — eligibility (drain, priority,
the cached health check, the gate's last signal, the relay's own health), pause, a planned handoff of
the epoch this node holds (a promote), the successor by the pool's one rule,
and whether a promote names someone else (everyone else then defers).

It decides nothing: `core.decide` does. It reads state other parts keep
current — `PoolCommands` (operator commands from the pool's event files), the
last pool view (members' eligibility judged on this agent's clock), the
health monitor's last result and the relay's status file — and never blocks:
no check runs on the renewal path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from elections.core.commands import PoolCommands
from elections.core.eligibility import successor
from elections.core.gate import MASTER_SIGNAL
from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import PoolView

RELAY_GRACE = 3.0  # seconds a new leader's relay has to come up before it counts
RELAY_STALE = 3.0  # a relay status older than this is a dead relay


@dataclass(frozen=True)
class PoolFacts:
    """The policy's part of an `Observation` (same field names)."""

    eligible: bool = True
    ineligible_why: str = ""
    paused: bool = False
    planned_handoff: tuple[str, str] | None = None
    successor: str | None = None
    priority: int = 50
    promote_elsewhere: bool = False
    rival_priority: int = 100
    unheard: Mapping[str, str] = field(default_factory=dict)  # core.eligibility.unheard: never chosen


class Policy(Protocol):
    """What the pool's state (ADR 0011) tells this node's elector each cycle."""

    def facts(self, held_epoch: int | None, lease_epoch: int | None) -> PoolFacts:
        """The pool's facts for a cycle in which this node holds `held_epoch`
        (None: follower) and the lease names `lease_epoch`."""


class OpenPolicy:
    """Phase 1: everyone eligible, no commands, no priorities."""

    def facts(self, held_epoch: int | None, lease_epoch: int | None) -> PoolFacts:
        return PoolFacts(priority=100)


class PoolPolicy:
    def __init__(
        self, node: str, priority: int, commands: PoolCommands, pool_view: Callable[[], PoolView],
        leader_since: Callable[[], float | None], local: LocalState, clock_mono: Callable[[], float],
        health: Callable[[], str] = lambda: "ok", relay_attests: bool = True,
        gate: Callable[[], str | None] = lambda: None, unheard: Callable[[], dict[str, str]] = dict,
    ) -> None:  # fmt: skip
        self.node = node
        self.priority = priority
        self.commands = commands
        self.pool_view = pool_view
        self.leader_since = leader_since
        self.local = local
        self.mono = clock_mono
        self.health = health
        self.relay_attests = relay_attests
        self.gate = gate
        self.unheard = unheard  # members whose beacons stopped, or no one hears (core.eligibility.unheard)

    def relay_health(self) -> str:
        """'ok' while the local relay serves this leadership (or is still
        within its start-up grace); a lease must attest the relay, not only a
        live Celery worker."""
        since = self.leader_since()
        if since is None or self.mono() - since < RELAY_GRACE:
            return "ok"
        status = self.local.relay_health()  # its own small record, never the snapshot
        if not status.serving():
            return "relay not running"
        age = self.mono() - (status.updated or 0.0)
        if age > RELAY_STALE:
            return f"relay status {age:.1f} s old > {RELAY_STALE:g} s"
        return "ok"

    def eligibility(self) -> tuple[bool, str]:
        if self.local.stopping():  # SIGTERM: the supervisor hands the lease over; take none back
            return False, "this agent is stopping"
        if self.commands.drained.get(self.node):
            return False, "drained"
        if self.priority <= 0:
            return False, "priority 0 (never leader)"
        health = self.health()
        if health != "ok":
            return False, health
        gate = self.gate()  # None: no gate configured; else MASTER_SIGNAL or why not (core.gate)
        if gate is not None and gate != MASTER_SIGNAL:
            return False, f"gate: {gate}"
        if self.relay_attests and self.leader_since() is not None:
            relay = self.relay_health()
            if relay != "ok":
                return False, relay
        return True, ""

    def successor(self, unheard: Mapping[str, str] | None = None) -> str | None:
        gone = self.unheard() if unheard is None else unheard
        return successor(self.pool_view().members, excluding=self.node, unheard=gone)

    def rival_priority(self) -> int:
        """The highest priority of the other eligible members but the lease's holder (the
        one being replaced): a takeover by the highest waits for nobody (issue 22: every
        failover of a pool of equal priorities waited 0.25 s for a rival that waited as long).
        0 when the others are all ineligible; 100 (as before) while this view knows no other."""
        view = self.pool_view()
        holder = (view.lease or {}).get("node")
        others = {n: m for n, m in view.members.items() if n not in (self.node, holder)}
        if not others:
            return 100  # a pool starting: the members not read yet may be of any priority
        return max((m.priority for m in others.values() if m.eligible), default=0)

    def handoff(self, epoch: int, unheard: Mapping[str, str] | None = None) -> tuple[str, str] | None:
        """(target, why) when a promote of `epoch` names an eligible other member that is heard."""
        target = self.commands.promote_at(epoch)
        if target is None or target == self.node:
            return None
        members = self.pool_view().members
        if target not in members or not members[target].eligible:
            return None  # checked when submitted; if it fell ineligible since, do not hand off blindly
        if target in (self.unheard() if unheard is None else unheard):
            return None  # gone since: a handoff to it would wait out a TTL
        return target, f"promote of {target} requested"

    def facts(self, held_epoch: int | None, lease_epoch: int | None) -> PoolFacts:
        ok, why = self.eligibility()
        unheard = self.unheard()
        promoted = self.commands.promote_at(lease_epoch) if lease_epoch is not None else None
        return PoolFacts(
            eligible=ok,
            ineligible_why=why,
            paused=self.commands.paused,
            planned_handoff=self.handoff(held_epoch, unheard) if held_epoch is not None else None,
            successor=self.successor(unheard) if held_epoch is not None else None,
            priority=self.priority,
            promote_elsewhere=promoted is not None and promoted != self.node,
            rival_priority=self.rival_priority() if held_epoch is None else 100,
            unheard=unheard,
        )
