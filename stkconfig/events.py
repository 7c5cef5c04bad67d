"""The retention of this member's event files (`EVENTS_*`): the `events` section; the share's
`Retention` is made of it (`elections.ports.store.stores.PoolPlace.of`)."""

from __future__ import annotations

from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw


@dataclass(frozen=True)
class Events:
    events_segment_bytes: int = 1 << 20  # readers read at most 64 MiB of one
    events_keep_bytes: int = 4 << 20
    events_keep_days: float = 400.0


def parse(raw: Raw, known: object, bad: Bad) -> Events:
    """Each key alone (E010/E011), then E041 when the keep cannot hold a sealed segment."""
    d = Events()
    segment = raw.number("EVENTS_SEGMENT_BYTES", bad) or d.events_segment_bytes
    keep = raw.number("EVENTS_KEEP_BYTES", bad) or d.events_keep_bytes
    days = raw.number("EVENTS_KEEP_DAYS", bad) or d.events_keep_days
    if keep < 2 * segment:
        bad("stkrelay.E041", "EVENTS_KEEP_BYTES",
            f"{keep} must be at least twice EVENTS_SEGMENT_BYTES={segment}",
            "keep the active file and at least one sealed segment")  # fmt: skip
    return Events(segment, keep, days)
