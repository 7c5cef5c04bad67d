"""Where this pool's addresses really are, looked at on a thread of its own
(ADR 0011 phase 4): `OwnershipWatch`.

Every `OWNERSHIP_CHECK` seconds it asks each address executor of this agent
(`VIP_*`, `AWS_*`, `OCI_*`, `AZURE_*`) to `observe()` — read-only, bounded by
the executors' own timeouts, never on the renewal path — and keeps:

- `reports()`: what this agent sees of itself, for its heartbeat (`holds`);
- `snapshot()`: the ownership map (`core.ownership`) of its sightings and the
  members' heartbeat reports, with the repairs it made, for `pool.json` (the
  panel, the API, `/metrics`);
- the repairs of `core.repair`, each the very action of this agent's election
  (or demotion) plan for that address, stamped with the epoch and run through
  the executors' fencing gate, recorded in the pool's history as
  `action_applied` / `action_failed` / `action_fenced` with `repair` (the
  verdict it put right) — unless failover is paused or `OWNERSHIP_REPAIR = 0`.

A member's `holds` that is malformed is refused whole and counted with the
share's other refusals (`bad_field`): that member's reports are no evidence.
`doctor_map()` is the same look made once, for `relayctl doctor`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any

from elections.core.action_config import ActionConfig
from elections.core.actions import ActionPlan, demotion_plan, plan_for
from elections.core.evidence import Refusals
from elections.core.ownership import (
    ADDRESS_EXECUTORS,
    BadReport,
    Entry,
    HoldClaim,
    Sighting,
    ownership_map,
    reports_of,
)
from elections.core.repair import ACQUIRE, Repair, RepairStanding, repairs
from elections.core.untrusted import BAD_FIELD
from elections.executors import ActionFence, Executor, Observer, Outcome, Sink, run_plan
from elections.ports.local.pool_view import PoolView

log = logging.getLogger("stkrelay.ownership")

KEEP_REPAIRS = 8  # the latest repairs shown with the map
STEADY_TRIES = 3  # looks made at once while this agent's standing changes under them


def targets(config: ActionConfig, executors: list[Executor]) -> list[tuple[Observer, dict[str, Any]]]:
    """(executor, its arguments) for every address this agent's config moves."""
    by_name = {ex.name: ex for ex in executors}
    out: list[tuple[Observer, dict[str, Any]]] = []
    for name in ADDRESS_EXECUTORS:
        part = getattr(config, name)
        ex = by_name.get(name)
        if part is not None and isinstance(ex, Observer):
            out.append((ex, asdict(part)))
    return out


def look(found: list[tuple[Observer, dict[str, Any]]]) -> list[Sighting]:
    """Every target observed once (an executor that raises is a failed sighting)."""
    out = []
    for ex, args in found:
        try:
            out.append(ex.observe(args))
        except Exception as exc:  # observe() does not raise; a bug must not stop the watch
            log.exception("%s observe crashed", ex.name)
            address = args.get("address") or args.get("private_ip") or "?"
            out.append(Sighting(ex.name, str(address), error=f"{type(exc).__name__}: {exc}"))
    return out


def member_reports(
    docs: Mapping[str, dict[str, Any]], refuse: Callable[[str, str], None]
) -> dict[str, list[HoldClaim]]:
    """The members' `holds`; a malformed one is refused whole (`refuse(node, why)`)."""
    out = {}
    for node, doc in docs.items():
        try:
            out[node] = reports_of(node, doc)
        except BadReport as exc:
            refuse(node, str(exc))
    return out


def expected_owner(me: RepairStanding) -> tuple[str | None, int | None]:
    """Who should hold the addresses: this agent while it leads, else the live lease's holder."""
    if me.held_epoch is not None:
        return me.node, me.held_epoch
    return me.leader, me.lease_epoch if me.leader is not None else None


class TaggedSink:
    """A `Sink` that marks every record as a repair (`repair`: the verdict put right)."""

    def __init__(self, sink: Sink | None, repair: str) -> None:
        self.sink, self.repair = sink, repair

    def record(self, kind: str, epoch: int, reason: str, **extra: Any) -> None:
        if self.sink is not None:
            self.sink.record(kind, epoch, reason, repair=self.repair, **extra)


class OwnershipWatch:
    def __init__(
        self,
        node: str,
        config: ActionConfig,
        executors: list[Executor],
        gate: ActionFence,
        sink: Sink | None,
        interval: float,
        hold: float,
        standing: Callable[[], RepairStanding],
        member_docs: Callable[[], Mapping[str, dict[str, Any]]],
        monotonic: Callable[[], float] = time.monotonic,
        refusals: Refusals | None = None,
        repair: bool = True,
    ) -> None:
        self.node, self.config, self.gate, self.sink = node, config, gate, sink
        self.executors = executors
        self.found = targets(config, executors)
        self.interval, self.hold, self.repair = interval, hold, repair
        self.standing, self.member_docs, self.monotonic = standing, member_docs, monotonic
        self.refusals = refusals
        self._mine: list[Sighting] = []
        self._entries: list[Entry] = []
        self._at: float | None = None
        self._last_repair: dict[tuple[str, str], float] = {}
        self._repairs: list[dict[str, Any]] = []
        self._said: dict[tuple[str, str], str] = {}  # the verdict last logged, per address
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.interval > 0 and bool(self.found)

    def reports(self) -> list[dict[str, Any]]:
        """This agent's latest sightings of itself, as its heartbeat carries them."""
        return [s.report() for s in self._mine]

    def snapshot(self) -> dict[str, Any]:
        """The map for `pool.json` ({} while off or before the first look)."""
        if self._at is None:
            return {}
        return {"at": self._at, "every": self.interval, "entries": [e.to_doc() for e in self._entries],
                "repairs": list(self._repairs)}  # fmt: skip

    def run_once(self) -> list[Outcome]:
        """One look, the map, and the repairs it calls for; never raises.

        A look takes time (an `ip addr`, a provider's API): this agent may be elected, and its
        election plan take the address, while it runs. A sighting from before that change
        judged by the standing after it is a `missing` address the plan has just put in place,
        and a repair of it (issue 41: with the first cycle as the worker is ready, the first
        look and the election came together). So the standing is read before and after the
        look; a look that straddles a change is made again, and at most `STEADY_TRIES` times:
        the last one is mapped, but nothing is repaired on it."""
        for _try in range(STEADY_TRIES):
            before = self.standing()
            mine = look(self.found)
            me = self.standing()
            if me == before:
                break
        steady = me == before
        if not self.repair or not steady:
            me = replace(me, paused=True)
        expected, epoch = expected_owner(me)
        reports = member_reports(self.member_docs(), self._refuse)
        entries = ownership_map(self.node, expected, epoch, mine, reports)
        self._mine, self._entries, self._at = mine, entries, self.monotonic()
        for e in entries:  # logged when the verdict changes, not at every look
            if self._said.get(e.key) != e.verdict:
                log.log(logging.INFO if e.ok else logging.WARNING, "address %s (%s) %s", e.address,
                        e.executor, e.describe())  # fmt: skip
                self._said[e.key] = e.verdict
        outcomes = []
        for r in repairs(entries, mine, me, self._last_repair, self._at, self.hold):
            outcomes.append(self._put_right(r))
        return outcomes

    def _put_right(self, r: Repair) -> Outcome:
        self._last_repair[r.key] = self.monotonic()
        plan = plan_for(r.epoch, self.node, self.config) if r.verb == ACQUIRE else demotion_plan(
            r.epoch, self.node, self.config)  # fmt: skip
        [action] = [a for a in plan.actions if a.executor == r.executor]
        why = "it should be on this leader" if r.verb == ACQUIRE else "the leader holds it too"
        action = replace(action, description=f"Put right ({r.cause}, {why}): {action.description}")
        by_name = {ex.name: ex for ex in self.executors}
        one = ActionPlan(r.epoch, self.node, (action,), plan.kind)
        [outcome] = run_plan(one, [by_name[r.executor]], self.gate, TaggedSink(self.sink, r.cause))
        log.warning("put right %s %s (%s): %s", r.verb, r.address, r.cause, outcome.line())
        self._repairs = [{"executor": r.executor, "address": r.address, "verb": action.verb, "cause": r.cause,
                          "epoch": r.epoch, "status": outcome.status, "message": outcome.message,
                          "at": self._last_repair[r.key]}, *self._repairs][:KEEP_REPAIRS]  # fmt: skip
        return outcome

    def _refuse(self, node: str, why: str) -> None:
        if self.refusals is None:
            return
        at = datetime.now(UTC).isoformat(timespec="seconds")
        if self.refusals.note(f"members/{node}.json", BAD_FIELD, f"holds: {why}", at, self.monotonic()):
            log.warning("refused the address reports of %s: %s", node, why)

    # -- the thread ---------------------------------------------------------------------
    def start(self) -> OwnershipWatch:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="ownership", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = self.monotonic()
            try:
                self.run_once()
            except Exception:  # never a dead thread
                log.exception("ownership look failed")
            finally:
                _close_db()
            if self._stop.wait(max(0.05, self.interval - (self.monotonic() - started))):
                return


def _close_db() -> None:
    """The repair's history rows were written on this thread's connection: let it go."""
    try:
        from django.db import connection

        connection.close()
    except Exception:  # no Django here (a bare test): nothing to close
        pass


def standing_of(
    node: str, view: PoolView, held_epoch: int | None, paused: bool, busy: bool, now: float
) -> RepairStanding:
    """This agent's `RepairStanding` from its pool view (`PoolView`: the lease as last read, judged
    live on this machine's clock from when its renewal was last seen)."""
    lease = view.lease or {}
    seen, ttl = view.lease_seen_at, lease.get("ttl_s")
    live = (bool(lease) and not lease.get("released") and seen is not None and isinstance(ttl, (int, float))
            and now - seen < ttl)  # fmt: skip
    leader = lease.get("node") if live and isinstance(lease.get("node"), str) else None
    epoch = lease.get("epoch") if leader is not None and isinstance(lease.get("epoch"), int) else None
    return RepairStanding(node, held_epoch, leader, epoch, paused, busy)


def doctor_map(
    node: str, config: ActionConfig, executors: list[Executor], leader: str | None, epoch: int | None,
    members: Mapping[str, dict[str, Any]],
) -> tuple[list[Entry], dict[str, str]]:  # fmt: skip
    """One look now, and the map with the members' reports: (entries, refused reports by node)."""
    refused: dict[str, str] = {}
    mine = look(targets(config, executors))
    reports = member_reports(members, refused.__setitem__)
    return ownership_map(node, leader, epoch if leader else None, mine, reports), refused
