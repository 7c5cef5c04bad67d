"""The agent's wiring: one `Agent` built from settings, driven by the Celery
tasks of the lease queue. Imported only by entry points (`elections.tasks`,
the management commands); nothing below imports it back.

The Celery worker (solo pool) owns the one `Elector` of the agent. Each tick it
ingests the pool's new events (history rows, command fold), runs one elector
cycle, writes this member's heartbeat, and publishes through `LocalState`:
`leadership.json` (whether this agent leads, the epoch, and the monotonic
instant until which it may act as leader) and `pool.json` (its survey of the
pool, judged on its own clock). Other local processes read those files;
monotonic time is shared by all processes of one machine, never compared
across machines.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from elections.core.actions import action_config
from elections.core.commands import PoolCommands
from elections.core.decide import Decision, Timing
from elections.core.eligibility import Freshness, judge, observe
from elections.core.evidence import Refusals
from elections.errors import StoreUnavailable
from elections.executors import Gate, build_executors, epoch_from_state, leader_duties
from elections.ports.clock import SystemClock
from elections.ports.localstate import Leadership, LocalState, MemberView, PoolView
from elections.ports.stores import PoolPlace, open_event_tail, open_store, store_details
from elections.runtime.elector import Elector
from elections.runtime.health import HealthMonitor
from elections.runtime.lease_writes import Identity
from elections.runtime.policy import PoolPolicy
from elections.runtime.projection import Projector, pool_event_sink

log = logging.getLogger("stkrelay.agent")

_agent: Agent | None = None


def identity() -> Identity:
    from django.conf import settings

    stk = settings.STK
    return Identity(
        node=stk.node,
        kmsn=stk.kmsn,
        station=stk.station,
        ip=stk.node_ip,
        port=stk.relay_port,
        pid=int(os.environ.get("STK_AGENT_PID") or os.getpid()),
    )


class Agent:
    def __init__(self) -> None:
        from django.conf import settings

        stk = settings.STK
        self.stk = stk
        self.fresh: dict[str, Freshness] = {}
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
        self._unprojected: list[list[dict[str, Any]]] = []
        self.view = PoolView(kmsn=stk.kmsn, node=stk.node)
        self._leader_since: float | None = None
        self._beat_fields: dict[str, Any] = {}
        self.health = HealthMonitor.from_settings(stk.health_cmd, stk.health_url).start()
        self.policy = PoolPolicy(
            stk.node, stk.priority, self.commands, lambda: self.view, lambda: self._leader_since,
            self.local, clock.monotonic, health=self.health.status, relay_attests=stk.relay_attests,
        )  # fmt: skip
        self.elector = Elector(
            store, clock, identity(), self.timing, events=pool_event_sink(stk), policy=self.policy,
            on_elected=self._elected, on_demoted=self._demoted, refusals=self.refusals,
        )  # fmt: skip
        self._seed_memory()
        config, problems = action_config(stk.values)
        for problem in problems:
            log.error("leader action disabled: %s", problem)
        executors = build_executors(config, stk.data_dir)
        gate = Gate(epoch_from_state(self.local, clock.monotonic))
        self.duties = leader_duties(stk.node, config, executors, gate, pool_event_sink(stk))

    def _seed_memory(self) -> None:
        """What this agent knew before it restarted: the epochs in its own state
        and history, and the last lease it saw. A restarted agent must neither
        take an epoch again nor believe an older copy of a lease."""
        from django.db.models import Max

        from elections.models import ElectionEvent

        before = self.local.leadership()
        in_history = ElectionEvent.objects.aggregate(m=Max("epoch"))["m"] or 0
        self.elector.know(max(before.max_epoch, in_history, before.epoch or 0), before.seen)

    def _elected(self, epoch: int) -> None:
        self._leader_since = self.clock.monotonic()
        self.publish(self.elector.last)  # first: the executors' gate reads it
        self._run_duty(self.duties[0], epoch)

    def _demoted(self, epoch: int) -> None:
        self._leader_since = None
        self.publish(self.elector.last)
        self._run_duty(self.duties[1], epoch)

    def _run_duty(self, duty: Callable[[int], Any], epoch: int) -> None:
        """Run a leader duty plan beside the election loop: a slow cloud API must
        never delay a renewal. Every action is fenced on the epoch at its gate."""

        def run() -> None:
            from django.db import connection

            try:
                duty(epoch)
            finally:
                connection.close()

        threading.Thread(target=run, name=f"duty-{epoch}", daemon=True).start()

    def ingest(self) -> bool:
        """Fold the pool's new, verified events into the command state and hand
        them to the projector (the database inserts happen off this path). The
        tail reads a bounded amount per call. True if there was anything new."""
        while self._unprojected and self.projector.submit(self._unprojected[0], timeout=0):
            self._unprojected.pop(0)
        if self._unprojected:  # the database is behind: read nothing more until it catches up
            return False
        try:
            events = self.tail.new_events()
        except StoreUnavailable as exc:
            log.debug("event files not read: %s", exc)
            return False
        if events:
            self.commands.apply(events)
            self.elector.know(max(e["epoch"] if isinstance(e.get("epoch"), int) else 0 for e in events))
            if not self.projector.submit(events, timeout=0):
                log.warning("history projection is behind: %d events wait for the database", len(events))
                self._unprojected.append(events)
        return bool(events)

    def watch(self) -> Decision | None:
        """The cheap, frequent look (LEASE_WATCH): new pool events, or a lease
        that changed (a handoff, a release), trigger a full cycle at once, so a
        planned switchover does not wait for the next poll."""
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
        # back, seen by the watch) looks at once: it rewrites or steps down now.
        gone = self.elector.is_leader and read.status == "missing"
        if news or moved or gone:
            return self.tick(renewing=False)
        return None

    def tick(self, renewing: bool) -> Decision:
        """One cycle; if the lease we wait on expires before the next poll, look
        again right then (so failover does not wait a whole poll interval)."""
        self.ingest()
        decision = self.elector.cycle(renewing=renewing)
        fields = {"priority": self.stk.priority, "drain": bool(self.commands.drained.get(self.stk.node)),
                  "health": self.health.status(), "paused": self.commands.paused}  # fmt: skip
        if renewing or fields != self._beat_fields:  # a drain shows at once, not at the next renew
            self.elector.heartbeat(**fields)
            self._beat_fields = fields
        self.publish(decision)
        self.view = self.survey()
        if decision.wake_in is not None and decision.wake_in < self.timing.poll:
            time.sleep(max(decision.wake_in, 0.0) + 0.01)
            decision = self.elector.cycle(renewing=False)
            self.publish(decision)
        return decision

    def survey(self) -> PoolView:
        """This agent's view of the pool, judged on its own clock: the lease and
        every member's eligibility with reasons. Written to DATA_DIR/pool.json
        for the panel and for command checks in other local processes."""
        now = self.clock.monotonic()
        stk = self.stk
        read = self.elector.last_read
        lease = None
        if read is not None and read.record is not None and read.status == "valid":
            rec = read.record
            lease = {"node": rec.node, "epoch": rec.epoch, "ip": rec.ip, "port": rec.port,
                     "renew_seq": rec.renew_seq, "ttl_s": rec.ttl_s, "released": rec.released,
                     "handoff_to": rec.handoff_to}  # fmt: skip
        try:
            docs = self.elector.store.read_members()  # type: ignore[attr-defined]
            reachable = True
        except StoreUnavailable:
            docs, reachable = {}, False
        members = {}
        for node, doc in docs.items():
            self.fresh[node] = observe(self.fresh.get(node, Freshness()), doc.get("seq"), now)
            v = judge(node, doc, self.fresh[node], now, stk.heartbeat_ttl, stk.promotion_hold)
            epoch = doc.get("epoch")
            members[node] = MemberView(
                eligible=v.eligible, reasons=v.reasons, age=v.age, priority=v.priority, ip=doc.get("ip"),
                drain=bool(doc.get("drain")), health=doc.get("health"), version=doc.get("version"),
                epoch=epoch if isinstance(epoch, int) else None,
            )  # fmt: skip
        view = PoolView(
            kmsn=stk.kmsn, node=stk.node, updated=now, lease=lease,
            lease_status=read.status if read is not None else "unreachable",
            lease_detail=read.detail if read is not None else "",
            store_reachable=reachable and read is not None, members=members,
            decision=str(self.elector.last or ""), paused=self.commands.paused,
            lease_seen_at=self.elector.memory.seen_at, command_clock=self.commands.clock,
            refusals=self.refusals.to_doc(now), store=store_details(self.elector.store),
        )  # fmt: skip
        self.local.write_pool(view)
        return view

    def publish(self, decision: Decision | None) -> None:
        el = self.elector
        state = Leadership(
            node=el.me.node,
            pid=os.getpid(),
            leader=el.is_leader,
            epoch=el.memory.leader_epoch if el.is_leader else None,
            max_epoch=el.memory.max_epoch,
            valid_until=el.leader_valid_until,
            updated=self.clock.monotonic(),
            decision=str(decision) if decision else "",
            seen=el.memory.seen_key,
        )
        if self.local.stopping():  # the agent is stopping: it claims nothing
            state = state.disclaimed(state.decision)
        self.local.write_leadership(state)


def agent() -> Agent:
    global _agent
    if _agent is None:
        _agent = Agent()
    return _agent
