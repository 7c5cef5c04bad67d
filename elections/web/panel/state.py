"""What the panel shows about a pool, gathered once per request.

`site_states(now)` turns this agent's own pool view (`DATA_DIR/pool.json`,
written by its worker) and the views of the pools it watches
(`DATA_DIR/watched/<KMSN>.json`, docs/design.md §11), its relay status (`DATA_DIR/relay.json`, while it
leads) and the election history into `SiteState`s (`panel.site`). Every age and countdown is
measured on *this machine's* monotonic clock from when this agent observed
something (the worker's `updated`, a change of the lease's renew_seq), never
by comparing another machine's wall clock with ours.

The lease's renewal is timed from `lease_seen_at` when the pool view carries
it, else from the first pool view in which this web process saw the current
`(node, epoch, renew_seq)` — so "renewed N s ago" is as observed by this agent.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from elections.core.decide import GONE, SILENT
from elections.core.ownership import Entry
from elections.core.skew import versus
from elections.core.untrusted import as_list, as_object
from elections.ports.local.localstate import LocalState, RelayStatus
from elections.ports.local.pool_view import PoolView
from elections.web.panel.relay_state import relay_state
from elections.web.panel.site import MemberRow, SiteState
from relay.server.listen_set import door_hosts

_lock = threading.Lock()
_lease_seen: dict[str, tuple[tuple[Any, ...], float]] = {}


def _lease_seen_at(pool: PoolView) -> float | None:
    lease, updated = pool.lease, pool.updated
    if not lease or updated is None:
        return None
    if pool.lease_seen_at is not None:
        return pool.lease_seen_at
    key = (lease.get("node"), lease.get("epoch"), lease.get("renew_seq"))
    kmsn = pool.kmsn
    with _lock:
        known = _lease_seen.get(kmsn)
        if known is None or known[0] != key:
            _lease_seen[kmsn] = (key, float(updated))
            return float(updated)
        return known[1]


def build_site(
    pool: PoolView, now: float, relay: RelayStatus | None = None, leads: bool = False
) -> SiteState:
    """A `SiteState` from a pool view, without the database (see `annotate`)."""
    kmsn = pool.kmsn or settings.STK.kmsn
    view_age = now - pool.updated if pool.updated is not None else None
    lease = pool.lease
    leader_node = (lease or {}).get("node")
    members = []
    heard = as_object(pool.beacons.get("members"))
    mine = pool.members[pool.node].clock if pool.node in pool.members else None
    for node, m in sorted(pool.members.items()):
        age = m.age
        if age is not None and view_age is not None:
            age = age + view_age  # aged on this machine's clock since the view was taken
        b = as_object(heard.get(node))
        b_age, b_loss = b.get("age_s"), b.get("loss")
        if isinstance(b_age, (int, float)) and view_age is not None:
            b_age = b_age + view_age
        members.append(
            MemberRow(
                node=node,
                leader=node == leader_node and not (lease or {}).get("released"),
                eligible=m.eligible,
                reasons=list(m.reasons),
                age=age,
                priority=m.priority,
                ip=m.ip,
                drain=m.drain,
                health=m.health,
                version=m.version,
                epoch=m.epoch,
                beacon_loss=b_loss if isinstance(b_loss, (int, float)) else None,
                beacon_age=b_age if isinstance(b_age, (int, float)) else None,
                web_tls=m.web_tls,
                clock=m.clock,
                clock_vs_agent=versus(m.clock, mine) if node != pool.node else None,
                gone=age is not None and age > settings.STK.heartbeat_ttl and node != leader_node,
                entry=m.entry,
                entry_sessions=m.entry_sessions,
            )
        )
    site = SiteState(
        kmsn=kmsn,
        agent=pool.node or settings.STK.node,
        view_age=view_age,
        lease=lease,
        lease_status=pool.lease_state,  # `released` for a released lease, never `valid` (issue 42)
        lease_detail=pool.lease_detail,
        store_reachable=pool.store_reachable,
        members=members,
        decision=pool.decision,
        paused=pool.paused,
        this_agent_leads=leads,
        refusals=pool.refusals,
        detection=pool.detection,
        serving=pool.beacons.get("serving") or {},
        watched=pool.watched,
        store=pool.store,
        share_split=pool.share_split,
    )
    _addresses(site, pool.ownership, now)
    echoes = pool.beacons.get("echoes")
    site.beacon_echoes = echoes if isinstance(echoes, int) and not isinstance(echoes, bool) else 0
    seen_at = _lease_seen_at(pool)
    if lease is not None and seen_at is not None:
        site.renewed_ago = max(now - seen_at, 0.0)
        ttl = lease.get("ttl_s")
        if isinstance(ttl, (int, float)):
            site.expires_in = ttl - site.renewed_ago
    if leads and lease and leader_node == site.agent:
        site.relay = relay_state(relay or RelayStatus(), kmsn, now)
    return site


def _addresses(site: SiteState, doc: dict[str, Any], now: float) -> None:
    """The ownership map of `pool.json` (this agent's own file, read defensively)."""
    entries = as_list(doc.get("entries"))
    site.addresses = [e for e in (Entry.from_doc(d) for d in entries[:64]) if e is not None]
    at = doc.get("at")
    site.addresses_age = max(now - at, 0.0) if isinstance(at, (int, float)) and site.addresses else None
    repairs = as_list(doc.get("repairs"))
    site.repairs = []
    for r in repairs[:8]:
        if isinstance(r, dict) and isinstance(r.get("at"), (int, float)):
            site.repairs.append({**{k: r.get(k) for k in ("executor", "address", "verb", "cause", "epoch",
                                                           "status", "message")},
                                 "age_s": max(now - r["at"], 0.0)})  # fmt: skip


def annotate(site: SiteState, wall_now: datetime) -> SiteState:
    """Add what comes from the election history: leader since, changes in 24 h, pause state."""
    return annotate_all([site], wall_now)[0]


def annotate_all(sites: list[SiteState], wall_now: datetime) -> list[SiteState]:
    """`annotate` for many pools at once: three queries whatever their number
    (the fleet view shows 50 pools on every poll)."""
    from django.db.models import Count, Min, Q

    from elections.models import ElectionEvent

    if not sites:
        return sites
    kmsns = [s.kmsn for s in sites]
    events = ElectionEvent.objects.filter(kmsn__in=kmsns).order_by()
    with_epoch = [s for s in sites if s.epoch is not None]
    since: dict[tuple[str, int], datetime] = {}
    if with_epoch:
        wanted = Q()
        for s in with_epoch:
            wanted |= Q(kmsn=s.kmsn, epoch=s.epoch)
        rows = events.filter(wanted, kind="elected").values("kmsn", "epoch").annotate(at=Min("observed_at"))
        since = {(r["kmsn"], r["epoch"]): r["at"] for r in rows}
    recent = events.filter(kind="elected", observed_at__gte=wall_now - timedelta(hours=24))
    changes = dict(recent.values("kmsn").annotate(n=Count("id")).values_list("kmsn", "n"))
    early_all, early_24h = early_takeover_counts(kmsns, wall_now)
    unknown = [s.kmsn for s in sites if s.paused is None]
    paused: dict[str, bool] = {}
    if unknown:
        rows = (
            events.filter(kmsn__in=unknown, kind__in=("pause_requested", "resume_requested"))
            .order_by("kmsn", "-observed_at", "-id")
            .values_list("kmsn", "kind")
        )
        for kmsn, kind in rows:
            paused.setdefault(kmsn, kind == "pause_requested")
    for s in sites:
        if s.epoch is not None:
            s.since = since.get((s.kmsn, s.epoch))
        s.changes_24h = changes.get(s.kmsn, 0)
        s.early_takeovers, s.early_takeovers_24h = early_all.get(s.kmsn, 0), early_24h.get(s.kmsn, 0)
        if s.paused is None:
            s.paused = paused.get(s.kmsn, False)
    return sites


def early_takeover_counts(kmsns: list[str], wall_now: datetime) -> tuple[dict[str, int], dict[str, int]]:
    """Per KMSN, the elections taken on liveness evidence (cause `gone`): ever, and in 24 h."""
    from django.db.models import Count

    from elections.models import ElectionEvent

    early = ElectionEvent.objects.filter(
        kmsn__in=kmsns, kind="elected", detail__cause__in=(GONE, SILENT)
    ).order_by()

    def per_kmsn(rows: Any) -> dict[str, int]:
        return dict(rows.values("kmsn").annotate(n=Count("id")).values_list("kmsn", "n"))

    return per_kmsn(early), per_kmsn(early.filter(observed_at__gte=wall_now - timedelta(hours=24)))


def watched_kmsns() -> list[str]:
    """The KMSNs of the `[pool:<KMSN>]` sections, in the ini's order."""
    return [w.kmsn for w in settings.STK.watched]


def all_kmsns() -> list[str]:
    """Every pool this agent shows: its own first, then the watched ones."""
    return [settings.STK.kmsn, *watched_kmsns()]


def pool_view(kmsn: str) -> PoolView | None:
    """This agent's latest view of pool `kmsn` (own or watched); None if it shows no such pool."""
    stk = settings.STK
    local = LocalState(stk.data_dir)
    if kmsn == stk.kmsn:
        pool = local.pool()
        return pool if pool.exists else PoolView(kmsn=stk.kmsn, node=stk.node)
    if kmsn not in watched_kmsns():
        return None
    pool = local.watched_pool(kmsn)
    return pool if pool.exists and pool.kmsn == kmsn else PoolView(kmsn=kmsn, node=stk.node, watched=True)


def _built(kmsn: str, now: float) -> SiteState | None:
    pool = pool_view(kmsn)
    if pool is None:
        return None
    leads, relay = False, None
    if not pool.watched:
        local = LocalState(settings.STK.data_dir)
        leads = local.leads_now(now)
        relay = local.relay() if leads else None
        site = build_site(pool, now, relay, leads)
        if settings.STK.entry:
            site.entry_here = local.entry()
            site.entry_here_live = site.entry_here.fresh(now)
        stk = settings.STK
        if door_hosts(stk.node_ip, stk.relay_loopback, stk.relay_forward):
            site.door_here = local.door()
            site.door_here_live = site.door_here.fresh(now)
        return site
    return build_site(pool, now, relay, leads)


def site_states(now: float | None = None, wall_now: datetime | None = None) -> list[SiteState]:
    """One `SiteState` per KMSN this agent sees: its own pool, then every watched one."""
    now = time.monotonic() if now is None else now
    states = [s for s in (_built(k, now) for k in all_kmsns()) if s is not None]
    return annotate_all(states, wall_now or timezone.now())


def site_state(kmsn: str, now: float | None = None) -> SiteState | None:
    site = _built(kmsn, time.monotonic() if now is None else now)
    return None if site is None else annotate(site, timezone.now())
