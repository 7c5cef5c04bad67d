"""The `Executor` port, the fencing `ActionFence`, and `run_plan`.

An executor carries out verbs for one provider (`name`, `verbs`,
`apply(action, recheck) -> Outcome`). Every action passes the gate first: the
gate asks `current_epoch()` — the epoch this node holds right now, None if it
is not leader — and refuses a stale action, recording `action_fenced`; else it
runs the executor and records `action_applied` or `action_failed`.

What "stale" means (ADR 0011 fencing):
- an acquiring verb (`start_relay`, `assign_vip`, `assign_secondary_ip`) runs
  only while this node holds exactly the action's epoch;
- a releasing verb (`stop_relay`, `release_vip`, `release_secondary_ip`) runs
  when this node holds that epoch or none at all (the demotion plan runs after
  the lease is gone), and is refused once this node holds another epoch: a
  late release of epoch N must not undo what this node did on winning N+2.
Executors that write more than once (Azure: remove + add) call `recheck()`
before each write, so a lease lost between the steps stops the rest.

Errors never escape `ActionFence.run` or `run_plan`; each becomes an `Outcome`.

ElectionError (elections.errors)
└── ExecutorError        an action could not be carried out; str() is readable
    ├── CommandFailed    a command (ip, arping, oci, az) is missing, timed out
    │                    or exited non-zero
    ├── ProviderError    a provider API refused or could not be reached
    │   └── PreconditionFailed   HTTP 412: the resource changed since it was
    │                            read (Azure If-Match on the NIC's ETag)
    └── Fenced           the epoch went stale between the steps of an action
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from elections.core.actions import RELEASE_IP, RELEASE_VIP, STOP_RELAY, Action, ActionPlan
from elections.core.ownership import Sighting
from elections.errors import ElectionError
from elections.ports.local.localstate import LocalState
from elections.ports.store.stores import TransitionSink

log = logging.getLogger("stkrelay.actions")

APPLIED, FENCED, FAILED, PLANNED = "applied", "fenced", "failed", "planned"
RELEASING = frozenset({STOP_RELAY, RELEASE_VIP, RELEASE_IP})


class ExecutorError(ElectionError):
    pass


class CommandFailed(ExecutorError):
    pass


class ProviderError(ExecutorError):
    pass


class PreconditionFailed(ProviderError):
    pass


class Fenced(ExecutorError):
    def __init__(self, reason: str, held: int | None) -> None:
        self.held = held
        super().__init__(reason)


@dataclass(frozen=True)
class Outcome:
    action: Action
    status: str  # applied | fenced | failed | planned
    message: str
    held: int | None = None  # the epoch this node held at the gate
    detail: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def ok(self) -> bool:
        return self.status == APPLIED

    def line(self) -> str:
        return f"{self.status:8} {self.action.verb} {self.action.target}: {self.message}"


def applied(action: Action, message: str, **detail: Any) -> Outcome:
    return Outcome(action, APPLIED, message, detail=detail)


Recheck = Callable[[], None]


def no_recheck() -> None:
    return None


class Executor(Protocol):
    name: str
    verbs: frozenset[str]

    def apply(self, action: Action, recheck: Recheck = no_recheck) -> Outcome:
        """Carry the action out, or raise an `ExecutorError` with a readable
        message. Call `recheck()` before each provider write after the first."""
        ...


@runtime_checkable
class Observer(Protocol):
    """An executor that can say where its address really is (ADR 0011 phase 4):
    `observe(args)` takes an action's `args`, is read-only, and never raises."""

    name: str

    def observe(self, args: dict[str, Any]) -> Sighting: ...


Sink = TransitionSink  # where a duty plan records its outcomes (ports.store.stores)


# -- the gate ----------------------------------------------------------------------


class ActionFence:
    """Fencing: an action runs only if its epoch is current (see the module
    docstring for what "current" means for acquiring and releasing verbs)."""

    def __init__(self, current_epoch: Callable[[], int | None]) -> None:
        self.current_epoch = current_epoch

    def stale(self, action: Action) -> tuple[str | None, int | None]:
        """(why the action is stale, or None; the epoch held now). Never
        raises: an epoch source that fails fences (never act blind)."""
        try:
            held = self.current_epoch()
        except Exception as exc:
            return f"epoch unknown ({type(exc).__name__}: {exc})", None
        if held == action.epoch:
            return None, held
        if held is None:
            if action.verb in RELEASING:
                return None, held
            return f"stale epoch {action.epoch}: this node leads no epoch now", held
        return f"stale epoch {action.epoch}: this node holds epoch {held}", held

    def recheck_for(self, action: Action) -> Recheck:
        def recheck() -> None:
            why, held = self.stale(action)
            if why is not None:
                raise Fenced(why, held)

        return recheck

    def run(self, action: Action, executor: Executor | None, sink: Sink | None = None) -> Outcome:
        """Check the epoch, then apply; record the outcome. Never raises."""
        why, held = self.stale(action)
        if why is not None:
            outcome = Outcome(action, FENCED, why, held)
        elif executor is None:
            outcome = Outcome(action, FAILED, f"no executor {action.executor!r} for {action.verb}", held)
        else:
            outcome = _apply(executor, action, self.recheck_for(action), held)
        _record(sink, outcome)
        return outcome


def _apply(executor: Executor, action: Action, recheck: Recheck, held: int | None) -> Outcome:
    try:
        out = executor.apply(action, recheck)
    except Fenced as exc:
        return Outcome(action, FENCED, str(exc), exc.held)
    except ExecutorError as exc:
        return Outcome(action, FAILED, str(exc) or type(exc).__name__, held)
    except Exception as exc:
        log.exception("executor %s crashed on %s", executor.name, action.describe())
        return Outcome(action, FAILED, f"{type(exc).__name__}: {exc}", held)
    if not isinstance(out, Outcome):
        return Outcome(action, FAILED, f"executor {executor.name} returned {out!r}", held)
    return Outcome(out.action, out.status, out.message, held if out.held is None else out.held, out.detail)


def _record(sink: Sink | None, outcome: Outcome) -> None:
    a = outcome.action
    level = logging.INFO if outcome.ok else logging.WARNING
    log.log(level, "%s epoch %s: %s", outcome.status, a.epoch, outcome.line())
    if sink is None:
        return
    extra: dict[str, Any] = {"verb": a.verb, "target": a.target, "executor": a.executor}
    if outcome.status == FENCED:
        kind = "action_fenced"
        extra["held"] = outcome.held
    elif outcome.status == APPLIED:
        kind = "action_applied"
    else:
        kind = "action_failed"
        extra["error"] = outcome.message
    try:
        sink.record(kind, a.epoch, outcome.message, **extra)
    except Exception:  # the history is best effort here: the action already happened
        log.exception("could not record %s for %s", kind, a.describe())


def run_plan(
    plan: ActionPlan,
    executors: Iterable[Executor],
    gate: ActionFence,
    sink: Sink | None,
    dry_run: bool = False,
    notify: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every action of the plan, in order, each through the gate; one outcome
    per action. A dry run applies and records nothing. `notify` is told each
    outcome as soon as it is known (`executors.held`: the addresses the relay
    serves); its errors are logged, never raised."""
    by_name = {ex.name: ex for ex in executors}
    outcomes = []
    for action in plan.actions:
        ex = by_name.get(action.executor)
        if ex is not None and action.verb not in ex.verbs:
            ex = None
        if dry_run:
            note = "dry run: not applied" if ex else f"dry run: no executor {action.executor!r} configured"
            outcomes.append(Outcome(action, PLANNED, note))
            continue
        outcome = gate.run(action, ex, sink)
        outcomes.append(outcome)
        if notify is not None:
            try:
                notify(outcome)
            except Exception:
                log.exception("the outcome of %s was not noted", action.describe())
    return outcomes


# -- epoch sources -----------------------------------------------------------------


def epoch_from_state(local: LocalState, monotonic: Callable[[], float]) -> Callable[[], int | None]:
    """The production epoch source: this agent's leadership state
    (`leadership.json`, written by its worker after every cycle), judged on
    this machine's monotonic clock."""

    def current() -> int | None:
        return local.leadership().held_epoch(monotonic())

    return current


# -- commands ----------------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str = ""
    stderr: str = ""


Runner = Callable[[Sequence[str], float], Completed]


def run_command(argv: Sequence[str], timeout: float) -> Completed:
    """The real runner: no shell, output captured, bounded in time."""
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise CommandFailed(f"{argv[0]}: command not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(f"{' '.join(argv[:4])} …: timed out after {timeout:g} s") from exc
    return Completed(p.returncode, p.stdout, p.stderr)


def summarize(text: str, limit: int = 300) -> str:
    """A one-line reason from a command's error output: an embedded JSON error
    (`code` and `message`, as the OCI and Azure CLIs print) or the last line."""
    m = re.search(r"\{.*\}", text, re.S)
    if m:
        try:
            doc = json.loads(m.group(0))
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            doc = doc["error"]
        if isinstance(doc, dict) and doc.get("message"):
            code = doc.get("code") or doc.get("status") or ""
            return f"{code}: {doc['message']}"[:limit] if code else str(doc["message"])[:limit]
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "(no output)")[:limit]
