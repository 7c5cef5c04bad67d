"""Where a pool's records live (DESIGN.md §5): the one place that opens a
pool's lease store, its event sink and its event tail.

A pool is found by its `PoolPlace`: the KMSN, the location (`LEASE_DIR`), the
key that signs its records (`POOL_KEY`), the deadline of every operation
(`SHARE_TIMEOUT`), the backend and that backend's own settings. Backends:

- `file`: `LEASE_DIR` is a directory (a mounted share, §5.1).

Every other module asks here; nothing else constructs a backend, so a new one
(`smb://` lease dirs, §5.3; `LEASE_STORE = etcd`, §5.2) plugs in at this one
seam. A backend's modules are imported only when a pool uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from elections.core.evidence import Refusals
from elections.ports.clock import Clock
from elections.ports.eventlog import EventTail, JsonlEventSink
from elections.ports.sharefiles import DEFAULT_TIMEOUT, deadline_for
from elections.ports.store import FileLeaseStore, LeaseStore

FILE = "file"
EVENTS_DIR = "events"


class EventSink(Protocol):
    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None: ...


@dataclass(frozen=True)
class PoolPlace:
    kmsn: str
    lease_dir: str
    key: str
    timeout: float = DEFAULT_TIMEOUT
    backend: str = FILE
    options: Mapping[str, str] = field(default_factory=dict)  # the backend's own settings

    @classmethod
    def of(cls, stk: Any) -> PoolPlace:
        """This agent's own pool, from its settings (`settings.STK`)."""
        return cls(
            kmsn=stk.kmsn,
            lease_dir=stk.lease_dir,
            key=stk.pool_key,
            timeout=stk.share_timeout,
            backend=str(getattr(stk, "lease_store", FILE) or FILE),
            options=dict(getattr(stk, "values", {}) or {}),
        )

    def describe(self) -> str:
        return f"{self.backend}:{self.lease_dir}"


def open_store(
    place: PoolPlace,
    node: str,
    clock: Clock,
    refusals: Refusals | None = None,
    lock_stale_s: float = 2.0,
) -> LeaseStore:
    """The pool's lease store, as seen by `node`."""
    if place.backend == FILE:
        return FileLeaseStore(
            place.lease_dir, place.key, node, clock, lock_stale_s=lock_stale_s, timeout=place.timeout,
            refusals=refusals,
        )  # fmt: skip
    raise ValueError(f"unknown lease store {place.backend!r}")


def open_event_sink(place: PoolPlace, node: str, clock: Clock) -> EventSink:
    """Where `node` appends its signed events in the pool."""
    if place.backend == FILE:
        path = Path(place.lease_dir) / EVENTS_DIR / f"{node}.jsonl"
        return JsonlEventSink(path, node, clock, place.key, deadline_for(place.lease_dir, place.timeout))
    raise ValueError(f"unknown lease store {place.backend!r}")


def open_event_tail(place: PoolPlace, clock: Clock, refusals: Refusals | None = None) -> EventTail:
    """A reader of every member's new, verified events in the pool."""
    if place.backend == FILE:
        return EventTail(
            Path(place.lease_dir) / EVENTS_DIR, key=place.key, refusals=refusals, clock=clock,
            deadline=deadline_for(place.lease_dir, place.timeout),
        )  # fmt: skip
    raise ValueError(f"unknown lease store {place.backend!r}")
