"""One retry helper for the whole project, with an injected sleep.

`retry(fn, on=..., backoff=...)` calls `fn` until it returns without raising
one of the `on` exceptions, sleeping `backoff`'s delays in between, and
re-raises the last exception when the tries are used up. `Backoff.delays()`
serves loops that are not a single call (a supervisor restarting a child).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """`tries` attempts; the n-th wait is `first * factor**n`, capped at `cap`,
    and spread by ±`jitter` (a fraction) when a `rng` is given."""

    tries: int
    first: float = 0.0
    factor: float = 1.0
    cap: float = float("inf")
    jitter: float = 0.0

    def delay(self, n: int, rng: random.Random | None = None) -> float:
        """The wait after the (n+1)-th failure."""
        base = min(self.first * self.factor**n, self.cap)
        if rng is not None and self.jitter:
            base *= 1 + rng.uniform(-self.jitter, self.jitter)
        return max(base, 0.0)

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits between the tries (one fewer than `tries`)."""
        for n in range(self.tries - 1):
            yield self.delay(n, rng)


def retry(
    fn: Callable[[], T],
    *,
    on: type[BaseException] | tuple[type[BaseException], ...],
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """`fn()`, tried up to `backoff.tries` times while it raises one of `on`."""
    waits = backoff.delays(rng)
    while True:
        try:
            return fn()
        except on:
            wait = next(waits, None)
            if wait is None:
                raise
            if wait > 0:
                sleep(wait)
