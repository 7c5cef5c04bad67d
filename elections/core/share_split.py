"""A share that is not shared (issue 19 item 6): members of one KMSN on two stores. Pure.

The seed's agents mirror ``W:\\socket`` to ``C:\\STK\\socket``; an agent whose
``LEASE_DIR`` names the local copy leads a pool of one, and so does the real
pool: two relays, two epochs 1, and no store that sees both. Beacons (signed
with the pool key, docs/design.md §13) are the only thing that crosses between
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
monotonic clock. It forgets a condition the moment it is contradicted (the
member file appears, the lease names that leader, the member stops leading)
or when the member has not been heard for a whole `grace`; a shorter pause in
its beacons, or a survey that could not list the store, changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

MEMBER_MISSING = "member_missing"
FOREIGN_LEADER = "foreign_leader"
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
    details: dict[tuple[str, str], str] = field(default_factory=dict)

    def observe(
        self,
        heard: Mapping[str, Mapping[str, Any]],
        member_files: Collection[str] | None,
        lease: tuple[str, int] | None,
        now: float,
        lease_known: bool = True,
    ) -> list[Split]:
        """Findings at `now`. `heard`: the beacon board's members (``role``, ``epoch``,
        ``age_s``, ``store``); `member_files`: the nodes with a member file in this
        agent's store, None when the store could not be read (then nothing is judged
        about files); `lease`: (holder, epoch) of the valid lease read, or None for no
        lease; `lease_known` false when the lease could not be read (unreachable,
        corrupt, forged): then nothing is judged about leaders."""
        holding: dict[tuple[str, str], str] = {}
        for node, doc in list(heard.items())[:MAX_TRACKED]:
            age = doc.get("age_s")
            # Not heard for a whole grace: gone, or never here; a shorter pause (a loaded
            # host, lost datagrams) changes nothing: its member file is still not in our store.
            if node == self.node or not isinstance(age, (int, float)) or age > self.grace:
                continue
            missing = (node, MEMBER_MISSING)
            if member_files is None:  # the store was not listed this time: not judged, kept as it was
                if missing in self.details:
                    holding[missing] = self.details[missing]
            elif node not in member_files:
                holding[missing] = (f"{node} beacons as a member of this KMSN, but its member "
                                    f"file is not in this agent's store")  # fmt: skip
            epoch, foreign = doc.get("epoch"), (node, FOREIGN_LEADER)
            if not lease_known:
                if foreign in self.details:
                    holding[foreign] = self.details[foreign]
            elif doc.get("role") == "leader" and isinstance(epoch, int) and lease != (node, epoch):
                named = f"{lease[0]} epoch {lease[1]}" if lease else "no lease"
                holding[foreign] = (f"{node} beacons as leader of epoch {epoch}, but this "
                                                   f"agent's store has {named}")  # fmt: skip
        self.since = {key: self.since.get(key, now) for key in holding}
        self.details = holding
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
