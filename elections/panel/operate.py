"""Operator commands as the panel and the API issue them: audit, check, submit.

`perform()` is the one path for both: it writes the intent to the audit trail
(refusing the action if that fails), checks the user's permission, calls
`elections.commands.submit` (the only writer of command events), and writes
the outcome. `preview()` says what a command will do, with the ActionPlan dry
run from `elections.actions.plan_for` when that module exists. `progress()`
tells, from the pool view, whether an accepted command has taken effect.
"""

from __future__ import annotations

import importlib
import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

from .. import audit, commands
from ..auth import denial
from .state import SiteState

log = logging.getLogger("stkrelay.panel")

KINDS = ("drain", "undrain", "promote", "pause", "resume")
HTTP_STATUS = {
    "accepted": 202,
    "stale_epoch": 409,
    "unknown_member": 404,
    "unknown_pool": 404,
    "refused": 422,
    "forbidden": 403,
    "unavailable": 503,
    "audit_unavailable": 503,
    "error": 500,
}


@dataclass
class Outcome:
    code: str
    message: str
    correlation: str
    epoch: int | None = None
    recorded: bool = True  # the outcome row was written

    @property
    def status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    @property
    def ok(self) -> bool:
        return self.code == "accepted"

    def as_dict(self) -> dict[str, Any]:
        return {
            "result": self.code,
            "message": self.message,
            "correlation": self.correlation,
            "epoch": self.epoch,
            "audit_recorded": self.recorded,
        }


def perform(
    user: Any,
    client: str,
    via: str,
    kind: str,
    kmsn: str,
    target: str | None,
    reason: str = "",
    expected_epoch: int | None = None,
    force: bool = False,
    confirm: str | None = None,
) -> Outcome:
    """Audit the intent, check, submit, audit the outcome. Never raises."""
    correlation = secrets.token_hex(8)
    who = user.get_username()
    base = dict(
        user=who,
        client=client[:200],
        via=via,
        action=kind[:16],
        kmsn=kmsn[:64],
        target=(target or "")[:64],
        reason=reason,
        expected_epoch=expected_epoch,
        force=force,
        correlation=correlation,
    )
    try:
        audit.append(phase=audit.AuditEntry.INTENT, **base)
    except audit.AuditUnavailable as exc:
        return Outcome(
            "audit_unavailable",
            f"refused: the audit trail cannot be written ({exc})",
            correlation,
            recorded=False,
        )
    epoch = None
    why = denial(user, kind) if kind in KINDS else f"unknown command {kind!r}"
    if why:
        code, message = ("forbidden" if kind in KINDS else "refused"), why
    elif kmsn != settings.STK.kmsn:
        code, message = "unknown_pool", f"this agent does not manage pool {kmsn!r}"
    elif confirm is not None and confirm.strip() != (target or ""):
        code, message = "refused", f"the typed name {confirm.strip()!r} does not match the target {target!r}"
    else:
        try:
            result = commands.submit(
                kind,
                target,
                actor=who,
                client=client,
                reason=reason,
                expected_epoch=expected_epoch,
                force=force,
                correlation=correlation,
            )
            code, message, epoch = result.code, result.message, result.epoch
        except Exception as exc:
            log.exception("command %s %s failed", kind, target)
            code, message = "error", f"command failed: {exc}"
    outcome = Outcome(code, message, correlation, epoch)
    try:
        audit.append(phase=audit.AuditEntry.OUTCOME, result=code, message=message, epoch=epoch, **base)
    except audit.AuditUnavailable:
        outcome.recorded = False
        outcome.message += " (warning: the outcome could not be written to the audit trail)"
    return outcome


@dataclass
class Preview:
    summary: str
    steps: list[str] = field(default_factory=list)
    plan: str = ""  # elections.actions' rendered ActionPlan, when available
    plan_source: str = ""
    successor: str | None = None


def likely_successor(site: SiteState, excluding: str | None) -> str | None:
    """The eligible member the pool will most likely pick (highest priority, then name)."""
    candidates = [m for m in site.members if m.eligible and m.node != excluding]
    if not candidates:
        return None
    candidates.sort(key=lambda m: (-(m.priority if isinstance(m.priority, int) else 50), m.node))
    return candidates[0].node


def _action_config(actions: Any) -> Any:
    """This agent's executors, from its `[stk]` values (STK_* overrides applied)."""
    return actions.action_config(settings.STK.values)[0]


def _plan(epoch: int, node: str, old_leader: str | None) -> tuple[str, str]:
    """The dry run: the old leader's demotion plan and `node`'s plan for `epoch`."""
    try:
        actions = importlib.import_module("elections.actions")
    except ImportError:
        return "", "panel"
    try:
        config = _action_config(actions)
        parts = []
        if old_leader and hasattr(actions, "demotion_plan"):
            parts.append(actions.demotion_plan(epoch - 1, old_leader, config).render())
        parts.append(actions.plan_for(epoch, node, config).render())
        return "\n\n".join(parts), "elections.actions"
    except Exception as exc:
        log.warning("plan_for(%s, %s) failed: %s", epoch, node, exc)
        return "", "panel"


def preview(kind: str, site: SiteState, target: str | None) -> Preview:
    """What `kind` on `target` will do, as a list of steps and the dry-run plan."""
    epoch = site.epoch or 0
    leader = site.leader
    nxt = epoch + 1

    def move(to: str | None, why: str) -> Preview:
        to_name = to or "another eligible member"
        steps = [
            f"{leader or 'the leader'} {why} and stops its relay",
            f"{to_name} takes epoch {nxt}",
            f"the relay starts on {to_name}",
            "clients follow via leader_changed (and the lease) and reconnect",
        ]
        p = Preview("", steps, successor=to)
        if to:
            p.plan, p.plan_source = _plan(nxt, to, leader)
        return p

    if kind == "drain":
        if target == leader:
            p = move(likely_successor(site, target), f"hands epoch {epoch} off")
            p.summary = (
                f"Drain {target}, the current leader: it becomes ineligible and hands leadership over. "
                "Clients reconnect once."
            )
            p.steps.append(f"{target} stays drained (never elected) until undrained")
            return p
        return Preview(
            f"Drain {target}: it becomes ineligible to lead. Leadership stays with {leader or 'nobody'} "
            f"at epoch {epoch}; nothing moves now.",
            [f"{target} is marked drained", f"{target} will not be elected until undrained"],
        )
    if kind == "undrain":
        return Preview(
            f"Undrain {target}: it becomes eligible again once its heartbeat shows it; "
            "leadership does not move.",
            [f"{target}'s drain mark is cleared", "no change of leader"],
        )
    if kind == "promote":
        p = move(target, f"hands epoch {epoch} over to {target}")
        p.summary = f"Promote {target}: a planned switchover from {leader or 'nobody'} to {target}."
        return p
    if kind == "pause":
        return Preview(
            "Pause automatic failover: if the leader fails while paused, no member takes over until resumed.",
            [f"{leader or 'the leader'} keeps leading epoch {epoch}", "no automatic elections until resumed"],
        )
    return Preview(
        "Resume automatic failover: members contend again when the lease lapses.",
        ["automatic elections resume", "no change of leader now"],
    )


@dataclass
class Progress:
    done: bool
    failed: bool
    text: str


def progress(entry: audit.AuditEntry, site: SiteState, wall_now: datetime, timeout_s: float) -> Progress:
    """Has the accepted command in `entry` (its outcome row) taken effect yet?"""
    if entry.result != "accepted":
        return Progress(True, True, f"{entry.action} was not accepted: {entry.message}")
    waited = (wall_now - entry.at).total_seconds()
    from_epoch = entry.epoch or 0
    leader, epoch = site.leader, site.epoch or 0
    target = entry.target
    member = site.member(target) if target else None
    state = f"{leader} leads epoch {epoch}" if leader else "no leader at the moment"
    if entry.action == "promote":
        if leader == target and epoch > from_epoch:
            return Progress(True, False, f"{leader} leads epoch {epoch} (was epoch {from_epoch})")
        if leader and epoch > from_epoch:
            return Progress(True, True, f"{leader} leads epoch {epoch}, not {target}")
        what = f"waiting for {target} to take over from epoch {from_epoch}"
    elif entry.action == "drain":
        drained = member is None or member.drain
        if leader and leader != target and drained:
            moved = f" (was epoch {from_epoch})" if epoch > from_epoch else ""
            return Progress(True, False, f"{target} is drained; {leader} leads epoch {epoch}{moved}")
        if drained and leader is None and not site.eligible and site.lease is not None:
            return Progress(
                True, False, f"{target} is drained; no eligible member is left: the pool has no leader"
            )
        what = f"waiting for {target} to be drained" + (" and hand off" if leader == target else "")
    elif entry.action == "undrain":
        if member is not None and not member.drain:
            return Progress(True, False, f"{target} is no longer drained; {state}")
        what = f"waiting for {target}'s heartbeat to show the undrain"
    else:
        return Progress(
            True, False, f"{entry.action} recorded at epoch {from_epoch}; the pool reads it at its next poll"
        )
    if waited > timeout_s:
        return Progress(True, True, f"no effect seen within {timeout_s:.0f} s ({state}); check the site page")
    return Progress(False, False, f"{what} — {state} ({waited:.0f} s)")
