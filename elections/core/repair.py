"""What an agent does about its ownership map (ADR 0011 phase 4): pure.

- **The leader** takes back an address it should hold and does not
  (`drift`, `orphan`, `missing`, or a `conflict` between others): one
  acquiring action of its own epoch (`assign_vip`, `assign_secondary_ip` with
  reassignment), exactly the action of its election plan.
- **A follower** lets go of an address it holds once the live leader holds it
  too (its own `release_vip` / `release_secondary_ip`): the leader takes
  first, the follower lets go after, so the address never answers nowhere.
  A cloud seize moves the address by itself; this catches the rest (a VIP
  added by hand, an old leader whose release failed, a provider that copied).

Each decision rests on this agent's own sighting of itself (an `ip addr`, its
own NIC in the provider's answer), never on another member's report alone:
the follower's "the leader holds it too" may come from the leader's heartbeat,
and a wrong one costs nothing while a live leader exists. Nothing is done
while failover is paused, while a leader duty plan is still running, when the
sighting failed, or within `hold` seconds of this agent's last repair of the
same address (so a fight over an address costs one action per hold). Every
action goes through the executors' fencing gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from elections.core.ownership import Entry, Sighting

ACQUIRE, RELEASE = "acquire", "release"


@dataclass(frozen=True)
class RepairStanding:
    """This agent's part in the pool when it looks."""

    node: str
    held_epoch: int | None  # the epoch this agent leads now, None: follower
    leader: str | None  # the live lease's holder as this agent sees it, None: none
    lease_epoch: int | None
    paused: bool = False
    busy: bool = False  # a leader duty plan (elected / demoted) is still running


@dataclass(frozen=True)
class Repair:
    executor: str
    address: str
    verb: str  # acquire | release
    epoch: int
    cause: str  # the verdict it puts right

    @property
    def key(self) -> tuple[str, str]:
        return (self.executor, self.address)


def repairs(
    entries: Sequence[Entry],
    mine: Sequence[Sighting],
    me: RepairStanding,
    last_repair: Mapping[tuple[str, str], float],
    now: float,
    hold: float,
) -> list[Repair]:
    """At most one repair per address (see the module docstring)."""
    if me.paused or me.busy:
        return []
    sighted = {s.key: s for s in mine if s.held is not None}
    out = []
    for e in entries:
        s = sighted.get(e.key)
        if s is None:
            continue  # this agent could not see itself: never act blind
        last = last_repair.get(e.key)
        if last is not None and now - last < hold:
            continue
        if me.held_epoch is not None:
            if e.expected == me.node and e.epoch == me.held_epoch and not s.held:
                out.append(Repair(e.executor, e.address, ACQUIRE, me.held_epoch, e.verdict))
        elif (
            me.leader not in (None, me.node) and me.lease_epoch is not None
            and s.held and e.expected == me.leader and me.leader in e.holders
        ):  # fmt: skip
            out.append(Repair(e.executor, e.address, RELEASE, me.lease_epoch, e.verdict))
    return out
