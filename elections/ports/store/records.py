"""`PoolStore`: the pool's records over any `Backend` (docs/design.md §5.1, §5.2,
§5.4), written once. It is the `LeaseStore` of every backend.

What it keeps, whatever the backend:

- Every record is signed with the pool key (`pool_key`); nothing read is
  trusted (§5.4). A lease is parsed by `parse_lease`; a member record must be
  validly signed, name its own node, carry counters a database holds
  (`check_member`), and its heartbeat `seq` may only grow (a lower one is a
  replay: refused, and the last good record is kept, ageing as if silent).
  Whatever fails is counted in `refusals` and logged once per record and cause
  (`refuse`).
- `write` is the backend's compare-and-set of the lease; `acquire` its
  `claim`: one more than the highest epoch the pool recorded (the lease, the
  members' claims, the epoch counter if the backend keeps one, and what the
  caller knows), the claim in this member's record, then the lease — all or
  nothing. No two nodes can take one epoch, and none is taken twice, even when
  the lease or the members' records are deleted.
- `write_member` never lowers this member's epoch or seq, across restarts too:
  it starts above what its record holds. Its next heartbeat need not read the
  record back (`_own`: what this client last wrote); it is read again after a
  write that failed or lost a race, and after a restart.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead, LeaseRecord, parse_lease, sign, signature_ok
from elections.core.skew import ClockReading
from elections.core.untrusted import (
    FORGED,
    LEASE,
    MEMBER,
    REPLAYED,
    UNSIGNED,
    WRONG_NODE,
    Untrusted,
    as_int,
    check_member,
    load_object,
)
from elections.core.witness import WITNESS, WitnessRead, WitnessRecord, parse_witness
from elections.errors import StoreUnavailable
from elections.ports.share.sharefiles import NODE_FILE
from elections.ports.store.backend import (
    LEASE_KEY,
    MEMBERS,
    WITNESS_KEY,
    Backend,
    Got,
    Write,
    WriteOutcome,
    counted,
    member_key,
)
from stkhost.clock import Clock

log = logging.getLogger("stkrelay.store")

MAX_MEMBERS = 64  # member records read per pool; more are refused (too_many)
MEMBER_WRITE_TRIES = 3  # compare-and-set of this member's record, when another writer of it got there first


class PoolStore:
    def __init__(
        self, backend: Backend, pool_key: str, node: str, clock: Clock, refusals: Refusals | None = None
    ) -> None:
        self.backend = backend
        self.pool_key = pool_key  # signs and verifies every record
        self.node = node
        self.clock = clock
        self.refusals = refusals if refusals is not None else Refusals()
        self._refuse = counted(self.refusals, clock, backend.where)
        self._member_seq: dict[str, int] = {}  # node -> highest heartbeat seq accepted
        self._member_doc: dict[str, dict[str, Any]] = {}  # node -> that heartbeat
        self._own: tuple[str, dict[str, Any]] | None = None  # (revision, doc) of what we last wrote
        self._member_written: tuple[float, float] | None = None  # wall clock around our last heartbeat write
        self._lease_read: tuple[Got, LeaseRead] | None = None  # the last lease read, for a cached Got
        self._lease_mine: tuple[str, str, int] | None = None  # (revision, node, epoch): our last lease write
        self._members_read: dict[str, dict[str, Any]] | None = None  # the last listing, for a cached one
        self.own_record: dict[str, Any] | None = None  # our last heartbeat (without `sig`), for the beacons
        self.selective_reads = backend.reads_one_by_one  # `read_member`/`member_names` are worth it
        self._witness_floor = 0  # the highest epoch of a witness record read or written: below it, a replay

    def describe(self) -> str:
        return self.backend.describe()

    def details(self) -> dict[str, Any]:
        """What the panel shows of the store (etcd: endpoints, leader, revision)."""
        return self.backend.details()

    def wait_change(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """Wait until the lease may have changed (True) or `timeout` passes."""
        return self.backend.wait_change(LEASE_KEY, timeout, stop)

    def refuse(self, source: str, exc: Untrusted, log_it: bool = True) -> None:
        """Count and (once per source and cause) log something the store holds that is no evidence
        (`backend.counted`: the backend was handed one of its own, counting in the same `refusals`)."""
        self._refuse(source, exc, log_it)

    # -- the lease ---------------------------------------------------------------------
    def read(self) -> LeaseRead:
        return self.backend.run(self._read_lease)

    def _read_lease(self) -> LeaseRead:
        got = self.backend.get(LEASE_KEY, LEASE.max_bytes)
        last = self._lease_read
        if got.cached and last is not None and last[0].revision == got.revision:
            return last[1]  # unchanged since it was judged (and counted)
        read = self._judge_lease(got)
        self._lease_read = (got, read)
        return read

    def _judge_lease(self, got: Got, count: bool = True) -> LeaseRead:
        source = self.backend.source(LEASE_KEY)
        if got.refused is not None:
            exc = got.refused
            if count:
                self.refuse(source, exc, log_it=False)  # counted like any other refused lease
            return LeaseRead("corrupt", detail=exc.detail, revision=got.revision, cause=exc.cause)
        read = replace(parse_lease(got.data, self.pool_key), revision=got.revision)
        if got.data is None and got.note:
            read = replace(read, detail=got.note)
        if read.cause and count:  # counted here; the elector logs what it makes of the lease
            self.refuse(source, Untrusted(read.cause, read.detail), log_it=False)
        return read

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        data = record.encode(self.pool_key)
        hold = 0.0 if record.released else record.ttl_s
        # A plain renewal of the record this store wrote last: the backend may skip its lock.
        renewal = (
            self._lease_mine == (expect, record.node, record.epoch)
            and record.ttl_s > 0
            and not record.released
            and record.handoff_to is None
        )

        def run() -> WriteOutcome:
            self._lease_mine = None  # unknown until the write is done
            outcome, written = self.backend.cas(LEASE_KEY, data, expect, fence, hold, renewal=renewal)
            if outcome is WriteOutcome.WRITTEN:
                self._lease_mine = (written, record.node, record.epoch)
            return outcome

        return self.backend.run(run)

    def acquire(
        self,
        make: Callable[[int], LeaseRecord | None],
        expect: str,
        known_epoch: int,
        member: dict[str, Any],
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        return self.backend.run(lambda: self._acquire(make, expect, known_epoch, member))

    def _acquire(
        self, make: Callable[[int], LeaseRecord | None], expect: str, known_epoch: int, member: dict[str, Any]
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        made: list[tuple[LeaseRecord, dict[str, Any]]] = []
        counter = self.backend.counter_key
        node = str(member.get("node") or self.node)

        def build(lease: Got) -> list[Write]:
            counter_got = self.backend.get(counter, LEASE.max_bytes) if counter else None
            self._own = None  # an election is rare: compare on what our record holds now
            own_rev, own = self._read_own(node)
            highest = max(known_epoch, self._lease_epoch(lease), self._counter_epoch(counter_got),
                          self._members_epoch())  # fmt: skip
            record = make(highest + 1)
            if record is None:
                return []  # the caller starts over (an early takeover seeing a fresher epoch): CHANGED
            claim = _next_member(dict(member, epoch=record.epoch), own)
            made.append((record, claim))
            writes = []
            if counter and counter_got is not None:
                body = {"epoch": record.epoch, "node": node}
                writes.append(Write(counter, self._signed(body), counter_got.revision))
            claim_bytes = self._signed(claim) + self.backend.record_end
            writes.append(Write(member_key(node), claim_bytes, own_rev))  # the claim, before the lease
            writes.append(Write(LEASE_KEY, record.encode(self.pool_key), hold_s=record.ttl_s))
            return writes

        self._lease_mine = None
        claimed = self.backend.claim(expect, build)
        if claimed.outcome is not WriteOutcome.WRITTEN or not made:
            self._own = None
            return claimed.outcome, None
        record, claim = made[-1]  # the record of the build that was written (a retry builds again)
        self._lease_mine = (claimed.revisions.get(LEASE_KEY, ""), record.node, record.epoch)
        if node == self.node:
            self._wrote_own(claimed.revisions.get(member_key(node), ""), claim)
        return WriteOutcome.WRITTEN, record

    def _lease_epoch(self, got: Got) -> int:
        read = self._judge_lease(got, count=False)
        return read.record.epoch if read.status == "valid" and read.record is not None else 0

    def _counter_epoch(self, got: Got | None) -> int:
        if got is None or (got.data is None and got.refused is None):
            return 0
        source = self.backend.source(self.backend.counter_key or "")
        try:
            if got.refused is not None:
                raise got.refused
            doc = load_object(got.data or b"", MEMBER, source)
            if not signature_ok(doc, self.pool_key):
                raise Untrusted(
                    UNSIGNED if "sig" not in doc else FORGED, "epoch counter is not validly signed"
                )
        except Untrusted as exc:
            self.refuse(source, exc)
            return 0
        return counter_of(doc.get("epoch"))

    def highest_epoch(self) -> int:
        def run() -> int:
            best = self._lease_epoch(self.backend.get(LEASE_KEY, LEASE.max_bytes, fresh=True))
            counter = self.backend.counter_key
            if counter:
                best = max(best, self._counter_epoch(self.backend.get(counter, LEASE.max_bytes)))
            return max(best, self._members_epoch())

        return self.backend.run(run)

    # -- the share's witness (issue 38) -----------------------------------------------------
    def read_witness(self, kmsn: str) -> WitnessRead:
        """The witness record as the store holds it now, judged (`core.witness.parse_witness`):
        whatever is no evidence is counted and logged once per cause, never raised; a valid
        record of an epoch below one this store read before is a replay."""

        def run() -> WitnessRead:
            got = self.backend.get(WITNESS_KEY, WITNESS.max_bytes, fresh=True)
            source = self.backend.source(WITNESS_KEY)
            if got.refused is not None:
                self.refuse(source, got.refused)
                return WitnessRead("refused", revision=got.revision, cause=got.refused.cause,
                                   detail=got.refused.detail)  # fmt: skip
            read = parse_witness(got.data, self.pool_key, kmsn, self._witness_floor, got.revision)
            if read.status == "refused":
                self.refuse(source, Untrusted(read.cause, read.detail))
            elif read.record is not None:
                self._witness_floor = max(self._witness_floor, read.record.epoch)
            return read

        return self.backend.run(run)

    def write_witness(self, record: WitnessRecord, expect: str) -> WriteOutcome:
        """The witness record's compare-and-set on the revision `expect` read before (W1, W2, W4:
        the caller's verdict on that read decides whether to write at all)."""

        def run() -> WriteOutcome:
            outcome, _written = self.backend.cas(WITNESS_KEY, record.encode(self.pool_key), expect)
            if outcome is WriteOutcome.WRITTEN:
                self._witness_floor = max(self._witness_floor, record.epoch)
            return outcome

        return self.backend.run(run)

    # -- members' heartbeats -------------------------------------------------------------
    def _signed(self, doc: dict[str, Any]) -> bytes:
        body = {k: v for k, v in doc.items() if k != "sig"}
        return json.dumps(dict(body, sig=sign(body, self.pool_key))).encode()

    def _read_own(self, node: str | None = None) -> tuple[str, dict[str, Any]]:
        """(revision, doc) of a member's own record (this node's unless told), the doc
        only if validly signed; junk in its place is counted, and overwritten."""
        node = node or self.node
        if node == self.node and self._own is not None:
            return self._own
        key = member_key(node)
        got = self.backend.get(key, MEMBER.max_bytes)
        try:
            if got.refused is not None:
                raise got.refused
            doc = load_object(got.data or b"{}", MEMBER, self.backend.source(key))
        except Untrusted as exc:  # planted in its place (a link, a FIFO, junk): counted, replaced
            self.refuse(self.backend.source(key), exc)
            return got.revision, {}
        return got.revision, doc if signature_ok(doc, self.pool_key) else {}

    def _wrote_own(self, revision: str, doc: dict[str, Any]) -> None:
        self._own = (revision, doc)
        self.own_record = doc

    def write_member(self, doc: dict[str, Any]) -> None:
        """Write this member's heartbeat; never lowers its epoch or its seq."""
        node = str(doc["node"])
        own = node == self.node

        def run() -> None:
            for _ in range(MEMBER_WRITE_TRIES):
                revision, mine = self._read_own(node)
                body = _next_member(doc, mine)
                before = self.clock.wall().timestamp()
                if own:
                    self._own = None  # unknown until this write is done
                data = self._signed(body) + self.backend.record_end
                outcome, written = self.backend.cas(member_key(node), data, revision)
                if outcome is WriteOutcome.WRITTEN:
                    if own:  # when, on this clock, the store timed our write
                        self._member_written = (before, self.clock.wall().timestamp())
                        self._wrote_own(written, body)
                    return
            raise StoreUnavailable(f"member record {self.backend.source(member_key(node))} kept changing")

        self.backend.run(run)

    def _member(self, node: str, got: Got) -> dict[str, Any] | None:
        source = self.backend.source(member_key(node[:64]))
        if got.data is None and got.refused is None:
            return None  # removed between the listing and this read (a forget): gone, not forged
        try:
            if got.refused is not None:
                raise got.refused
            doc = load_object(got.data or b"", MEMBER, source)
            if not signature_ok(doc, self.pool_key):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, f"{node} is not validly signed")
            if doc.get("node") != node:
                raise Untrusted(WRONG_NODE, f"{node}'s record names node {str(doc.get('node'))[:64]!r}")
            check_member(doc, source)
            seq = counter_of(doc.get("seq"))
            if seq < self._member_seq.get(node, 0):
                raise Untrusted(REPLAYED, f"{node}: heartbeat seq {seq} < {self._member_seq[node]} seen")
        except Untrusted as exc:
            self.refuse(source, exc)
            return self._member_doc.get(node)  # the last good heartbeat: it ages as if silent
        self._member_seq[node], self._member_doc[node] = seq, doc
        return doc

    def _read_members(self, fresh: bool = False) -> dict[str, dict[str, Any]]:
        listing = self.backend.list(MEMBERS, MAX_MEMBERS, MEMBER.max_bytes, fresh=fresh)
        if listing.cached and self._members_read is not None:
            return dict(self._members_read)
        for exc in listing.refused:
            self.refuse(self.backend.source(MEMBERS), exc)
        out = {}
        for node, got in listing.found.items():
            doc = self._member(node, got)
            if doc is not None:
                out[node] = doc
        self._members_read = out
        return dict(out)

    def read_members(self) -> dict[str, dict[str, Any]]:
        """Every member's last valid heartbeat, by node (bad records are refused)."""
        return self.backend.run(self._read_members)

    def _members_epoch(self) -> int:
        members = self._read_members(fresh=True)  # an election counts what the store holds now
        return max((counter_of(d.get("epoch")) for d in members.values()), default=0)

    def read_member(self, node: str) -> dict[str, Any] | None:
        """One member's last valid heartbeat (one read; a bad record is refused as in `read_members`)."""
        if not NODE_FILE.fullmatch(node):
            return None
        return self.backend.run(
            lambda: self._member(node, self.backend.get(member_key(node), MEMBER.max_bytes))
        )

    def member_names(self) -> set[str]:
        """The nodes with a member record (one listing, no record read)."""
        return self.backend.run(lambda: self.backend.names(MEMBERS, MAX_MEMBERS))

    def remove_member(self, node: str) -> bool:
        """Remove `node`'s member record (a retired member: `relayctl forget`); True if
        there was one. Its events stay."""
        if not NODE_FILE.fullmatch(node):
            raise ValueError(f"{node[:64]!r} is not a node id")
        self.forget_member(node)
        return self.backend.run(lambda: self.backend.delete(member_key(node)))

    def forget_member(self, node: str) -> None:
        """Drop what this store remembers of `node`'s heartbeats: a member of that name
        that comes back starts afresh."""
        self._member_seq.pop(node, None)
        self._member_doc.pop(node, None)
        self._members_read = None

    def measure_clock(self) -> ClockReading | None:
        """This machine's wall clock against the store's (`core.skew`), or None. Shown only."""
        key = member_key(self.node)
        return self.backend.run(lambda: self.backend.measure_clock(key, self._member_written))


def _next_member(doc: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    """`doc`, never below what the member's record holds: its epoch kept, its seq past it."""
    doc = {k: v for k, v in doc.items() if k != "sig"}
    if counter_of(mine.get("epoch")) > counter_of(doc.get("epoch")):
        doc["epoch"] = counter_of(mine.get("epoch"))
    if counter_of(mine.get("seq")) >= counter_of(doc.get("seq")):
        doc["seq"] = counter_of(mine.get("seq")) + 1  # the seq only grows, across restarts too
    return doc


def counter_of(value: Any) -> int:
    """A record's counter (seq, epoch) as a number: anything but a positive int is 0."""
    return as_int(value, 0, minimum=1)
