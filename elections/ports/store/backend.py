"""The backend port of a pool's store: bytes under keys, and nothing else
(docs/design.md §5). Every record rule — sign, verify, refuse and count, never let a
seq or an epoch go down, the highest epoch, the members — lives once, above
this port, in `records.PoolStore`; a backend never looks inside a record.

Keys name the records, whatever the backend keeps them as:

    lease             relay_leader.json          pool/leader       the lease
    epoch             (none on a share)          pool/epoch        the epoch counter
    members/<node>    members/<node>.json        pool/members/<node>

Implemented by `share_backend.ShareBackend` (a local or mounted directory, and
SMB: the same files through a `Share`), `etcd.backend.EtcdBackend` and
`memory_backend.MemoryBackend` (a dict, for in-process tests).

The contract of every backend:

- `get(key, max_bytes)` is a `Got`: the bytes (None: no record) and the
  revision to compare on. What cannot be read as a record (a link, a FIFO, an
  oversized value) is a `Got` with `refused` set, never an exception; only a
  store that cannot be reached raises `StoreUnavailable`.
  `fresh` asks past any cache the backend keeps (an election's reads).
- `list(prefix, limit, max_bytes, fresh)` reads every record under a prefix (at most
  `limit`), keyed by the name after the prefix; what the listing itself
  refuses (too many, odd entries) is in `Listing.refused`.
- `cas(key, data, expected, fence, hold_s)` writes only over `expected`
  (the revision last read) and only if `fence()`, asked at the last moment,
  still says yes; losing is an outcome (`CHANGED`, `BUSY`, `FENCED`, `LOST`),
  not an exception. `hold_s` binds the record to this client's hold of the
  store for that long (etcd: an etcd lease; 0: no hold, a released record);
  a backend without holds ignores it.
- `claim(expect, build)` is an election, atomic: under the backend's
  exclusion (a share's lock and move-aside, one etcd transaction) it reads the
  lease as the server holds it, and if its revision is `expect`, asks
  `build(lease)` for the writes (`Write`s, in order: the lease last) and makes
  them all, or none.
- `wait_change(key, timeout, stop)` waits until `key` may have changed (True) or
  `timeout` passes (False); the default (`poll_wait`) just waits: the caller
  reads again. It never holds a lock a writer needs.
- `run(fn)` runs one operation of the record layer under the backend's
  deadline and exclusion: a hung store raises `StoreUnavailable`.
- `event_streams(retention)` is the pool's event log as bytes, one stream of
  lines per node (`event_streams.EventStreams`: append, last seq, read on from
  a cursor); its rules are the event record layer's (`event_records`).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from elections.core.evidence import DETAIL_CHARS, SOURCE_CHARS, Refusals, printable
from elections.core.retention import Retention
from elections.core.skew import ClockReading
from elections.core.untrusted import SECURITY_CAUSES, Untrusted
from elections.ports.events.event_streams import EventStreams
from stkhost.clock import Clock

log = logging.getLogger("stkrelay.store")
T = TypeVar("T")

LEASE_KEY = "lease"
WITNESS_KEY = "witness"  # the share's witness (issue 38): written only by compare-and-set
EPOCH_KEY = "epoch"
MEMBERS = "members/"


def member_key(node: str) -> str:
    return MEMBERS + node


class WriteOutcome(enum.Enum):
    WRITTEN = "written"
    CHANGED = "changed"  # the store no longer holds what was read: lost the race
    BUSY = "busy"  # another writer holds the lock right now
    FENCED = "fenced"  # fence() said no at the last moment: nothing written
    LOST = "lost"  # the store took the writer's hold away (an etcd lease revoked or expired): step down


@dataclass(frozen=True)
class Got:
    """One record as a backend read it: never trusted (the record layer judges it)."""

    data: bytes | None  # None: there is no record (or it could not be read: `refused`)
    revision: str  # what a compare-and-set over this read compares on
    refused: Untrusted | None = None  # not a record at all (a link, a FIFO, too large)
    note: str = ""  # why there is none, when the backend knows more than "missing"
    cached: bool = False  # from the backend's cache (etcd's, fed by its watch stream): unchanged since read


@dataclass
class Listing:
    found: dict[str, Got] = field(default_factory=dict)  # name after the prefix -> its record
    refused: list[Untrusted] = field(default_factory=list)  # what the listing itself refused
    cached: bool = False  # as `Got.cached`: the same listing as last time


@dataclass(frozen=True)
class Write:
    key: str
    data: bytes
    expected: str | None = None  # the revision it must still have (None: not compared)
    hold_s: float | None = None  # as `cas`'s: the lease's write is bound to a new hold this long


@dataclass(frozen=True)
class Claimed:
    outcome: WriteOutcome
    revisions: dict[str, str] = field(default_factory=dict)  # key -> its revision after the claim


Build = Callable[[Got], Sequence[Write] | None]


class Backend(Protocol):
    where: str  # shown in logs (never a password)

    @property
    def counter_key(self) -> str | None:  # the epoch counter's key, if the backend keeps one (etcd)
        ...

    reads_one_by_one: bool  # each member is its own read: worth reading only what changed (a share)
    record_end: bytes  # what ends a member record's bytes: a newline in a share's text files

    def describe(self) -> str: ...

    def source(self, key: str) -> str:
        """The record's name as this backend keeps it, for logs and the panel."""
        ...

    def run(self, fn: Callable[[], T]) -> T: ...

    def get(self, key: str, max_bytes: int, fresh: bool = False) -> Got: ...

    def list(self, prefix: str, limit: int, max_bytes: int, fresh: bool = False) -> Listing: ...

    def names(self, prefix: str, limit: int) -> set[str]: ...

    def cas(
        self, key: str, data: bytes, expected: str | None, fence: Callable[[], bool] | None = None,
        hold_s: float | None = None, renewal: bool = False,
    ) -> tuple[WriteOutcome, str]: ...  # fmt: skip

    def claim(self, expect: str, build: Build) -> Claimed: ...

    def delete(self, key: str) -> bool: ...

    def wait_change(self, key: str, timeout: float, stop: threading.Event | None = None) -> bool: ...

    def measure_clock(self, key: str, window: tuple[float, float] | None) -> ClockReading | None: ...

    def details(self) -> dict[str, Any]: ...

    def event_streams(self, retention: Retention | None = None) -> EventStreams:
        """The pool's event log on this backend (`retention`: how a share keeps its files, `EVENTS_*`)."""
        ...


def poll_wait(timeout: float, stop: threading.Event | None = None) -> bool:
    """The default `wait_change`: nothing tells this backend of a change, so wait
    (`stop` ends the wait early) and let the caller read again."""
    (stop or threading.Event()).wait(max(0.0, timeout))
    return False


def plain_details(where: str) -> dict[str, Any]:
    """What the panel shows of a backend that has nothing more to say."""
    return {"kind": where.partition(":")[0], "where": where}


class Refuse(Protocol):
    """What a store holds that is no evidence, from `source`: counted and logged (`counted`)."""

    def __call__(self, source: str, exc: Untrusted, log_it: bool = True) -> None: ...


def counted(refusals: Refusals, clock: Clock, where: str) -> Refuse:
    """The record layer's count-and-log: each refusal noted in `refusals`, logged once per
    source and cause (a forgery, a replay and the like as SECURITY). One is made before the
    backend and handed to it at its construction (`refuse=`), and to its record layer."""

    def refuse(source: str, exc: Untrusted, log_it: bool = True) -> None:
        at = clock.wall().isoformat(timespec="seconds")
        if refusals.note(source, exc.cause, exc.detail, at, clock.monotonic()) and log_it:
            level = logging.ERROR if exc.cause in SECURITY_CAUSES else logging.WARNING
            prefix = "SECURITY: " if exc.cause in SECURITY_CAUSES else ""
            log.log(level, "%signoring %s in %s: %s (%s)", prefix, printable(source, SOURCE_CHARS), where,
                    printable(exc.detail, DETAIL_CHARS), exc.cause)  # fmt: skip

    return refuse


def log_only(source: str, exc: Untrusted, log_it: bool = True) -> None:
    """The `refuse` of a backend built without a record layer's (logged, never counted)."""
    if log_it:
        detail = printable(exc.detail, DETAIL_CHARS)
        log.warning("ignoring %s: %s (%s)", printable(source, SOURCE_CHARS), detail, exc.cause)
