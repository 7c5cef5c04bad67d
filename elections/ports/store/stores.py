"""Where a pool's records live (docs/design.md §5): the one place that opens a
pool's lease store, its event sink and its event tail — always the record
layers (`records.PoolStore`, `event_records.PoolEventSink`/`PoolEventTail`)
over the pool's backend.

A pool is found by its `PoolPlace`: the KMSN, the location (`LEASE_DIR`), the
key that signs its records (`POOL_KEY`), the deadline of every operation
(`SHARE_TIMEOUT`), the backend and that backend's own settings. Backends:

- `file`: `LEASE_DIR` is a directory (a mounted share, §5.1), or an
  `smb://[user@]host[:port]/share/path` spoken to without a mount (§5.3,
  `SMB_PASSWORD`/`SMB_PASSWORD_FILE`): the same files and rules over a
  `Share` (`share.LocalShare`, `smbshare.SmbShare`).
- `etcd`: the keys under `ETCD_PREFIX` on the members of `ETCD_ENDPOINTS`
  (§5.2, `elections.ports.etcd`); `ETCD_CA`/`ETCD_CERT`/`ETCD_KEY` for TLS.

Every other module asks here; nothing else constructs a backend, so a new one
(`smb://` lease dirs, §5.3; `LEASE_STORE = etcd`, §5.2) plugs in at this one
seam (`open_backend`); the records above it are always the same.
A backend's modules are imported only when a pool uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from elections.core.evidence import Refusals
from elections.core.retention import Retention
from elections.ports.events.event_records import PoolEventSink, PoolEventTail
from elections.ports.share.share import Share
from elections.ports.share.sharefiles import DEFAULT_TIMEOUT
from elections.ports.store.backend import Backend, counted, log_only
from elections.ports.store.records import PoolStore
from elections.ports.store.store import LeaseStore
from stkconfig.model import Config
from stkconfig.parsed import EtcdSettings, SmbLogin, WatchedPool
from stkconfig.smburl import is_smb, parse_smb_url, smb_password
from stkhost.clock import Clock

if TYPE_CHECKING:
    from elections.ports.etcd.pool import EtcdPool

FILE = "file"
ETCD = "etcd"
BACKENDS = (FILE, ETCD)


class EventSink(Protocol):
    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None: ...

    def last_seq(self) -> int:
        """The highest seq this node has in the pool's log (read once, then kept): a seq is never
        reused. Raises `StoreUnavailable` or OSError."""
        ...


class TransitionSink(Protocol):
    """Where the elector and the leader's duties record a transition (`runtime.projection.DbEventSink`:
    a row and the pool's line; an `EventSink` itself). What `record` returns is not theirs to use."""

    def record(self, kind: str, epoch: int, reason: str, **extra: Any) -> object: ...


class NullSink:
    """An `EventSink` that keeps nothing (a contender without `--events`)."""

    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None:
        pass

    def last_seq(self) -> int:
        return 0


class EventReader(Protocol):
    backlog: bool  # the last call stopped at a cap: call again soon
    last_seq: dict[str, int]  # node -> the highest seq accepted from it

    def new_events(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class PoolPlace:
    kmsn: str
    lease_dir: str
    key: str
    timeout: float = DEFAULT_TIMEOUT
    backend: str = FILE
    smb: SmbLogin = field(default_factory=SmbLogin)  # an smb:// lease dir's login
    etcd: EtcdSettings = field(default_factory=EtcdSettings)  # with ETCD: where and how
    retention: Retention = field(default_factory=Retention)  # the share's event files (EVENTS_*)

    @classmethod
    def of(cls, stk: Config) -> PoolPlace:
        """This agent's own pool, from its `Config`."""
        return cls(
            kmsn=stk.kmsn,
            lease_dir=stk.lease_dir,
            key=stk.pool_key,
            timeout=stk.share_timeout,
            backend=stk.lease_store or FILE,
            smb=stk.smb,
            etcd=stk.etcd,
            retention=Retention(
                stk.events_segment_bytes, stk.events_keep_bytes, stk.events_keep_days * 86400
            ),
        )

    @classmethod
    def watched(cls, pool: WatchedPool) -> PoolPlace:
        """A watched pool (a `[pool:<KMSN>]` section): always on a share, its events kept as by default."""
        return cls(pool.kmsn, pool.lease_dir, pool.pool_key, pool.share_timeout, FILE, smb=pool.smb)

    def describe(self) -> str:
        if self.backend == ETCD:
            return _etcd_pool(self).describe()
        return f"{self.backend}:{self.lease_dir}"

    @property
    def remote(self) -> bool:
        """True when the lease dir is reached over SMB, not as a local path."""
        return is_smb(self.lease_dir)


def open_share(place: PoolPlace) -> Share:
    """The pool's folder as a `Share`: SMB for an smb:// lease dir (one
    connection per process and folder), else the local directory."""
    if place.remote:
        from elections.ports.share.smbshare import smb_share  # smbprotocol only for pools that use it

        return smb_share(parse_smb_url(place.lease_dir), smb_password(place.smb), place.timeout)
    from elections.ports.share.share import LocalShare

    return LocalShare(place.lease_dir, place.timeout)


def _etcd_pool(place: PoolPlace) -> EtcdPool:
    """The process's one `EtcdPool` for this place (client, watch, key layout)."""
    from elections.ports.etcd.client import Tls
    from elections.ports.etcd.pool import default_prefix, pool_for

    etcd = place.etcd
    tls = Tls(etcd.ca, etcd.cert, etcd.key)
    prefix = etcd.prefix or default_prefix(place.kmsn)
    return pool_for(",".join(etcd.endpoints), prefix, place.timeout, tls, fallback=etcd.poll)


def store_details(store: LeaseStore) -> dict[str, Any]:
    """What the panel shows of a pool's store: its kind and place, and what the
    backend adds (etcd: endpoints, leader, revision). Never raises."""
    try:
        return dict(store.details())
    except Exception as exc:
        return {"kind": store.describe().partition(":")[0], "where": store.describe(), "error": str(exc)}


def open_backend(
    place: PoolPlace, node: str, clock: Clock, lock_stale_s: float = 2.0, watch: bool = True,
    refusals: Refusals | None = None,
) -> Backend:  # fmt: skip
    """The pool's records as bytes under keys (`backend.Backend`), as `node` reaches them
    (`watch`: etcd's watch of the pool, for a reader that waits on changes); what it refuses
    is counted in `refusals` (without: logged only)."""
    if place.backend == FILE:
        from elections.ports.share.share_backend import ShareBackend

        share = open_share(place)
        refuse = counted(refusals, clock, share.where) if refusals is not None else log_only
        return ShareBackend(share, place.key, node, clock, lock_stale_s=lock_stale_s, timeout=place.timeout,
                            refuse=refuse)  # fmt: skip
    if place.backend == ETCD:
        from elections.ports.etcd.backend import EtcdBackend

        pool = _etcd_pool(place)
        refuse = counted(refusals, clock, pool.describe()) if refusals is not None else log_only
        return EtcdBackend(pool, node, watch=watch, refuse=refuse)
    raise ValueError(f"unknown lease store {place.backend!r}")


def open_store(
    place: PoolPlace,
    node: str,
    clock: Clock,
    refusals: Refusals | None = None,
    lock_stale_s: float = 2.0,
) -> LeaseStore:
    """The pool's lease store, as seen by `node`: the one record layer over its backend."""
    refusals = refusals if refusals is not None else Refusals()
    backend = open_backend(place, node, clock, lock_stale_s, refusals=refusals)
    return PoolStore(backend, place.key, node, clock, refusals=refusals)


def open_event_sink(place: PoolPlace, node: str, clock: Clock) -> EventSink:
    """Where `node` appends its signed events in the pool."""
    streams = open_backend(place, node, clock, watch=False).event_streams(place.retention)
    return PoolEventSink(streams, node, clock, place.key)


def open_event_tail(place: PoolPlace, clock: Clock, refusals: Refusals | None = None) -> EventReader:
    """A reader of every member's new, verified events in the pool."""
    streams = open_backend(place, "", clock).event_streams(place.retention)
    return PoolEventTail(streams, place.key, refusals=refusals, clock=clock)
