"""JSON API under /api/v1/ (docs/panel.md has curl examples).

Authentication: a browser session (with the CSRF header on POST) or
`Authorization: Bearer stk_...` (`manage.py stkuser token NAME`). Commands
(POST .../drain|undrain|promote|pause|resume) go through the same
`elections.steering.perform` as the panel's buttons and `relayctl`: audited, permission-checked,
and mapped to HTTP: 202 accepted, 400 bad request, 403 forbidden, 404 unknown
member/pool, 409 stale epoch, 422 refused, 503 unavailable.

`GET /api/v1/leader?kmsn=...` answers without login only when
STK_PUBLIC_LEADER_LOOKUP=1 (relay clients' fallback lookup).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.paginator import EmptyPage, Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _

from elections import audit
from elections.core.commands import NEEDS_TARGET
from elections.core.untrusted import API_BODY, Untrusted, load_object
from elections.core.witness import fast_takeover
from elections.steering import MAX_EPOCH, perform
from elections.web import health as agent_views
from elections.web.auth import actor_for, api_error, api_view
from elections.web.panel import fleet, fmt
from elections.web.panel.audit_log import audit_rows, pool_chains, published_entries
from elections.web.panel.operate import KINDS
from elections.web.panel.page import PAGE_SIZE
from elections.web.panel.site import SiteState
from elections.web.panel.state import site_state, site_states, watched_kmsns
from elections.web.panel.views import history_rows


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def summary(s: SiteState) -> dict[str, Any]:
    return {
        "kmsn": s.kmsn,
        "agent": s.agent,
        "leader": s.leader,
        "has_leader": s.has_leader,
        "why_no_leader": None if s.has_leader else s.why_no_leader,
        "epoch": s.epoch,
        "since": fmt.iso(s.since) or None,
        "lease_status": s.lease_status,
        "lease_renewed_ago_s": _r(s.renewed_ago),
        "lease_expires_in_s": _r(s.expires_in),
        "members_eligible": len(s.eligible),
        "members_total": len(s.members),
        "relay_clients": s.relay.clients if s.relay and s.relay.running else None,
        "leader_changes_24h": s.changes_24h,
        "paused": s.paused,
        "view_age_s": _r(s.view_age),
        "view_stale": s.view_stale,
        "watched": s.watched,
        "store_reachable": s.store_reachable,
        "alarms": s.alarms,
        "security_alarm": s.security_alarm,
        "refused_records": s.refused_total,
        # what a fast takeover of a silent leader rests on (issue 38), None: the TTL path
        "fast_takeover": fast_takeover(s.serving),
    }


def members(s: SiteState) -> list[dict[str, Any]]:
    return [
        {
            "node": m.node,
            "role": m.role,
            "eligible": m.eligible,
            "reasons": m.reasons,
            "heartbeat_age_s": _r(m.age),
            "priority": m.priority,
            "drain": m.drain,
            "health": m.health,
            "version": m.version,
            "ip": m.ip,
            "epoch": m.epoch,
            # its panel's certificate (64 hex; "" in plain HTTP; null when its heartbeat does not say)
            "web_tls_sha256": m.web_tls,
            # its wall clock against the store's, and against this agent's (shown only: core.skew)
            "clock": _clock(m),
        }
        for m in s.members
    ]


def _clock(m: Any) -> dict[str, Any] | None:
    if m.clock is None:
        return None
    vs = m.clock_vs_agent
    return {**m.clock.to_doc(), "vs_this_agent_s": None if vs is None else round(vs[0], 3)}


def addresses(s: SiteState) -> dict[str, Any]:
    """The ownership map (ADR 0011 phase 4) as this agent last looked, and its latest repairs."""
    return {
        "kmsn": s.kmsn,
        "observed_ago_s": _r(s.addresses_age),
        "addresses": [e.to_doc() for e in s.addresses],
        "repairs": [{**r, "age_s": _r(r["age_s"])} for r in s.repairs],
    }


def lease(s: SiteState) -> dict[str, Any]:
    return {
        "kmsn": s.kmsn,
        "status": s.lease_status,
        "detail": s.lease_detail,
        "store_reachable": s.store_reachable,
        "store": s.store or None,
        "record": s.lease,
        "renewed_ago_s": _r(s.renewed_ago),
        "expires_in_s": _r(s.expires_in),
        "decision": s.decision,
    }


def relay(s: SiteState) -> dict[str, Any] | None:
    r = s.relay
    if r is None:
        return None
    return {
        "running": r.running,
        "why": r.why or None,
        "pid": r.pid,
        "epoch": r.epoch,
        "clients": r.clients,
        "per_station": dict(r.per_station),
        "connections": r.connections,
        "messages": r.messages,
        "messages_per_s": _r(r.rate, 2),
        "deliveries": r.deliveries,
        "bytes": r.bytes,
        "no_route": r.no_route,
        "drops": r.drops,
        "listen": [
            {"address": e.address, "why": e.why, "state": e.state, "error": e.error or None} for e in r.listen
        ],
        "legacy": None
        if r.legacy is None
        else {  # RELAY_LEGACY = 1 (relay.wire.legacy)
            "sessions": r.legacy.sessions,
            "registered": r.legacy.registered,
            "refused": r.legacy.refused,
        },
        "kind": "exec" if r.proxy is not None else "builtin",
        "proxy": _proxy(r.proxy),
    }


def _proxy(p: Any) -> dict[str, Any] | None:
    """RELAY_KIND = exec: the external relay and the fencing proxy's counters (docs/design.md §16)."""
    if p is None:
        return None
    return {
        "command": p.command, "accepting": p.accepting, "pid": p.pid, "upstream": p.upstream,
        "listening": p.listening, "connections": p.connections, "accepted": p.accepted,
        "refused": p.refused, "closed": p.closed, "bytes_up": p.bytes_up, "bytes_down": p.bytes_down,
        "restarts": p.restarts, "last_error": p.last_error or None,
    }  # fmt: skip


def _site_or_404(kmsn: str) -> SiteState | JsonResponse:
    s = site_state(kmsn)
    return (
        s
        if s is not None
        else api_error(404, "unknown_pool", _("this agent does not see pool %(kmsn)r") % {"kmsn": kmsn})
    )


@api_view()
def sites(request: HttpRequest) -> HttpResponse:
    """Every pool this agent shows (its own first, then the watched ones in the
    ini's order); `?kmsn=` keeps those whose KMSN contains it, `?sort=` orders
    them like the fleet view (`worst`, `kmsn`, `epoch`, ...; `dir=asc|desc`)."""
    for name, allowed in (("sort", fleet.SORTS), ("dir", fleet.DIRECTIONS)):
        given = request.GET.get(name)
        if given is not None and given not in allowed:
            return api_error(400, "bad_request", _("%(name)s must be one of %(allowed)s")
                             % {"name": name, "allowed": ", ".join(allowed)})  # fmt: skip
    order = fleet.Order.of(request.GET)
    states = order.apply(site_states()) if request.GET.get("sort") else site_states()
    if not request.GET.get("sort"):
        states = [s for s in states if order.kmsn.lower() in s.kmsn.lower()]
    return JsonResponse({"sites": [summary(s) for s in states]})


@api_view()
def site(request: HttpRequest, kmsn: str) -> HttpResponse:
    s = _site_or_404(kmsn)
    if isinstance(s, JsonResponse):
        return s
    return JsonResponse({**summary(s), "members": members(s), "lease": lease(s), "relay": relay(s),
                         "addresses": addresses(s)})  # fmt: skip


@api_view()
def site_members(request: HttpRequest, kmsn: str) -> HttpResponse:
    s = _site_or_404(kmsn)
    if isinstance(s, JsonResponse):
        return s
    return JsonResponse({"kmsn": kmsn, "epoch": s.epoch, "members": members(s)})


@api_view()
def site_addresses(request: HttpRequest, kmsn: str) -> HttpResponse:
    s = _site_or_404(kmsn)
    if isinstance(s, JsonResponse):
        return s
    return JsonResponse(addresses(s))


@api_view()
def site_lease(request: HttpRequest, kmsn: str) -> HttpResponse:
    s = _site_or_404(kmsn)
    if isinstance(s, JsonResponse):
        return s
    return JsonResponse(lease(s))


def _page(request: HttpRequest, items: Any) -> tuple[Any, dict[str, Any]] | JsonResponse:
    try:
        size = min(max(int(request.GET.get("page_size", PAGE_SIZE)), 1), 500)
        number = int(request.GET.get("page", 1))
    except ValueError:
        return api_error(400, "bad_request", _("page and page_size must be integers"))
    paginator = Paginator(items, size)
    try:
        page = paginator.page(number)
    except EmptyPage:
        return api_error(404, "no_such_page", _("there are %(n)d pages") % {"n": paginator.num_pages})
    return page, {"page": number, "page_size": size, "pages": paginator.num_pages, "count": paginator.count}


@api_view()
def history(request: HttpRequest) -> HttpResponse:
    rows, filters = history_rows(request)
    paged = _page(request, rows)
    if isinstance(paged, JsonResponse):
        return paged
    page, meta = paged
    used = {k: filters[k] or None for k in ("kmsn", "period", "reason")}
    return JsonResponse({**meta, "filters": used, "failovers": [f.as_dict() for f in page]})


@api_view()
def audit_log(request: HttpRequest) -> HttpResponse:
    published = published_entries()
    rows, filters = audit_rows(request.GET, published)
    paged = _page(request, rows)
    if isinstance(paged, JsonResponse):
        return paged
    page, meta = paged
    chain = audit.verify_chain()
    others = pool_chains(published)
    return JsonResponse(
        {
            **meta,
            "filters": {k: v or None for k, v in filters.items()},
            "chain": {
                "ok": chain.ok,
                "entries": chain.entries,
                "broken_at": chain.broken_at,
                "detail": chain.detail or None,
            },
            "node": settings.STK.node,
            "pool_chains": {
                node: {"ok": c.ok, "entries": c.entries, "broken_at": c.broken_at, "detail": c.detail or None}
                for node, c in others
            },
            "actions": [r.as_dict() for r in page],
        }
    )


TARGETED = (*NEEDS_TARGET, "unbind")  # the commands whose body must name a member (or a station)


def _body(request: HttpRequest) -> dict[str, Any] | None:
    if request.content_type == "application/json":
        try:
            return load_object(request.body or b"{}", API_BODY, "request body")
        except Untrusted:
            return None
    return {k: v for k, v in request.POST.items()}


@api_view(methods=("POST",))
def command(request: HttpRequest, kmsn: str, kind: str) -> HttpResponse:
    """POST {target, reason, expected_epoch, force} → the command's outcome."""
    if kind not in KINDS:
        return api_error(404, "unknown_command", _("commands are %(kinds)s") % {"kinds": ", ".join(KINDS)})
    body = _body(request)
    if body is None:
        return api_error(400, "bad_request", _("the body must be a JSON object (or a form)"))
    expected = body.get("expected_epoch")
    if isinstance(expected, str):  # a form: "" and "null" are no expectation, like JSON's null
        if expected.strip().isdigit():
            expected = int(expected)
        elif expected in ("", "null"):
            expected = None
    if isinstance(expected, float) and expected.is_integer():  # JSON's 7.0 is the integer 7
        expected = int(expected)
    if expected is not None and (
        not isinstance(expected, int) or isinstance(expected, bool) or not 0 <= expected <= MAX_EPOCH
    ):
        return api_error(400, "bad_request", _("expected_epoch must be an integer from 0 to 2^63-1"))
    target = body.get("target") or None
    if target is not None and not isinstance(target, str):
        return api_error(400, "bad_request", _("target must be a member name"))
    if target is None and kind in TARGETED:  # the document requires it (openapi.TARGET_BODY)
        return api_error(400, "bad_request", _("%(kind)s needs a target") % {"kind": kind})
    reason, force = body.get("reason"), body.get("force")
    if reason is not None and not isinstance(reason, str):
        return api_error(400, "bad_request", _("reason must be a string"))
    if force is not None and not isinstance(force, (bool, str)):  # a form's force is a string
        return api_error(400, "bad_request", _("force must be true or false"))
    force = force in (True, "1", "true", "on")
    outcome = perform(
        actor_for(request.api_user, request, "api"),
        kind,
        kmsn,
        target,
        reason=(reason or "")[:500],
        expected_epoch=expected,
        force=force,
    )
    return JsonResponse({"command": kind, "target": target, **outcome.as_dict()}, status=outcome.status)


def _public_leader(request: HttpRequest) -> bool:
    return bool(getattr(settings, "STK_PUBLIC_LEADER_LOOKUP", False))


@api_view(public=_public_leader)
def leader(request: HttpRequest) -> HttpResponse:
    """Who leads `?kmsn=` (default: this agent's pool), from the signed lease."""
    kmsn = request.GET.get("kmsn")
    if kmsn and kmsn != settings.STK.kmsn:
        return _watched_leader(kmsn)
    return agent_views.leader(request)


def _watched_leader(kmsn: str) -> HttpResponse:
    """A watched pool's leader, from this agent's latest verified view of it."""
    s = site_state(kmsn) if kmsn in watched_kmsns() else None
    if s is None:
        return JsonResponse({"kmsn": kmsn, "leader": None, "status": "unknown_kmsn"}, status=404)
    if not s.store_reachable:
        return JsonResponse(
            {"kmsn": kmsn, "error": _("lease store unreachable: %(detail)s") % {"detail": s.lease_detail}},
            status=503,
        )
    lease = s.lease or {}
    if not s.has_leader:
        return JsonResponse({"kmsn": kmsn, "leader": None, "status": s.lease_status}, status=404)
    return JsonResponse({"kmsn": kmsn, "leader": s.leader, "station": s.leader, "ip": lease.get("ip"),
                         "port": lease.get("port"), "epoch": s.epoch, "status": "valid"})  # fmt: skip


@api_view(methods=("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other path under /api/v1/: a JSON 404 (after authentication), never Django's HTML page."""
    return api_error(
        404, "not_found", _("no endpoint /api/v1/%(rest)s (see /api/v1/openapi.json)") % {"rest": rest}
    )
