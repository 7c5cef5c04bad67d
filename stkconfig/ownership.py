"""The ownership keys of `stk.ini` (ADR 0011 phase 4, `elections.runtime.ownership`): the
`ownership` section.

- `OWNERSHIP_CHECK` (seconds, default 2): how often this agent looks where its
  addresses (`VIP_*`, `AWS_*`, `OCI_*`, `AZURE_*`) really are, reports it in
  its heartbeat and computes the pool's ownership map; `0` = off (no look, no
  map, no repair). Else 0.5..300 (`stkrelay.E120`).
- `OWNERSHIP_HOLD` (seconds, default `LEASE_TTL`): after putting an address
  right, this agent leaves that address alone this long, so a fight over it
  costs one action per hold. At least `RENEW_DEADLINE` (`stkrelay.E121`): a
  deposed leader, which may act until its renew deadline, then makes one
  repair at most before it stops; at most 86400.
- `OWNERSHIP_REPAIR` (default 1): `0` shows the map and raises its alarms but
  never acts (`stkrelay.E122` for anything but 0/1/yes/no/true/false/on/off).

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value and leaves its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.raw import Raw

DEFAULTS = {"OWNERSHIP_CHECK": "2", "OWNERSHIP_HOLD": "", "OWNERSHIP_REPAIR": "1"}
MIN_CHECK, MAX_CHECK = 0.5, 300.0
MAX_HOLD = 86400.0
FLAGS = {**dict.fromkeys(("1", "yes", "true", "on"), True),
         **dict.fromkeys(("0", "no", "false", "off"), False)}  # fmt: skip


@dataclass(frozen=True)
class Ownership:
    ownership_check: float = 2.0  # seconds between looks at the addresses; 0 = off
    ownership_hold: float = 10.0  # default: LEASE_TTL
    ownership_repair: bool = True


class OwnershipNeeds(Protocol):
    """What the ownership keys read of the sections before them."""

    lease_ttl: float
    renew_deadline: float


def parse(raw: Raw, known: OwnershipNeeds, bad: Bad) -> Ownership:
    """The check interval, the hold and the repair; defaults where a value is bad."""
    values, lease_ttl, renew_deadline = raw.values, known.lease_ttl, known.renew_deadline
    check = 2.0
    text = values.get("OWNERSHIP_CHECK", "") or DEFAULTS["OWNERSHIP_CHECK"]
    try:
        check = float(text)
        if check != 0 and not MIN_CHECK <= check <= MAX_CHECK:
            bad("stkrelay.E120", "OWNERSHIP_CHECK", f"{check:g} is out of range",
                f"use 0 (off) or {MIN_CHECK:g}..{MAX_CHECK:g} seconds, e.g. 2")  # fmt: skip
            check = 2.0
    except ValueError:
        bad("stkrelay.E120", "OWNERSHIP_CHECK", f"{text!r} is not a number",
            "set OWNERSHIP_CHECK to seconds between looks, e.g. 2 (0 = off)")  # fmt: skip
    hold = lease_ttl
    text = values.get("OWNERSHIP_HOLD", "")
    if text:
        try:
            hold = float(text)
        except ValueError:
            bad("stkrelay.E121", "OWNERSHIP_HOLD", f"{text!r} is not a number",
                f"set OWNERSHIP_HOLD to seconds, at least RENEW_DEADLINE ({renew_deadline:g})")  # fmt: skip
            hold = lease_ttl
        else:
            if not renew_deadline <= hold <= MAX_HOLD:
                bad("stkrelay.E121", "OWNERSHIP_HOLD",
                    f"{hold:g} must be from RENEW_DEADLINE ({renew_deadline:g}) to {MAX_HOLD:g}",
                    "a deposed leader may act until its renew deadline: the hold must outlast it "
                    "(default: LEASE_TTL)")  # fmt: skip
                hold = max(lease_ttl, renew_deadline)
    text = (values.get("OWNERSHIP_REPAIR", "") or DEFAULTS["OWNERSHIP_REPAIR"]).lower()
    repair = FLAGS.get(text)
    if repair is None:
        bad("stkrelay.E122", "OWNERSHIP_REPAIR", f"{text!r} is not 0 or 1",
            "1: the leader puts drifted addresses right; 0: only show and alarm")  # fmt: skip
        repair = True
    return Ownership(check, hold, repair)
