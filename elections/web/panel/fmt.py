"""Small formatting helpers for the panel: ages and durations in the reader's
language, and times in the site's zone (`TIME_ZONE`, Django's current zone) with
the zone named, UTC on hover. The API speaks ISO 8601 in UTC (`iso`)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

NONE = "—"


def age(seconds: float | None) -> str:
    """A relative age or countdown: '4.2 s', '37 s', '12 min', '3.5 h', '9 d'."""
    if seconds is None:
        return NONE
    s = max(seconds, 0.0)
    if s < 10:
        return _("%(n).1f s") % {"n": s}
    if s < 120:
        return _("%(n).0f s") % {"n": s}
    if s < 7200:
        return _("%(n).0f min") % {"n": s / 60}
    if s < 172800:
        return _("%(n).1f h") % {"n": s / 3600}
    return _("%(n).0f d") % {"n": s / 86400}


def zone_name() -> str:
    """The zone the panel shows times in (TIME_ZONE of the ini)."""
    return str(settings.TIME_ZONE)


def zone_label(t: datetime) -> str:
    """The zone at `t` as its offset from UTC: 'UTC+8', 'UTC+5:30', 'UTC-3', 'UTC'. Not its short
    name: 'CST' is China's, Cuba's and the American Central's alike."""
    offset = t.utcoffset()
    minutes = 0 if offset is None else round(offset.total_seconds() / 60)
    if not minutes:
        return "UTC"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{'+' if minutes > 0 else '-'}{hours}" + (f":{rest:02d}" if rest else "")


def utc(t: datetime | None) -> str:
    return NONE if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def local(t: datetime | None) -> str:
    """In the site's zone (TIME_ZONE), its short name after: '2026-06-15 20:30:15 UTC+8'."""
    if t is None:
        return NONE
    lt = timezone.localtime(t)
    return lt.strftime("%Y-%m-%d %H:%M:%S ") + zone_label(lt)


def clock(t: datetime) -> str:
    """Only the time of day in the site's zone (the timeline's labels)."""
    return timezone.localtime(t).strftime("%H:%M:%S")


def when(t: datetime | None) -> SafeString | str:
    """`<time>` in the site's zone, its UTC instant as the hover title and the machine value."""
    if t is None:
        return NONE
    return format_html('<time datetime="{}" title="{} · {}">{}</time>', iso(t), utc(t), zone_name(), local(t))


def iso(t: datetime | None) -> str:
    return "" if t is None else t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def rate(value: float | None) -> str:
    return NONE if value is None else _("%(n).1f/s") % {"n": value}


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"
