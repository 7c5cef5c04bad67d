"""The site page's leadership timeline: which window it opens on, and the chart
(`elections.web.svg`) of who led when within it, from this agent's history."""

from __future__ import annotations

from datetime import datetime, timedelta

from elections.web import svg
from elections.web.panel import fmt
from elections.web.panel.failovers import load_events, segments
from elections.web.panel.site import SiteState

TIMELINE_WINDOWS = {"15m": 0.25, "1h": 1, "6h": 6, "24h": 24}


def default_window(last_change: datetime | None, now: datetime) -> str:
    """The timeline's window when none is asked for: the shortest that shows the last
    change of leader (15 min when it is recent: what an operator opens the page for)."""
    if last_change is None:
        return "1h"
    ago_h = (now - last_change).total_seconds() / 3600
    return next((w for w, hours in TIMELINE_WINDOWS.items() if ago_h <= hours * 0.8), "24h")


def timeline_svg(s: SiteState, hours: float, now: datetime) -> str:
    from elections.models import ElectionEvent

    # The chart's right edge moves in steps of 1/180 of the window (5 s for 15 min), so that a
    # poll re-sends it only when a bar has visibly grown, not on every request.
    step = hours * 3600 / 180
    now = datetime.fromtimestamp((now.timestamp() // step + 1) * step, tz=now.tzinfo)
    start = now - timedelta(hours=hours)
    events = load_events(s.kmsn, since=start, kinds=("elected", "stepped_down", "released", "handoff"))
    before = (
        ElectionEvent.objects.filter(kmsn=s.kmsn, kind="elected", observed_at__lt=start)
        .order_by("-observed_at", "-id")
        .values_list("id", "kmsn", "node", "epoch", "kind", "reason", "observed_at", "detail")
        .first()
    )
    if before is not None:
        from elections.web.panel.failovers import Ev

        events.append(Ev(*before))
    bars = [
        svg.Bar(g.node, g.epoch, g.start, g.end) for g in segments(events, now, s.epoch if s.leader else None)
    ]
    return svg.timeline(bars, [m.node for m in s.members], start, now, tz_label=fmt.zone_name())
