"""The `Clock` port: every decision that needs time gets it from here.

`SystemClock` reads the machine's clocks; `FakeClock` is moved by hand in tests.
Liveness is always timed on `monotonic()` of the machine that decides; `wall()`
is used only for human-readable timestamps and the legacy `lease_until` field.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps; comparable only on this machine."""

    def wall(self) -> datetime:
        """Aware UTC datetime, for display and records; never for liveness."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told to, "to allow for less flaky testing"."""

    def __init__(self, monotonic: float = 1000.0, wall: datetime | None = None) -> None:
        self._mono = monotonic
        self._wall = wall or datetime(2026, 6, 15, 12, 0, 0, tzinfo=UTC)

    def monotonic(self) -> float:
        return self._mono

    def wall(self) -> datetime:
        return self._wall

    def advance(self, seconds: float) -> None:
        from datetime import timedelta

        self._mono += seconds
        self._wall += timedelta(seconds=seconds)
