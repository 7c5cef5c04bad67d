"""What the panel shows about a pool, gathered once per request.

`site_states(now)` turns this agent's own pool view (`DATA_DIR/pool.json`,
written by its worker), its relay status (`DATA_DIR/relay.json`, while it
leads) and the election history into `SiteState`s. Every age and countdown is
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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from elections.ports.localstate import LocalState, PoolView, RelayStatus

_lock = threading.Lock()
_lease_seen: dict[str, tuple[tuple[Any, ...], float]] = {}
_relay_samples: dict[Any, tuple[float, int, float | None]] = {}


def stale_after() -> float:
    """A pool view older than this means this agent's worker is not looking."""
    stk = settings.STK
    return 3 * max(stk.lease_poll, stk.lease_renew) + 2


@dataclass
class MemberRow:
    node: str
    leader: bool
    eligible: bool
    reasons: list[str]
    age: float | None
    priority: Any
    ip: str | None
    drain: bool
    health: Any
    version: Any
    epoch: Any

    @property
    def role(self) -> str:
        return "leader" if self.leader else "follower"


@dataclass
class RelayState:
    """The leader's relay, from its relay.json (only on the leading agent)."""

    running: bool
    why: str = ""
    pid: Any = None
    epoch: Any = None
    clients: int = 0
    per_station: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    connections: int = 0
    unregistered: int = 0
    messages: int = 0
    deliveries: int = 0
    bytes: int = 0
    no_route: int = 0
    rate: float | None = None  # messages/s between two observations
    drops: dict[str, int] = field(default_factory=dict)
    age: float | None = None

    @property
    def drops_total(self) -> int:
        return sum(v for v in self.drops.values() if isinstance(v, int))


@dataclass
class SiteState:
    kmsn: str
    agent: str  # the node whose view this is (this agent)
    view_age: float | None  # seconds since this agent's worker wrote the view
    lease: dict[str, Any] | None
    lease_status: str
    lease_detail: str
    store_reachable: bool
    members: list[MemberRow]
    decision: str
    renewed_ago: float | None = None
    expires_in: float | None = None
    since: datetime | None = None
    relay: RelayState | None = None
    changes_24h: int = 0
    paused: bool | None = None
    this_agent_leads: bool = False
    refusals: dict[str, Any] = field(default_factory=dict)  # what this agent refused as evidence
    store: dict[str, Any] = field(default_factory=dict)  # the pool's store: kind, where, etcd leader...

    @property
    def epoch(self) -> int | None:
        return (self.lease or {}).get("epoch")

    @property
    def view_stale(self) -> bool:
        return self.view_age is None or self.view_age > stale_after()

    @property
    def leader(self) -> str | None:
        """The node holding a live lease, as this agent sees it now (None: no leader)."""
        lease = self.lease
        if not lease or lease.get("released") or self.view_stale:
            return None
        if self.expires_in is not None and self.expires_in <= 0:
            return None
        return lease.get("node")

    @property
    def has_leader(self) -> bool:
        return self.leader is not None

    @property
    def why_no_leader(self) -> str:
        if self.view_age is None:
            return "this agent has no view of the pool yet"
        if self.view_stale:
            return f"this agent's view of the pool is {self.view_age:.0f} s old"
        if not self.store_reachable:
            return "the lease store is unreachable from this agent"
        if self.lease is None:
            return f"no valid lease (status {self.lease_status})"
        if self.lease.get("released"):
            return f"lease released by {self.lease.get('node')}" + (
                f", handed to {self.lease['handoff_to']}" if self.lease.get("handoff_to") else ""
            )
        return f"lease of {self.lease.get('node')} expired"

    @property
    def eligible(self) -> list[MemberRow]:
        return [m for m in self.members if m.eligible]

    def member(self, node: str) -> MemberRow | None:
        return next((m for m in self.members if m.node == node), None)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def relay_state(status: RelayStatus, kmsn: str, now: float) -> RelayState:
    """The relay as its status file describes it; defensive about every field."""
    if not status.exists:
        return RelayState(False, "no relay status (relay.json) on this agent")
    age = status.age(now)
    if not status.listening:
        return RelayState(False, "relay not listening", pid=status.pid, epoch=status.epoch, age=age)
    if age is None or age > 3.0:
        return RelayState(False, "relay status is stale", pid=status.pid, epoch=status.epoch, age=age)
    snap = status.snapshot
    counts = snap.get("counts") if isinstance(snap.get("counts"), dict) else {}
    stations = counts.get(kmsn) if isinstance(counts.get(kmsn), dict) else {}
    per_station = []
    for station, roles in sorted(stations.items()):
        if isinstance(roles, dict):
            per_station.append((str(station), {str(r): _int(n) for r, n in sorted(roles.items())}))
    relayed = snap.get("relayed") if isinstance(snap.get("relayed"), dict) else {}
    drops = snap.get("drops") if isinstance(snap.get("drops"), dict) else {}
    messages = _int(relayed.get("messages"))
    assert status.updated is not None
    rate = _rate(status.pid, status.updated, messages)
    return RelayState(
        True,
        pid=status.pid,
        epoch=status.epoch,
        clients=sum(sum(r.values()) for _, r in per_station),
        per_station=per_station,
        connections=_int(snap.get("connections")),
        unregistered=_int(snap.get("unregistered")),
        messages=messages,
        deliveries=_int(relayed.get("deliveries")),
        bytes=_int(relayed.get("bytes")),
        no_route=_int(relayed.get("no_route")),
        rate=rate,
        drops={str(k): _int(v) for k, v in drops.items()},
        age=age,
    )


def _rate(key: Any, updated: float, messages: int) -> float | None:
    """Messages/s between the last two observations at least 1 s apart."""
    with _lock:
        prev = _relay_samples.get(key)
        if prev is None or messages < prev[1]:
            _relay_samples[key] = (updated, messages, None)
            return None
        if updated - prev[0] < 1.0:
            return prev[2]
        rate = (messages - prev[1]) / (updated - prev[0])
        _relay_samples[key] = (updated, messages, rate)
        return rate


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
    for node, m in sorted(pool.members.items()):
        age = m.age
        if age is not None and view_age is not None:
            age = age + view_age  # aged on this machine's clock since the view was taken
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
            )
        )
    site = SiteState(
        kmsn=kmsn,
        agent=pool.node or settings.STK.node,
        view_age=view_age,
        lease=lease,
        lease_status=pool.lease_status,
        lease_detail=pool.lease_detail,
        store_reachable=pool.store_reachable,
        members=members,
        decision=pool.decision,
        paused=pool.paused,
        this_agent_leads=leads,
        refusals=pool.refusals,
        store=pool.store,
    )
    seen_at = _lease_seen_at(pool)
    if lease is not None and seen_at is not None:
        site.renewed_ago = max(now - seen_at, 0.0)
        ttl = lease.get("ttl_s")
        if isinstance(ttl, (int, float)):
            site.expires_in = ttl - site.renewed_ago
    if leads and lease and leader_node == site.agent:
        site.relay = relay_state(relay or RelayStatus(), kmsn, now)
    return site


def annotate(site: SiteState, wall_now: datetime) -> SiteState:
    """Add what comes from the election history: leader since, changes in 24 h, pause state."""
    from elections.models import ElectionEvent

    events = ElectionEvent.objects.filter(kmsn=site.kmsn)
    if site.epoch is not None:
        first = (
            events.filter(kind="elected", epoch=site.epoch)
            .order_by("observed_at")
            .values_list("observed_at", flat=True)
            .first()
        )
        site.since = first
    site.changes_24h = events.filter(kind="elected", observed_at__gte=wall_now - timedelta(hours=24)).count()
    if site.paused is None:
        last = (
            events.filter(kind__in=("pause_requested", "resume_requested"))
            .order_by("-observed_at", "-id")
            .values_list("kind", flat=True)
            .first()
        )
        site.paused = last == "pause_requested"
    return site


def site_states(now: float | None = None, wall_now: datetime | None = None) -> list[SiteState]:
    """One `SiteState` per KMSN this agent sees (today: its own pool)."""
    now = time.monotonic() if now is None else now
    wall_now = wall_now or timezone.now()
    stk = settings.STK
    local = LocalState(stk.data_dir)
    pool = local.pool()
    if not pool.exists:
        pool = PoolView(kmsn=stk.kmsn, node=stk.node)
    leads = local.leads_now(now)
    relay = local.relay() if leads else None
    return [annotate(build_site(pool, now, relay, leads), wall_now)]


def site_state(kmsn: str, now: float | None = None) -> SiteState | None:
    return next((s for s in site_states(now) if s.kmsn == kmsn), None)
