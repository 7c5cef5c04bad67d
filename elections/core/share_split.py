"""A share that is not shared (issue 19 item 6): members of one KMSN on two stores. Pure.

The seed's agents mirror ``W:\\socket`` to ``C:\\STK\\socket``; an agent whose
``LEASE_DIR`` names the local copy leads a pool of one, and so does the real
pool: two relays, two epochs 1, and no store that sees both. Beacons (signed
with the pool key, DESIGN.md §13) are the only thing that crosses between
them, so they are the evidence:

- **member_missing**: a member of this KMSN has been beaconing for `grace`
  seconds and its member file never appeared in this agent's store;
- **foreign_leader**: a member has been beaconing as leader of an epoch for
  `grace` seconds while the lease in this agent's store names another holder
  or epoch (a leader whose lease this store does not have).

`grace` must outlast a member's first heartbeat and a lease change reaching
the store (the agent uses 2 × max(``LEASE_TTL``, ``HEARTBEAT_TTL``)): before
it, both are what any start or failover looks like. A finding names both
stores: ours, and the one the member's beacons say (``store``, optional in
beacons; "not said" for a sender without it). It is an alarm, never an
action: nothing here touches the lease.

`SplitWatch.observe(...)` is fed this agent's view at every survey and keeps,
per (member, kind), since when the condition has held on this agent's
monotonic clock; it forgets a condition the moment it stops holding.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

MEMBER_MISSING = "member_missing"
FOREIGN_LEADER = "foreign_leader"
HEARD_WITHIN = 2.0  # seconds: a member counts as beaconing while its last beacon is this fresh
NOT_SAID = "(not said: an older agent)"
MAX_TRACKED = 64


@dataclass(frozen=True)
class Split:
    node: str
    kind: str  # MEMBER_MISSING or FOREIGN_LEADER
    ours: str  # this agent's store, as it names it
    theirs: str  # the member's store, as its beacons name it
    since_s: float  # how long the condition has held
    detail: str

    def to_doc(self) -> dict[str, Any]:
        return {"node": self.node, "kind": self.kind, "ours": self.ours, "theirs": self.theirs,
                "since_s": round(self.since_s, 1), "detail": self.detail}  # fmt: skip


@dataclass
class SplitWatch:
    node: str  # this agent
    store: str  # this agent's store, as it names it
    grace: float
    since: dict[tuple[str, str], float] = field(default_factory=dict)

    def observe(
        self,
        heard: Mapping[str, Mapping[str, Any]],
        member_files: Collection[str] | None,
        lease: tuple[str, int] | None,
        now: float,
    ) -> list[Split]:
        """Findings at `now`. `heard`: the beacon board's members (``role``, ``epoch``,
        ``age_s``, ``store``); `member_files`: the nodes with a member file in this
        agent's store, None when the store could not be read (then nothing is judged
        about files); `lease`: (holder, epoch) of the valid lease read, or None."""
        holding: dict[tuple[str, str], str] = {}
        for node, doc in list(heard.items())[:MAX_TRACKED]:
            age = doc.get("age_s")
            if node == self.node or not isinstance(age, (int, float)) or age > HEARD_WITHIN:
                continue
            if member_files is not None and node not in member_files:
                holding[(node, MEMBER_MISSING)] = (f"{node} beacons as a member of this KMSN, but its member "
                                                   f"file is not in this agent's store")  # fmt: skip
            epoch = doc.get("epoch")
            if doc.get("role") == "leader" and isinstance(epoch, int) and lease != (node, epoch):
                named = f"{lease[0]} epoch {lease[1]}" if lease else "no lease"
                holding[(node, FOREIGN_LEADER)] = (f"{node} beacons as leader of epoch {epoch}, but this "
                                                   f"agent's store has {named}")  # fmt: skip
        self.since = {key: self.since.get(key, now) for key in holding}
        found = []
        for (node, kind), detail in sorted(holding.items()):
            held = now - self.since[(node, kind)]
            if held >= self.grace:
                theirs = heard[node].get("store")
                theirs = theirs if isinstance(theirs, str) and theirs else NOT_SAID
                found.append(Split(node, kind, self.store, theirs, held,
                                   f"{detail}: two stores? this agent's is {self.store}, "
                                   f"{node}'s is {theirs}"))  # fmt: skip
        return found
