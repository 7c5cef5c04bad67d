"""Refused input in the relay's log, without amplification (issue 40).

Anyone who reaches a relay port can send it bad frames as fast as it can
connect; one log line per refusal would let a keyless host write the agent's
log at its own pace. `RefusalLog` writes the first `first` refusals of each
cause (a wire error code, ``evicted``, ...) one line each, then keeps quiet
about that cause and writes one summary line per cause and `every` seconds,
"N more ... refused in the last T s", for what it left out. Every refusal is
counted whatever is written (`counts`; the relay shows its own counters too).

The causes it keeps apart are bounded (`MAX_CAUSES`; the rest share one), so
a stream of new causes cannot grow it. The clock and the timer are the
caller's: `now` reads the time, `later(delay, fn)` runs `fn` after `delay`
seconds (the relay passes its loop's ``time`` and ``call_later``); without
`later`, a due summary is written with the next refusal of its cause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

FIRST = 2  # lines written for each cause before it goes quiet
EVERY = 60.0  # seconds between two summaries of one cause
MAX_CAUSES = 32
OTHER = "other"  # the cause of every cause beyond MAX_CAUSES


class RefusalLog:
    def __init__(self, log: logging.Logger, now: Callable[[], float], *, first: int = FIRST,
                 every: float = EVERY, later: Callable[[float, Callable[[], None]], Any] | None = None,
                 level: int = logging.INFO) -> None:  # fmt: skip
        self.log, self.now, self.later = log, now, later
        self.first, self.every, self.level = first, every, level
        self.counts: dict[str, int] = {}  # every refusal, by cause
        self._quiet: dict[str, tuple[float, int]] = {}  # cause -> (quiet since, refusals left out)
        self._due = False  # a summary is scheduled with `later`

    def refused(self, cause: str, fmt: str, *args: Any, level: int | None = None) -> None:
        """Count one refusal of `cause`; log it (``fmt % args``, at `level`) if it is among the first."""
        if cause not in self.counts and len(self.counts) >= MAX_CAUSES:
            cause = OTHER
        n = self.counts[cause] = self.counts.get(cause, 0) + 1
        if n <= self.first:
            self.log.log(self.level if level is None else level, fmt, *args)
            if n == self.first:
                self.log.log(self.level, "further %s refusals are summed up every %g s", cause, self.every)
            return
        since, left_out = self._quiet.get(cause, (self.now(), 0))
        self._quiet[cause] = (since, left_out + 1)
        if self.later is None:
            self.summarise(only=cause)
        elif not self._due:
            self._due = True
            self.later(self.every, self._scheduled)

    def _scheduled(self) -> None:
        self._due = False
        self.summarise(force=True)  # the next refusal left out schedules the next one

    def summarise(self, only: str | None = None, force: bool = False) -> None:
        """Write the summary of each cause (or of `only`) whose quiet spell is `every` seconds old
        (any age with `force`), and start its next spell."""
        now = self.now()
        for cause, (since, left_out) in list(self._quiet.items()):
            if (only is not None and cause != only) or (not force and now - since < self.every):
                continue
            del self._quiet[cause]
            if left_out:
                self.log.log(self.level, "%d more %s refusals in the last %.0f s (%d in all)",
                             left_out, cause, now - since, self.counts.get(cause, 0))  # fmt: skip
