"""Clock skew, shown and never used for a decision (ADR 0011: "future skew is made
visible through status/doctor"). Pure.

Each member measures its own wall clock against the pool's store — the file
server (the mtime it gives a heartbeat this member just wrote, against this
member's clock before and after the write) or etcd (the `Date` of an answer,
against the clock before and after the call) — and publishes the reading in its
heartbeat (`clock`: `{offset_s, error_s, against}`; offset > 0: the member's
clock is ahead of the store's). The store is the pool's one common reference,
so two members' readings give their skew against each other too:
offset(A) - offset(B), within error(A) + error(B). No election, freshness or
action reads any of it: freshness is timed on each judge's own monotonic clock
(`core.eligibility`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeGuard

SHOWN_LIMIT = 5.0  # seconds: `relayctl doctor` says FAIL past this (informative, like every doctor line)
MAX_ABS = 1e9  # a reading beyond this (about 30 years) is no reading


@dataclass(frozen=True)
class ClockReading:
    offset_s: float  # this machine's wall clock minus the store's
    error_s: float  # the reading is within +-error_s
    against: str  # "file server" | "etcd"

    def to_doc(self) -> dict[str, Any]:
        return {"offset_s": round(self.offset_s, 3), "error_s": round(self.error_s, 3),
                "against": self.against}  # fmt: skip


def from_window(
    before: float, after: float, server: float, resolution: float, against: str
) -> ClockReading | None:
    """A reading from an event the store timed at `server` (on its clock) that happened
    between `before` and `after` on ours; `resolution`: the store's time grain (a
    file system's mtime: ~0; an HTTP Date: 1 s, truncated)."""
    if not all(math.isfinite(x) for x in (before, after, server)) or after < before:
        return None
    mid = (before + after) / 2
    offset = mid - (server + resolution / 2)
    if abs(offset) > MAX_ABS:
        return None
    return ClockReading(offset, (after - before) / 2 + resolution / 2, against)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reading_of(doc: dict[str, Any]) -> ClockReading | None:
    """A heartbeat's `clock`, checked (anything malformed is no reading)."""
    value = doc.get("clock")
    if not isinstance(value, dict):
        return None
    offset, error, against = value.get("offset_s"), value.get("error_s"), value.get("against")
    if not (_is_number(offset) and _is_number(error)):
        return None
    if not isinstance(against, str) or against not in ("file server", "etcd"):
        return None
    if not (math.isfinite(offset) and math.isfinite(error)):
        return None
    if abs(offset) > MAX_ABS or not 0 <= error < MAX_ABS:
        return None
    return ClockReading(float(offset), float(error), against)


def versus(theirs: ClockReading | None, mine: ClockReading | None) -> tuple[float, float] | None:
    """Their clock minus mine (and the error of that), through the store both read."""
    if theirs is None or mine is None or theirs.against != mine.against:
        return None
    return theirs.offset_s - mine.offset_s, theirs.error_s + mine.error_s


def describe(reading: ClockReading | None) -> str:
    if reading is None:
        return "not measured"
    return f"{reading.offset_s:+.2f} s (±{reading.error_s:.2f}) vs the {reading.against}"
