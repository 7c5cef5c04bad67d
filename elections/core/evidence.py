"""What the agent refused as evidence, for people to see (DESIGN.md §5.4).

`Refusals` counts every refused record per cause (the `stkrelay_security_events_total`
counter on /metrics) and keeps the latest distinct refusals (file, cause,
detail) for the panel's banner and `relayctl doctor`. `note()` says whether a
refusal is new, so callers log each cause once per file instead of every
cycle. Pure: the caller passes the time it wants shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KEEP = 32  # distinct refusals remembered for display
SHOWN_FOR = 900.0  # seconds a refusal stays in the panel's banner after it was last seen


def printable(text: str, limit: int) -> str:
    """Text from outside as it may be shown and stored: names on a share need not
    be UTF-8 (lone surrogates become escapes), and nothing is longer than `limit`."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:limit]


@dataclass
class Refusal:
    source: str  # the file (relative to the share) or peer it came from
    cause: str  # one of core.untrusted.CAUSES
    detail: str
    count: int = 1
    last_at: str = ""
    last_mono: float | None = None  # the recorder's monotonic clock, to age refusals out of view

    def to_doc(self) -> dict[str, Any]:
        return {"source": self.source, "cause": self.cause, "detail": self.detail, "count": self.count,
                "last_at": self.last_at}  # fmt: skip


@dataclass
class Refusals:
    counts: dict[str, int] = field(default_factory=dict)
    recent: dict[tuple[str, str], Refusal] = field(default_factory=dict)

    def note(self, source: str, cause: str, detail: str, at: str = "", now: float | None = None) -> bool:
        """Count one refusal; True if (source, cause) was not among the recent ones."""
        source, detail = printable(source, 200), printable(detail, 500)
        self.counts[cause] = self.counts.get(cause, 0) + 1
        key = (source, cause)
        known = self.recent.pop(key, None)
        if known is not None:
            known.count += 1
            known.detail, known.last_at, known.last_mono = detail, at, now
            self.recent[key] = known  # most recent last
            return False
        self.recent[key] = Refusal(source, cause, detail, 1, at, now)
        while len(self.recent) > KEEP:
            self.recent.pop(next(iter(self.recent)))
        return True

    def total(self) -> int:
        return sum(self.counts.values())

    def to_doc(self, now: float | None = None, window: float = SHOWN_FOR) -> dict[str, Any]:
        """Counts since start, and the refusals seen within `window` seconds of `now`, newest first."""
        recent = [r for r in reversed(self.recent.values())
                  if now is None or r.last_mono is None or now - r.last_mono <= window]  # fmt: skip
        return {"counts": dict(self.counts), "recent": [r.to_doc() for r in recent]}


def merged(*docs: dict[str, Any]) -> dict[str, Any]:
    """Several `Refusals.to_doc()` as one: counts added, recent ones in order."""
    counts: dict[str, int] = {}
    recent: list[dict[str, Any]] = []
    for doc in docs:
        for cause, n in doc.get("counts", {}).items():
            counts[cause] = counts.get(cause, 0) + n
        recent.extend(doc.get("recent", []))
    return {"counts": counts, "recent": recent[:KEEP]}
