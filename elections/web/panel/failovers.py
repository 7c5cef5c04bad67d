"""Failover history from this agent's database: `load_events` turns
ElectionEvent rows into the core's `Ev`s; `failovers_for(kmsn)` caches the
derivation (`core.failovers.derive`) per process until the event table changes
(its max id and row count).
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from elections.core.failovers import REASONS, Ev, Failover, Tenure, derive, segments

__all__ = ["REASONS", "Ev", "Failover", "Tenure", "derive", "failovers_for", "known_kmsns", "load_events",
           "segments"]  # fmt: skip

# -- from the database, cached ---------------------------------------------------
_cache_lock = threading.Lock()
_cache: dict[str, tuple[tuple[Any, ...], list[Failover]]] = {}
FIELDS = ("id", "kmsn", "node", "epoch", "kind", "reason", "observed_at", "detail")
IGNORED_KINDS = ("renew_failed", "audit")  # audit rows: the audit page's, not a transition


def load_events(kmsn: str, since: datetime | None = None, kinds: tuple[str, ...] | None = None) -> list[Ev]:
    from elections.models import ElectionEvent

    qs = ElectionEvent.objects.filter(kmsn=kmsn).exclude(kind__in=IGNORED_KINDS)
    if kinds:
        qs = qs.filter(kind__in=kinds)
    if since is not None:
        qs = qs.filter(observed_at__gte=since)
    return [Ev(*row) for row in qs.order_by().values_list(*FIELDS)]


def table_version() -> tuple[Any, ...]:
    from django.db.models import Count, Max

    from elections.models import ElectionEvent

    agg = ElectionEvent.objects.aggregate(m=Max("id"), n=Count("id"))
    return (agg["m"], agg["n"])


def failovers_for(kmsn: str) -> list[Failover]:
    """Every failover of `kmsn`, oldest first; recomputed only when events changed."""
    version = table_version()
    with _cache_lock:
        hit = _cache.get(kmsn)
        if hit is not None and hit[0] == version:
            return hit[1]
    result = derive(load_events(kmsn))
    with _cache_lock:
        _cache[kmsn] = (version, result)
    return result


def known_kmsns() -> list[str]:
    from elections.models import ElectionEvent

    return sorted(ElectionEvent.objects.order_by().values_list("kmsn", flat=True).distinct())
