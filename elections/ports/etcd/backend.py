"""`EtcdBackend`: the backend port on etcd v3 (docs/design.md §5.2), under one pool's
prefix (`EtcdPool`):

    lease             pool/leader          on an etcd lease while held
    epoch             pool/epoch           the epoch counter
    members/<node>    pool/members/<node>

- A revision is the key's `mod_revision` and etcd lease (`etcd:<mod>:<lease>`;
  "" and `etcd:0:0` are "no key"). Every write is one transaction compared on
  the key's `mod_revision` (never a blind put).
- The lease's record is bound to the holder's etcd lease, refreshed first
  (keepalive); a lease etcd no longer has means the holder lost it behind its
  back: `LOST`, nothing written. A released record (`hold_s` 0) is put
  without a lease, so it stays for the handoff, and the holder's etcd lease
  is revoked.
- `claim` grants a new etcd lease and, in one transaction compared on the
  `mod_revision` of the lease, the counter and this member's own key, makes
  every write of the record layer (the counter, the claim, the lease).
- With the pool's watch connected and nothing changed, `get` of the lease and
  `list` of the members hand back the last read (`cached`) until the fallback
  timer runs out; `wait_change` waits on the watch. What is acted on is always what a
  linearizable read returned, never a value carried by the stream.

Every call has the client's deadline: `StoreUnavailable`, never a hang.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from elections.core.retention import Retention
from elections.core.skew import ClockReading, from_window
from elections.core.untrusted import LEASE, TOO_LARGE, TOO_MANY, WRONG_NODE, Untrusted
from elections.errors import StoreUnavailable
from elections.ports.etcd import pool as layout
from elections.ports.etcd.client import EtcdRefused, LeaseNotFound, delete, gateway_int, mod_is, put
from elections.ports.etcd.events import EtcdEvents
from elections.ports.etcd.pool import NODE, EtcdPool, Kv, parse_revision, revision
from elections.ports.store.backend import (
    EPOCH_KEY,
    LEASE_KEY,
    MEMBERS,
    WITNESS_KEY,
    Build,
    Claimed,
    Got,
    Listing,
    Refuse,
    WriteOutcome,
    log_only,
    poll_wait,
)

log = logging.getLogger("stkrelay.store")
T = TypeVar("T")

MEMBERS_CAP = 2 << 20  # bytes of one answer listing the members
KEYS = {
    LEASE_KEY: layout.LEASE_KEY,
    EPOCH_KEY: layout.EPOCH_KEY,
    MEMBERS: layout.MEMBERS,
    WITNESS_KEY: layout.WITNESS_KEY,
}


def key_of(key: str) -> str:
    """The etcd key (under the prefix) a record key is kept at."""
    if key in KEYS:
        return KEYS[key]
    if key.startswith(MEMBERS):
        return layout.MEMBERS + key[len(MEMBERS) :]
    raise KeyError(f"no etcd key for record {key!r}")


C = TypeVar("C", Got, Listing)


class EtcdBackend:
    counter_key = EPOCH_KEY
    reads_one_by_one = False  # one range reads every member
    record_end = b""

    def __init__(self, pool: EtcdPool, node: str, watch: bool = True, refuse: Refuse = log_only) -> None:
        self.pool = pool
        self.client = pool.client
        self.node = node
        self.where = pool.describe()
        self.refuse = refuse  # the record layer's count-and-log (`backend.counted`)
        self.watcher = pool.watching() if watch else None
        self._listening = False  # told of revoked leases once it holds one (short-lived readers never are)
        self._held = 0  # the etcd lease under the record this client wrote as holder
        self._lost: set[int] = set()  # etcd leases the watch saw taken away
        self._lease_cache: tuple[int, float, Got] | None = None  # (generation, when, read)
        self._members_cache: tuple[int, float, Listing] | None = None
        self._lock = threading.RLock()

    def describe(self) -> str:
        return self.pool.describe()

    def details(self) -> dict[str, Any]:
        """The store as the panel shows it: endpoints, the etcd leader, the revision."""
        from elections.ports.etcd.health import cluster_view

        try:
            return dict(cluster_view(self.pool))
        except Exception as exc:  # the panel shows why, never fails
            return {"kind": "etcd", "where": self.describe(), "error": str(exc)}

    def source(self, key: str) -> str:
        return key_of(key)

    def event_streams(self, retention: Retention | None = None) -> EtcdEvents:
        """`events/<node>/<seq>` (`etcd.events`); a reader watches them if this backend watches."""
        return EtcdEvents(self.pool, watch=self.watcher is not None)

    def run(self, fn: Callable[[], T]) -> T:
        with self._lock:
            return fn()

    @property
    def held_lease(self) -> int:
        return self._held

    def _lease_gone(self, lease: int) -> None:
        self._lost.add(lease)
        if len(self._lost) > 64:
            self._lost = {lease}

    # -- waiting for a change ----------------------------------------------------------------------
    def wait_change(self, key: str, timeout: float, stop: threading.Event | None = None) -> bool:
        """Sleep until the lease changes (the watch says so) or `timeout` passes."""
        w = self.watcher
        if w is None or not w.connected:
            return poll_wait(timeout, stop)
        cached = self._lease_cache
        since = cached[0] if cached is not None else w.generation["lease"]
        return w.wait_change("lease", since, max(0.0, timeout))

    def _cached(self, part: str, cache: tuple[int, float, C] | None) -> C | None:
        w = self.watcher
        if cache is None or w is None or not w.connected:
            return None
        gen, at, value = cache
        if gen != w.generation[part] or time.monotonic() - at >= self.pool.fallback:
            return None
        return value

    def _generation(self, part: str) -> int:
        return self.watcher.generation[part] if self.watcher else 0

    # -- reading -----------------------------------------------------------------------
    def get(self, key: str, max_bytes: int, fresh: bool = False) -> Got:
        if key == LEASE_KEY and not fresh:
            cached = self._cached("lease", self._lease_cache)
            if cached is not None:
                return replace(cached, cached=True)
            gen = self._generation("lease")
            got = self._got(key, max_bytes)
            self._lease_cache = (gen, time.monotonic(), got)
            return got
        return self._got(key, max_bytes)

    def _got(self, key: str, max_bytes: int) -> Got:
        return self._judge(key, self.pool.get(key_of(key), max_bytes), max_bytes)

    def _judge(self, key: str, kv: Kv | None, max_bytes: int) -> Got:
        if kv is None:
            gone = key == LEASE_KEY and self._held and self._held in self._lost
            note = "the etcd lease under this node's record was revoked" if gone else "no lease key"
            return Got(None, revision(0, 0), note=note if key == LEASE_KEY else "")
        if kv.value is None:
            what = "lease value" if key == LEASE_KEY else f"{key_of(key)}"
            exc = Untrusted(TOO_LARGE, f"{what} is larger than {max_bytes} bytes")
            return Got(None, kv.revision, refused=exc)
        return Got(kv.value, kv.revision)

    def list(self, prefix: str, limit: int, max_bytes: int, fresh: bool = False) -> Listing:
        if not fresh:
            cached = self._cached("members", self._members_cache)
            if cached is not None:
                return replace(cached, found=dict(cached.found), cached=True)
        gen = self._generation("members")
        kvs, more = self.pool.bounded_range(key_of(prefix), limit, max_bytes, MEMBERS_CAP)
        out = Listing()
        if more:
            out.refused.append(Untrusted(TOO_MANY, f"more than {limit} member records"))
        for kv in kvs:
            node = kv.key[len(key_of(prefix)) :]
            got = self._judge(prefix + node, kv, max_bytes)
            if not NODE.fullmatch(node):
                got = replace(
                    got, refused=Untrusted(WRONG_NODE, f"member key {node[:64]!r} is not named after a node")
                )
            out.found[node] = got
        self._members_cache = (gen, time.monotonic(), out)
        return replace(out, found=dict(out.found))

    def names(self, prefix: str, limit: int) -> set[str]:
        return set(self.list(prefix, limit, 1 << 16).found)

    # -- writing -----------------------------------------------------------------------
    def _attach(self, hold_s: float, key_lease: int) -> int | None:
        """The etcd lease the record is written under; None if the holder lost its own."""
        if hold_s <= 0:
            return 0
        if self._held:
            if self._held in self._lost or self.client.keepalive(self._held) <= 0:
                return None
            return self._held
        if key_lease and self.client.keepalive(key_lease) > 0:
            return key_lease  # this node's record, written by another process of it
        lease, _granted = self.client.grant(max(1, math.ceil(hold_s)))
        self._held = lease
        return lease

    def cas(
        self, key: str, data: bytes, expected: str | None, fence: Callable[[], bool] | None = None,
        hold_s: float | None = None, renewal: bool = False,
    ) -> tuple[WriteOutcome, str]:  # fmt: skip
        seen = parse_revision(expected or "")
        if seen is None:
            return WriteOutcome.CHANGED, ""  # a revision of another store: read again
        mod, key_lease = seen
        target = self.pool.key(key_of(key))
        if key != LEASE_KEY:
            result = self.client.txn([mod_is(target, mod)], [put(target, data)])
            self.pool.touched("members")
            if not result.get("succeeded"):
                return WriteOutcome.CHANGED, ""
            return WriteOutcome.WRITTEN, revision(_txn_revision(result), 0)
        lease = self._attach(hold_s or 0.0, key_lease)
        if lease is None:
            return self._lose(f"etcd lease {self._held:x} is gone"), ""
        if fence is not None and not fence():
            return WriteOutcome.FENCED, ""
        try:
            doc = self.client.txn([mod_is(target, mod)], [put(target, data, lease)])
        except LeaseNotFound:
            return self._lose(f"etcd lease {lease:x} is gone"), ""
        self.pool.touched("lease")
        if not doc.get("succeeded"):
            return WriteOutcome.CHANGED, ""
        if not hold_s and self._held:
            held, self._held = self._held, 0
            self._revoke(held)
        return WriteOutcome.WRITTEN, revision(_txn_revision(doc), lease)

    def _lose(self, why: str) -> WriteOutcome:
        log.warning("%s no longer holds the lease in %s: %s", self.node, self.describe(), why)
        self._held = 0
        return WriteOutcome.LOST

    def _revoke(self, lease: int) -> None:
        try:
            self.client.revoke(lease)
        except (StoreUnavailable, EtcdRefused) as exc:
            log.info("etcd lease %x not revoked (it expires by itself): %s", lease, exc)

    def claim(self, expect: str, build: Build) -> Claimed:
        seen = parse_revision(expect)
        if seen is None:
            return Claimed(WriteOutcome.CHANGED)
        lease_kv = self.pool.get(layout.LEASE_KEY, LEASE.max_bytes)
        if (lease_kv.mod if lease_kv else 0) != seen[0]:
            return Claimed(WriteOutcome.CHANGED)
        writes = list(build(self._judge(LEASE_KEY, lease_kv, LEASE.max_bytes)) or ())
        if not writes:
            return Claimed(WriteOutcome.CHANGED)
        lease, _granted = self.client.grant(max(1, math.ceil(writes[-1].hold_s or 1)))
        compares = [mod_is(self.pool.key(layout.LEASE_KEY), seen[0])]
        puts = []
        for w in writes:
            target = self.pool.key(key_of(w.key))
            if w.key != LEASE_KEY:
                expected = parse_revision(w.expected or "")
                compares.append(mod_is(target, expected[0] if expected else -1))
            puts.append(put(target, w.data, lease if w.key == LEASE_KEY else 0))
        try:
            doc = self.client.txn(compares, puts)
        except LeaseNotFound:
            return Claimed(WriteOutcome.CHANGED)
        self.pool.touched("lease")
        self.pool.touched("members")
        if not doc.get("succeeded"):
            self._revoke(lease)
            return Claimed(WriteOutcome.CHANGED)
        if self.watcher is not None and not self._listening:
            self._listening = True
            self.watcher.on_lease_gone(self._lease_gone)
        if self._held and self._held != lease:
            self._revoke(self._held)
        self._held = lease
        self._lost.discard(lease)
        at = _txn_revision(doc)
        return Claimed(WriteOutcome.WRITTEN, {w.key: revision(at, lease if w.key == LEASE_KEY else 0)
                                              for w in writes})  # fmt: skip

    def delete(self, key: str) -> bool:
        result = self.client.txn([], [delete(self.pool.key(key_of(key)))])
        self.pool.touched("members")
        self._members_cache = None
        answers = result.get("responses") or [{}]
        return int((answers[0].get("response_delete_range") or {}).get("deleted") or 0) > 0

    # -- etcd's clock ------------------------------------------------------------------
    def measure_clock(self, key: str, window: tuple[float, float] | None) -> ClockReading | None:
        """The `Date` of one answer (a read of this member's own key) against this
        clock before and after the call."""
        self.pool.get(key_of(key), 16 << 10)
        sent, received, date = self.client.answered
        try:
            server = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError):
            return None
        return from_window(sent, received, server, 1.0, "etcd")


def _txn_revision(doc: dict[str, Any]) -> int:
    return gateway_int((doc.get("header") or {}).get("revision"))
