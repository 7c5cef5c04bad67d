"""The `Clock` port: every decision that needs time gets it from here.

`SystemClock` reads the machine's clocks; `FakeClock` is moved by hand in tests.
Liveness is always timed on `monotonic()` of the machine that decides; `wall()`
is used only for human-readable timestamps and the legacy `lease_until` field.

`boottime()` is the serving gate's clock (docs/design.md §15): `CLOCK_BOOTTIME` where the
system has it (Linux), which runs on while the machine is suspended, where
`CLOCK_MONOTONIC` stops. A leader PC that sleeps and resumes must find its gate
and its renew deadline as old as they really are, never fresher: every deadline
after which a leader must not serve is kept on it too (`Elector`, the serving
right's window, `leadership.json`'s `valid_until_boot`). Elsewhere (no
`CLOCK_BOOTTIME`) it is the monotonic clock.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

_BOOT_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boottime() -> float:
    """Seconds on this machine's clock that counts suspended time (the gate's clock)."""
    return time.clock_gettime(_BOOT_CLOCK)


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps; comparable only on this machine."""

    def boottime(self) -> float:
        """Seconds on this machine's clock that also counts time suspended (`boottime()`)."""

    def wall(self) -> datetime:
        """Aware UTC datetime, for display and records; never for liveness."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def boottime(self) -> float:
        return boottime()

    def wall(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told to, "to allow for less flaky testing"."""

    def __init__(self, monotonic: float = 1000.0, wall: datetime | None = None) -> None:
        self._mono = monotonic
        self._boot = monotonic + 50_000.0  # another origin: never comparable with monotonic
        self._wall = wall or datetime(2026, 6, 15, 12, 0, 0, tzinfo=UTC)

    def monotonic(self) -> float:
        return self._mono

    def boottime(self) -> float:
        return self._boot

    def wall(self) -> datetime:
        return self._wall

    def advance(self, seconds: float) -> None:
        from datetime import timedelta

        self._mono += seconds
        self._boot += seconds
        self._wall += timedelta(seconds=seconds)

    def suspend(self, seconds: float) -> None:
        """The machine sleeps `seconds`: the boot clock and the wall move, monotonic does not."""
        from datetime import timedelta

        self._boot += seconds
        self._wall += timedelta(seconds=seconds)
