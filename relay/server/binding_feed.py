"""The pool's station bindings, fed to a serving relay off its event loop.

`BindingFeed` reads this agent's ``DATA_DIR/stations.json`` (written by the
worker from the pool's signed station events, `elections.core.stations`) on
a thread of its own, every `every` seconds (a `stat` while the file is
unchanged: `LocalState` caches by identity), and hands each new set of bound
stations to the relay's `relay.server.bindings.StationBindings` on the loop with
`call_soon_threadsafe`. A registration never waits for a read, and a data
directory that hangs holds up this thread only. `first()` waits (on the
loop, without blocking it) for the first read, so a relay that has just won
an election knows the bindings before it accepts anyone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from elections.ports.local.localstate import LocalState
from relay.server.bindings import StationBindings

log = logging.getLogger("stkrelay.relay")

EVERY = 0.25
FIRST_WITHIN = 2.0


class BindingFeed:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        data_dir: str | os.PathLike[str],
        bindings: StationBindings,
        every: float = EVERY,
    ) -> None:
        self.loop, self.local, self.bindings, self.every = loop, LocalState(data_dir), bindings, every
        self.read_once = asyncio.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="station-bindings", daemon=True)

    def start(self) -> BindingFeed:
        self._thread.start()
        return self

    async def first(self, within: float = FIRST_WITHIN) -> bool:
        """True once the file was read (present or not) within `within` seconds."""
        try:
            async with asyncio.timeout(within):
                await self.read_once.wait()
            return True
        except TimeoutError:
            log.error("stations.json not read within %.1f s: serving without the station bindings", within)
            return False

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        last: tuple[frozenset[str], dict[str, int]] | None = None
        while not self._stop.is_set():
            try:
                stations = self.local.stations()
                if stations.exists and (stations.bound, stations.at) != last:
                    last = (stations.bound, stations.at)
                    self.loop.call_soon_threadsafe(self.bindings.replace, stations.bound, stations.at)
                self.loop.call_soon_threadsafe(self.read_once.set)
            except RuntimeError:  # the loop is closed: the relay is gone
                return
            except Exception:
                log.exception("could not read the station bindings")
            self._stop.wait(self.every)
