"""When the agent reads the share: quiet, the glance, events, kicks and nudges.

While the beacons vouch it reads less; the glance (the cheap look between polls), the pool's
events folded, and the beacons' kicks and nudges turned into cycles.

A mixin of `runtime.agent.Agent` (its state is the agent's, set up in `Agent.__init__`): while the
leader's beacons vouch for the lease a follower last read (`_quiet`), the pool's event files are read
on a nudge and once a LEASE_TTL (`_events_due`), the members' files as `runtime.member_reads` says.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from elections.core.commands import PoolCommands
from elections.core.decide import Decision, Timing, Verdict
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.pool_view import PoolView
from elections.ports.stores import EventReader
from elections.runtime.beacon_link import BeaconLink
from elections.runtime.bindings import PoolBindings
from elections.runtime.elector import Elector
from elections.runtime.projection import Projector
from stkconfig.model import Config

log = logging.getLogger("stkrelay.agent")

# Event kinds whose `epoch` need not be this pool's: an audit row carries the
# epoch of the pool the command was given to, which may be a watched pool whose
# members (hostile ones too) sign any epoch they like. Knowing it as this pool's
# made every agent refuse the live lease as older (a needless election, at that
# watched pool's epoch + 1).
NOT_THIS_POOLS_EPOCH = ("audit",)
# Event kinds that concern people, not the election: folded and projected (the audit page shows them
# at once), never a reason for a cycle. An audit row follows every command, nudged: its cycle on every
# member held the election lock and both cores while a handoff's target waited for them (issue 22).
NOT_NEWS = ("audit",)
CATCH_UP_S = 0.2  # seconds of one cycle spent reading a backlog of pool events (a joiner's history)
# The verdicts a quiet tick may stand on without a cycle: a follower following, a leader holding.
# After any other (a step-down, a lost claim, a wait) the next tick cycles: a leader woken from a
# freeze steps down, and skipping from there left "step_down" as its decision for good (the
# panel's and relayctl's word on it), however long it had been following.
SETTLED = frozenset({Verdict.FOLLOW, Verdict.HOLD, Verdict.RENEW, Verdict.IDLE})
SLOW_KICK_S = 0.3  # a beacon's cycle slower than this says where its time went (the log)


class Looks:
    """The agent's reads of the share and its events, and the cycles they start."""

    _last_done: dict[str, float]
    _unprojected: list[list[dict[str, Any]]]
    # What it uses of the agent (set in `Agent.__init__`, or defined by another half).
    stk: Config
    clock: Clock
    timing: Timing
    lock: threading.RLock
    commands: PoolCommands
    tail: EventReader
    projector: Projector
    bindings: PoolBindings
    elector: Elector
    beacons: BeaconLink | None

    if TYPE_CHECKING:

        def _tick(self, renewing: bool, wait: bool = True, news: bool = False) -> Decision: ...

        def publish(self, decision: Decision | None) -> None: ...

        def survey(self, read_members: bool = True) -> PoolView: ...

    def ingest(self) -> bool:
        """Fold the pool's new, verified events into the command state and hand
        them to the projector (the database inserts happen off this path). The
        tail reads a bounded amount per call; while it has a backlog (an agent
        joining a pool's history) it is called again for up to `CATCH_UP_S`.
        True if there was anything new that concerns the election (not only `NOT_NEWS`)."""
        news = False
        until = self.clock.monotonic() + CATCH_UP_S
        while True:
            while self._unprojected and self.projector.submit(self._unprojected[0], timeout=0):
                self._unprojected.pop(0)
            if self._unprojected:  # the database is behind: read nothing more until it catches up
                return news
            try:
                events = self.tail.new_events()
            except StoreUnavailable as exc:
                log.debug("event files not read: %s", exc)
                return news
            if events:
                news = news or concern_the_election(events)
                self.commands.apply(events)
                for target in forgotten(events):  # a retired member's name may be used afresh
                    self.elector.store.forget_member(target)
                self.bindings.fold(events)
                self.elector.know(highest_epoch(events))
                if not self.projector.submit(events, timeout=0):
                    log.warning("history projection is behind: %d events wait for the database", len(events))
                    self._unprojected.append(events)
            if not self.tail.backlog:
                self.bindings.publish(caught_up=True)
                return news
            if self.clock.monotonic() >= until:
                return news

    def _nudged(self) -> None:
        """A command nudge (`core.nudge`): the pool's events now, and a cycle if they held news."""
        with self.lock:
            if self.ingest():
                self._tick(renewing=False, news=True)

    def _kicked(self, why: str) -> None:
        """A beacon's reaction or a gone leader: one cycle now (a store read). One that
        takes longer than `SLOW_KICK_S` says where its time went (a takeover's seconds
        under load are spent here: the election lock, the share's event files, the cycle)."""
        asked = self.clock.monotonic()
        with self.lock:
            # The store first: a handoff's target takes its epoch now, its relay starting meanwhile;
            # then the pool's events (the lease changed hands: its elected/handoff lines are on the
            # share already). A takeover needs none of them: the epoch comes from the store's records.
            locked = self.clock.monotonic()
            decision = self.elector.cycle(renewing=False)
            cycled = self.clock.monotonic()
            self.publish(decision)
            self.ingest()
            ingested = self.clock.monotonic()
            # The view too (the members' files as last read): a quiet follower's next tick may be a
            # LEASE_POLL away, and the panel and relayctl check commands against this view's epoch.
            self.view = self.survey(read_members=False)
        if cycled - asked > SLOW_KICK_S:
            log.info("slow beacon cycle (%s): %.2f s waiting for the election lock, %.2f s in the cycle, "
                     "%.2f s reading the pool's events after it (%s)", why, locked - asked, cycled - locked,
                     ingested - cycled, decision.verdict.value)  # fmt: skip

    def glance(self) -> Decision | None:
        """The cheap, frequent look (LEASE_WATCH): new pool events, or a lease
        that changed (a handoff, a release), trigger a full cycle at once, so a
        planned switchover does not wait for the next poll. While the leader's
        beacons name the very lease this follower last read, the lease is not
        read again (they would say when it changed)."""
        with self.lock:
            return self._glance()

    def _glance(self) -> Decision | None:
        if self._quiet():  # the beacons tell when the lease changes, nudges when a command came
            if self._events_due() and self.ingest():
                return self._tick(renewing=False, news=True)
            return None
        news = self.ingest()
        try:
            read = self.elector.store.read()
        except StoreUnavailable:
            return None
        rec = read.record
        mem = self.elector.memory
        moved = (
            read.status == "valid"
            and rec is not None
            and (rec.key != mem.seen_key or rec.released != mem.seen_released)
        )
        # A leader whose record vanished (on etcd: its lease revoked behind its
        # back, seen by etcd's watch stream) looks at once: it rewrites or steps down now.
        gone = self.elector.is_leader and read.status == "missing"
        if news or moved or gone:
            return self._tick(renewing=False)
        return None

    def _quiet(self) -> bool:
        """A follower whose leader's fresh beacons name the very lease it last read,
        or a leader that hears every other member beacon: the share can be read
        less often, and the beacons say when to look (`BeaconLink.vouches`,
        `hears_all`). False the moment the beacons stop, and while the store was
        unreachable at the last look (every tick then cycles, as without beacons)."""
        if self.beacons is None or self.elector.last_read is None:
            return False
        if self.elector.is_leader:
            others = set(self.view.members) - {self.stk.node}
            return bool(others) and self.beacons.hears_all(others)
        return self.beacons.vouches()

    def _due(self, what: str, every: float) -> bool:
        now = self.clock.monotonic()
        if now - self._last_done.get(what, -1e9) < every:
            return False
        self._last_done[what] = now
        return True

    def _events_due(self, renewing: bool = False) -> bool:
        """While quiet, whether to read the pool's event files now: once a LEASE_TTL,
        leader and follower alike. Commands come with a nudge, which reads them at once
        (`_nudged`); a command whose nudge was lost is folded within a LEASE_TTL. (A
        leader read them at each renewal: a third of its share operations, issue 22.) A
        backlog (a joiner's history, a big file planted on the share) is read on at every
        look, as when not quiet: once a LEASE_TTL, 30 MiB of history took minutes, not seconds."""
        if self.tail.backlog or self._unprojected:
            return True
        return self._due("events", self.timing.ttl)


def skips_cycle(quiet: bool, last: Decision | None, news: bool, renewing: bool, leads: bool) -> bool:
    """Whether a tick stands on the last decision without a cycle (issue 22's quiet agent):
    quiet, no news, the last decision a settled one, and never a leader's renewal."""
    settled = last is not None and last.verdict in SETTLED
    return quiet and settled and not news and not (renewing and leads)


def concern_the_election(events: list[dict[str, Any]]) -> bool:
    """Whether these new pool events are news for a cycle: any but `NOT_NEWS` rows."""
    return any(e.get("kind") not in NOT_NEWS for e in events)


def forgotten(events: list[dict[str, Any]]) -> list[str]:
    """The members these pool events retire (`relayctl forget`)."""
    named = (e.get("target") for e in events if e.get("kind") == "forget_requested")
    return [t for t in named if isinstance(t, str)]


def highest_epoch(events: list[dict[str, Any]]) -> int:
    """The highest epoch these pool events speak of as this pool's (0 if none)."""
    epochs = [e.get("epoch") for e in events if e.get("kind") not in NOT_THIS_POOLS_EPOCH]
    return max((n for n in epochs if isinstance(n, int)), default=0)
