"""`GET /metrics`: Prometheus text format, written by prometheus_client.

Readable without login from loopback addresses (a local scraper or
node-exporter textfile job); from anywhere else it needs a session or
`Authorization: Bearer stk_...` (Prometheus: `authorization: {credentials_file: ...}`).

`PoolCollector.collect()` reads, at scrape time, what the panel reads (this
agent's pool view and relay status, its election history, its leadership
state): nothing is counted in memory between scrapes, so every web process
answers the same. It sits on a private `REGISTRY` (not prometheus_client's
global one) beside the library's process and platform collectors.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from elections.audit import LoginFailure
from elections.core.ownership import VERDICTS
from elections.core.untrusted import CAUSES, as_object
from elections.models import ElectionEvent
from elections.ports.local.localstate import LocalState
from elections.runtime.notify import read_counters, read_queue
from elections.web.auth import api_error, bearer_user, is_loopback
from elections.web.metrics_view import build_info, view_families
from elections.web.panel.failovers import failovers_for
from elections.web.panel.proxy_state import ProxyState
from elections.web.panel.relay_state import RelayState
from elections.web.panel.site import SiteState
from elections.web.panel.state import site_states
from elections.web.throttle import login_throttle
from relay.web.ws_flow import DROPS as WS_DROPS

GAP_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 15, 30, 60)  # seconds without a leader; +Inf is added


def gap_buckets(gaps: Iterable[float], bounds: Sequence[float] = GAP_BUCKETS) -> list[tuple[str, float]]:
    """Cumulative `(le, count)` pairs for `gaps`, ending with `+Inf` (every gap)."""
    values = list(gaps)
    pairs = [(floatToGoString(b), float(sum(1 for g in values if g <= b))) for b in bounds]
    return [*pairs, ("+Inf", float(len(values)))]


class PoolCollector(Collector):
    """The stkrelay_* families, read from this agent's files and database per scrape."""

    def collect(self) -> Iterable[Metric]:
        now = time.monotonic()
        states = site_states(now)
        yield from _pool_families(states)
        yield from _member_families(states)
        yield from _history_families(states)
        yield _refusal_family(states)
        yield from _beacon_families(states)
        yield from _address_families(states)
        yield _websocket_drops()
        yield from _agent_families(now)
        yield from _relay_families(
            [(s.kmsn, s.relay) for s in states if s.relay is not None and s.relay.running]
        )
        yield from _proxy_families([(s.kmsn, s.relay.proxy) for s in states if s.relay and s.relay.proxy])
        yield from _door_families(states)
        yield from _login_families()
        yield from _notify_families()


def _pool_families(states: list[SiteState]) -> Iterable[Metric]:
    """Each pool: its leader, epoch, lease age and early takeovers, and the view's families."""
    g = GaugeMetricFamily(
        "stkrelay_pool_has_leader",
        "1 if the pool has a live leader as this agent sees it.",
        labels=["kmsn"],
    )
    for s in states:
        g.add_metric([s.kmsn], 1 if s.has_leader else 0)
    yield g
    yield from view_families(states)
    g = GaugeMetricFamily(
        "stkrelay_pool_leader",
        "1 for the member that leads the pool, 0 for the others.",
        labels=["kmsn", "node"],
    )
    for s in states:
        for m in s.members:
            g.add_metric([s.kmsn, m.node], 1 if s.leader == m.node else 0)
    yield g
    c = CounterMetricFamily(
        "stkrelay_early_takeovers",
        "Elections taken before the TTL on evidence that the leader's agent was gone (docs/design.md §13).",
        labels=["kmsn"],
    )
    for s in states:
        c.add_metric([s.kmsn], s.early_takeovers)
    yield c
    g = GaugeMetricFamily("stkrelay_pool_epoch", "Epoch of the pool's current lease.", labels=["kmsn"])
    for s in states:
        if s.epoch is not None:
            g.add_metric([s.kmsn], s.epoch)
    yield g
    g = GaugeMetricFamily(
        "stkrelay_pool_lease_renewed_age_seconds",
        "Seconds since this agent saw the lease renewed (its own clock).",
        labels=["kmsn"],
    )
    for s in states:
        if s.renewed_ago is not None:
            g.add_metric([s.kmsn], round(s.renewed_ago, 3))
    yield g


def _member_families(states: list[SiteState]) -> Iterable[Metric]:
    """Each pool's members, by eligibility."""
    g = GaugeMetricFamily(
        "stkrelay_pool_members", "Members with a heartbeat, by eligibility.", labels=["kmsn", "eligible"]
    )
    for s in states:
        for e in (True, False):
            g.add_metric([s.kmsn, str(e).lower()], sum(1 for m in s.members if m.eligible == e))
    yield g
    g = GaugeMetricFamily(
        "stkrelay_member_eligible", "1 if the member may become leader.", labels=["kmsn", "node"]
    )
    for s in states:
        for m in s.members:
            g.add_metric([s.kmsn, m.node], 1 if m.eligible else 0)
    yield g


def _history_families(states: list[SiteState]) -> Iterable[Metric]:
    """This agent's election history: failovers and the gaps before them."""
    elections = dict(
        ElectionEvent.objects.filter(kind="elected").values_list("kmsn").annotate(n=Count("id")).order_by()
    )
    c = CounterMetricFamily(
        "stkrelay_failovers_total", "Elections recorded in this agent's history.", labels=["kmsn"]
    )
    for kmsn, n in sorted(elections.items()):
        c.add_metric([kmsn], n)
    yield c
    h = HistogramMetricFamily(
        "stkrelay_failover_gap_seconds",
        "Seconds the pool had no leader before each failover in this agent's history.",
        labels=["kmsn"],
    )
    for kmsn in sorted({*elections, *(s.kmsn for s in states)}):
        gaps = [f.gap_s for f in failovers_for(kmsn) if f.gap_s is not None]
        h.add_metric([kmsn], gap_buckets(gaps), sum(gaps))
    yield h


def _refusal_family(states: list[SiteState]) -> Metric:
    """Records refused as evidence, by cause (`core.untrusted.CAUSES`)."""
    c = CounterMetricFamily(
        "stkrelay_security_events",
        "Records from the share refused as evidence (forged, replayed, oversized...), by cause.",
        labels=["kmsn", "cause"],
    )
    for s in states:
        counts = as_object(s.refusals.get("counts"))
        for cause in sorted(CAUSES):
            n = counts.get(cause, 0)
            c.add_metric([s.kmsn, cause], n if isinstance(n, int) else 0)
    return c


def _websocket_drops() -> Metric:
    """WebSockets this web process closed as too slow."""
    c = CounterMetricFamily(
        "stkrelay_websocket_drops",
        "WebSockets this web process closed as too slow, by route and bound (relay/web/ws_flow.py).",
        labels=["route", "cause"],
    )
    for (route, cause), n in sorted(WS_DROPS.snapshot().items()):
        c.add_metric([route, cause], n)
    return c


def _agent_families(now: float) -> Iterable[Metric]:
    """This agent: whether it leads now, and its build."""
    stk = settings.STK
    g = GaugeMetricFamily(
        "stkrelay_agent_leader", "1 while this agent leads its pool.", labels=["kmsn", "node"]
    )
    g.add_metric([stk.kmsn, stk.node], 1 if LocalState(stk.data_dir).leads_now(now) else 0)
    yield g
    yield build_info(stk.kmsn, stk.node, stk.lease_store)


def _login_families() -> Iterable[Metric]:
    """This agent's login lockouts (`elections.web.throttle`, `audit.LoginFailure`)."""
    gate = login_throttle()
    g = GaugeMetricFamily(
        "stkrelay_login_lockouts",
        "Login lockouts in force on this agent's panel: addresses, and (user, client) pairs.",
        labels=["scope"],
    )
    g.add_metric(["address"], len(gate.lockouts()))
    g.add_metric(["user"], len(LoginFailure.locked()))
    yield g
    c = CounterMetricFamily(
        "stkrelay_login_refused",
        "Login attempts refused before any password was hashed, by the limit that refused them.",
        labels=["scope"],
    )
    for scope, n in sorted(gate.refused.items()):
        c.add_metric([scope], n)
    yield c


def _notify_families() -> Iterable[Metric]:
    """The worker's notifications (`elections.runtime.notify`, its DATA_DIR/notify.json)."""
    n = read_counters(settings.STK.data_dir)
    kmsn = settings.STK.kmsn
    c = CounterMetricFamily("stkrelay_webhook_events", "Webhook events delivered (sent), given up "
                            "after every try (failed), or pushed out of the full queue (dropped).",
                            labels=["kmsn", "outcome"])  # fmt: skip
    for outcome in ("sent", "failed", "dropped"):
        c.add_metric([kmsn, outcome], n[outcome])
    yield c
    depth, age = read_queue(settings.STK.data_dir, time.monotonic())  # the worker's clock: this machine's
    g = GaugeMetricFamily("stkrelay_webhook_queue_depth", "Webhook events waiting to be delivered "
                          "(queued, or waiting out a retry).", labels=["kmsn"])  # fmt: skip
    g.add_metric([kmsn], depth)
    yield g
    g = GaugeMetricFamily("stkrelay_webhook_oldest_pending_seconds", "How long the oldest webhook event "
                          "waiting has waited (0 when none).", labels=["kmsn"])  # fmt: skip
    g.add_metric([kmsn], round(age, 3))
    yield g
    c = CounterMetricFamily("stkrelay_role_change_commands", "ON_ROLE_CHANGE runs (run), and those "
                            "that failed or timed out (failed).", labels=["kmsn", "outcome"])  # fmt: skip
    c.add_metric([kmsn, "run"], n["role_runs"])
    c.add_metric([kmsn, "failed"], n["role_failed"])
    yield c


def _address_families(states: list[SiteState]) -> Iterable[Metric]:
    """Where each address is against the lease (ADR 0011 phase 4): 1 for its verdict, 0 for the others."""
    g = GaugeMetricFamily(
        "stkrelay_address_verdict",
        "1 for the address's ownership verdict as this agent last looked (ok, drift, orphan, conflict, "
        "missing, unknown), 0 for the others.",
        labels=["kmsn", "executor", "address", "verdict"],
    )
    for s in states:
        for e in s.addresses:
            for v in VERDICTS:
                g.add_metric([s.kmsn, e.executor, e.address, v], 1 if e.verdict == v else 0)
    yield g


def _beacon_families(states: list[SiteState]) -> Iterable[Metric]:
    """How this agent detects a leader's death, and what it hears of each member (docs/design.md §13)."""
    split = GaugeMetricFamily("stkrelay_share_split", "Members of the pool that beacon to this agent but use "
                              "another lease store (core.share_split); 0 when all share one.",
                              labels=["kmsn"])  # fmt: skip
    for s in states:
        split.add_metric([s.kmsn], len({f.get("node") for f in s.share_split}))
    yield split
    g = GaugeMetricFamily("stkrelay_pool_detection", "1 for the pool's detection mode on this agent.",
                          labels=["kmsn", "mode"])  # fmt: skip
    for s in states:
        for mode in ("beacons", "lease only"):
            g.add_metric([s.kmsn, mode], 1 if s.detection == mode else 0)
    yield g
    c = CounterMetricFamily(
        "stkrelay_beacon_echoes",
        "This agent's own beacons come back from its own address (its broadcast), dropped unparsed; "
        "a copy from another address is a replay (stkrelay_security_events_total{cause=replayed}).",
        labels=["kmsn"],
    )
    for s in states:
        if s.detection == "beacons":
            c.add_metric([s.kmsn], s.beacon_echoes)
    yield c
    for name, help_text, attr in (
        (
            "stkrelay_beacon_age_seconds",
            "Seconds since this agent last heard a beacon of the member.",
            "beacon_age",
        ),
        (
            "stkrelay_beacon_loss_ratio",
            "Share of the member's beacons this agent never received.",
            "beacon_loss",
        ),
    ):
        g = GaugeMetricFamily(name, help_text, labels=["kmsn", "node"])
        for s in states:
            for m in s.members:
                value = getattr(m, attr)
                if value is not None:
                    g.add_metric([s.kmsn, m.node], round(value, 4))
        yield g


def _relay_families(relays: list[tuple[str, RelayState]]) -> Iterable[Metric]:
    """The leader's relay counters (no samples on a follower)."""
    g = GaugeMetricFamily(
        "stkrelay_relay_clients",
        "Registered relay clients on this agent, by station and role.",
        labels=["kmsn", "station", "role"],
    )
    for kmsn, r in relays:
        for station, roles in r.per_station:
            for role, n in roles.items():
                g.add_metric([kmsn, station, role], n)
    yield g
    for name, help_text, attr in (
        ("stkrelay_relay_messages_total", "Messages relayed by this agent's relay process.", "messages"),
        ("stkrelay_relay_bytes_total", "Bytes of relayed message frames.", "bytes"),
    ):
        c = CounterMetricFamily(name, help_text, labels=["kmsn"])
        for kmsn, r in relays:
            c.add_metric([kmsn], getattr(r, attr))
        yield c
    c = CounterMetricFamily(
        "stkrelay_relay_drops_total",
        "Clients or frames dropped by the relay, by cause.",
        labels=["kmsn", "cause"],
    )
    for kmsn, r in relays:
        for cause, n in sorted(r.drops.items()):
            c.add_metric([kmsn, cause], n)
    yield c
    yield from _tunnel_families([(kmsn, r.tunnel) for kmsn, r in relays if r.tunnel is not None])


def _proxy_families(proxies: list) -> Iterable[Metric]:
    """The fencing proxy and the external relay behind it (RELAY_KIND = exec, docs/design.md §16)."""
    up = GaugeMetricFamily("stkrelay_proxy_upstream_up", "1 while the external relay accepts TCP.",
                           labels=["kmsn"])  # fmt: skip
    conns = GaugeMetricFamily("stkrelay_proxy_connections", "Connections the fencing proxy forwards now.",
                              labels=["kmsn"])  # fmt: skip
    accepted = CounterMetricFamily("stkrelay_proxy_accepted_total", "Connections the proxy forwarded.",
                                   labels=["kmsn"])  # fmt: skip
    refused = CounterMetricFamily("stkrelay_proxy_refused_total", "Connections refused at accept, by cause "
                                  "(gate_shut, relay_down, total).", labels=["kmsn", "cause"])  # fmt: skip
    closed = CounterMetricFamily("stkrelay_proxy_closed_total", "Forwarded connections ended, by cause.",
                                 labels=["kmsn", "cause"])  # fmt: skip
    moved = CounterMetricFamily("stkrelay_proxy_bytes_total", "Bytes forwarded, by direction (up: to the "
                                "external relay).", labels=["kmsn", "direction"])  # fmt: skip
    restarts = CounterMetricFamily("stkrelay_proxy_upstream_restarts_total", "Restarts of the external relay "
                                   "in this leadership.", labels=["kmsn"])  # fmt: skip
    for kmsn, p in proxies:
        up.add_metric([kmsn], 1 if p.accepting else 0)
        conns.add_metric([kmsn], p.connections)
        accepted.add_metric([kmsn], p.accepted)
        for cause, n in sorted(p.refused.items()):
            refused.add_metric([kmsn, cause], n)
        for cause, n in sorted(p.closed.items()):
            closed.add_metric([kmsn, cause], n)
        moved.add_metric([kmsn, "up"], p.bytes_up)
        moved.add_metric([kmsn, "down"], p.bytes_down)
        restarts.add_metric([kmsn], p.restarts)
    yield from (up, conns, accepted, refused, closed, moved, restarts)


def _door_families(states: list[SiteState]) -> Iterable[Metric]:
    """This agent's station door (issue 36, `relay.server.station_door`, its ``door.json``): the
    counters are its process's since it started, and only while it reports (within 3 s)."""
    up = GaugeMetricFamily("stkrelay_door_up", "1 while this agent's station door reports and listens.",
                           labels=["kmsn"])  # fmt: skip
    epoch = GaugeMetricFamily("stkrelay_door_target_epoch", "Epoch of the lease whose relay the station "
                              "door leads stations to now (no sample while it leads nowhere).",
                              labels=["kmsn"])  # fmt: skip
    conns = GaugeMetricFamily("stkrelay_door_connections", "Connections the station door forwards now, by "
                              "port (json: protocol v1; passthrough).", labels=["kmsn", "port"])  # fmt: skip
    accepted = CounterMetricFamily("stkrelay_door_accepted_total", "Connections the station door accepted "
                                   "and forwarded.", labels=["kmsn"])  # fmt: skip
    refused = CounterMetricFamily("stkrelay_door_refused_total", "Connections the station door closed at "
                                  "accept, by reason (no_leader, stale_view, no_view, released, old_epoch, "
                                  "leader_changing, lan_share, per_address, total).",
                                  labels=["kmsn", "reason"])  # fmt: skip
    closed = CounterMetricFamily("stkrelay_door_closed_total", "Forwarded connections ended, by cause "
                                 "(repointed: closed on a leader change; no_leader: the gate shut; ended, "
                                 "reset: a side ended it).", labels=["kmsn", "cause"])  # fmt: skip
    changes = CounterMetricFamily("stkrelay_door_leader_changes_total", "Leader changes the station "
                                  "door followed (re-pointed to a new epoch or relay).",
                                  labels=["kmsn"])  # fmt: skip
    moved = CounterMetricFamily("stkrelay_door_bytes_total", "Bytes the station door forwarded, by direction "
                                "(up: to the relay).", labels=["kmsn", "direction"])  # fmt: skip
    for s in states:
        door = s.door_here
        if door is None:
            continue
        up.add_metric([s.kmsn], 1 if s.door_here_live and door.listening else 0)
        proxy = ProxyState.of(door.proxy)
        if not s.door_here_live or proxy is None:
            continue
        target_epoch = (door.target or {}).get("epoch")
        if isinstance(target_epoch, int) and not isinstance(target_epoch, bool):
            epoch.add_metric([s.kmsn], target_epoch)
        conns.add_metric([s.kmsn, "json"], door.sessions)
        conns.add_metric([s.kmsn, "passthrough"], door.streams)
        accepted.add_metric([s.kmsn], proxy.accepted)
        for reason, n in sorted(proxy.refused.items()):
            refused.add_metric([s.kmsn, reason], n)
        for cause, n in sorted(proxy.closed.items()):
            closed.add_metric([s.kmsn, cause], n)
        changes.add_metric([s.kmsn], door.repointed)
        moved.add_metric([s.kmsn, "up"], proxy.bytes_up)
        moved.add_metric([s.kmsn, "down"], proxy.bytes_down)
    yield from (up, epoch, conns, accepted, refused, closed, changes, moved)


def _tunnel_families(tunnels: list) -> Iterable[Metric]:
    """The leader's tunnel to the cloud relay (docs/design.md §14; only with CLOUD_URL)."""
    g = GaugeMetricFamily("stkrelay_tunnel_connected", "1 while the cloud accepted this leader's tunnel.",
                          labels=["kmsn", "epoch"])  # fmt: skip
    r = GaugeMetricFamily("stkrelay_tunnel_remote_clients", "Remote clients registered through the tunnel.",
                          labels=["kmsn"])  # fmt: skip
    b = CounterMetricFamily("stkrelay_tunnel_bytes_total", "Bytes over the tunnel, by direction.",
                            labels=["kmsn", "direction"])  # fmt: skip
    n = CounterMetricFamily("stkrelay_tunnel_reconnects_total", "Tunnel connections ended and redialled.",
                            labels=["kmsn"])  # fmt: skip
    for kmsn, t in tunnels:
        g.add_metric([kmsn, str(t.epoch)], 1 if t.connected else 0)
        r.add_metric([kmsn], t.remote_clients)
        b.add_metric([kmsn, "in"], t.bytes_in)
        b.add_metric([kmsn, "out"], t.bytes_out)
        n.add_metric([kmsn], t.reconnects)
    yield from (g, r, b, n)


REGISTRY = CollectorRegistry()
REGISTRY.register(PoolCollector())
ProcessCollector(registry=REGISTRY)  # process_* (Linux /proc; nothing elsewhere)
PlatformCollector(registry=REGISTRY)  # python_info


def render_metrics() -> bytes:
    return generate_latest(REGISTRY)


def metrics(request: HttpRequest) -> HttpResponse:
    if not is_loopback(request):
        user = bearer_user(request)
        if not user and not request.user.is_authenticated:
            return api_error(401, "unauthenticated", "/metrics needs a token (or a loopback address)")
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE_LATEST)
