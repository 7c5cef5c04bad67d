"""How often an agent reads the members' files (`members/<node>.json`), and
which (docs/design.md §6, §13; issue 22: a quiet pool, flat in its size).

A member's heartbeat is judged by when this agent saw its seq change
(`core.eligibility`). Without beacons every survey reads the folder and every
file. With beacons each member's beacon says what its record is (`mseq`,
`mdig`: `core.beacons`), so a quiet agent reads only what may have changed:

- a member whose beacons carry a record digest other than that of its record
  held here, or one not held yet (a record not on the share is looked for
  once per digest);
- the members whose beacons say nothing of their record (beacons off on that
  member, an older version, beacons lost) every `quiet_survey_every`, as before;
- the folder's listing once a LEASE_TTL (files come and go);
- its own record is the one it wrote (`PoolStore.own_record`).

A steady pool reads no member file at all; a new `mseq` in a beacon is the
freshness of that member's heartbeat (`Agent.survey`). A store without
`selective_reads` (etcd: one range reads them all) is read whole, on the same cadence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from elections.core.beacons import member_digest
from elections.errors import StoreUnavailable
from elections.ports.store.store import LeaseStore

QUIET_SURVEY_EVERY = 5.0  # at most this long between reads of the members' files while quiet (see below)
KEEP_UNREADABLE = 64

Docs = dict[str, dict[str, Any]]


def quiet_survey_every(heartbeat_ttl: float, lease_renew: float) -> float:
    """How often a quiet agent reads the files of members whose beacons say nothing of
    their record. A member's heartbeat is judged by when this agent saw its seq change,
    so a read every S seconds of heartbeats written every LEASE_RENEW makes a live
    member look up to S + LEASE_RENEW old: S stays under half of what HEARTBEAT_TTL
    leaves, or a live member would be judged stale (TTL 3, renew 1: 1 s; the defaults: 3.5 s)."""
    return min(QUIET_SURVEY_EVERY, max(0.25, (heartbeat_ttl - lease_renew) / 2))


class MemberReads:
    def __init__(
        self, store: LeaseStore, node: str, heartbeat_ttl: float, lease_renew: float, lease_ttl: float,
        monotonic: Callable[[], float],
    ) -> None:  # fmt: skip
        self.store = store
        self.node = node
        self.every = quiet_survey_every(heartbeat_ttl, lease_renew)
        self.listing_every = lease_ttl
        self.monotonic = monotonic
        self.last: tuple[Docs, bool] | None = None  # the records as last read, and whether the share answered
        self._unreadable: dict[str, str] = {}  # node -> the digest its beacons gave, not found on the share
        self._done: dict[str, float] = {}

    def read(self, full: bool, said: dict[str, tuple[int, str]]) -> tuple[Docs, bool]:
        """The members' records: all of them (`full`, or none held yet), or only
        what may have changed (above). `said`: (mseq, mdig) by member, from fresh beacons."""
        self.last = self._read(full, said)
        return self.last

    def _read(self, full: bool, said: dict[str, tuple[int, str]]) -> tuple[Docs, bool]:
        store = self.store
        selective = store.selective_reads  # each record its own read (a share): read only what changed
        if self.last is not None and not full and not (selective and said):
            if not self._due("survey", self.every):
                return self.last  # quiet, and no beacon says anything of the records
            full = True
        if full or self.last is None or not selective:
            now = self.monotonic()
            self._done["listing"] = self._done["survey"] = now  # a whole read is both
            try:
                return store.read_members(), True
            except StoreUnavailable:
                return {}, False
        docs = dict(self.last[0])
        try:
            wanted = {
                n for n, (_, digest) in said.items() if n not in docs or member_digest(docs[n]) != digest
            }
            if self._due("listing", self.listing_every):
                names = store.member_names()
                for gone in set(docs) - names - {self.node}:
                    del docs[gone]
                wanted |= names - set(docs)
            unsaid = {n for n in docs if n not in said and n != self.node}
            if unsaid and self._due("survey", self.every):
                wanted |= unsaid
            for node in sorted(wanted - {self.node}):
                self._read_one(docs, node, said)
        except StoreUnavailable:
            return docs, False
        own = store.own_record
        if own is not None:
            docs[self.node] = own
        return docs, True

    def _read_one(self, docs: Docs, node: str, said: dict[str, tuple[int, str]]) -> None:
        digest = said.get(node, (0, ""))[1]
        if node not in docs and digest and self._unreadable.get(node) == digest:
            return  # a member that beacons a record not on the share: looked for once per record
        doc = self.store.read_member(node)
        if doc is not None:
            docs[node] = doc
            self._unreadable.pop(node, None)
        elif digest:
            self._unreadable[node] = digest
            while len(self._unreadable) > KEEP_UNREADABLE:
                self._unreadable.pop(next(iter(self._unreadable)))

    def _due(self, what: str, every: float) -> bool:
        now = self.monotonic()
        if now - self._done.get(what, -1e9) < every:
            return False
        self._done[what] = now
        return True
