"""The relay's gate: does this agent still lead, with its epoch (leadership.json)?

`LeadershipGate` is what every relay session asks before it routes; `LeadershipChanges` is the
serving loop's wait for the worker to replace leadership.json or addresses.json (inotify).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from elections.ports.local.localstate import (
    ADDRESSES_NAME,
    LEADERSHIP_NAME,
    Leadership,
    LocalState,
)
from stkhost.dirwatch import DirWatch


class LeadershipGate:
    """`gate()` of the relay: does this agent still lead, with `epoch`?

    The state file is read at most every `cache_s`; the deadline in it is
    compared with the clock at every call.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        epoch: int,
        cache_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.local, self.epoch, self.cache_s, self.clock = LocalState(data_dir), epoch, cache_s, clock
        self._state = Leadership()
        self._pid_ok = False
        self._read_at: float | None = None

    def _refresh(self, now: float) -> None:
        if self._read_at is not None and now - self._read_at < self.cache_s:
            return
        self._state = self.local.leadership()
        self._pid_ok = self._state.worker_alive()
        self._read_at = now

    def why_not(self, fresh: bool = False) -> str | None:
        """None while this agent leads with `epoch`; else the reason, for the log.
        `fresh`: read the state file now, whatever the cache says."""
        now = self.clock()
        if fresh:
            self._read_at = None
        self._refresh(now)
        state = self._state
        if not state.leader:
            return "the leadership state says this agent is not the leader"
        if not state.leads_now(now):
            return "the renew deadline in the leadership state has passed"
        if state.epoch != self.epoch:
            return f"the epoch changed from {self.epoch} to {state.epoch}"
        if not self._pid_ok:
            return f"the lease worker (pid {state.pid}) is gone"
        return None

    def __call__(self) -> bool:
        return self.why_not() is None

    def successor(self) -> tuple[int, str, int] | None:
        """(epoch, ip, port) of the member this agent handed its lease to, as the leadership
        state says once this agent no longer leads (read now: the gate has just shut)."""
        self._read_at = None
        self._refresh(self.clock())
        state, named = self._state, self._state.successor
        if state.leader or named is None or named[0] <= self.epoch:
            return None
        return named

    def deadline(self) -> float | None:
        """The renew deadline (monotonic) in the state last read, if it says this agent leads."""
        state = self._state
        return state.valid_until if state.leader else None


class LeadershipChanges:
    """The serving loop's wait: until the worker replaces leadership.json or
    addresses.json (inotify, on the event loop), a stop, or a timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop, data_dir: str | os.PathLike[str]) -> None:
        self.loop = loop
        self.changed = asyncio.Event()
        self.watch = DirWatch(data_dir, (LEADERSHIP_NAME, ADDRESSES_NAME))
        if self.watch.fd is not None:
            loop.add_reader(self.watch.fd, self._readable)

    @property
    def watching(self) -> bool:
        return self.watch.watching

    def _readable(self) -> None:
        if self.watch.drain():
            self.changed.set()
        if self.watch.ended:  # the data directory went away: polling from now on
            self._unwatch()

    def _unwatch(self) -> None:
        if self.watch.fd is not None:
            self.loop.remove_reader(self.watch.fd)
            self.watch.close()

    async def wait(self, stopping: asyncio.Event, timeout: float) -> None:
        if not (self.changed.is_set() or stopping.is_set()):
            waiters = {asyncio.ensure_future(self.changed.wait()), asyncio.ensure_future(stopping.wait())}
            _, pending = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
        self.changed.clear()

    def __enter__(self) -> LeadershipChanges:
        return self

    def __exit__(self, *_: object) -> None:
        self._unwatch()
