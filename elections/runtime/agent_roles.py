"""The lead gained and lost: the duty plans, the handoff fence, leftovers let go.

The duty plans run on threads of their own; the fence shuts the relay's gate before a handoff is
written; what an earlier run of this agent held and never released is let go.

A mixin of `runtime.agent.Agent` (its state is the agent's, set up in `Agent.__init__`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from elections.core.commands import PoolCommands
from elections.core.decide import Decision, Timing
from elections.core.repair import Standing
from elections.executors import Outcome
from elections.ports.clock import Clock
from elections.ports.localstate import LocalState
from elections.ports.pool_view import PoolView
from elections.runtime.beacon_link import BeaconLink
from elections.runtime.elector import Elector
from elections.runtime.ownership import standing_of
from stkconfig.model import Config

log = logging.getLogger("stkrelay.agent")

GATE_WAIT = 0.02  # at most this long between looks of an elected plan waiting for its gate (publish wakes it)
# Before a handoff is written, the relay's gate is shut and this long is waited at most for the relay
# to say it stopped: past it, no relay routes for the epoch whatever it says (its gate re-reads the
# leadership state at least every 0.1 s, `relay.runner.gate.LeadershipGate`, the write of that state, and
# core.serving's GATE_LAG: 0.2 s, with a margin for clock rates; checked in tests/servesim.py).
FENCE_WITHIN = 0.25  # seconds
FENCE_LOOK = 0.002  # seconds between looks at relay.json meanwhile


class Roles:
    """The agent's elected/demoted hooks, its handoff fence, and the duty plans they run."""

    _fenced: int | None  # an epoch this agent stopped serving before handing it off
    _leader_since: float | None  # when this agent was last elected (monotonic)
    _released: set[int]  # epochs whose demotion plan this process ran
    _duty: threading.Thread | None  # the last duty plan's thread (repairs wait for it)
    _told: threading.Event  # set at every publish that says this agent leads
    # What it uses of the agent (set in `Agent.__init__`, or defined by another half).
    stk: Config
    clock: Clock
    timing: Timing
    local: LocalState
    commands: PoolCommands
    view: PoolView
    elector: Elector
    beacons: BeaconLink | None
    duties: tuple[Callable[[int], list[Outcome]], Callable[[int], list[Outcome]]]  # (elected, demoted)

    if TYPE_CHECKING:

        def publish(self, decision: Decision | None) -> None: ...

        def _say_own_record(self) -> None: ...

    def _standing(self) -> Standing:
        busy = self._duty is not None and self._duty.is_alive()
        held = self.elector.memory.leader_epoch
        return standing_of(self.stk.node, self.view, held, self.commands.paused, busy, self.clock.monotonic())

    def _elected(self, epoch: int) -> None:
        self._leader_since = self.clock.monotonic()
        self.publish(self.elector.last)  # first: the executors' gate reads it
        if self.beacons is not None:  # the pool hears of the new epoch now, not one interval later
            self._say_own_record()  # the claim rewrote this member's record
            self.beacons.wake()
        self._run_duty(self.duties[0], epoch, self._gate_opens)

    def _gate_opens(self, epoch: int) -> bool:
        """An epoch taken on silence serves by acks from the start (docs/design.md §15): its
        gate opens when a majority acknowledges the new leader's beacons, a few beacon
        intervals after the election. The elected plan (start_relay, fenced on that gate)
        waits for it, up to RENEW_DEADLINE; False if the epoch is lost meanwhile."""
        until = self.clock.monotonic() + self.timing.deadline
        while self.clock.monotonic() < until:
            self._told.clear()  # before the look: a publish after it wakes the wait below at once
            if self.local.leadership().held_epoch(self.clock.monotonic()) == epoch:
                return True
            if self.elector.memory.leader_epoch != epoch:
                return False
            self._told.wait(GATE_WAIT)
        return True  # run it anyway: the executors' gate fences it, and says so

    def _fence(self, epoch: int) -> None:
        """Stop serving `epoch` before its handoff is written (docs/design.md §5.1: the target may
        take the next epoch at once): the leadership state says this agent leads no more (and
        names the target), and never again for that epoch; then wait until the relay says it
        stopped, or FENCE_WITHIN, past which its gate has read that state whatever it says."""
        self._fenced = epoch
        began = time.monotonic()  # relay.json's `updated` is this host's monotonic clock
        self.publish(self.elector.last)
        if not self.local.relay_stopped(epoch, began, FENCE_WITHIN, FENCE_LOOK):
            log.info("relay did not confirm its stop within %.2f s: its gate is shut by now", FENCE_WITHIN)
        if self.beacons is not None:  # the resign may say so: its taker need not wait for acks
            self.beacons.fenced(epoch)

    def _demoted(self, epoch: int) -> None:
        self._leader_since = None
        self._released.add(epoch)
        self.publish(self.elector.last)
        if self.beacons is not None:  # `resign` now: a handoff's target takes over at once
            self.beacons.wake()
        self._run_duty(self.duties[1], epoch)

    def _let_go_of_leftovers(self) -> None:
        """Addresses an earlier run of this agent took and never released (it was
        killed while it led: addresses.json still names them, and the kernel still
        has a VIP, answering ARP for it beside the new holder): once a newer epoch
        is another member's, run their epoch's demotion plan, once per epoch."""
        el = self.elector
        seen = el.memory.seen_key
        if el.is_leader or seen is None or seen[0] == el.me.node:
            return
        for epoch in sorted({h.epoch for h in self.local.held_addresses()} - self._released):
            if epoch < seen[1]:
                self._released.add(epoch)
                log.warning("releasing what this agent held as leader of epoch %d before it restarted "
                            "(%s leads epoch %d)", epoch, seen[0], seen[1])  # fmt: skip
                self._run_duty(self.duties[1], epoch)

    def _run_duty(
        self, duty: Callable[[int], Any], epoch: int, first: Callable[[int], bool] | None = None
    ) -> None:
        """Run a leader duty plan beside the election loop: a slow cloud API must
        never delay a renewal. Every action is fenced on the epoch at its gate.
        `first`: waited for on the duty's thread; False skips the plan."""

        def run() -> None:
            from django.db import connection

            try:
                if first is None or first(epoch):
                    duty(epoch)
            finally:
                connection.close()

        self._duty = threading.Thread(target=run, name=f"duty-{epoch}", daemon=True)
        self._duty.start()
