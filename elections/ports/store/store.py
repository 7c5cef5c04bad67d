"""The `LeaseStore` port (docs/design.md §5.1), and the stores of the share.

Contract of every store:
- `read()` returns a `LeaseRead` (valid / missing / corrupt / forged) and raises
  `StoreUnavailable` only when the store itself cannot be reached.
- `write(record, expect, fence)` is compare-and-set: it writes only if the store
  still holds exactly what was read with revision `expect`, and only if `fence()`
  still returns True at the last moment before the write. It returns a
  `WriteOutcome`; losing a race is a normal outcome, not an exception. A
  backend whose records are bound to a hold of the store (etcd's leases)
  answers `LOST` when that hold was taken away: the writer leads no more.
- `acquire(make, expect, known_epoch, member)` is the compare-and-set of an
  election: under the same exclusion as `write`, it picks the new epoch as one
  more than the highest the pool has recorded (lease, members' records, the
  counter, and `known_epoch`), records the claim in this member's record, then
  writes the lease. No two nodes can ever take the same epoch, even when the
  lease is deleted.
- `write_member(doc)` never lowers the epoch or the seq recorded in this member's record.

There is one implementation, `records.PoolStore` (every record rule, written
once), over a `backend.Backend` (bytes under keys): `FileLeaseStore` is it
over the share's files (`share_backend.ShareBackend`: a local or mounted
directory, or an `SmbShare`), `etcd.store.EtcdLeaseStore` over etcd.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.skew import ClockReading
from elections.core.untrusted import SECURITY_CAUSES
from elections.core.witness import WitnessRead, WitnessRecord
from elections.ports.share.share import Share, share_of
from elections.ports.share.share_backend import LEASE_NAME, LOCK_NAME, MEMBERS_DIR, ShareBackend
from elections.ports.share.sharefiles import DEFAULT_TIMEOUT
from elections.ports.store.backend import WriteOutcome, counted
from elections.ports.store.records import MAX_MEMBERS, PoolStore
from stkhost.clock import Clock

__all__ = ["LEASE_NAME", "LOCK_NAME", "MAX_MEMBERS", "MEMBERS_DIR", "SECURITY_CAUSES", "FileLeaseStore",
           "LeaseStore", "WriteOutcome"]  # fmt: skip


class LeaseStore(Protocol):
    def read(self) -> LeaseRead: ...

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome: ...

    def acquire(
        self,
        make: Callable[[int], LeaseRecord | None],
        expect: str,
        known_epoch: int,
        member: dict[str, Any],
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        """Take the next epoch if the lease is still `expect`: `make(epoch)` builds the record (under
        the claim's lock); None from it writes nothing (`CHANGED`: the caller starts over)."""
        ...

    def highest_epoch(self) -> int: ...

    def read_witness(self, kmsn: str) -> WitnessRead:
        """The share's witness record (issue 38) as the store holds it now, judged: anything but a
        valid record of this pool (a replay of an epoch below one read before too) is no evidence,
        counted, never raised."""
        ...

    def write_witness(self, record: WitnessRecord, expect: str) -> WriteOutcome:
        """The witness record's compare-and-set on the revision `expect` of a read (never blind)."""
        ...

    def write_member(self, doc: dict[str, Any]) -> None: ...

    def read_members(self) -> dict[str, dict[str, Any]]: ...

    def read_member(self, node: str) -> dict[str, Any] | None:
        """One member's last valid heartbeat (one read), None if there is none valid."""
        ...

    def member_names(self) -> set[str]:
        """The nodes with a member record (one listing, no record read)."""
        ...

    @property
    def selective_reads(self) -> bool:
        """Each member record is its own read (a share): `read_member`/`member_names` are worth it."""
        ...

    @property
    def own_record(self) -> dict[str, Any] | None:
        """This node's last heartbeat as written (without `sig`), for its beacons; None before one."""
        ...

    def remove_member(self, node: str) -> bool:
        """Remove `node`'s member record (a retired member: `relayctl forget`); True if
        there was one. Its events stay. Also `forget_member(node)`."""
        ...

    def measure_clock(self) -> ClockReading | None:
        """This machine's wall clock against the store's (`core.skew`), or None."""
        ...

    def forget_member(self, node: str) -> None:
        """Drop what this store remembers of `node`'s heartbeats (its replay floor, its
        last good record): the pool forgot it, so a member of that name that comes back
        starts afresh."""
        ...

    def wait_change(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """Wait until the lease may have changed (True) or `timeout` passes (False)."""
        ...

    def details(self) -> dict[str, Any]:
        """What the panel shows of the store: its kind and place, and what the backend adds."""
        ...

    def describe(self) -> str: ...


class FileLeaseStore(PoolStore):
    """The pool's records in the share's files (`relay_leader.json`, `members/`)."""

    backend: ShareBackend

    def __init__(
        self,
        lease_dir: str | os.PathLike[str] | Share,
        pool_key: str,
        node: str,
        clock: Clock,
        lock_stale_s: float = 2.0,
        timeout: float = DEFAULT_TIMEOUT,
        refusals: Refusals | None = None,
    ) -> None:
        share = share_of(lease_dir, timeout)
        refusals = refusals if refusals is not None else Refusals()
        backend = ShareBackend(share, pool_key, node, clock, lock_stale_s, timeout,
                               refuse=counted(refusals, clock, share.where))  # fmt: skip
        super().__init__(backend, pool_key, node, clock, refusals)

    @property
    def share(self) -> Share:
        return self.backend.share

    @property
    def renewals_in_place(self) -> int:
        """Renewals written without the lock (`ShareBackend._renew_in_place`)."""
        return self.backend.renewals_in_place
