"""The admin panel's pages: sites, site, failover history (and its CSV), command
confirmation and progress (login: `login.py`, audit history: `audit_log.py`).
Thin: data comes from `state`, `failovers` and `operate`; every page needs a
login (`auth.panel_view`)."""

from __future__ import annotations

import csv
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import pgettext
from django.views.decorators.http import require_http_methods

from elections import audit
from elections.core.commands import forget_refusal
from elections.ports.local.localstate import LocalState
from elections.steering import perform
from elections.web.auth import actor_for, denial, panel_view
from elections.web.panel import fleet, fmt, words
from elections.web.panel.failovers import REASONS, Failover, failovers_for, known_kmsns
from elections.web.panel.live import render_live
from elections.web.panel.operate import KINDS, preview, progress
from elections.web.panel.page import PAGE_SIZE, base_context
from elections.web.panel.site import SiteState
from elections.web.panel.state import all_kmsns, site_state, site_states
from elections.web.panel.timeline import TIMELINE_WINDOWS, default_window, timeline_svg

PERIODS = {"1h": 1, "6h": 6, "24h": 24, "7d": 24 * 7, "30d": 24 * 30, "all": None}


# -- sites ----------------------------------------------------------------------------
@panel_view
def sites(request: HttpRequest) -> HttpResponse:
    """The fleet view: every pool, worst first (or as sorted), filterable by KMSN."""
    states = site_states()
    order = fleet.Order.of(request.GET)
    shown = order.apply(states)
    alarm_text = next((s.alarm_text for s in sorted(states, key=lambda s: s.has_leader) if s.alarm_text), "")
    ctx = base_context(
        request, _("Sites"), bool(alarm_text), alarm_text=alarm_text, sites=[_site_row(s) for s in shown],
        order=order, h=order.headers(), sorts=[(k, v[0]) for k, v in fleet.SORTS.items()],
        order_label=order.label(),
        counts=fleet.counts(states, shown),
    )  # fmt: skip
    return render_live(request, "panel/sites.html", ctx, {"sites-live": "panel/_sites_table.html"})


def _site_row(s: SiteState) -> dict[str, Any]:
    return {
        "s": s,
        "since": fmt.when(s.since),
        "renewed": fmt.age(s.renewed_ago),
        "expired": not (s.expires_in is not None and s.expires_in > 0),
        "expires": fmt.age(s.expires_in) if s.expires_in is not None and s.expires_in > 0 else "",
        "lease_status": words.lease_state(s),
        "lease_detail": words.lease_detail(s.lease_detail),
        "decision": words.decision(s.decision),
        "eligible": len(s.eligible),
        "total": len(s.members),
        "relay_clients": s.relay.clients if s.relay and s.relay.running else None,
        "view_age": fmt.age(s.view_age),
        "alarms": fleet.alarm_badges(s),
    }


# -- site -----------------------------------------------------------------------------
@dataclass
class Button:
    kind: str
    label: str
    target: str | None
    enabled: bool
    why: str = ""
    url: str = ""


def _buttons(request: HttpRequest, s: SiteState) -> tuple[dict[str, list[Button]], list[Button]]:
    """Per-member buttons and pool buttons, each enabled or disabled with a reason."""

    def make(kind: str, label: str, target: str | None, why: str = "") -> Button:
        why = denial(request.user, kind) or why
        if not why and s.epoch is None:
            why = _("no lease epoch known: nothing to act on")
        url = ""
        if not why:
            q: dict[str, object] = {"epoch": s.epoch}
            if target:
                q["target"] = target
            url = reverse("panel-confirm", args=[s.kmsn, kind]) + "?" + urlencode(q)
        return Button(kind, label, target, not why, why, url)

    per_member: dict[str, list[Button]] = {}
    for m in s.members:
        row = []
        if m.drain:
            row.append(make("undrain", _("Undrain"), m.node))
        else:
            # Draining the last eligible member is allowed, with force on the confirmation page.
            row.append(make("drain", _("Drain"), m.node))
        why = ""
        if m.leader:
            why = _("already the leader")
        elif not m.eligible:
            why = _("not eligible: %(reasons)s") % {
                "reasons": pgettext("separator", "; ").join(words.reason(r) for r in m.reasons)
                or _("unknown")
            }
        row.append(make("promote", _("Promote"), m.node, why))
        stale_after = settings.STK.heartbeat_ttl + settings.STK.promotion_hold
        # Forget only where it can be used (its own pool's agents, elections.steering; a member gone
        # for good): not a disabled button with three lines of why on every healthy row.
        if not s.watched and not forget_refusal(m.node, m, s.lease, stale_after):
            row.append(make("forget", _("Forget"), m.node))
        per_member[m.node] = row
    pool = (
        [make("resume", _("Resume failover"), None)]
        if s.paused
        else [make("pause", _("Pause failover"), None)]
    )
    return per_member, pool


def _stations(request: HttpRequest, s: SiteState) -> list[dict[str, Any]]:
    """The stations of this agent's own pool (stations.json), with the key each was
    seen with and, for a bound one, its reset button."""
    if s.watched or s.kmsn != settings.STK.kmsn:
        return []
    known = LocalState(settings.STK.data_dir).stations()
    rows = []
    for station in sorted({*known.known, *known.bound})[:500]:
        bound = station in known.bound
        why = denial(request.user, "unbind") or ""
        query = urlencode({"epoch": s.epoch if s.epoch is not None else "", "target": station})
        url = "" if why else f"{reverse('panel-confirm', args=[s.kmsn, 'unbind'])}?{query}"
        button = Button("unbind", _("Reset binding"), station, not why, why, url) if bound else None
        rows.append({"station": station, "bound": bound, "key": known.known.get(station, "station"),
                     "buttons": [button] if button else []})  # fmt: skip
    return rows


@panel_view
def site(request: HttpRequest, kmsn: str) -> HttpResponse:
    s = site_state(kmsn)
    if s is None:
        raise Http404(_("this agent does not see pool %(kmsn)s") % {"kmsn": kmsn})
    now = timezone.now()
    recent = failovers_for(kmsn)[-5:][::-1]
    window = request.GET.get("window", "")
    if window not in TIMELINE_WINDOWS:
        window = default_window(recent[0].at if recent else None, now)
    per_member, pool_buttons = _buttons(request, s)
    members = [{"m": m, "age": fmt.age(m.age), "buttons": per_member.get(m.node, []),
                "reasons": [words.reason(r) for r in m.reasons],
                "beacon_age": fmt.age(m.beacon_age),
                "beacon_loss": f"{m.beacon_loss:.0%}" if m.beacon_loss is not None else "—"}
               for m in s.members]  # fmt: skip
    relay = s.relay
    ctx = base_context(
        request,
        _("Pool %(kmsn)s") % {"kmsn": kmsn},
        bool(s.alarm_text),
        alarm_text=s.alarm_text,
        s=s,
        trouble=words.trouble(s),
        row=_site_row(s),
        members=members,
        pool_buttons=pool_buttons,
        relay=relay,
        relay_rate=fmt.rate(relay.rate) if relay else "—",
        relay_bytes=fmt.size(relay.bytes) if relay else "—",
        stations=_stations(request, s),
        timeline=mark_safe(timeline_svg(s, TIMELINE_WINDOWS[window], now)),
        window=window,
        windows=[(w, words.WINDOWS[w]) for w in TIMELINE_WINDOWS],
        recent=[
            {"f": f, "reason": words.of(words.FAILOVER_REASONS, f.reason), "at": fmt.when(f.at)}
            for f in recent
        ],
        zone=fmt.zone_name(),
        addresses_age=fmt.age(s.addresses_age),
        repairs=[{**r, "age": fmt.age(r["age_s"])} for r in s.repairs],
    )
    sections = {
        "site-summary": "panel/_site_summary.html",
        "site-members": "panel/_site_members.html",
        "site-addresses": "panel/_site_addresses.html",
        "site-entry": "panel/_site_entry.html",
        "site-door": "panel/_site_door.html",
        "site-relay": "panel/_site_relay.html",
        "site-timeline": "panel/_site_timeline.html",
    }
    return render_live(request, "panel/site.html", ctx, sections)


# -- failover history ---------------------------------------------------------------------
def history_rows(request: HttpRequest) -> tuple[list[Failover], dict[str, str]]:
    kmsns = sorted(set(known_kmsns()) | set(all_kmsns()))
    kmsn = request.GET.get("kmsn") or ""
    period = request.GET.get("period") or "7d"
    reason = request.GET.get("reason") or ""
    period = period if period in PERIODS else "7d"
    rows: list[Failover] = []
    for k in [kmsn] if kmsn else kmsns:
        rows.extend(failovers_for(k))
    hours = PERIODS[period]
    if hours is not None:
        since = timezone.now() - timedelta(hours=hours)
        rows = [r for r in rows if r.at >= since]
    if reason:
        rows = [r for r in rows if r.reason == reason]
    rows.sort(key=lambda r: (r.at, r.epoch), reverse=True)
    return rows, {"kmsn": kmsn, "period": period, "reason": reason, "kmsns": kmsns}  # type: ignore[dict-item]


@panel_view
def history(request: HttpRequest) -> HttpResponse:
    rows, filters = history_rows(request)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    query = {k: v for k, v in filters.items() if k in ("kmsn", "period", "reason") and v}
    ctx = base_context(
        request,
        _("Failover history"),
        page=page,
        rows=[
            {"f": f, "at": fmt.when(f.at), "reason": words.of(words.FAILOVER_REASONS, f.reason)} for f in page
        ],
        filters=filters,
        reasons=[(r, words.of(words.FAILOVER_REASONS, r)) for r in REASONS],
        periods=[(p, words.PERIODS[p]) for p in PERIODS],
        zone=fmt.zone_name(),
        query=urlencode(query),
        total=len(rows),
    )
    return render_live(request, "panel/history.html", ctx, {"history-live": "panel/_history_table.html"})


class _Echo:
    def write(self, value: str) -> str:
        return value


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


def csv_cell(value: Any) -> Any:
    """A cell a spreadsheet will not run (OWASP CSV injection): text starting with
    = + - @ tab or CR gets a leading ' — except a plain number such as -0.5."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.match(value):
        return "'" + value
    return value


@panel_view
def history_csv(request: HttpRequest) -> HttpResponse:
    rows, _ = history_rows(request)
    writer = csv.writer(_Echo())
    header = ["epoch", "kmsn", "at_utc", "from", "to", "reason", "actor", "gap_s", "detail", "correlation"]

    def lines():
        yield writer.writerow(header)
        for f in rows:
            gap = "" if f.gap_s is None else f"{f.gap_s:.3f}"
            yield writer.writerow(
                csv_cell(v)
                for v in [
                    f.epoch,
                    f.kmsn,
                    fmt.iso(f.at),
                    f.from_node or "",
                    f.to_node,
                    f.reason,
                    f.actor,
                    gap,
                    f.detail,
                    f.correlation,
                ]
            )

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="failovers-{time.strftime("%Y%m%d-%H%M%S")}.csv"'
    return response


# -- commands ----------------------------------------------------------------------------
def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def progress_timeout() -> float:
    return max(30.0, 3 * settings.STK.lease_ttl + 5)


@panel_view
@require_http_methods(["GET", "POST"])
def confirm(request: HttpRequest, kmsn: str, kind: str) -> HttpResponse:
    """GET: what the command will do, the dry-run plan and the expected epoch.
    POST: perform it (403 without permission, 409 on a changed epoch, ...)."""
    if kind not in KINDS:
        raise Http404(_("no such command"))
    s = site_state(kmsn)
    if s is None:
        raise Http404(_("this agent does not see pool %(kmsn)s") % {"kmsn": kmsn})
    if request.method == "POST":
        target = request.POST.get("target") or None
        outcome = perform(
            actor_for(request.user, request, "panel"),
            kind,
            kmsn,
            target,
            reason=(request.POST.get("reason") or "").strip()[:500],
            expected_epoch=_int_or_none(request.POST.get("expected_epoch")),
            force=request.POST.get("force") == "1",
            confirm=(request.POST.get("confirm_name") or "") if kind in ("promote", "forget") else None,
        )
        if outcome.ok:
            return redirect(reverse("panel-progress", args=[kmsn, outcome.correlation]), permanent=False)
        ctx = base_context(
            request,
            _("%(command)s not done") % {"command": words.of(words.COMMANDS, kind)},
            True,
            s=s,
            kind=kind,
            command=words.of(words.COMMANDS, kind),
            target=target,
            outcome=outcome,
            expected=_int_or_none(request.POST.get("expected_epoch")),
        )
        return render(request, "panel/result.html", ctx, status=outcome.status)
    target = request.GET.get("target") or None
    expected = _int_or_none(request.GET.get("epoch"))
    if expected is None:
        expected = s.epoch
    why = denial(request.user, kind)
    choices = [m for m in s.eligible if not m.leader] if kind == "promote" else []
    if kind == "promote" and target not in {m.node for m in choices}:
        target = choices[0].node if len(choices) == 1 else None
    if kind in ("drain", "undrain", "forget") and (not target or s.member(target) is None):
        raise Http404(_("no such member"))
    if kind == "unbind" and not target:
        raise Http404(_("no station named"))
    ctx = base_context(
        request,
        _("Confirm: %(command)s") % {"command": words.of(words.COMMANDS, kind)},
        not s.has_leader,
        s=s,
        kind=kind,
        command=words.of(words.COMMANDS, kind),
        target=target,
        expected=expected,
        moved=expected is not None and s.epoch is not None and expected != s.epoch,
        preview=preview(kind, s, target) if (target or kind in ("pause", "resume")) else None,
        choices=choices,
        previews={m.node: preview(kind, s, m.node) for m in choices},
        denied=why,
        last_eligible=kind == "drain" and {m.node for m in s.eligible} <= {target},
    )
    return render(request, "panel/confirm.html", ctx, status=403 if why else 200)


@panel_view
def command_progress(request: HttpRequest, kmsn: str, correlation: str) -> HttpResponse:
    entry = audit.AuditEntry.objects.filter(
        phase=audit.AuditEntry.OUTCOME, correlation=correlation, kmsn=kmsn
    ).first()
    if entry is None:
        raise Http404(_("no such command"))
    s = site_state(kmsn)
    if s is None:
        raise Http404(_("this agent does not see pool %(kmsn)s") % {"kmsn": kmsn})
    p = progress(entry, s, timezone.now(), progress_timeout())
    ctx = base_context(
        request,
        f"{words.of(words.COMMANDS, entry.action)} {entry.target}".strip(),
        not s.has_leader,
        s=s,
        entry=entry,
        command=words.of(words.COMMANDS, entry.action),
        p=p,
        row=_site_row(s),
    )
    return render_live(request, "panel/progress.html", ctx, {"progress-live": "panel/_progress.html"})
