"""This agent's elector, built from settings, and the leadership state file.

The Celery worker (solo pool) owns the one `Elector` of the agent. After every
cycle it writes `DATA_DIR/leadership.json` atomically: whether this agent
leads, the epoch, and the monotonic instant until which it may act as leader.
Other local processes (the supervisor, the relay) read that file; monotonic
time is shared by all processes of one machine, never compared across machines.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .actions import action_config
from .clock import SystemClock
from .decide import Decision, Timing
from .elector import Elector, Identity
from .eligibility import Freshness, judge, observe
from .errors import StoreUnavailable
from .eventlog import JsonlEventSink
from .executors import Gate, build_executors, epoch_from_state, leader_duties
from .policy import PoolPolicy
from .projection import EventTail, PoolCommands, ingest
from .store import FileLeaseStore

log = logging.getLogger("stkrelay.agent")

STATE_NAME = "leadership.json"
POOL_NAME = "pool.json"
STOPPING_NAME = "stopping"  # written by the supervisor before it releases the lease on shutdown
_agent: Agent | None = None


class DbEventSink:
    """Writes each transition as an ElectionEvent row and to the pool's
    `events/<node>.jsonl` (the file is best effort: the share may be down)."""

    def __init__(self, kmsn: str, node: str, pool_log: JsonlEventSink | None) -> None:
        self.kmsn = kmsn
        self.node = node
        self.pool_log = pool_log

    def record(self, kind: str, epoch: int, reason: str, required: bool = False, **extra: Any) -> None:
        """One history row, then the pool's line. With `required` (operator
        commands), a pool line that cannot be written raises OSError."""
        from django.db import IntegrityError, transaction
        from django.db.models import Max
        from django.utils import timezone

        from .models import ElectionEvent

        # Two local processes may record (the worker, and the supervisor's
        # release on shutdown): the database hands out the seq.
        for _ in range(20):
            seq = (ElectionEvent.objects.filter(node=self.node).aggregate(m=Max("seq"))["m"] or 0) + 1
            try:
                with transaction.atomic():
                    ElectionEvent.objects.create(
                        kmsn=self.kmsn, node=self.node, seq=seq, epoch=epoch, kind=kind, reason=reason,
                        observed_at=timezone.now(), detail=extra,
                    )  # fmt: skip
                break
            except IntegrityError:
                continue
        if self.pool_log is None:
            return
        try:
            self.pool_log.record(kind, epoch, reason, seq=seq, **extra)
        except OSError as exc:
            if required:
                raise
            log.warning("pool event log not written: %s", exc)


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


def event_sink() -> DbEventSink:
    """History rows in this agent's database, mirrored to the pool's events/<node>.jsonl."""
    from django.conf import settings

    stk = settings.STK
    path = Path(stk.lease_dir) / "events" / f"{stk.node}.jsonl"
    return DbEventSink(stk.kmsn, stk.node, JsonlEventSink(path, stk.node, SystemClock()))


def read_state(data_dir: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        doc = json.loads((Path(data_dir) / STATE_NAME).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def leads_now(state: dict[str, Any], now: float | None = None) -> bool:
    """True while the state says this agent leads and its deadline has not passed."""
    until = state.get("valid_until")
    if not state.get("leader") or not isinstance(until, (int, float)):
        return False
    return (time.monotonic() if now is None else now) < until


class Agent:
    def __init__(self) -> None:
        from django.conf import settings

        stk = settings.STK
        self.stk = stk
        self.fresh: dict[str, Freshness] = {}
        clock = SystemClock()
        self.data_dir = Path(stk.data_dir)
        self.timing = Timing(stk.lease_ttl, stk.lease_renew, stk.lease_poll, stk.renew_deadline)
        store = FileLeaseStore(stk.lease_dir, stk.relay_token, stk.node, clock)
        self.commands = PoolCommands()
        self.tail = EventTail(Path(stk.lease_dir) / "events")
        self.view: dict[str, Any] = {}
        self._leader_since: float | None = None
        self._beat_fields: dict[str, Any] = {}
        self.policy = PoolPolicy(
            stk.node, stk.priority, self.commands, lambda: self.view, lambda: self._leader_since,
            self.data_dir, clock.monotonic, health_cmd=stk.health_cmd, health_url=stk.health_url,
            relay_attests=stk.relay_attests,
        )  # fmt: skip
        self.elector = Elector(
            store, clock, identity(), self.timing, events=event_sink(), policy=self.policy,
            on_elected=self._elected, on_demoted=self._demoted,
        )  # fmt: skip
        self.clock = clock
        config, problems = action_config(stk.values)
        for problem in problems:
            log.error("leader action disabled: %s", problem)
        executors = build_executors(config, self.data_dir)
        self.duties = leader_duties(stk.node, config, executors, Gate(epoch_from_state(self.data_dir)),
                                    event_sink())  # fmt: skip

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
        """Project the pool's new events into this database and fold commands.
        True if there was anything new."""
        events = self.tail.new_events()
        if events:
            ingest(self.stk.kmsn, events)
            self.commands.apply(events)
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
        if news or moved:
            return self.tick(renewing=False)
        return None

    def tick(self, renewing: bool) -> Decision:
        """One cycle; if the lease we wait on expires before the next poll, look
        again right then (so failover does not wait a whole poll interval)."""
        self.ingest()
        decision = self.elector.cycle(renewing=renewing)
        fields = {"priority": self.stk.priority, "drain": bool(self.commands.drained.get(self.stk.node)),
                  "health": self.policy.health(), "paused": self.commands.paused}  # fmt: skip
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

    def survey(self) -> dict[str, Any]:
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
            members[node] = {"eligible": v.eligible, "reasons": list(v.reasons), "age": v.age,
                             "priority": v.priority, "ip": doc.get("ip"), "drain": bool(doc.get("drain")),
                             "health": doc.get("health"), "version": doc.get("version"),
                             "epoch": doc.get("epoch")}  # fmt: skip
        view = {"kmsn": stk.kmsn, "node": stk.node, "updated": now, "lease": lease,
                "lease_status": read.status if read is not None else "unreachable",
                "lease_detail": read.detail if read is not None else "",
                "store_reachable": reachable and read is not None, "members": members,
                "decision": str(self.elector.last or ""),
                "paused": self.commands.paused, "lease_seen_at": self.elector.memory.seen_at}  # fmt: skip
        _write_json(self.data_dir / POOL_NAME, view)
        return view

    def publish(self, decision: Decision | None) -> None:
        el = self.elector
        doc = {
            "node": el.me.node,
            "pid": os.getpid(),
            "leader": el.is_leader,
            "epoch": el.memory.leader_epoch if el.is_leader else None,
            "max_epoch": el.memory.max_epoch,
            "valid_until": el.leader_valid_until,
            "updated": self.clock.monotonic(),
            "decision": str(decision) if decision else "",
        }
        if (self.data_dir / STOPPING_NAME).exists():  # the agent is stopping: it claims nothing
            doc.update(leader=False, epoch=None, valid_until=None)
        _write_json(self.data_dir / STATE_NAME, doc)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    """Atomically, for readers in other local processes."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def disclaim(data_dir: str | os.PathLike[str], why: str) -> None:
    """Mark this agent's leadership state "not leader" (after a release on the
    way out), so no local reader trusts a claim whose worker is gone."""
    state = read_state(data_dir)
    if state.get("leader"):
        _write_json(Path(data_dir) / STATE_NAME, {**state, "leader": False, "epoch": None,
                                                  "valid_until": None, "decision": why})  # fmt: skip


def read_pool(data_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The pool view last written by this agent's worker ({} if none yet)."""
    if data_dir is None:
        from django.conf import settings

        data_dir = settings.STK.data_dir
    try:
        doc = json.loads((Path(data_dir) / POOL_NAME).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def agent() -> Agent:
    global _agent
    if _agent is None:
        _agent = Agent()
    return _agent
