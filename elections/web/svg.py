"""Server-rendered SVG chart of who led a pool when (no JavaScript, no library).

`timeline(segments, nodes, start, end)` draws one lane per member, one bar per
epoch of leadership, and shades every stretch of the window in which no one
led. Pure: the caller passes the time window; every text is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from django.utils import timezone
from django.utils.translation import gettext as _

# Colour-blind-safe (Okabe-Ito), dark enough for white labels on the bars.
PALETTE = ("#0b5fa5", "#a34700", "#00735a", "#8a3f7d", "#6b5d00", "#3c3c8c", "#9c2f2f")
LANE_H, BAR_H, LEFT, RIGHT, TOP, AXIS_H = 28, 18, 64, 12, 8, 26


@dataclass(frozen=True)
class Bar:
    node: str
    epoch: int
    start: datetime
    end: datetime | None  # None: still leading at `end` of the window


def _ticks(start: datetime, end: datetime) -> list[datetime]:
    span = (end - start).total_seconds()
    step = next(
        (s for s in (60, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400) if span / s <= 8), 86400 * 7
    )
    first = datetime.fromtimestamp((int(start.timestamp()) // step + 1) * step, tz=start.tzinfo)
    out, t = [], first
    while t < end:
        out.append(t)
        t += timedelta(seconds=step)
    return out


def _gaps(bars: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """Stretches of [lo, hi] covered by no bar."""
    out, cursor = [], lo
    for a, b in sorted(bars):
        if a > cursor:
            out.append((cursor, min(a, hi)))
        cursor = max(cursor, b)
    if cursor < hi:
        out.append((cursor, hi))
    return [(a, b) for a, b in out if b > a]


def timeline(
    bars: Iterable[Bar],
    nodes: Iterable[str],
    start: datetime,
    end: datetime,
    width: int = 960,
    tz_label: str = "UTC",
) -> str:
    """The chart as an inline <svg> element with a title and a text description.
    Gaps are shaded only from the first recorded leadership on (before it there
    is no history, which is not the same as no leader)."""
    start, end = timezone.localtime(start), timezone.localtime(end)  # labels in the site's zone
    bars = [b for b in bars if (b.end is None or b.end >= start) and b.start <= end]
    lanes = sorted(set(nodes) | {b.node for b in bars})
    plot_w = width - LEFT - RIGHT
    height = TOP + max(len(lanes), 1) * LANE_H + AXIS_H
    span = max((end - start).total_seconds(), 1.0)

    def x(t: datetime) -> float:
        return LEFT + plot_w * min(max((t - start).total_seconds() / span, 0.0), 1.0)

    spans = [(x(max(b.start, start)), x(min(b.end or end, end))) for b in bars]
    history_from = min((a for a, _ in spans), default=LEFT + plot_w)
    gaps = _gaps([(a, max(b, a + 1)) for a, b in spans], history_from, LEFT + plot_w)
    gap_s = sum((b - a) for a, b in gaps) / plot_w * span
    desc = _description(bars, start, end, tz_label, gap_s if gaps else None)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-labelledby="tl-title tl-desc">',
        f'<title id="tl-title">{escape(_("Leadership timeline"))}</title>',
        f'<desc id="tl-desc">{escape(desc)}</desc>',
        '<defs><pattern id="tl-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fde2e1"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#c62828" stroke-width="2"/></pattern></defs>',
    ]
    plot_h = max(len(lanes), 1) * LANE_H
    for a, b in gaps:
        parts.append(
            f'<rect class="gap" x="{a:.1f}" y="{TOP}" width="{max(b - a, 2):.1f}" height="{plot_h}" '
            f'fill="url(#tl-hatch)"><title>{escape(_("no leader"))}</title></rect>'
        )
    parts += _lanes(lanes, plot_w)
    parts += _bars(bars, spans, lanes)
    parts += _axis(_ticks(start, end), x, TOP + plot_h, plot_w)
    parts.append("</svg>")
    return "".join(parts)


def _description(bars: list[Bar], start: datetime, end: datetime, tz_label: str, gap_s: float | None) -> str:
    """The chart's text for screen readers: the window, who led which epoch, the time without a
    leader (`gap_s`, None when there was no gap)."""
    led = sorted({(b.node, b.epoch) for b in bars}, key=lambda p: p[1])
    led_text = ", ".join(_("%(node)s epoch %(epoch)s") % {"node": n, "epoch": e} for n, e in led)
    span_text = {"start": f"{start:%Y-%m-%d %H:%M}", "end": f"{end:%H:%M}", "zone": tz_label}
    return (
        _("Leadership from %(start)s to %(end)s %(zone)s: ") % span_text
        + (led_text or _("no leadership recorded"))
        + ((_("; about %(n).0f s without a leader") % {"n": gap_s}) if gap_s is not None else _("; no gap"))
        + "."
    )


def _lanes(lanes: list[str], plot_w: float) -> list[str]:
    """One lane per member: its line and its name."""
    parts = []
    for i, node in enumerate(lanes):
        y = TOP + i * LANE_H
        parts.append(
            f'<line x1="{LEFT}" y1="{y + LANE_H:.1f}" x2="{LEFT + plot_w}" y2="{y + LANE_H:.1f}" '
            f'stroke="#d0d4d9"/>'
        )
        parts.append(
            f'<text x="{LEFT - 8}" y="{y + LANE_H / 2 + 4:.1f}" text-anchor="end" '
            f'font-size="12" fill="#1f2328">{escape(node)}</text>'
        )
    return parts


def _bars(bars: list[Bar], spans: list[tuple[float, float]], lanes: list[str]) -> list[str]:
    """One bar per epoch of leadership, in its member's lane and colour, labelled where it fits."""
    colour = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(lanes)}
    parts = []
    for b, (a, z) in zip(bars, spans, strict=True):
        y = TOP + lanes.index(b.node) * LANE_H + (LANE_H - BAR_H) / 2
        w = max(z - a, 2.0)
        until = _("now") if b.end is None else f"{timezone.localtime(b.end):%H:%M:%S}"
        title = _("%(node)s led epoch %(epoch)s: %(start)s–%(until)s") % {
            "node": b.node,
            "epoch": b.epoch,
            "start": f"{timezone.localtime(b.start):%H:%M:%S}",
            "until": until,
        }
        parts.append(
            f'<rect class="lead" x="{a:.1f}" y="{y:.1f}" width="{w:.1f}" height="{BAR_H}" rx="2" '
            f'fill="{colour[b.node]}"><title>{escape(title)}</title></rect>'
        )
        if w > 34:
            parts.append(
                f'<text x="{a + 4:.1f}" y="{y + BAR_H - 5:.1f}" font-size="11" fill="#ffffff">'
                f"e{b.epoch}</text>"
            )
    return parts


def _axis(ticks: list[datetime], x: Callable[[datetime], float], axis_y: float, plot_w: float) -> list[str]:
    """The time axis under the lanes, with a labelled tick at each of `ticks`."""
    parts = [f'<line x1="{LEFT}" y1="{axis_y}" x2="{LEFT + plot_w}" y2="{axis_y}" stroke="#57606a"/>']
    for t in ticks:
        tx = x(t)
        parts.append(f'<line x1="{tx:.1f}" y1="{axis_y}" x2="{tx:.1f}" y2="{axis_y + 4}" stroke="#57606a"/>')
        parts.append(
            f'<text x="{tx:.1f}" y="{axis_y + 17}" text-anchor="middle" font-size="11" '
            f'fill="#424a53">{t:%H:%M}</text>'
        )
    return parts
