"""Operator commands (drain, undrain, promote, pause, resume, unbind, forget): the check a
command must pass, and the fold of the pool's command events into its state.

`forget` retires a member that is gone for good (ADR 0011's heartbeat hygiene):
refused while its heartbeat is fresh (`forget_refusal`) or while it holds the
lease; the steering service then removes its member record from the store. Its
events and this pool's history of it are kept; a member that comes back simply
heartbeats again and is a member again.

Pure: no I/O, no clock. The steering service (`elections.steering`) checks a
command against this agent's pool view with `check_command()` and writes it as an
event; every agent folds every command event it reads with `PoolCommands`.

Order without wall clocks (docs/design.md §5.4–§6). Command events come from the
event files of different members, whose `at` fields are other machines' wall
clocks: they are never compared. Each command carries `clock`, a Lamport
clock: one more than the highest `clock` of any command its issuing agent had
folded (or issued) before. So a command given after seeing another sorts
after it, on every agent. Commands are ordered by `(clock, node, seq)`:
concurrent commands (neither issuer had seen the other) are ordered by node
id, then by the issuer's own event sequence, which every agent computes alike.
Each register (one member's drain mark, the pool's pause) holds the value of
the last command in that order, whatever order the files were read in; a
command without `clock` (written before this rule) counts as clock 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from elections.core.untrusted import as_int

KINDS = ("drain", "undrain", "promote", "pause", "resume", "unbind", "forget")  # unbind: core.stations
NEEDS_TARGET = ("drain", "undrain", "promote", "forget")
EVENT_KINDS = tuple(f"{k}_requested" for k in KINDS)
MAX_PROMOTES = 16  # pending promotes remembered (newest by order)

# Outcomes of a command (`CommandResult.code`), stable for scripts and HTTP:
ACCEPTED = "accepted"  # written; the pool will act on it
STALE_EPOCH = "stale_epoch"  # the operator saw another epoch than the pool's (409)
UNKNOWN_MEMBER = "unknown_member"  # no such member in the pool (404)
# A station's name as unbind takes it: 1 to 64 characters, none a C0/C1 control or DEL
# (the OpenAPI document declares the same pattern for unbind's target).
STATION_PATTERN = "^[^\\x00-\\x1f\\x7f-\\x9f]{1,64}$"
STATION_NAME = re.compile(STATION_PATTERN)
REFUSED = "refused"  # unsafe (the last eligible member without force; an ineligible promote) (422)
UNAVAILABLE = "unavailable"  # the share or this agent's view of the pool is not reachable (503)

OrderKey = tuple[int, str, int]


class MemberLike(Protocol):
    @property
    def eligible(self) -> bool: ...

    @property
    def reasons(self) -> Sequence[str]: ...

    @property
    def age(self) -> float | None: ...  # its heartbeat's age on the judging agent's clock


class PoolLike(Protocol):
    @property
    def epoch(self) -> int | None: ...

    @property
    def lease(self) -> dict[str, Any] | None: ...

    @property
    def members(self) -> Mapping[str, MemberLike]: ...


@dataclass(frozen=True)
class CommandResult:
    code: str
    message: str
    correlation: str
    epoch: int | None = None

    @property
    def ok(self) -> bool:
        return self.code == ACCEPTED


def forget_refusal(node: str, member: MemberLike, lease: dict[str, Any] | None, stale_after: float) -> str:
    """Why `node` may not be forgotten now ("" if it may): it holds the lease, or its
    heartbeat is not stale yet (past `stale_after` = HEARTBEAT_TTL + PROMOTION_HOLD on
    this agent's clock: the same rule that makes it ineligible)."""
    lease = lease or {}
    if lease.get("node") == node and not lease.get("released"):
        return f"{node} holds the lease (epoch {lease.get('epoch')}): drain it so that another member leads"
    if member.age is None:
        return f"{node}'s heartbeat has not been timed yet: wait for this agent to judge it"
    if member.age <= stale_after:
        return (f"{node}'s heartbeat is fresh ({member.age:.1f} s old, stale after {stale_after:g} s): "
                "stop its agent first")  # fmt: skip
    return ""


def check_command(
    pool: PoolLike, kind: str, target: str | None, expected_epoch: int | None, force: bool,
    stale_after: float | None = None,
) -> tuple[str, str]:  # fmt: skip
    """Validation of a command against a pool view: (code, message). `stale_after`:
    when a heartbeat counts as stale here (HEARTBEAT_TTL + PROMOTION_HOLD); forget needs it."""
    if kind not in KINDS:
        return REFUSED, f"unknown command {kind!r}"
    epoch = pool.epoch
    if expected_epoch is not None and epoch is not None and expected_epoch != epoch:
        return STALE_EPOCH, (
            f"the pool is at epoch {epoch}, not at the {expected_epoch} expected: read it again, then retry"
        )
    if kind == "unbind":  # a station, member or not: resetting an unbound one changes nothing
        if not (target and STATION_NAME.fullmatch(target)):
            return REFUSED, "unbind needs a station name (at most 64 printable characters)"
        return ACCEPTED, f"unbind {target} accepted: the site token is accepted for it again"
    members = pool.members
    if kind in NEEDS_TARGET:
        if not target:
            return REFUSED, f"{kind} needs a target member"
        if target not in members:
            return UNKNOWN_MEMBER, f"no member {target!r} in the pool"
    if kind == "forget":
        why = "this agent does not know when a heartbeat is stale" if stale_after is None else ""
        why = why or forget_refusal(str(target), members[str(target)], pool.lease, stale_after or 0.0)
        if why:
            return REFUSED, f"{target} cannot be forgotten: {why}"
        return ACCEPTED, f"forget {target} accepted: its member record is removed, its history kept"
    eligible = {n for n, m in members.items() if m.eligible}
    if kind == "drain" and not force and eligible <= {target}:
        return REFUSED, f"{target} is the last eligible member: draining it leaves no leader (use force)"
    if kind == "promote":
        if target not in eligible:
            why = "; ".join(members[str(target)].reasons) or "not eligible"
            return REFUSED, f"{target} cannot be promoted: {why}"
        if (pool.lease or {}).get("node") == target:
            return REFUSED, f"{target} already leads epoch {epoch}"
    return ACCEPTED, f"{kind} {target or 'pool'} accepted at epoch {epoch}"


def order_key(event: dict[str, Any]) -> OrderKey:
    """Where a command event stands in the pool's order (see the module docstring)."""
    return (as_int(event.get("clock")), str(event.get("node") or ""), as_int(event.get("seq")))


@dataclass
class PoolCommands:
    """The pool's command state: last-writer-wins registers in command order."""

    drained: dict[str, bool] = field(default_factory=dict)
    paused: bool = False
    promotes: list[dict[str, Any]] = field(default_factory=list)  # pending, in order, newest last
    clock: int = 0  # the highest command clock folded: the next command issued here takes clock + 1
    _drain_at: dict[str, OrderKey] = field(default_factory=dict)
    _pause_at: OrderKey | None = None

    def apply(self, events: list[dict[str, Any]]) -> None:
        """Fold command events (others are ignored), in any order, any batching;
        an event folded again changes nothing."""
        for e in events:
            kind, target = e.get("kind"), e.get("target")
            if kind not in EVENT_KINDS:
                continue
            key = order_key(e)
            self.clock = max(self.clock, key[0])
            if kind in ("drain_requested", "undrain_requested") and target:
                name = str(target)
                if name not in self._drain_at or key > self._drain_at[name]:
                    self._drain_at[name] = key
                    self.drained[name] = kind == "drain_requested"
            elif kind in ("pause_requested", "resume_requested"):
                if self._pause_at is None or key > self._pause_at:
                    self._pause_at = key
                    self.paused = kind == "pause_requested"
            elif kind == "promote_requested" and target:
                if any(order_key(p) == key for p in self.promotes):
                    continue  # read again (a replaced event file is re-read from the start)
                self.promotes.append(e)
                self.promotes.sort(key=order_key)
                del self.promotes[:-MAX_PROMOTES]

    def promote_at(self, epoch: int) -> str | None:
        """The target of the last promote (in command order) issued against `epoch`."""
        for e in reversed(self.promotes):
            if e.get("expected_epoch") in (None, epoch) and as_int(e.get("epoch")) == epoch:
                return str(e["target"])
        return None
