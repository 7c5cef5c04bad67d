"""What the agent refused as evidence, for people to see (docs/design.md §5.4).

`Refusals` counts every refused record per cause (the `stkrelay_security_events_total`
counter on /metrics) and keeps the latest distinct refusals (file, cause,
detail) for the panel's banner and `relayctl doctor`. `note()` says whether a
refusal is new, so callers log each cause once per file instead of every
cycle. A refusal's source and detail quote what an attacker wrote: `printable`
reduces them to `SAFE` and a bound before anyone (the panel, doctor, the
webhook, a log line) sees them. Pure: the caller passes the time it wants shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

KEEP = 32  # distinct refusals remembered for display
SHOWN_FOR = 900.0  # seconds a refusal stays in the panel's banner after it was last seen
SOURCE_CHARS = 160  # the most of a refusal's source that is kept and shown
DETAIL_CHARS = 240  # ...and of its detail
# What text quoted from outside may hold wherever it goes: the panel, `relayctl doctor`, the
# logs, the webhook's body (and the chat it may reach), ON_ROLE_CHANGE. ASCII letters and digits,
# the space and `.,:;/_-+=()'\`: enough for node names, addresses, paths (`relay_leader.json`,
# `W:\socket`), times and our own words; none of the markup of a chat or a page (`@` `<` `>` `|`
# `&` `*` `[` `]` `{` `}` `#` `!` `~` `"` backquote), no control character or line end. Any
# character that is not ASCII (another script's look-alike letter, a bidi override, a lone
# surrogate from a name that is not UTF-8) is shown as its escape (`\u0430`, `\u202e`, `\udcff`).
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;/_-+=()'\\")
UNSAFE = "?"  # what stands for each character outside SAFE


def printable(text: str, limit: int) -> str:
    """Text from outside as it may be quoted anywhere: what is not ASCII as its escape, then
    each character outside `SAFE` replaced by `UNSAFE`; at most `limit` characters."""
    ascii_text = str(text)[:limit].encode("ascii", "backslashreplace").decode("ascii")
    return "".join(ch if ch in SAFE else UNSAFE for ch in ascii_text[:limit])


@dataclass
class Refusal:
    source: str  # the file (relative to the share) or peer it came from
    cause: str  # one of core.untrusted.CAUSES
    detail: str
    count: int = 1
    last_at: str = ""
    last_mono: float | None = None  # the recorder's monotonic clock, to age refusals out of view

    def to_doc(self, now: float | None = None, wall: datetime | None = None) -> dict[str, Any]:
        """`last_at` as noted, else (a datagram's refusal: noted on the monotonic clock alone)
        the wall time `wall` stood at when `now` was, less the refusal's age: never empty."""
        last_at = self.last_at
        if not last_at and wall is not None and now is not None and self.last_mono is not None:
            last_at = (wall - timedelta(seconds=max(0.0, now - self.last_mono))).isoformat(timespec="seconds")
        return {"source": self.source, "cause": self.cause, "detail": self.detail, "count": self.count,
                "last_at": last_at}  # fmt: skip


@dataclass
class Refusals:
    counts: dict[str, int] = field(default_factory=dict)
    recent: dict[tuple[str, str], Refusal] = field(default_factory=dict)

    def note(self, source: str, cause: str, detail: str, at: str = "", now: float | None = None) -> bool:
        """Count one refusal; True if (source, cause) was not among the recent ones."""
        source, detail = printable(source, SOURCE_CHARS), printable(detail, DETAIL_CHARS)
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

    def to_doc(
        self, now: float | None = None, window: float = SHOWN_FOR, wall: datetime | None = None
    ) -> dict[str, Any]:
        """Counts since start, and the refusals seen within `window` seconds of `now`, newest first
        (`wall`: the wall-clock time at `now`, for refusals noted without one: `Refusal.to_doc`)."""
        recent = [r for r in reversed(self.recent.values())
                  if now is None or r.last_mono is None or now - r.last_mono <= window]  # fmt: skip
        return {"counts": dict(self.counts), "recent": [r.to_doc(now, wall) for r in recent]}


def merged(*docs: dict[str, Any]) -> dict[str, Any]:
    """Several `Refusals.to_doc()` as one: counts added, recent ones in order."""
    counts: dict[str, int] = {}
    recent: list[dict[str, Any]] = []
    for doc in docs:
        for cause, n in doc.get("counts", {}).items():
            counts[cause] = counts.get(cause, 0) + n
        recent.extend(doc.get("recent", []))
    return {"counts": counts, "recent": recent[:KEEP]}
