"""The gate keys of `stk.ini`: the VRRP-master signal of ADR 0011's eligibility; the `gate` section.

- `GATE_CMD`: a command (split like a shell would, `shlex`, but run without one)
  whose exit status 0 means "this host is master"; its program must exist
  (`stkrelay.E104`).
- `GATE_FILE`: an absolute path to a file holding `MASTER`, `BACKUP` or
  `FAULT` (keepalived's `notify` script writes it); its folder must exist, the
  file itself need not yet (until it does the member is not master)
  (`stkrelay.E105`). Not both (`stkrelay.E106`).
- `GATE_TIMEOUT` (seconds, default 1): the gate's own deadline, at most
  `LEASE_RENEW`, so a heartbeat never carries a gate result older than one
  renewal plus a look (`stkrelay.E107`).
- `GATE_MAX_AGE` (seconds, default 0 = off): for a writer that rewrites the
  file periodically, the file counts only if it changed within this long (on
  this agent's own clock); at least two looks' worth when set, and only with
  `GATE_FILE` (`stkrelay.E108`).

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value and leaves its default.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Protocol

from elections.core.gate import LOOK_EVERY
from stkconfig.bad import Bad
from stkconfig.parsed import GATE_TIMEOUT as DEFAULT_TIMEOUT
from stkconfig.parsed import GateConfig
from stkconfig.raw import Raw


@dataclass(frozen=True)
class Gate:
    gate: GateConfig = field(default_factory=GateConfig)


class GateNeeds(Protocol):
    """What the gate reads of the sections before it."""

    lease_renew: float


def parse(raw: Raw, known: GateNeeds, bad: Bad) -> Gate:
    """`Config.gate`: the command or the file, the gate's deadline and the file's freshness."""
    return Gate(_gate(raw, known.lease_renew, bad))


def _gate(raw: Raw, lease_renew: float, bad: Bad) -> GateConfig:
    values = raw.values
    cmd_text, path = values.get("GATE_CMD", ""), values.get("GATE_FILE", "")
    timeout = raw.number("GATE_TIMEOUT", bad)
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    max_age = raw.number("GATE_MAX_AGE", bad)
    max_age = 0.0 if max_age is None else float(max_age)
    if cmd_text and path:
        bad("stkrelay.E106", "GATE_CMD", "and GATE_FILE are both set: the gate is one signal",
            "keep GATE_FILE for a keepalived notify script, or GATE_CMD for a check command")  # fmt: skip
    argv: tuple[str, ...] = ()
    if cmd_text:
        try:
            argv = tuple(shlex.split(cmd_text))
        except ValueError as exc:
            bad("stkrelay.E104", "GATE_CMD", f"{cmd_text!r} cannot be split into words ({exc})",
                "quote it as a shell would; it runs without one")  # fmt: skip
        if argv and shutil.which(argv[0]) is None:
            bad("stkrelay.E104", "GATE_CMD", f"{argv[0]!r} is not an executable program",
                "name the program by its absolute path, e.g. /usr/local/bin/vrrp-master")  # fmt: skip
            argv = ()
    if path:
        if not os.path.isabs(path):
            bad("stkrelay.E105", "GATE_FILE", f"{path!r} is not an absolute path",
                "e.g. /run/stkrelay/gate, written by keepalived's notify script")  # fmt: skip
            path = ""
        elif not os.path.isdir(os.path.dirname(path)):
            bad("stkrelay.E105", "GATE_FILE", f"the folder of {path} does not exist",
                "create it (keepalived's notify script writes the file in it)")  # fmt: skip
            path = ""
    if timeout > lease_renew:
        bad("stkrelay.E107", "GATE_TIMEOUT",
            f"{timeout:g} must not exceed LEASE_RENEW={lease_renew:g}: heartbeats would carry a stale gate",
            f"lower GATE_TIMEOUT to {min(DEFAULT_TIMEOUT, lease_renew):g}")  # fmt: skip
    if max_age and not values.get("GATE_FILE"):
        bad("stkrelay.E108", "GATE_MAX_AGE", "is set without GATE_FILE (a command is fresh at each run)",
            "remove GATE_MAX_AGE, or use GATE_FILE")  # fmt: skip
    elif max_age and max_age < 2 * LOOK_EVERY + timeout:
        least = 2 * LOOK_EVERY + timeout
        bad("stkrelay.E108", "GATE_MAX_AGE",
            f"{max_age:g} is less than two looks at the file ({least:g} s): a live writer would look stale",
            f"use 0 (off) or at least {least:g}; the writer must rewrite the file more often")  # fmt: skip
    return GateConfig(cmd=argv, file=path, timeout=timeout, max_age=max_age)
