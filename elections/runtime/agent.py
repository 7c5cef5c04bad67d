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

`Agent` is the wiring; its concepts are mixins of their own modules:
`agent_looks` (quiet, the glance, events folded, kicks and nudges),
`agent_roles` (elected/demoted, the handoff fence, the duty plans) and
`agent_publish` (leadership.json and pool.json).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from elections.core.action_config import action_config
from elections.core.commands import PoolCommands
from elections.core.decide import Decision, Timing
from elections.core.eligibility import Freshness
from elections.core.evidence import Refusals
from elections.core.skew import ClockReading
from elections.errors import StoreUnavailable
from elections.executors import AddressBook, Gate, build_executors, epoch_from_state, leader_duties
from elections.ports.beacon_config import BeaconConfig
from elections.ports.beacon_seqs import SEQS_NAME
from elections.ports.clock import SystemClock
from elections.ports.gate import gate_for
from elections.ports.localstate import LocalState
from elections.ports.pool_view import PoolView, entry_shown
from elections.ports.store import LeaseStore
from elections.ports.stores import PoolPlace, open_event_tail, open_store
from elections.ports.webcert import served_fingerprint
from elections.runtime import notify_feed
from elections.runtime.agent_looks import NOT_THIS_POOLS_EPOCH, Looks, skips_cycle
from elections.runtime.agent_publish import Publishing
from elections.runtime.agent_roles import Roles
from elections.runtime.beacon_link import BeaconLink
from elections.runtime.bindings import PoolBindings
from elections.runtime.elector import Elector
from elections.runtime.health import HealthMonitor
from elections.runtime.lease_writes import identity
from elections.runtime.member_reads import MemberReads
from elections.runtime.ownership import OwnershipWatch
from elections.runtime.policy import PoolPolicy
from elections.runtime.projection import Projector, pool_event_sink
from elections.runtime.share_split import SplitAlarm
from elections.runtime.watch import Watchers
from elections.runtime.witness_keeper import WitnessKeeper
from stkconfig.model import Config

log = logging.getLogger("stkrelay.agent")

_agent: Agent | None = None
CLOCK_EVERY = 30.0  # seconds between readings of this machine's clock against the store's (one operation)


class Agent(Looks, Roles, Publishing):
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
            witness=self.witness,
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
        config, problems = action_config(stk.values)
        for problem in problems:
            log.error("leader action disabled: %s", problem)
        executors = build_executors(config, stk.data_dir)
        gate = Gate(epoch_from_state(self.local, clock.monotonic))
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
        self.elector.know(max(before.max_epoch, in_history, before.epoch or 0), before.seen)

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


def built() -> Agent | None:
    """The one `Agent` of this process if it was built (None before the first `agent()`)."""
    return _agent


def agent(config: Config) -> Agent:
    """The one `Agent` of this process, built from `config` at the first call."""
    global _agent
    if _agent is None:
        _agent = Agent(config)
    return _agent
