"""Between one agent's elector and its beacons (docs/design.md §13).

- The beacons say what the elector's memory says (`standing()`): leader of
  epoch E with its renew_seq, or follower of the lease it last read.
- A `Reaction` of the board (a resign, a leader beacon of a new lease or of a
  higher epoch, a split brain) or the liveness evidence of a gone leader
  becomes one election cycle at once, on a thread of its own (`kick`): the
  cycle reads the store and `decide()` judges, so a beacon never does more
  than make the store be read sooner. Kicks that arrive while one runs are
  folded into the next.
- A command nudge (`core.nudge`, verified and judged new by the service)
  becomes one call of `nudged` on the same thread: the agent reads the pool's
  event files and runs a cycle if they held news.
- The elector asks `evidence(holder, epoch)` for its `Observation`.
- The serving right (docs/design.md §15, `core.serving`): the elector's `Serving`
  (`taken`, `bound`, `lapsed`, `silent`) is this link; the book lives with the
  beacons (`BeaconService.book`). A member's ack that moves the gate calls
  `on_acked` (the agent publishes its leadership state: the relay's gate).
- `vouches()`: the leader's fresh beacons name the lease this follower last
  read (its holder and epoch, renewed since or not) and its TTL as timed has
  not run out, so reading the share again now would tell it nothing; `heard_at(key)`: when a leader beacon
  first named a lease, for the elector's timer when it reads that lease later;
  `hears_all(members)`: a leader hears every member beacon, so another
  leader's beacon would reach it before any read of the share could.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from elections.core.beacon_board import Reaction, Standing
from elections.core.lease import LeaseRead
from elections.core.lease_memory import Memory
from elections.core.nudge import Nudge
from elections.ports.beacons.beacon_config import BeaconConfig
from elections.ports.beacons.beacons import BeaconService

log = logging.getLogger("stkrelay.beacons")

VOUCH_INTERVALS = 3.0  # a leader beacon vouches for the lease this many intervals after it came
# A leader is quiet while every member beaconed within this many intervals (1.2 s at 0.2 s). With 3
# (0.6 s) a 10-member pool on a loaded machine missed one of nine members often enough that its
# leader polled a quarter of the time (2 share operations per LEASE_WATCH). It bounds only how soon
# the leader reads the share, never whether it serves (its gate: docs/election.md, "Less share traffic").
LEADER_QUIET_INTERVALS = 6.0


class ElectorState(Protocol):
    """What the beacons read of the elector (`runtime.elector.Elector`)."""

    @property
    def memory(self) -> Memory: ...

    @property
    def last_read(self) -> LeaseRead | None: ...


class BeaconLink:
    """`elector()`: the elector, once built. It is built after its beacons (they are its
    evidence, its serving right and its timer's news: constructor arguments of the elector),
    and it is asked for only once the beacons run (`start`)."""

    def __init__(
        self, config: BeaconConfig, elector: Callable[[], ElectorState], cycle: Callable[[str], None],
        monotonic: Callable[[], float], nudged: Callable[[], None] = lambda: None,
        folded: Callable[[str], int] = lambda node: 0, gate_clock: Callable[[], float] | None = None,
        members: Callable[[], int] = lambda: 0, on_acked: Callable[[], None] = lambda: None,
        republish: Callable[[], None] = lambda: None,
    ) -> None:  # fmt: skip
        self.elector = elector
        self.cycle = cycle
        self.nudged = nudged
        self.interval = config.interval
        self.service = BeaconService(config, self.standing, self.react, monotonic, nudged=self.nudge,
                                     folded=folded, gate_clock=gate_clock, members=members,
                                     on_acked=on_acked, on_quiet=self.quiet_changed)  # fmt: skip
        self._kick = threading.Event()
        self._why = ""
        self._cycle_wanted = False
        self._nudge_wanted = False
        self._view_wanted = False
        self.republish = republish  # the pool view, written again (`quiet_changed`)
        self.kicks = 0
        self._thread = threading.Thread(target=self._run, name="beacon-kicks", daemon=True)

    def start(self) -> BeaconLink:
        self.service.start()
        self._thread.start()
        return self

    def standing(self) -> Standing:
        el = self.elector()
        mem = el.memory
        read = el.last_read
        rec = read.record if read is not None and read.status == "valid" else None
        holds = rec is not None and mem.seen_key is not None and rec.node == mem.seen_key[0]
        holder_ip = rec.ip if holds and rec is not None else None
        return Standing(node=mem.node, leader_epoch=mem.leader_epoch, seen_key=mem.seen_key,
                        holder_ip=holder_ip, max_epoch=mem.max_epoch, renew_seq=mem.renew_seq)  # fmt: skip

    def evidence(self, node: str, epoch: int) -> str | None:
        return self.service.evidence(node, epoch)

    # -- elections.core.serving.Serving -----------------------------------------------------
    def taken(self, epoch: int, cause: str | None, now: float, after: tuple[str, int] | None = None) -> None:
        self.service.taken(epoch, cause, after)

    def fenced(self, epoch: int) -> None:
        """The relay of `epoch` stopped before its planned release (`ServingBook.fenced`)."""
        self.service.serving_fenced(epoch)

    def overwritten(self, epoch: int, now: float) -> None:
        self.service.serving_overwritten(epoch)

    def bound(self, epoch: int, now: float) -> float | None:
        return self.service.serving_bound(epoch)

    def lapsed(self, epoch: int, now: float) -> str | None:
        return self.service.serving_lapsed(epoch)

    def silent(self, holder: str, epoch: int) -> str | None:
        return self.service.silent(holder, epoch)

    def vouches(self) -> bool:
        mem = self.elector().memory
        if mem.leader_epoch is not None or mem.seen_key is None or mem.seen_released:
            return False
        key = self.service.leader_key(mem.seen_key[0], VOUCH_INTERVALS * self.interval)
        if key is None or key[:2] != mem.seen_key[:2] or key[2] < mem.seen_key[2]:
            return False
        # Never past the lease's TTL as timed (`Elector.heard` moves it with each renewal the beacons
        # name): beacons that name no newer renewal for a TTL are replays or a holder that stopped
        # renewing, and the follower looks again (issue 40: replayed, they kept it from ever looking).
        return mem.seen_at is None or self.service.monotonic() - mem.seen_at < mem.seen_ttl

    def heard_at(self, key: tuple[str, int, int]) -> float | None:
        return self.service.heard_at(key)

    def renewal_heard(self, node: str, epoch: int) -> tuple[int, float] | None:
        return self.service.renewal_heard(node, epoch)

    def winner_heard(self, epoch: int, seconds: float) -> bool:
        return self.service.winner_heard(epoch, seconds)

    def hears_all(self, nodes: set[str]) -> bool:
        """Every one of `nodes` beaconed within `LEADER_QUIET_INTERVALS`: a leader of a
        pool whose members all beacon hears at once when another one takes over."""
        return self.service.hears_all(nodes, LEADER_QUIET_INTERVALS * self.interval)

    @property
    def heard_window(self) -> float:
        """Seconds within which a member's beacon counts as heard lately."""
        return VOUCH_INTERVALS * self.interval * 5

    def heard(self) -> list[str]:
        """The members whose beacons reached this one lately (for its heartbeat)."""
        return self.service.heard(self.heard_window)

    def react(self, reaction: Reaction) -> None:
        """From the beacon thread: run a cycle soon (never on that thread)."""
        if reaction.security:
            log.error("%s", reaction.why)
        else:
            log.info("beacon: %s", reaction.why)
        self._why = reaction.why
        self._cycle_wanted = True
        self._kick.set()

    def nudge(self, nudge: Nudge) -> None:
        """From the beacon thread: read the pool's events soon (never on that thread)."""
        self._nudge_wanted = True
        self._kick.set()

    def quiet_changed(self) -> None:
        """From the beacon thread: the holder went quiet or was heard again (`service.quiet`): the
        pool view is written again soon, so the station door sees it (never on that thread)."""
        self._view_wanted = True
        self._kick.set()

    def wake(self) -> None:
        """This member's standing changed (elected, stepped down): beacon it now."""
        self.service.send_now()

    def _run(self) -> None:
        while True:
            self._kick.wait()
            self._kick.clear()
            self.kicks += 1
            nudged, self._nudge_wanted = self._nudge_wanted, False
            cycle, self._cycle_wanted = self._cycle_wanted, False
            view, self._view_wanted = self._view_wanted, False
            try:
                if nudged:
                    self.nudged()
                if cycle:  # a cycle writes the view too
                    self.cycle(self._why)
                elif view:
                    self.republish()
            except Exception:  # the next kick or tick tries again
                log.exception("election cycle on a beacon failed")
