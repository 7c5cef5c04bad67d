"""Between one agent's elector and its beacons (DESIGN.md §13).

- The beacons say what the elector's memory says (`standing()`): leader of
  epoch E with its renew_seq, or follower of the lease it last read.
- A `Reaction` of the board (a resign, a leader beacon of a new lease or of a
  higher epoch, a split brain) or the liveness evidence of a gone leader
  becomes one election cycle at once, on a thread of its own (`kick`): the
  cycle reads the store and `decide()` judges, so a beacon never does more
  than make the store be read sooner. Kicks that arrive while one runs are
  folded into the next.
- The elector asks `evidence(holder, epoch)` for its `Observation`.
- The serving right (DESIGN.md §15, `core.serving`): the elector's `Serving`
  (`taken`, `bound`, `lapsed`, `silent`) is this link; the book lives with the
  beacons (`BeaconService.book`). A member's ack that moves the gate calls
  `on_acked` (the agent publishes its leadership state: the relay's gate).
- `vouches()`: the leader's fresh beacons name the very lease this follower
  last read, so reading the share again now would tell it nothing;
  `hears_all(members)`: a leader hears every member beacon, so another
  leader's beacon would reach it before any read of the share could.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from elections.core.beacon_board import Reaction, Standing
from elections.ports.beacons import BeaconConfig, BeaconService
from elections.runtime.elector import Elector

log = logging.getLogger("stkrelay.beacons")

VOUCH_INTERVALS = 3.0  # a leader beacon vouches for the lease this many intervals after it came


class BeaconLink:
    def __init__(
        self, config: BeaconConfig, elector: Elector, cycle: Callable[[str], None],
        monotonic: Callable[[], float],
    ) -> None:  # fmt: skip
        self.elector = elector
        self.cycle = cycle
        self.interval = config.interval
        self.service = BeaconService(config, self.standing, self.react, monotonic)
        self._kick = threading.Event()
        self._why = ""
        self.kicks = 0
        self._thread = threading.Thread(target=self._run, name="beacon-kicks", daemon=True)

    def start(self) -> BeaconLink:
        self.service.start()
        self._thread.start()
        return self

    def standing(self) -> Standing:
        el = self.elector
        mem = el.memory
        read = el.last_read
        rec = read.record if read is not None and read.status == "valid" else None
        holds = rec is not None and mem.seen_key is not None and rec.node == mem.seen_key[0]
        holder_ip = rec.ip if holds and rec is not None else None
        return Standing(node=mem.node, leader_epoch=mem.leader_epoch, seen_key=mem.seen_key,
                        holder_ip=holder_ip, max_epoch=mem.max_epoch, renew_seq=mem.renew_seq)  # fmt: skip

    def evidence(self, node: str, epoch: int) -> str | None:
        return self.service.evidence(node, epoch)

    # -- elections.runtime.elector.Serving -----------------------------------------------------
    def taken(self, epoch: int, cause: str | None, now: float) -> None:
        self.service.taken(epoch, cause)

    def bound(self, epoch: int, now: float) -> float | None:
        return self.service.serving_bound(epoch)

    def lapsed(self, epoch: int, now: float) -> str | None:
        return self.service.serving_lapsed(epoch)

    def silent(self, holder: str, epoch: int) -> str | None:
        return self.service.silent(holder, epoch)

    def vouches(self) -> bool:
        mem = self.elector.memory
        if mem.leader_epoch is not None or mem.seen_key is None or mem.seen_released:
            return False
        key = self.service.leader_key(mem.seen_key[0], VOUCH_INTERVALS * self.interval)
        return key == mem.seen_key

    def hears_all(self, nodes: set[str]) -> bool:
        """Every one of `nodes` beaconed within the vouching window: a leader of a
        pool whose members all beacon hears at once when another one takes over."""
        return self.service.hears_all(nodes, VOUCH_INTERVALS * self.interval)

    def heard(self) -> list[str]:
        """The members whose beacons reached this one lately (for its heartbeat)."""
        return self.service.heard(VOUCH_INTERVALS * self.interval * 5)

    def react(self, reaction: Reaction) -> None:
        """From the beacon thread: run a cycle soon (never on that thread)."""
        if reaction.security:
            log.error("%s", reaction.why)
        else:
            log.info("beacon: %s", reaction.why)
        self._why = reaction.why
        self._kick.set()

    def _run(self) -> None:
        while True:
            self._kick.wait()
            self._kick.clear()
            self.kicks += 1
            try:
                self.cycle(self._why)
            except Exception:  # the next kick or tick tries again
                log.exception("election cycle on a beacon failed")
