"""`EtcdLeaseStore`: the `LeaseStore` port on etcd v3 (DESIGN.md §5.2), with
the same records, signatures and refusals as the file backend (§5.1, §5.4).

- `read()` is a linearizable range of `pool/leader`, parsed by `parse_lease`
  like the file's bytes. With the pool's watch connected and nothing changed,
  the last read is handed back until its fallback timer runs out.
- `write()` is one transaction compared on the key's `mod_revision` (never a
  blind put). The record stays bound to the holder's etcd lease, refreshed
  first (keepalive); a lease etcd no longer has means the holder lost it
  behind its back: `WriteOutcome.LOST`, nothing written. A released record
  (`ttl_s: 0`) is put without a lease, so it stays for the handoff, and the
  holder's etcd lease is revoked.
- `acquire()` grants a new etcd lease and, in one transaction compared on the
  `mod_revision` of the lease, the epoch counter and this member's own key,
  moves the counter to one more than the highest epoch the pool recorded (the
  counter, the lease, the members' claims, `known_epoch`), writes the claim in
  this member's record and the lease. No two nodes can take one epoch, and an
  epoch is never taken again even when keys are deleted (the claims and the
  callers' memory still count).
- `write_member()` never lowers this member's epoch or heartbeat `seq`; it too
  compares on the key's `mod_revision`.

Whatever the prefix holds that is not evidence (unsigned, forged, replayed,
another node's record under this node's key, oversized, not JSON) is refused,
counted in `refusals` and logged once per key and cause, exactly as on the
share. Every call has the client's deadline: `StoreUnavailable`, never a hang.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from email.utils import parsedate_to_datetime
from typing import Any

from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead, LeaseRecord, parse_lease, sign, signature_ok
from elections.core.skew import ClockReading, from_window
from elections.core.untrusted import (
    FORGED,
    LEASE,
    MEMBER,
    REPLAYED,
    TOO_LARGE,
    UNSIGNED,
    WRONG_NODE,
    Untrusted,
    check_member,
    load_object,
)
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.etcd.client import LeaseNotFound, Refused, as_int, delete, mod_is, put
from elections.ports.etcd.pool import (
    EPOCH_KEY,
    LEASE_KEY,
    MEMBERS,
    NODE,
    EtcdPool,
    Kv,
    parse_revision,
    revision,
)
from elections.ports.store import MAX_MEMBERS, SECURITY_CAUSES, WriteOutcome

log = logging.getLogger("stkrelay.store")

MEMBERS_CAP = 2 << 20  # bytes of one answer listing the members


class EtcdLeaseStore:
    def __init__(self, pool: EtcdPool, token: str, node: str, clock: Clock, refusals: Refusals | None = None,
                 watch: bool = True) -> None:  # fmt: skip
        self.pool = pool
        self.client = pool.client
        self.token = token
        self.node = node
        self.clock = clock
        self.refusals = refusals if refusals is not None else Refusals()
        self.watch = pool.watching() if watch else None
        self._listening = False  # told of revoked leases once it holds one (short-lived readers never are)
        self._held = 0  # the etcd lease under the record this store wrote as holder
        self._lost: set[int] = set()  # etcd leases the watch saw taken away
        self._lease_cache: tuple[int, float, LeaseRead] | None = None  # (generation, when, read)
        self._members_cache: tuple[int, float, dict[str, dict[str, Any]]] | None = None
        self._member_seq: dict[str, int] = {}
        self._member_doc: dict[str, dict[str, Any]] = {}
        self._own: tuple[int, dict[str, Any]] | None = None  # (mod_revision, doc) of our member key
        self._lock = threading.Lock()

    def describe(self) -> str:
        return self.pool.describe()

    def refuse(self, source: str, exc: Untrusted, log_it: bool = True) -> None:
        at = self.clock.wall().isoformat(timespec="seconds")
        if self.refusals.note(source, exc.cause, exc.detail, at, self.clock.monotonic()) and log_it:
            level = logging.ERROR if exc.cause in SECURITY_CAUSES else logging.WARNING
            prefix = "SECURITY: " if exc.cause in SECURITY_CAUSES else ""
            log.log(
                level, "%signoring %s in %s: %s (%s)", prefix, source, self.describe(), exc.detail, exc.cause
            )

    def _lease_gone(self, lease: int) -> None:
        self._lost.add(lease)
        if len(self._lost) > 64:
            self._lost = {lease}

    def details(self) -> dict[str, Any]:
        """The store as the panel shows it: endpoints, the etcd leader, the revision."""
        from elections.ports.etcd.health import cluster_view

        return cluster_view(self.pool)

    def wait_change(self, timeout: float) -> bool:
        """Sleep until the lease changes (the watch says so) or `timeout` passes: a
        loop that waits here instead of sleeping sees a release at once."""
        w = self.watch
        if w is None or not w.connected:
            time.sleep(max(0.0, timeout))
            return False
        cached = self._lease_cache
        since = cached[0] if cached is not None else w.generation["lease"]
        return w.wait_change("lease", since, max(0.0, timeout))

    @property
    def held_lease(self) -> int:
        return self._held

    # -- the lease ---------------------------------------------------------------------
    def _cached(self, part: str, cache: tuple[int, float, Any] | None) -> Any:
        w = self.watch
        if cache is None or w is None or not w.connected:
            return None
        gen, at, value = cache
        if gen != w.generation[part] or time.monotonic() - at >= self.pool.fallback:
            return None
        return value

    def read(self) -> LeaseRead:
        cached = self._cached("lease", self._lease_cache)
        if cached is not None:
            return cached
        gen = self.watch.generation["lease"] if self.watch else 0
        read = self._read_lease()
        self._lease_cache = (gen, time.monotonic(), read)
        return read

    def _read_lease(self) -> LeaseRead:
        kv = self.pool.get(LEASE_KEY, LEASE.max_bytes)
        if kv is None:
            gone = self._held and self._held in self._lost
            detail = "the etcd lease under this node's record was revoked" if gone else "no lease key"
            return LeaseRead("missing", detail=detail, revision=revision(0, 0))
        if kv.value is None:
            exc = Untrusted(TOO_LARGE, f"lease value is larger than {LEASE.max_bytes} bytes")
            self.refuse(LEASE_KEY, exc, log_it=False)
            return LeaseRead("corrupt", detail=exc.detail, revision=kv.revision, cause=TOO_LARGE)
        read = replace(parse_lease(kv.value, self.token), revision=kv.revision)
        if read.cause:
            self.refuse(LEASE_KEY, Untrusted(read.cause, read.detail), log_it=False)
        return read

    def _attach(self, record: LeaseRecord, key_lease: int) -> int | None:
        """The etcd lease the record is written under; None if the holder lost its own."""
        if record.released:
            return 0
        if self._held:
            if self._held in self._lost or self.client.keepalive(self._held) <= 0:
                return None
            return self._held
        if key_lease and self.client.keepalive(key_lease) > 0:
            return key_lease  # this node's record, written by another process of it
        lease, _granted = self.client.grant(max(1, math.ceil(record.ttl_s)))
        self._held = lease
        return lease

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        seen = parse_revision(expect)
        if seen is None:
            return WriteOutcome.CHANGED  # a revision of another store: read again
        mod, key_lease = seen
        with self._lock:
            lease = self._attach(record, key_lease)
            if lease is None:
                return self._lose(f"etcd lease {self._held:x} is gone")
            if fence is not None and not fence():
                return WriteOutcome.FENCED
            try:
                key = self.pool.key(LEASE_KEY)
                doc = self.client.txn([mod_is(key, mod)], [put(key, record.encode(self.token), lease)])
            except LeaseNotFound:
                return self._lose(f"etcd lease {lease:x} is gone")
            self.pool.touched("lease")
            if not doc.get("succeeded"):
                return WriteOutcome.CHANGED
            if record.released and self._held:
                held, self._held = self._held, 0
                self._revoke(held)
            return WriteOutcome.WRITTEN

    def _lose(self, why: str) -> WriteOutcome:
        log.warning("%s no longer holds the lease in %s: %s", self.node, self.describe(), why)
        self._held = 0
        return WriteOutcome.LOST

    def _revoke(self, lease: int) -> None:
        try:
            self.client.revoke(lease)
        except (StoreUnavailable, Refused) as exc:
            log.info("etcd lease %x not revoked (it expires by itself): %s", lease, exc)

    def acquire(
        self, make: Callable[[int], LeaseRecord], expect: str, known_epoch: int, member: dict[str, Any]
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        seen = parse_revision(expect)
        if seen is None:
            return WriteOutcome.CHANGED, None
        with self._lock:
            lease_kv = self.pool.get(LEASE_KEY, LEASE.max_bytes)
            if (lease_kv.mod if lease_kv else 0) != seen[0]:
                return WriteOutcome.CHANGED, None
            counter_kv = self.pool.get(EPOCH_KEY, LEASE.max_bytes)
            self._own = None  # an election is rare: compare on what our key holds now
            own_mod, own = self._read_own()
            highest = max(known_epoch, self._lease_epoch(lease_kv), self._counter_epoch(counter_kv),
                          self._members_epoch())  # fmt: skip
            record = make(highest + 1)
            lease, _granted = self.client.grant(max(1, math.ceil(record.ttl_s)))
            claim = self._next_member(dict(member, epoch=record.epoch), own)
            counter = {"epoch": record.epoch, "node": self.node}
            try:
                doc = self.client.txn(
                    [mod_is(self.pool.key(LEASE_KEY), seen[0]),
                     mod_is(self.pool.key(EPOCH_KEY), counter_kv.mod if counter_kv else 0),
                     mod_is(self._member_key(self.node), own_mod)],
                    [put(self.pool.key(EPOCH_KEY), _signed(counter, self.token)),
                     put(self._member_key(self.node), _signed(claim, self.token)),
                     put(self.pool.key(LEASE_KEY), record.encode(self.token), lease)],
                )  # fmt: skip
            except LeaseNotFound:
                return WriteOutcome.CHANGED, None
            self.pool.touched("lease")
            self.pool.touched("members")
            if not doc.get("succeeded"):
                self._own = None
                self._revoke(lease)
                return WriteOutcome.CHANGED, None
            self._own = (_txn_revision(doc), claim)
            if self.watch is not None and not self._listening:
                self._listening = True
                self.watch.on_lease_gone(self._lease_gone)
            if self._held and self._held != lease:
                self._revoke(self._held)
            self._held = lease
            self._lost.discard(lease)
            return WriteOutcome.WRITTEN, record

    def _lease_epoch(self, kv: Kv | None) -> int:
        if kv is None or kv.value is None:
            return 0
        read = parse_lease(kv.value, self.token)
        return read.record.epoch if read.status == "valid" and read.record is not None else 0

    def _counter_epoch(self, kv: Kv | None) -> int:
        if kv is None:
            return 0
        try:
            if kv.value is None:
                raise Untrusted(TOO_LARGE, "epoch counter is too large")
            doc = load_object(kv.value, MEMBER, EPOCH_KEY)
            if not signature_ok(doc, self.token):
                raise Untrusted(
                    UNSIGNED if "sig" not in doc else FORGED, "epoch counter is not validly signed"
                )
        except Untrusted as exc:
            self.refuse(EPOCH_KEY, exc)
            return 0
        return _int(doc.get("epoch"))

    def highest_epoch(self) -> int:
        with self._lock:
            lease = self._lease_epoch(self.pool.get(LEASE_KEY, LEASE.max_bytes))
            return max(
                lease, self._counter_epoch(self.pool.get(EPOCH_KEY, LEASE.max_bytes)), self._members_epoch()
            )

    # -- members' heartbeats -------------------------------------------------------------
    def _member_key(self, node: str) -> str:
        return self.pool.key(MEMBERS + node)

    def _read_own(self, node: str | None = None) -> tuple[int, dict[str, Any]]:
        """(mod_revision, doc) of a member's own key (this node's unless told), the doc
        only if validly signed."""
        node = node or self.node
        if node == self.node and self._own is not None:
            return self._own
        kv = self.pool.get(MEMBERS + node, MEMBER.max_bytes)
        if kv is None:
            return 0, {}
        try:
            doc = load_object(kv.value or b"", MEMBER, "own member")
        except Untrusted:
            doc = {}
        return kv.mod, doc if signature_ok(doc, self.token) else {}

    def _next_member(self, doc: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
        doc = {k: v for k, v in doc.items() if k != "sig"}
        if _int(mine.get("epoch")) > _int(doc.get("epoch")):
            doc["epoch"] = _int(mine.get("epoch"))
        if _int(mine.get("seq")) >= _int(doc.get("seq")):
            doc["seq"] = _int(mine.get("seq")) + 1  # the seq only grows, across restarts too
        return doc

    def write_member(self, doc: dict[str, Any]) -> None:
        """Write this member's heartbeat; never lowers its epoch or its seq."""
        key = self._member_key(str(doc["node"]))
        with self._lock:
            for _ in range(3):
                own_mod, own = self._read_own(str(doc["node"]))
                body = self._next_member(doc, own)
                result = self.client.txn([mod_is(key, own_mod)], [put(key, _signed(body, self.token))])
                self.pool.touched("members")
                if result.get("succeeded"):
                    if doc["node"] == self.node:
                        self._own = (_txn_revision(result), body)
                    return
                self._own = None  # someone else wrote our key: read it again
        raise StoreUnavailable(f"member record {key} kept changing under this writer")

    def read_members(self) -> dict[str, dict[str, Any]]:
        """Every member's last valid heartbeat, by node (bad records are refused)."""
        cached = self._cached("members", self._members_cache)
        if cached is not None:
            return dict(cached)
        gen = self.watch.generation["members"] if self.watch else 0
        with self._lock:
            out = self._read_members()
        self._members_cache = (gen, time.monotonic(), out)
        return dict(out)

    def _read_members(self) -> dict[str, dict[str, Any]]:
        kvs, more = self.pool.bounded_range(MEMBERS, MAX_MEMBERS, MEMBER.max_bytes, MEMBERS_CAP)
        if more:
            self.refuse(MEMBERS, Untrusted("too_many", f"more than {MAX_MEMBERS} member records"))
        out = {}
        for kv in kvs:
            node = kv.key[len(MEMBERS) :]
            doc = self._member(node, kv)
            if doc is not None:
                out[node] = doc
        return out

    def remove_member(self, node: str) -> bool:
        if not NODE.fullmatch(node):
            raise ValueError(f"{node[:64]!r} is not a node id")
        with self._lock:
            self.forget_member(node)
            result = self.client.txn([], [delete(self._member_key(node))])
            self.pool.touched("members")
        answers = result.get("responses") or [{}]
        return int((answers[0].get("response_delete_range") or {}).get("deleted") or 0) > 0

    def forget_member(self, node: str) -> None:
        self._member_seq.pop(node, None)
        self._member_doc.pop(node, None)
        self._members_cache = None

    def measure_clock(self) -> ClockReading | None:
        """This machine's wall clock against the etcd member's: the `Date` of one answer
        (a read of this member's own key) against this clock before and after the call."""
        self.pool.get(MEMBERS + self.node, MEMBER.max_bytes)
        sent, received, date = getattr(self.client, "answered", (0.0, 0.0, ""))
        try:
            server = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError):
            return None
        return from_window(sent, received, server, 1.0, "etcd")

    def _member(self, node: str, kv: Kv) -> dict[str, Any] | None:
        source = f"{MEMBERS}{node[:64]}"
        try:
            if not NODE.fullmatch(node):
                raise Untrusted(WRONG_NODE, f"member key {node[:64]!r} is not named after a node")
            if kv.value is None:
                raise Untrusted(TOO_LARGE, f"member record is larger than {MEMBER.max_bytes} bytes")
            doc = load_object(kv.value, MEMBER, source)
            if not signature_ok(doc, self.token):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, f"{node} is not validly signed")
            if doc.get("node") != node:
                raise Untrusted(WRONG_NODE, f"{node}'s key holds node {str(doc.get('node'))[:64]!r}")
            check_member(doc, source)
            seq = _int(doc.get("seq"))
            if seq < self._member_seq.get(node, 0):
                raise Untrusted(REPLAYED, f"{node}: heartbeat seq {seq} < {self._member_seq[node]} seen")
        except Untrusted as exc:
            self.refuse(source, exc)
            return self._member_doc.get(node)  # the last good heartbeat: it ages as if silent
        self._member_seq[node], self._member_doc[node] = seq, doc
        return doc

    def _members_epoch(self) -> int:
        return max((_int(d.get("epoch")) for d in self._read_members().values()), default=0)


def _signed(doc: dict[str, Any], token: str) -> bytes:
    body = {k: v for k, v in doc.items() if k != "sig"}
    return json.dumps(dict(body, sig=sign(body, token))).encode()


def _txn_revision(doc: dict[str, Any]) -> int:
    return as_int((doc.get("header") or {}).get("revision"))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
