"""Small formatting helpers for the panel (ages, durations, UTC and local times)."""

from __future__ import annotations

from datetime import UTC, datetime


def age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = max(seconds, 0.0)
    if s < 10:
        return f"{s:.1f} s"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} d"


def utc(t: datetime | None) -> str:
    return "—" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def local(t: datetime | None) -> str:
    """In this machine's local time zone (the site's), with its UTC offset."""
    if t is None:
        return "—"
    lt = t.astimezone()
    return lt.strftime("%Y-%m-%d %H:%M:%S ") + (lt.strftime("%Z") or lt.strftime("%z"))


def iso(t: datetime | None) -> str:
    return "" if t is None else t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}/s"


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"
