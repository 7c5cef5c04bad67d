"""`GET /metrics`: Prometheus text format (version 0.0.4).

Readable without login from loopback addresses (a local scraper or
node-exporter textfile job); from anywhere else it needs a session or
`Authorization: Bearer stk_...` (Prometheus: `authorization: {credentials_file: ...}`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from django.db.models import Count
from django.http import HttpRequest, HttpResponse

from elections.models import ElectionEvent
from elections.ports.localstate import LocalState
from elections.web.auth import api_error, bearer_user, is_loopback
from elections.web.panel.state import site_states


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: object) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


class Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self, name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, object], float]]
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(**labels)} {value:g}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render() -> str:
    from django.conf import settings

    now = time.monotonic()
    states = site_states(now)
    out = Exposition()
    failovers = dict(
        ElectionEvent.objects.filter(kind="elected").values_list("kmsn").annotate(n=Count("id")).order_by()
    )
    out.family(
        "stkrelay_pool_has_leader",
        "gauge",
        "1 if the pool has a live leader as this agent sees it.",
        [({"kmsn": s.kmsn}, 1 if s.has_leader else 0) for s in states],
    )
    out.family(
        "stkrelay_pool_leader",
        "gauge",
        "1 for the member that leads the pool, 0 for the others.",
        [
            ({"kmsn": s.kmsn, "node": m.node}, 1 if s.leader == m.node else 0)
            for s in states
            for m in s.members
        ],
    )
    out.family(
        "stkrelay_pool_epoch",
        "gauge",
        "Epoch of the pool's current lease.",
        [({"kmsn": s.kmsn}, s.epoch) for s in states if s.epoch is not None],
    )
    out.family(
        "stkrelay_pool_lease_renewed_age_seconds",
        "gauge",
        "Seconds since this agent saw the lease renewed (its own clock).",
        [({"kmsn": s.kmsn}, round(s.renewed_ago, 3)) for s in states if s.renewed_ago is not None],
    )
    out.family(
        "stkrelay_pool_members",
        "gauge",
        "Members with a heartbeat, by eligibility.",
        [
            ({"kmsn": s.kmsn, "eligible": str(e).lower()}, sum(1 for m in s.members if m.eligible == e))
            for s in states
            for e in (True, False)
        ],
    )
    out.family(
        "stkrelay_member_eligible",
        "gauge",
        "1 if the member may become leader.",
        [({"kmsn": s.kmsn, "node": m.node}, 1 if m.eligible else 0) for s in states for m in s.members],
    )
    out.family(
        "stkrelay_failovers_total",
        "counter",
        "Elections recorded in this agent's history.",
        [({"kmsn": k}, n) for k, n in sorted(failovers.items())],
    )
    out.family(
        "stkrelay_agent_leader",
        "gauge",
        "1 while this agent leads its pool.",
        [({"node": settings.STK.node}, 1 if LocalState(settings.STK.data_dir).leads_now(now) else 0)],
    )
    relays = [(s, s.relay) for s in states if s.relay is not None and s.relay.running]
    out.family(
        "stkrelay_relay_clients",
        "gauge",
        "Registered relay clients on this agent, by station and role.",
        [
            ({"kmsn": s.kmsn, "station": st, "role": role}, n)
            for s, r in relays
            for st, roles in r.per_station
            for role, n in roles.items()
        ],
    )
    out.family(
        "stkrelay_relay_messages_total",
        "counter",
        "Messages relayed by this agent's relay process.",
        [({"kmsn": s.kmsn}, r.messages) for s, r in relays],
    )
    out.family(
        "stkrelay_relay_bytes_total",
        "counter",
        "Bytes of relayed message frames.",
        [({"kmsn": s.kmsn}, r.bytes) for s, r in relays],
    )
    out.family(
        "stkrelay_relay_drops_total",
        "counter",
        "Clients or frames dropped by the relay, by cause.",
        [({"kmsn": s.kmsn, "cause": k}, v) for s, r in relays for k, v in sorted(r.drops.items())],
    )
    return out.text()


def metrics(request: HttpRequest) -> HttpResponse:
    if not is_loopback(request):
        user = bearer_user(request)
        if not user and not request.user.is_authenticated:
            return api_error(401, "unauthenticated", "/metrics needs a token (or a loopback address)")
    return HttpResponse(render(), content_type="text/plain; version=0.0.4; charset=utf-8")
