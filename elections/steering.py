"""The steering service: the one path of every operator command (drain,
undrain, promote, pause, resume, unbind, forget), from the panel, the API and `relayctl` alike.

`perform(actor, ...)` writes the intent to the audit trail (refusing the
command if that fails), checks the actor's permission and the typed
confirmation, submits, and writes the outcome; every row is published to the
pool, so every agent's audit page shows it. `submit()` checks the command
against this agent's view of the pool (`core.commands.check_command`) and writes it as
an event to this agent's own `events/<node>.jsonl` in that pool (its own pool,
or a watched `[pool:<KMSN>]`, signed with that pool's key), naming the actor, client
address, reason, the epoch the operator saw and the command's Lamport clock
(the order rule is in `core.commands`). The target reacts when it observes the
event; nothing relies on the operator's agent staying up. In its own pool the
agent then sends a signed nudge naming the event to the leader and the beacon
targets (`ports.beacons.nudge`), so that the leader reads it at once instead of at its
next look; the event on the share stays the authority.

`forget` (a member gone for good) is the one command this agent carries out
itself, after its event is written: it removes the member's record from the
store (`remove_member`); every agent that reads the event drops what its store
remembered of that member. Only in this agent's own pool, and only while the
store answers (a view of an unreachable pool cannot tell a dead member from
a silent one).

Outcomes (`CommandOutcome.code`) and their HTTP statuses are in `HTTP_STATUS`.
"""

from __future__ import annotations

import getpass
import logging
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from elections import audit
from elections.core.commands import ACCEPTED, EVENT_KINDS, KINDS, UNAVAILABLE, CommandResult, check_command
from elections.core.stations import BOUND
from elections.errors import StoreUnavailable
from elections.ports.beacons.nudge import nudge_pool
from elections.ports.local.localstate import LocalState
from elections.ports.store.stores import PoolPlace, open_store
from elections.runtime.projection import pool_event_sink, watched_event_sink
from stkhost.clock import SystemClock

log = logging.getLogger("stkrelay.steering")

MAX_EPOCH = (1 << 63) - 1  # epochs are stored as SQLite INTEGERs (the audit trail too)

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


@dataclass(frozen=True)
class Actor:
    """Who gives a command, and from where. `denial(kind)` says why this actor
    may not give `kind` (None: allowed); the web layer passes its permission check."""

    user: str
    client: str
    via: str  # panel | api | cli
    denial: Callable[[str], str | None] = lambda kind: None

    @classmethod
    def from_shell(cls) -> Actor:
        """The operator at this machine's shell: the OS user, client `cli@host`."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        return cls(user=user, client=f"cli@{socket.gethostname()}", via="cli")


@dataclass
class CommandOutcome:
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
        return self.code == ACCEPTED

    def as_dict(self) -> dict[str, Any]:
        return {
            "result": self.code,
            "message": self.message,
            "correlation": self.correlation,
            "epoch": self.epoch,
            "audit_recorded": self.recorded,
        }


def audit_trail() -> audit.AuditTrail:
    """This agent's audit trail, publishing to the pool's event log."""
    return audit.AuditTrail(pool_event_sink(settings.STK))


def perform(
    actor: Actor,
    kind: str,
    kmsn: str,
    target: str | None,
    reason: str = "",
    expected_epoch: int | None = None,
    force: bool = False,
    confirm: str | None = None,
) -> CommandOutcome:
    """Audit the intent, check, submit, audit the outcome. Never raises."""
    correlation = secrets.token_hex(8)
    trail = audit_trail()
    # An epoch the database cannot hold is refused below, and audited as none.
    bad_epoch = expected_epoch is not None and not 0 <= expected_epoch <= MAX_EPOCH
    base = dict(
        user=actor.user[:150],
        client=actor.client[:200],
        via=actor.via[:16],
        action=kind[:16],
        kmsn=kmsn[:64],
        target=(target or "")[:64],
        reason=reason,
        expected_epoch=None if bad_epoch else expected_epoch,
        force=force,
        correlation=correlation,
    )
    try:
        trail.append(phase=audit.AuditEntry.INTENT, **base)
    except audit.AuditUnavailable as exc:
        return CommandOutcome(
            "audit_unavailable",
            f"refused: the audit trail cannot be written ({exc})",
            correlation,
            recorded=False,
        )
    epoch = None
    why = actor.denial(kind) if kind in KINDS else f"unknown command {kind!r}"
    if why:
        code, message = ("forbidden" if kind in KINDS else "refused"), why
    elif bad_epoch:
        code, message = (
            "refused",
            f"expected epoch {str(expected_epoch)[:30]} is not between 0 and {MAX_EPOCH}",
        )
    elif kmsn != settings.STK.kmsn and watched_pool(kmsn) is None:
        code, message = "unknown_pool", f"this agent neither manages nor watches pool {kmsn!r}"
    elif confirm is not None and confirm.strip() != (target or ""):
        code, message = "refused", f"the typed name {confirm.strip()!r} does not match the target {target!r}"
    else:
        try:
            result = submit(
                kind, target, actor=actor.user, client=actor.client, reason=reason,
                expected_epoch=expected_epoch, force=force, correlation=correlation, kmsn=kmsn,
            )  # fmt: skip
            code, message, epoch = result.code, result.message, result.epoch
        except Exception as exc:
            log.exception("command %s %s failed", kind, target)
            code, message = "error", f"command failed: {exc}"
    outcome = CommandOutcome(code, message, correlation, epoch)
    try:
        trail.append(phase=audit.AuditEntry.OUTCOME, result=code, message=message, epoch=epoch, **base)
    except audit.AuditUnavailable:
        outcome.recorded = False
        outcome.message += " (warning: the outcome could not be written to the audit trail)"
    seq = trail.sink.last_seq if trail.sink is not None else None
    # Every agent's audit page shows an accepted command's outcome now, not at its next look. A refused
    # one (a viewer's 403, a stale epoch) changed nothing and is read at the next look: nudged, a scan of
    # refused calls flooded every agent's nudge budget and raised `too_many` alarms (issue 42).
    if outcome.recorded and outcome.ok and seq:
        nudge_pool(settings.STK, None, settings.STK.node, seq, "audit")
    return outcome


def next_command_clock(folded: int, kmsn: str | None = None) -> int:
    """The Lamport clock of a command issued here now in pool `kmsn` (default:
    this agent's): one more than any command of that pool this agent has folded
    (`folded`, from its worker's pool view) or recorded."""
    from elections.models import ElectionEvent

    recent = (
        ElectionEvent.objects.filter(kmsn=kmsn or settings.STK.kmsn, kind__in=(*EVENT_KINDS, BOUND))
        .order_by("-id")
        .values_list("detail", flat=True)
    )
    seen = [d.get("clock") for d in recent[:200] if isinstance(d, dict)]
    return max([folded, *(c for c in seen if isinstance(c, int) and not isinstance(c, bool))]) + 1


def watched_pool(kmsn: str) -> Any | None:
    """The `[pool:<KMSN>]` section of `kmsn` (stkconfig.parsed.WatchedPool), or None."""
    return next((w for w in settings.STK.watched if w.kmsn == kmsn), None)


def submit(
    kind: str, target: str | None, *, actor: str, client: str, reason: str = "",
    expected_epoch: int | None = None, force: bool = False, correlation: str | None = None,
    kmsn: str | None = None,
) -> CommandResult:  # fmt: skip
    """Check a command against this agent's view of pool `kmsn` (default: its
    own) and write it to that pool: in a watched pool, as this agent's own event
    line on that pool's share, signed with that pool's key (docs/design.md §11)."""
    correlation = correlation or secrets.token_hex(8)
    stk = settings.STK
    local = LocalState(stk.data_dir)
    watched = watched_pool(kmsn) if kmsn and kmsn != stk.kmsn else None
    if watched is not None:
        pool, sink = local.watched_pool(watched.kmsn), watched_event_sink(watched, stk.data_dir)
        if pool.exists and watched.node in pool.members:
            return CommandResult(
                UNAVAILABLE, f"{watched.node} is a member of pool {watched.kmsn}: its event file is that "
                f"member's; set NODE in [pool:{watched.kmsn}] to this agent's own name there", correlation,
            )  # fmt: skip
    else:
        pool, sink = local.pool(), pool_event_sink(stk)
    if not pool.exists:
        return CommandResult(UNAVAILABLE, "this agent has no view of the pool yet", correlation)
    if watched is not None and not pool.store_reachable:
        return CommandResult(UNAVAILABLE, f"the share of pool {watched.kmsn} is unreachable", correlation)
    if kind == "forget" and (watched is not None or not pool.store_reachable):
        why = ("forget a member from one of its own pool's agents" if watched is not None else
               "the pool's store is unreachable: a silent member cannot be told from a gone one")  # fmt: skip
        return CommandResult(UNAVAILABLE, why, correlation, pool.epoch)
    code, message = check_command(
        pool, kind, target, expected_epoch, force, stk.heartbeat_ttl + stk.promotion_hold
    )
    epoch = pool.epoch
    if code != ACCEPTED:
        return CommandResult(code, message, correlation, epoch)
    # A forget event carries the member's epoch claim: every agent folds it, so the epoch
    # its member record held is never handed out again once the record is gone.
    claim = max(int(epoch or 0), pool.members[target].epoch or 0) if kind == "forget" and target else 0
    try:
        seq = sink.record(
            f"{kind}_requested", claim or int(epoch or 0), reason or message, required=True, target=target,
            actor=actor, client=client, expected_epoch=expected_epoch, force=force, correlation=correlation,
            clock=next_command_clock(pool.command_clock, pool.kmsn or stk.kmsn),
        )  # fmt: skip
    except OSError as exc:
        return CommandResult(UNAVAILABLE, f"command not written: {exc}", correlation, epoch)
    if watched is None and seq is not None:  # on the share: now tell the leader, so it need not poll for it
        nudge_pool(stk, (pool.lease or {}).get("ip"), stk.node, seq, f"{kind}_requested")
    if kind == "forget" and target:
        return _remove_member(target, message, correlation, epoch)
    return CommandResult(ACCEPTED, message, correlation, epoch)


def _remove_member(target: str, message: str, correlation: str, epoch: int | None) -> CommandResult:
    """Remove a forgotten member's record from this agent's own pool's store."""
    stk = settings.STK
    try:
        removed = open_store(PoolPlace.of(stk), stk.node, SystemClock()).remove_member(target)
    except (StoreUnavailable, OSError, ValueError) as exc:
        return CommandResult(UNAVAILABLE, f"forget {target} recorded, but its record not removed: {exc}",
                             correlation, epoch)  # fmt: skip
    if not removed:
        message = f"forget {target} recorded; its member record was already gone"
    return CommandResult(ACCEPTED, message, correlation, epoch)
