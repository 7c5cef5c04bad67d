"""The beacons' liveness watch (docs/design.md §13): a TCP connection held to the lease holder's supervisor.

`LivenessWatch` is mixed into `ports.beacons.BeaconService` and runs on its event
loop: the host's answers (connection ended, reconnect refused) go to
`core.liveness.Liveness`; timeouts and unreachable hosts are no answer. When the
evidence holds, `react` is told once per (holder, epoch). It uses the service's
`config`, `lock`, `liveness`, `standing`, `monotonic` and its events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from elections.core.beacon_board import BeaconBoard, Reaction, Standing
from elections.core.liveness import ANSWERS, CONNECTED, ENDED, REFUSED, UNREACHABLE, Liveness

log = logging.getLogger("stkrelay.beacons")

CONNECT_TIMEOUT = 1.0
HOLD_LOOK = 2.0  # seconds: a held liveness connection checks the lease's holder at least this often
RETARGET_WAIT = 2.0  # seconds: with no holder to watch, the liveness loop looks at least this often


class HalfConfig(Protocol):
    """What the halves of `BeaconService` read of its `BeaconConfig`."""

    node: str
    port: int  # BEACON_PORT
    interval: float


class LivenessWatch:
    """The liveness half of `BeaconService`: whom to watch, the connection held, the evidence told."""

    # What it uses of the service (set in `BeaconService.__init__`).
    config: HalfConfig
    lock: threading.Lock
    liveness: Liveness
    board: BeaconBoard
    standing: Callable[[], Standing]
    monotonic: Callable[[], float]
    _reported: tuple[str, int] | None
    _answered: asyncio.Event
    _retarget: asyncio.Event
    _hand: Callable[[Reaction], None]

    def evidence(self, node: str, epoch: int) -> str | None:
        """Why the holder `node` of `epoch` is positively gone, or None."""
        with self.lock:
            return self.liveness.gone(self.board, node, epoch, self.monotonic())

    def _target(self) -> tuple[str, tuple[str, int]] | None:
        return self._target_of(self.standing())

    def _target_of(self, st: Standing) -> tuple[str, tuple[str, int]] | None:
        """The holder whose liveness port to watch: the one of the lease this follower last read."""
        if st.leader_epoch is not None or st.seen_key is None or not st.holder_ip:
            return None
        if st.seen_key[0] == self.config.node:
            return None
        return st.seen_key[0], (st.holder_ip, self.config.port)

    def _saw(self, state: str) -> None:
        with self.lock:
            self.liveness.saw(state, self.monotonic())
        if state in ANSWERS:
            self._answered.set()  # the evidence loop looks closely from now on

    async def _retargeted(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._retarget.wait()

    async def _liveness_loop(self) -> None:
        pause = min(self.config.interval, 0.2)
        while True:
            target = self._target()
            self._watched = target
            self._retarget.clear()  # set again by the next send if the holder changed meanwhile
            with self.lock:
                node, address = target if target is not None else (None, None)
                self.liveness.watch(node, address, self.monotonic())
            if target is None:
                await self._retargeted(RETARGET_WAIT)  # a leader, or no holder known: nothing to watch
                continue
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    reader, writer = await asyncio.open_connection(*target[1])
            except ConnectionRefusedError:
                self._saw(REFUSED)  # the host answers: nothing listens there
                await asyncio.sleep(pause)
                continue
            except (TimeoutError, OSError):
                self._saw(UNREACHABLE)  # no answer: no evidence
                await asyncio.sleep(pause)
                continue
            self._saw(CONNECTED)
            await self._hold(reader, writer, target)
            await asyncio.sleep(min(pause, 0.05))

    async def _hold(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: tuple[str, tuple[str, int]]
    ) -> None:
        """Hold the connection until the host ends it or the lease names someone
        else (the send loop says so at its next beacon; HOLD_LOOK at the latest)."""
        loop = asyncio.get_running_loop()
        read = loop.create_task(reader.read(256))
        try:
            while True:
                retarget = loop.create_task(self._retarget.wait())
                # The read ends at once when the host ends the connection.
                done, _ = await asyncio.wait(
                    {read, retarget}, timeout=HOLD_LOOK, return_when=asyncio.FIRST_COMPLETED
                )
                retarget.cancel()
                if read not in done:
                    self._retarget.clear()
                    if self._target() != target:
                        return
                    self._watched = target
                    continue
                try:
                    data = read.result()
                except ConnectionResetError:
                    data = b""
                except OSError:  # a timeout of the kernel's own (keepalive): no answer
                    self._saw(UNREACHABLE)
                    return
                if not data:
                    self._saw(ENDED)
                    return
                read = loop.create_task(reader.read(256))  # the port says nothing: bytes are ignored
        finally:
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await read
            writer.close()

    async def _evidence_loop(self) -> None:
        # Evidence needs the host's answer first: until one comes (the liveness
        # connection ended or a reconnect refused), sleep on it instead of polling.
        while True:
            with self.lock:
                answered = self.liveness.state in ANSWERS
            if not answered:
                self._answered.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._answered.wait()
                continue
            await asyncio.sleep(self.config.interval / 4)
            st = self.standing()
            if st.leader_epoch is not None or st.seen_key is None:
                continue
            node, epoch = st.seen_key[0], st.seen_key[1]
            why = self.evidence(node, epoch)
            if why and self._reported != (node, epoch):
                self._reported = (node, epoch)
                log.warning("%s", why)
                self._hand(Reaction(why))
