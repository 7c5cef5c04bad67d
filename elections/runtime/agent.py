"""The agent's wiring: one `Agent` built from settings, driven by the Celery
tasks of the lease queue. Imported only by entry points (`elections.tasks`,
the management commands); nothing below imports it back.

The Celery worker (solo pool) owns the one `Elector` of the agent (and the
watchers of the `[pool:<KMSN>]` sections, `runtime.watch`, on threads of their
own: they never contend, and never hold up a tick). Each tick it
ingests the pool's new events (history rows, command fold), runs one elector
cycle, writes this member's heartbeat, and publishes through `LocalState`:
`leadership.json` (whether this agent leads, the epoch, and the monotonic
instant until which it may act as leader) and `pool.json` (its survey of the
pool, judged on its own clock). Other local processes read those files;
monotonic time is shared by all processes of one machine, never compared
across machines.

With beacons on (`BEACON_INTERVAL` > 0) a `BeaconLink` runs beside it: its
reactions and the evidence of a gone leader become an election cycle at once
(`_kicked`, under the same lock as the ticks). While the leader's beacons
vouch for the lease a follower last read, the follower reads the share less:
no lease read on its ticks and glances (a beacon naming another holder or
epoch makes it read; a renewal does not), the event files when a command
nudge names a line it lacks (`core.nudge`) and otherwise once a LEASE_TTL,
the member files only when a beacon says a record changed
(`runtime.member_reads`). A leader that hears every member beacon reads the
event files on nudges and once a LEASE_TTL, and the lease only at its
renewals, which write it without the lock (`FileLeaseStore._renew_in_place`).
Either falls back to polling the moment the beacons stop (three intervals
without one).

`Agent` is one class, in sections: the wiring and the tick; when it reads the
share (quiet, the glance, events folded, kicks and nudges); the lead gained and
lost (elected/demoted, the handoff fence, the duty plans); and what it publishes
(leadership.json and pool.json).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from elections.core.beacons import member_digest
from elections.core.commands import PoolCommands
from elections.core.decide import Decision, Timing, Verdict
from elections.core.eligibility import Freshness, judge, observe, unheard
from elections.core.evidence import Refusals, merged
from elections.core.gate import gate_of
from elections.core.repair import RepairStanding
from elections.core.serving import ACKED
from elections.core.skew import ClockReading, reading_of
from elections.errors import StoreUnavailable
from elections.executors import ActionFence, AddressBook, build_executors, epoch_from_state, leader_duties
from elections.ports.beacons.beacon_config import BeaconConfig
from elections.ports.beacons.beacon_seqs import SEQS_NAME
from elections.ports.local.gate import gate_for
from elections.ports.local.localstate import Leadership, LocalState
from elections.ports.local.pool_view import (
    MemberView,
    PoolView,
    entry_of,
    entry_sessions_of,
    entry_shown,
    web_tls_of,
)
from elections.ports.local.webcert import served_fingerprint
from elections.ports.share.share import SHARE_OPS
from elections.ports.store.store import LeaseStore
from elections.ports.store.stores import PoolPlace, open_event_tail, open_store, store_details
from elections.runtime import notify_feed
from elections.runtime.beacon_link import BeaconLink
from elections.runtime.bindings import PoolBindings
from elections.runtime.elector import Elector
from elections.runtime.health import HealthMonitor
from elections.runtime.lease_writes import identity
from elections.runtime.member_reads import MemberReads
from elections.runtime.ownership import OwnershipWatch, standing_of
from elections.runtime.policy import PoolPolicy
from elections.runtime.projection import Projector, pool_event_sink
from elections.runtime.share_split import SplitAlarm
from elections.runtime.watch import Watchers
from elections.runtime.witness_keeper import WitnessKeeper
from stkconfig.model import Config
from stkhost.clock import SystemClock

log = logging.getLogger("stkrelay.agent")

_agent: Agent | None = None

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

GATE_WAIT = 0.02  # at most this long between looks of an elected plan waiting for its gate (publish wakes it)
# Before a handoff is written, the relay's gate is shut and this long is waited at most for the relay
# to say it stopped: past it, no relay routes for the epoch whatever it says (its gate re-reads the
# leadership state at least every 0.1 s, `relay.runner.gate.LeadershipGate`, the write of that state, and
# core.serving's GATE_LAG: 0.2 s, with a margin for clock rates; checked in tests/servesim.py).
FENCE_WITHIN = 0.25  # seconds
FENCE_LOOK = 0.002  # seconds between looks at relay.json meanwhile

# The serving right (docs/design.md §15): members counted, and how far an ack must move the gate to be
# published.
MEMBER_HORIZON_S, MEMBER_HORIZON_TTLS = 60.0, 6.0  # a member unheard on the share longer is not counted
GATE_STEP = 0.2  # seconds
# leadership.json saying nothing new is written again after this many of the worker's looks (its
# `updated`: /healthz's stale_after is 3 looks and 2 s, `elections.web.panel.site.stale_after`).
RESTATE_LOOKS = 2
REPUBLISH_WAIT = 2.0  # seconds the view's quick rewrite waits for the election lock


CLOCK_EVERY = 30.0  # seconds between readings of this machine's clock against the store's (one operation)


class Agent:
    """The wiring: the elector, the beacons, the watchers, the duties and the publishing of one agent."""

    def __init__(self, config: Config) -> None:
        stk = config
        self.stk = stk
        self.fresh: dict[str, Freshness] = {}
        self.split: SplitAlarm | None = None  # members on another store (core.share_split), with beacons
        clock = SystemClock()
        self.clock = clock
        self.local = LocalState(stk.data_dir)
        self.timing = Timing(stk.lease_ttl, stk.lease_renew, stk.lease_poll, stk.renew_deadline)
        self.restate_every = RESTATE_LOOKS * max(stk.lease_poll, stk.lease_renew)  # seconds
        self.refusals = Refusals()
        place = PoolPlace.of(stk)
        store = open_store(place, stk.node, clock, refusals=self.refusals)
        self.commands = PoolCommands()
        self.tail = open_event_tail(place, clock, refusals=self.refusals)
        self.projector = Projector(stk.kmsn)
        self.notify = notify_feed.start_for(stk)  # ON_ROLE_CHANGE, WEBHOOK_URL: threads of their own
        # The [pool:<KMSN>] sections: read only, each on its own thread and share deadline.
        self.watchers = Watchers.from_settings(stk, clock, self.local, self.projector).start()
        self._unprojected: list[list[dict[str, Any]]] = []
        self.view = PoolView(kmsn=stk.kmsn, node=stk.node)
        self._leader_since: float | None = None
        self._beat_fields: dict[str, Any] = {}
        self._clock: ClockReading | None = None  # the last reading of this clock against the store's
        # The SHA-256 of the certificate this member's panel serves ("" in plain HTTP), in every
        # heartbeat: each agent's panel shows the others', for operators and clients to pin.
        self.web_tls = served_fingerprint(stk.data_dir, stk.tls_cert, stk.web_plain)
        self._member_docs: tuple[dict[str, dict[str, Any]], bool] | None = None  # survey(): last members seen
        self._publishing = threading.Lock()  # the election thread and the beacons' acks both publish
        self._gate_told = float("-inf")  # the valid_until last published
        self._told = threading.Event()  # set at every publish that says this agent leads (`_gate_opens`)
        # A change of the gate's signal is a cycle at once (and a heartbeat saying it), not at
        # the next tick: a leader whose VRRP instance left MASTER hands off within one look.
        self.health = HealthMonitor.from_settings(stk.health_cmd, stk.health_url, gate_for(stk.gate),
                                                  stk.gate.max_age, on_gate=self._gate_changed)  # fmt: skip
        self.policy = PoolPolicy(
            stk.node, stk.priority, self.commands, lambda: self.view, lambda: self._leader_since,
            self.local, clock.monotonic, health=self.health.status, relay_attests=stk.relay_attests,
            gate=self.health.gate, unheard=self.unheard,
        )  # fmt: skip
        self.member_reads = MemberReads(store, stk.node, stk.heartbeat_ttl, stk.lease_renew, stk.lease_ttl,
                                        clock.monotonic)  # fmt: skip
        self._fenced: int | None = None  # an epoch this agent stopped serving before handing it off
        # The beacons (`BeaconLink`) are built before the elector: they are its evidence, its serving
        # right and its timer's news; they read its memory once they run (started below).
        self.beacons = self._beacons(stk, store) if stk.beacon_interval > 0 else None
        beacons = self.beacons
        self.witness = self._witness(stk, store, beacons) if beacons else None
        self.elector = Elector(
            store, clock, identity(stk), self.timing, events=pool_event_sink(stk), policy=self.policy,
            on_elected=self._elected, on_demoted=self._demoted, refusals=self.refusals,
            evidence=beacons.evidence if beacons else None, serving=beacons,
            heard_at=beacons.heard_at if beacons else None,
            renewal_heard=beacons.renewal_heard if beacons else None, on_fence=self._fence,
            witness=self.witness, winner_heard=beacons.winner_heard if beacons else None,
        )  # fmt: skip
        self._seed_memory()
        # Stations bound to their credentials: folded here, published for the relay (stations.json).
        self.bindings = PoolBindings(self.local, pool_event_sink(stk), self.refusals, clock)
        self.bindings.seed(stk.kmsn)
        # One election cycle at a time: the Celery tasks and the beacons' kicks share it.
        self.lock = threading.RLock()
        self._last_done: dict[str, float] = {}
        if self.beacons is not None:
            self.beacons.start()
        if self.witness is not None:
            self.witness.start()
        self._start_duties(stk)
        self.health.start()

    def _beacons(self, stk: Config, store: LeaseStore) -> BeaconLink:
        """The beacons (`BeaconLink`) beside the elector: its evidence, acks, kicks and nudges."""
        clock = self.clock
        bconf = BeaconConfig(stk.kmsn, stk.node, stk.node_ip, stk.relay_port, stk.pool_key,
                             stk.beacon_interval, stk.beacon_port, stk.beacon_peers,
                             store=store.describe(), ttl=stk.lease_ttl,
                             seq_file=str(self.local.dir / SEQS_NAME))  # fmt: skip
        self.split = SplitAlarm(stk.node, bconf.store, 2 * max(stk.lease_ttl, stk.heartbeat_ttl))
        folded = self.tail.last_seq.get  # node -> its highest event seq this agent has: nudges' replays
        return BeaconLink(bconf, lambda: self.elector, self._kicked, clock.monotonic, nudged=self._nudged,
                          folded=lambda node: folded(node, 0), gate_clock=clock.boottime,
                          members=self.pool_size, on_acked=self._acked,
                          republish=self._republish)  # fmt: skip

    def _witness(self, stk: Config, store: LeaseStore, beacons: BeaconLink) -> WitnessKeeper:
        """The share's witness (issue 38): the third vote of a pool of two, kept beside the book."""
        service = beacons.service
        return WitnessKeeper(
            store, stk.kmsn, stk.node, service, service.book.witness_timing,
            lambda: self.elector.memory.leader_epoch, self._acked, beacons.react, stk.lease_renew,
            self.clock.boottime,
        )  # fmt: skip

    def _start_duties(self, stk: Config) -> None:
        """The leader's duty plans (`executors`) and the ownership watch of its addresses."""
        clock = self.clock
        config = stk.actions  # a bad key is stkrelay.E014–E017: the agent refused to start
        executors = build_executors(config, stk.data_dir)
        gate = ActionFence(epoch_from_state(self.local, clock.monotonic))
        # The addresses the executors take for this leader, for the relay to listen on (addresses.json).
        self._released: set[int] = set()  # epochs whose demotion plan this process ran
        self.duties = leader_duties(stk.node, config, executors, gate, pool_event_sink(stk),
                                    notify=AddressBook(stk.data_dir))  # fmt: skip
        self._duty: threading.Thread | None = None  # the last duty plan's thread (repairs wait for it)
        self.ownership = OwnershipWatch(
            stk.node, config, executors, gate, pool_event_sink(stk), stk.ownership_check, stk.ownership_hold,
            self._standing, lambda: (self._member_docs or ({}, False))[0], clock.monotonic, self.refusals,
            stk.ownership_repair,
        ).start()  # fmt: skip

    def _gate_changed(self, signal: str) -> None:
        """On a thread of its own: the health thread keeps looking even while a cycle
        waits on a slow share."""

        def cycle() -> None:
            from django.db import connection

            try:
                with self.lock:
                    self._tick(renewing=False, wait=False, news=True)
            except Exception:
                log.exception("the cycle after the gate's change failed")
            finally:
                connection.close()

        threading.Thread(target=cycle, name="gate-cycle", daemon=True).start()

    def _seed_memory(self) -> None:
        """What this agent knew before it restarted: the epochs in its own state
        and history, and the last lease it saw. A restarted agent must neither
        take an epoch again nor believe an older copy of a lease."""
        from django.db.models import Max

        from elections.models import ElectionEvent

        before = self.local.leadership()
        rows = ElectionEvent.objects.filter(kmsn=self.stk.kmsn).exclude(kind__in=NOT_THIS_POOLS_EPOCH)
        in_history = rows.aggregate(m=Max("epoch"))["m"] or 0
        self.elector.know(max(before.max_epoch, in_history, before.epoch or 0), before.seen, before.writers)

    def tick(self, renewing: bool) -> Decision:
        """One cycle; if the lease we wait on expires before the next poll, look
        again right then (so failover does not wait a whole poll interval)."""
        with self.lock:
            decision = self._tick(renewing, wait=False)
        if decision.wake_in is not None and decision.wake_in < self.timing.poll:
            time.sleep(max(decision.wake_in, 0.0) + 0.01)  # outside the lock: a kick may run meanwhile
            with self.lock:
                decision = self.elector.cycle(renewing=False)
                self.publish(decision)
        return decision

    def _tick(self, renewing: bool, wait: bool = True, news: bool = False) -> Decision:
        quiet = self._quiet() and self.elector.last is not None
        if not quiet or self._events_due(renewing):
            news = self.ingest() or news
        # A renewal is never skipped, nor a cycle after new events (a command may concern this node),
        # nor a leader's poll unless it is quiet: without beacons that poll is the look that rewrites
        # a damaged lease before its next renewal (a lease damaged again and again must not outlast
        # the followers' TTL for want of a look). A quiet leader hears every member's beacon: a new
        # holder's would reach it before a read could, its renewals (every LEASE_RENEW, well inside
        # the TTL) still look and rewrite, and commands and gate changes come as news (issue 22).
        # Nor a tick after a transition (a step-down, a lost claim): only a settled decision stands.
        skip = skips_cycle(quiet, self.elector.last, news, renewing, self.elector.is_leader)
        if skip:  # no read: the renewal it remembers (and publishes as `seen`) kept up with the beacons
            self.elector.heard()
        decision = self.elector.last if skip else self.elector.cycle(renewing=renewing)
        assert decision is not None
        leading = self.elector.memory.leader_epoch  # not None: `Elector.is_leader`
        if leading is not None:  # what its relay saw: bindings to record, impostors to report
            self.bindings.learn(self.local.relay(), leading, self.command_clock)
        fields = {"priority": self.stk.priority, "drain": bool(self.commands.drained.get(self.stk.node)),
                  "health": self.health.status(), "paused": self.commands.paused,
                  "web_tls": self.web_tls}  # fmt: skip
        gate = self.health.gate()
        if gate is not None:  # "master" or why not; absent: this member has no gate (ADR 0011)
            fields["gate"] = gate
        if self.ownership.enabled:  # where this member's addresses are (a change is written at once)
            fields["holds"] = self.ownership.reports()
        if (
            self.stk.entry and self.stk.entry_listen is not None
        ):  # the router forwards here (relay/server/entry)
            fields["entry"] = entry_shown(self.stk.entry_listen)
        if renewing or fields != self._beat_fields:  # a drain shows at once, not at the next renew
            # `hears`: whose beacons reach this member, so `relayctl doctor` can tell one-way paths.
            heard = {"hears": self.beacons.heard()} if self.beacons is not None else {}
            # `clock`: this machine's wall clock against the store's (core.skew): shown, never decided on.
            clock = {"clock": self._clock.to_doc()} if self._clock is not None else {}
            # `entry_sessions`: its remote clients now (entry.json), shown, never part of the change test.
            self.elector.heartbeat(**fields, **heard, **clock, **self._entry_sessions(fields))
            self._beat_fields = fields
            if self._due("clock", CLOCK_EVERY):
                self._measure_clock()
            self._say_own_record()
        self.publish(decision)
        # The view is written at every cycle (the panel judges the lease by it); while quiet,
        # the members' files are read again only every `quiet_survey_every`.
        self.view = self.survey(read_members=not quiet or news)
        if wait and not skip and decision.wake_in is not None and decision.wake_in < self.timing.poll:
            time.sleep(max(decision.wake_in, 0.0) + 0.01)
            decision = self.elector.cycle(renewing=False)
            self.publish(decision)
        return decision

    def keep(self) -> None:
        """On the way out: write what is kept only now and then (the beacons' replay memory)."""
        if self.beacons is not None:
            self.beacons.service.save_seqs(force=True)

    def _entry_sessions(self, fields: dict[str, Any]) -> dict[str, int]:
        if "entry" not in fields:
            return {}
        status = self.local.entry()
        return {"entry_sessions": status.sessions} if status.fresh(time.monotonic()) else {}

    def _measure_clock(self) -> None:
        try:
            self._clock = self.elector.store.measure_clock()
        except (StoreUnavailable, OSError) as exc:
            log.debug("clock not measured: %s", exc)

    # -- when the agent reads the share: quiet, the glance, events folded, kicks and nudges --------
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

    # -- the lead gained and lost: the duty plans, the handoff fence, leftovers let go -------------
    def _standing(self) -> RepairStanding:
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

    # -- what it publishes for local processes: leadership.json and pool.json ----------------------
    def pool_size(self) -> int:
        """The members the serving right counts (docs/design.md §15): this one, and every
        member whose heartbeat this agent saw change, or whose validly signed beacon it
        heard, within `MEMBER_HORIZON`. A beacon is a member alive as surely as a
        heartbeat, and comes within an interval: a leader elected as the pool starts
        counts its members (and arms the fast path) before its first survey reads them."""
        horizon = max(MEMBER_HORIZON_S, MEMBER_HORIZON_TTLS * self.stk.lease_ttl)
        others = {n for n, m in self.view.members.items() if m.age is not None and m.age <= horizon}
        if self.beacons is not None:
            others.update(self.beacons.service.heard(horizon))
        return len(others | {self.stk.node})

    def unheard(self) -> dict[str, str]:
        """The members this agent's beacons say not to hand the lease to, and why
        (`core.eligibility.unheard`); none while beacons are off here."""
        if self.beacons is None:
            return {}
        docs = (self._member_docs or ({}, False))[0]
        hears = {n: _hears(d) for n, d in docs.items()}
        service = self.beacons.service
        listening = self.clock.monotonic() - service.started
        return unheard(self.stk.node, service.heard_ages(), hears, self.stk.beacon_interval, listening)

    def _republish(self) -> None:
        """The holder's beacons went quiet, or came back (`BeaconService.quiet`): pool.json again
        now, the last survey with that flag changed (nothing read: the election lock is held for
        one local write), so the station door holds or releases its new connections within a
        look. A cycle under way writes it anyway, unless it wrote its view before the change."""
        beacons = self.beacons
        if beacons is None:
            return
        until = self.clock.monotonic() + REPUBLISH_WAIT
        while not self.lock.acquire(timeout=0.1):
            # A cycle holds it: its own view will say it, unless it wrote that view already.
            if self.view.beacons.get("quiet") == beacons.service.quiet:
                return
            if self.clock.monotonic() > until:
                log.warning("pool view not rewritten for a quiet leader: the election lock is held")
                return
        try:  # the last survey with only the flag changed: no read of anything, the lock held for a write
            if self.view.updated is None:  # no survey yet: its first one says it
                return
            view = replace(self.view, updated=self.clock.monotonic(),
                           beacons={**self.view.beacons, "quiet": beacons.service.quiet})  # fmt: skip
            self.local.write_pool(view)
            self.view = view
        finally:
            self.lock.release()

    def _acked(self) -> None:
        """A member acknowledged one of our leader beacons: publish the gate if it moved
        by `GATE_STEP` or more (from the beacon thread; never under the election lock,
        which a hung share may hold for seconds)."""
        el = self.elector
        valid = el.leader_valid_until if el.is_leader else None
        untold = self.beacons is not None and self.beacons.service.serving_untold(el.memory.leader_epoch)
        if valid is not None and (valid - self._gate_told >= GATE_STEP or untold):
            self.publish(el.last)

    def survey(self, read_members: bool = True) -> PoolView:
        """This agent's view of the pool, judged on its own clock: the lease and
        every member's eligibility with reasons. Written to DATA_DIR/pool.json
        for the panel and for command checks in other local processes. Without
        `read_members`, the members' heartbeats are those of the last reading."""
        now = self.clock.monotonic()
        stk = self.stk
        read = self.elector.last_read
        lease = None
        # Only a lease its memory took (`Elector.accepted`): a valid read it refused as older than
        # what it saw (a replayed copy, `lease_memory.outdated`) leaves the newest it took shown, and
        # its entry forwarding there, not to the replayed holder (issue 40).
        shown = self.elector.accepted if read is not None and read.status == "valid" else None
        if shown is not None and shown.record is not None:
            rec = shown.record
            lease = {"node": rec.node, "epoch": rec.epoch, "ip": rec.ip, "port": rec.port,
                     "renew_seq": rec.renew_seq, "ttl_s": rec.ttl_s, "released": rec.released,
                     "handoff_to": rec.handoff_to}  # fmt: skip
        said = self._said()
        docs, reachable = self.member_reads.read(read_members, said)
        self._member_docs = docs, reachable  # the ownership watch reads the members' `holds` from it
        beacons = self.beacons.service.snapshot() if self.beacons is not None else {}
        refusals = self.refusals.to_doc(now)
        if beacons:  # refused datagrams show beside refused share records
            refusals = merged(refusals, beacons.pop("refusals"))
            if isinstance(beacons.get("serving"), dict):  # early takeovers deferred for want of evidence
                beacons["serving"]["deferred"] = dict(self.elector.deferred)
                if self.witness is not None:  # the store's side: its last write or refresh, and why
                    beacons["serving"]["witness_store"] = self.witness.to_doc()
        members = {}
        gone = self.unheard()
        for node, doc in docs.items():
            seq = doc.get("seq")
            if node in said and isinstance(seq, int) and said[node][0] > seq:
                seq = said[node][0]  # its beacons say it wrote a newer heartbeat (the same record)
            self.fresh[node] = observe(self.fresh.get(node, Freshness()), seq, now)
            v = judge(node, doc, self.fresh[node], now, stk.heartbeat_ttl, stk.promotion_hold, gate_of(doc))
            if node in gone:  # its beacons stopped: never a successor (`unheard`), shown as why
                v = replace(v, eligible=False, reasons=(*v.reasons, gone[node]))
            epoch = doc.get("epoch")
            members[node] = MemberView(
                eligible=v.eligible, reasons=v.reasons, age=v.age, priority=v.priority, ip=doc.get("ip"),
                drain=bool(doc.get("drain")), health=doc.get("health"), version=doc.get("version"),
                epoch=epoch if isinstance(epoch, int) else None, web_tls=web_tls_of(doc),
                clock=reading_of(doc), entry=entry_of(doc), entry_sessions=entry_sessions_of(doc),
            )  # fmt: skip
        status = read.status if read is not None else "unreachable"
        split = (
            self.split.survey(beacons, docs if reachable else None, lease, status, now) if self.split else []
        )
        view = PoolView(
            kmsn=stk.kmsn, node=stk.node, updated=now, lease=lease, share_split=split,
            lease_status=read.status if read is not None else "unreachable",
            lease_detail=read.detail if read is not None else "",
            store_reachable=reachable and read is not None, members=members,
            decision=str(self.elector.last or ""), paused=self.commands.paused,
            lease_seen_at=self._lease_seen_at(), command_clock=self.command_clock,
            refusals=refusals, beacons=beacons, share_ops=SHARE_OPS.total,
            share_ops_by=SHARE_OPS.kinds(),
            store=store_details(self.elector.store), ownership=self.ownership.snapshot(),
        )  # fmt: skip
        self.local.write_pool(view)
        return view

    def _successor(self) -> tuple[int, str, int] | None:
        """(epoch, ip, port) of the member this node just handed its lease to, while no newer
        lease was seen: its address from its member record as last read."""
        handed, seen = self.elector.handed, self.elector.memory.seen_key
        if handed is None or (seen is not None and seen[1] >= handed[1]):
            return None
        member = self.view.members.get(handed[0])
        ip = member.ip if member is not None else None
        return (handed[1], ip, self.stk.relay_port) if isinstance(ip, str) and ip else None

    def _say_own_record(self) -> None:
        """Tell the beacons this member's record as just written (`core.beacons`: mseq, mdig)."""
        record = self.elector.store.own_record
        if self.beacons is not None and record is not None:
            seq = record.get("seq")
            self.beacons.service.member_record = (seq if isinstance(seq, int) else 0, member_digest(record))

    def _said(self) -> dict[str, tuple[int, str]]:
        """(mseq, mdig) of the members whose fresh beacons say what their record is."""
        if self.beacons is None:
            return {}
        return self.beacons.service.member_records(self.beacons.heard_window)

    def _lease_seen_at(self) -> float | None:
        """When the lease was last seen renewed, for the panel: by this agent's own
        read, or later by the holder's beacons (a quiet follower reads no renewal)."""
        seen, mem = self.elector.memory.seen_at, self.elector.memory
        if self.beacons is None or seen is None or mem.seen_key is None or mem.seen_released:
            return seen
        heard = self.beacons.service.renewed_at(mem.seen_key[0], mem.seen_key[1])
        return max(seen, heard) if heard is not None else seen

    @property
    def command_clock(self) -> int:
        """The highest Lamport clock folded: of commands and of station binds."""
        return max(self.commands.clock, self.bindings.book.clock)

    def publish(self, decision: Decision | None) -> None:
        """Write leadership.json from the elector's memory as it is now. Under its own
        lock, state composed and written together: whichever of the election thread
        and the beacons' acks writes last wrote the newest memory."""
        with self._publishing:
            el = self.elector
            epoch = el.memory.leader_epoch
            leads = el.is_leader and epoch != self._fenced  # a fenced epoch is never claimed again
            service = self.beacons.service if self.beacons is not None else None
            mode = service.serving_mode(epoch) if service is not None else None  # before the gate is read
            valid_boot = el.leader_valid_until_boot if leads else None
            valid = el.leader_valid_until if leads else None
            state = Leadership(
                node=el.me.node,
                pid=os.getpid(),
                leader=leads,
                epoch=epoch if leads else None,
                max_epoch=el.memory.max_epoch,
                valid_until=valid,
                updated=self.clock.monotonic(),
                decision=str(decision) if decision else "",
                seen=el.memory.seen_key,
                valid_until_boot=valid_boot,
                successor=None if leads else self._successor(),
                writers=el.memory.writers,
            )
            if self.local.stopping():  # the agent is stopping: it claims nothing
                state = state.disclaimed(state.decision)
            state = self.local.publish_leadership(state, self.restate_every)  # the state the file holds
            told = state.valid_until if state.leader else None
            self._gate_told = told if told is not None else float("-inf")
            if state.leader:
                self._told.set()
                if self.witness is not None:
                    self.witness.kick()  # a follower's keeper sleeps until its agent leads
            if service is not None and epoch is not None and mode == ACKED and state.leader:
                service.serving_told(epoch)  # the beacons may say ACKED now: the relay reads this gate
        self._let_go_of_leftovers()


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


def _hears(doc: dict[str, Any]) -> list[str] | None:
    """A heartbeat's `hears` (whose beacons reach that member), None if it says nothing."""
    hears = doc.get("hears")
    return [h for h in hears if isinstance(h, str)] if isinstance(hears, list) else None


def built() -> Agent | None:
    """The one `Agent` of this process if it was built (None before the first `agent()`)."""
    return _agent


def agent(config: Config) -> Agent:
    """The one `Agent` of this process, built from `config` at the first call."""
    global _agent
    if _agent is None:
        _agent = Agent(config)
    return _agent
