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
import time
from pathlib import Path
from typing import Any

from .clock import SystemClock
from .decide import Decision, Timing
from .elector import Elector, Identity
from .eventlog import JsonlEventSink
from .store import FileLeaseStore

log = logging.getLogger("stkrelay.agent")

STATE_NAME = "leadership.json"
_agent: Agent | None = None


class DbEventSink:
    """Writes each transition as an ElectionEvent row and to the pool's
    `events/<node>.jsonl` (the file is best effort: the share may be down)."""

    def __init__(self, kmsn: str, node: str, pool_log: JsonlEventSink | None) -> None:
        self.kmsn = kmsn
        self.node = node
        self.pool_log = pool_log

    def record(self, kind: str, epoch: int, reason: str, **extra: Any) -> None:
        from django.db.models import Max
        from django.utils import timezone

        from .models import ElectionEvent

        last = ElectionEvent.objects.filter(node=self.node).aggregate(m=Max("seq"))["m"] or 0
        ElectionEvent.objects.create(
            kmsn=self.kmsn,
            node=self.node,
            seq=last + 1,
            epoch=epoch,
            kind=kind,
            reason=reason,
            observed_at=timezone.now(),
        )
        if self.pool_log is not None:
            try:
                self.pool_log.record(kind, epoch, reason, **extra)
            except OSError as exc:
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
        clock = SystemClock()
        self.data_dir = Path(stk.data_dir)
        self.timing = Timing(stk.lease_ttl, stk.lease_renew, stk.lease_poll, stk.renew_deadline)
        store = FileLeaseStore(stk.lease_dir, stk.relay_token, stk.node, clock)
        self.elector = Elector(
            store,
            clock,
            identity(),
            self.timing,
            events=event_sink(),
            on_elected=self._publish_hook,
            on_demoted=self._publish_hook,
        )
        self.clock = clock

    def tick(self, renewing: bool) -> Decision:
        """One cycle; if the lease we wait on expires before the next poll, look
        again right then (so failover does not wait a whole poll interval)."""
        decision = self.elector.cycle(renewing=renewing)
        if renewing:
            self.elector.heartbeat()
        self.publish(decision)
        if decision.wake_in is not None and decision.wake_in < self.timing.poll:
            time.sleep(max(decision.wake_in, 0.0) + 0.01)
            decision = self.elector.cycle(renewing=False)
            self.publish(decision)
        return decision

    def _publish_hook(self, epoch: int) -> None:
        self.publish(self.elector.last)

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
        tmp = self.data_dir / f".{STATE_NAME}.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.data_dir / STATE_NAME)


def agent() -> Agent:
    global _agent
    if _agent is None:
        _agent = Agent()
    return _agent
