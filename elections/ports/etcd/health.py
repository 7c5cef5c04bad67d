"""What an operator is shown of a pool on etcd: the cluster as this agent sees
it (`cluster_view`, for the panel, cached) and the checks of `relayctl doctor`
(`doctor_checks`).

The TTL checks are clock-independent: they compare only numbers etcd itself
counts (the TTL it granted, the seconds it says are left), never a timestamp
of one machine with the clock of another. etcd raises a TTL below its minimum
(about 1.5 × its election timeout) silently: the doctor says so, because the
holder's key then outlives `LEASE_TTL`.
"""

from __future__ import annotations

import math
import time
from typing import Any

from elections.errors import StoreUnavailable
from elections.ports.etcd.client import EtcdRefused, LeaseNotFound, TooLarge, gateway_int
from elections.ports.etcd.pool import LEASE_KEY, EtcdPool

VIEW_EVERY = 5.0  # seconds a cluster view is reused
STATUS_TIMEOUT = 0.5

_views: dict[int, tuple[float, dict[str, Any]]] = {}


def _names(pool: EtcdPool) -> dict[int, str]:
    try:
        return {gateway_int(m.get("ID")): str(m.get("name") or "")[:64] for m in pool.client.member_list()}
    except (StoreUnavailable, EtcdRefused, TooLarge, LeaseNotFound):
        return {}


def cluster_view(pool: EtcdPool) -> dict[str, Any]:
    """{kind, endpoints, leader, revision, watch} of the pool's cluster; refreshed
    at most every `VIEW_EVERY` seconds (one status call and one member list)."""
    cached = _views.get(id(pool))
    if cached is not None and time.monotonic() - cached[0] < VIEW_EVERY:
        return cached[1]
    client = pool.client
    view: dict[str, Any] = {"kind": "etcd", "where": pool.describe(), "endpoints": client.endpoints,
                            "prefix": pool.prefix, "leader": None, "revision": client.revision,
                            "watch": pool.watch.connected, "member": client.last_member}  # fmt: skip
    for i, url in enumerate(client.endpoints):
        try:
            st = client.status(i, STATUS_TIMEOUT)
        except Exception:
            continue
        leader = gateway_int(st.get("leader"))
        view["leader"] = _names(pool).get(leader) or f"{leader:x}"
        view["revision"] = max(view["revision"], gateway_int((st.get("header") or {}).get("revision")))
        view["raft_term"] = gateway_int(st.get("raftTerm"))
        view["asked"] = url
        break
    _views[id(pool)] = (time.monotonic(), view)
    return view


def doctor_checks(pool: EtcdPool, lease_ttl: float) -> list[tuple[str, bool, str]]:
    """(check, ok, detail) rows: every member, one leader, a quorum read, and the TTLs."""
    client = pool.client
    rows: list[tuple[str, bool, str]] = []
    leaders, names = set(), _names(pool)
    for i, url in enumerate(client.endpoints):
        try:
            st = client.status(i, min(client.timeout, 2.0))
        except Exception as exc:
            rows.append((f"etcd member {url}", False, f"not answering: {exc}"))
            continue
        leader = gateway_int(st.get("leader"))
        leaders.add(leader)
        me = gateway_int((st.get("header") or {}).get("member_id"))
        rows.append((f"etcd member {url}", leader != 0,
                     f"{names.get(me, hex(me))} version {st.get('version')}, "
                     f"leader {names.get(leader, hex(leader)) if leader else 'none'}, "
                     f"revision {gateway_int((st.get('header') or {}).get('revision'))}"))  # fmt: skip
    rows.append(("etcd members agree on one leader", len(leaders) == 1 and 0 not in leaders,
                 ", ".join(names.get(x, hex(x)) for x in leaders) or "no member answered"))  # fmt: skip
    try:
        started = time.monotonic()
        kv = pool.get(LEASE_KEY, 1 << 16)
        rows.append(
            ("etcd quorum read", True, f"linearizable read in {1000 * (time.monotonic() - started):.0f} ms")
        )
    except (StoreUnavailable, TooLarge, EtcdRefused) as exc:
        rows.append(("etcd quorum read", False, str(exc)))
        return rows
    want = max(1, math.ceil(lease_ttl))
    try:
        probe, granted = client.grant(want)
        left, counted = client.time_to_live(probe)
        client.revoke(probe)
        rows.append(("etcd grants LEASE_TTL as asked", granted == want,
                     f"asked {want} s, granted {granted} s"
                     + ("" if granted == want else " (below etcd's minimum: raise LEASE_TTL)")))  # fmt: skip
        rows.append(("etcd counts the lease down on its own clock", 0 < left <= counted == granted,
                     f"{left} s left of {counted} s right after the grant"))  # fmt: skip
        if kv is not None and kv.lease:
            left, counted = client.time_to_live(kv.lease)
            rows.append(("the holder's key is bound to a live etcd lease", 0 < left <= counted <= want,
                         f"{left} s left of {counted} s (LEASE_TTL {lease_ttl:g} s)"))  # fmt: skip
    except (StoreUnavailable, EtcdRefused, LeaseNotFound, TooLarge) as exc:
        rows.append(("etcd lease TTLs", False, str(exc)))
    return rows
