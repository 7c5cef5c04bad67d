"""The /metrics families that say how far to trust the rest: how fresh this agent's view of
each pool is, whether its lease store answers, and which build answers (`stkrelay_build_info`).
An alert on any pool family should check `stkrelay_pool_view_stale` first
(packaging/prometheus/alerts.yml)."""

from __future__ import annotations

import functools
import platform
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from elections.web.panel.site import SiteState, stale_after


def view_families(states: list[SiteState]) -> Iterable[Metric]:
    """How fresh this agent's view of each pool is, and whether its lease store answers."""
    age = GaugeMetricFamily(
        "stkrelay_pool_view_age_seconds",
        "Seconds since this agent's worker (or watcher) last wrote its view of the pool (its own clock).",
        labels=["kmsn"],
    )
    stale = GaugeMetricFamily(
        "stkrelay_pool_view_stale",
        "1 while this agent's view of the pool is older than "
        "3 x max(LEASE_POLL, LEASE_RENEW) + 2 s, or missing: nothing it says is current.",
        labels=["kmsn"],
    )
    store = GaugeMetricFamily(
        "stkrelay_pool_store_reachable",
        "1 if the pool's lease store (share or etcd) answered this agent's last look.",
        labels=["kmsn"],
    )
    limit = GaugeMetricFamily(
        "stkrelay_pool_view_stale_after_seconds",
        "Age from which this agent's view of the pool is stale.",
        labels=["kmsn"],
    )
    for s in states:
        if s.view_age is not None:
            age.add_metric([s.kmsn], round(max(s.view_age, 0.0), 3))
        stale.add_metric([s.kmsn], 1 if s.view_stale else 0)
        store.add_metric([s.kmsn], 1 if s.store_reachable else 0)
        limit.add_metric([s.kmsn], stale_after())
    yield from (age, stale, store, limit)


def build_info(kmsn: str, node: str, store: str) -> Metric:
    g = GaugeMetricFamily(
        "stkrelay_build_info",
        "Always 1: this agent's version, Python, pool, node and lease store kind.",
        labels=["version", "python", "kmsn", "node", "store"],
    )
    g.add_metric([version(), platform.python_version(), kmsn, node, store], 1)
    return g


@functools.cache
def version() -> str:
    """stkrelay's version: the installed distribution's, else the source tree's pyproject.toml."""
    try:
        return metadata.version("stkrelay")
    except metadata.PackageNotFoundError:
        pass
    try:
        doc = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
        return str(doc["project"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"
