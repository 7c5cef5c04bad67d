"""Operator commands (drain, undrain, promote, pause, resume) as pool events.

`submit()` is the one entry point for the panel, the API and `relayctl`: it
checks the command against what this agent sees of the pool, then writes it as
an event to this agent's own `events/<node>.jsonl` on the share, naming the
actor, client address, reason and the epoch the operator saw. The target reacts
when it observes the event; nothing relies on the operator's agent staying up.

Outcomes (`CommandResult.code`), stable for scripts and HTTP status mapping:
  accepted        written; the pool will act on it
  stale_epoch     the operator saw another epoch than the pool's (HTTP 409)
  unknown_member  no such member in the pool (404)
  refused         the command would be unsafe (e.g. draining the last
                  eligible member without force; promoting an ineligible one)
  unavailable     the share or this agent's view of the pool is not reachable (503)
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from .agent import event_sink, read_pool

KINDS = ("drain", "undrain", "promote", "pause", "resume")
NEEDS_TARGET = ("drain", "undrain", "promote")


@dataclass(frozen=True)
class CommandResult:
    code: str
    message: str
    correlation: str
    epoch: int | None = None

    @property
    def ok(self) -> bool:
        return self.code == "accepted"


def check(
    pool: dict[str, Any], kind: str, target: str | None, expected_epoch: int | None, force: bool
) -> tuple[str, str]:
    """Pure validation of a command against a pool view: (code, message)."""
    if kind not in KINDS:
        return "refused", f"unknown command {kind!r}"
    epoch = (pool.get("lease") or {}).get("epoch")
    if expected_epoch is not None and epoch is not None and expected_epoch != epoch:
        return "stale_epoch", f"the pool is at epoch {epoch}, the page showed {expected_epoch}: reload"
    members = pool.get("members") or {}
    if kind in NEEDS_TARGET:
        if not target:
            return "refused", f"{kind} needs a target member"
        if target not in members:
            return "unknown_member", f"no member {target!r} in the pool"
    eligible = {n for n, m in members.items() if m.get("eligible")}
    if kind == "drain" and not force and eligible <= {target}:
        return "refused", f"{target} is the last eligible member: draining it leaves no leader (use force)"
    if kind == "promote":
        if target not in eligible:
            why = "; ".join(members[target].get("reasons") or []) or "not eligible"
            return "refused", f"{target} cannot be promoted: {why}"
        if (pool.get("lease") or {}).get("node") == target:
            return "refused", f"{target} already leads epoch {epoch}"
    return "accepted", f"{kind} {target or 'pool'} accepted at epoch {epoch}"


def submit(
    kind: str, target: str | None, *, actor: str, client: str, reason: str = "",
    expected_epoch: int | None = None, force: bool = False, correlation: str | None = None,
) -> CommandResult:  # fmt: skip
    correlation = correlation or secrets.token_hex(8)
    pool = read_pool()
    if not pool:
        return CommandResult("unavailable", "this agent has no view of the pool yet", correlation)
    code, message = check(pool, kind, target, expected_epoch, force)
    epoch = (pool.get("lease") or {}).get("epoch")
    if code != "accepted":
        return CommandResult(code, message, correlation, epoch)
    try:
        event_sink().record(
            f"{kind}_requested", int(epoch or 0), reason or message, required=True, target=target,
            actor=actor, client=client, expected_epoch=expected_epoch, force=force, correlation=correlation,
        )  # fmt: skip
    except OSError as exc:
        return CommandResult("unavailable", f"command not written: {exc}", correlation, epoch)
    return CommandResult("accepted", message, correlation, epoch)
