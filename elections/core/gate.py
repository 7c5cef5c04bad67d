"""The gate signal of ADR 0011 (on-prem: "this host is the VRRP master"): pure.

A member with a gate configured (`GATE_CMD` or `GATE_FILE`) is eligible only
while its gate says master *now*. What "now" means:

- `GATE_CMD`: the last run, made at most `LOOK_EVERY` + `GATE_TIMEOUT` ago,
  exited 0. A run that timed out, failed to start or exited otherwise is not
  master.
- `GATE_FILE`: the last look, made each `LOOK_EVERY`, read the file whole
  (regular, bounded, never through a link, never blocking on a FIFO) and its
  first word is `MASTER`. keepalived's `notify` script writes the file only on
  a transition, so a file is not required to change: it is fresh when it was
  readable at this look. A look that fails (no file, unreadable, too large, not
  a regular file, past its deadline) is not master: the gate fails closed.
  With `GATE_MAX_AGE` > 0 (a writer that rewrites the file periodically, e.g. a
  check that runs every second) the file must also have *changed* within that
  long, timed on this agent's monotonic clock from when a look saw its
  identity (inode, mtime, size, content) change; the first look times it from
  the file's mtime on this machine's own wall clock (the same machine's clock,
  never another's).

The signal published in the heartbeat (`gate`) is `MASTER_SIGNAL` or the
reason it is not; judges show the reason and count the member ineligible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LOOK_EVERY = 1.0  # seconds between looks at the gate (the health thread's interval)
MAX_FILE_BYTES = 64  # "MASTER\n" and friends; anything longer is not a gate file
MASTER_SIGNAL = "master"
PENDING = "gate not looked at yet"
MAX_REASON = 120
STATES = ("MASTER", "BACKUP", "FAULT", "STOP")  # what keepalived's notify passes as the state


@dataclass(frozen=True)
class Look:
    """One look at the gate: `ok` if it was read (or run) at all."""

    ok: bool
    word: str = ""  # GATE_FILE: the first word, upper-cased; GATE_CMD: "MASTER" when it exited 0
    why: str = ""  # when not ok, or not master: what happened
    stamp: Any = None  # GATE_FILE: what identifies this version of the file
    age_at_look: float | None = None  # GATE_FILE, first look: the file's age on this machine's clock


@dataclass(frozen=True)
class GateMemory:
    stamp: Any = None
    changed_at: float | None = None  # monotonic: when a look saw the file change


def remember(memory: GateMemory, look: Look, now: float) -> GateMemory:
    """Restart the change timer when a look saw another version of the file."""
    if not look.ok or look.stamp is None:
        return memory
    if memory.changed_at is None:
        return GateMemory(look.stamp, now - max(0.0, look.age_at_look or 0.0))
    if look.stamp != memory.stamp:
        return GateMemory(look.stamp, now)
    return memory


def signal(look: Look, memory: GateMemory, now: float, max_age: float = 0.0) -> str:
    """`MASTER_SIGNAL` when this look says master (and, with `max_age`, the file
    changed recently enough), else why not: the text the heartbeat carries."""
    if not look.ok:
        return shown(look.why or "gate unreadable")
    if look.word != "MASTER":
        said = look.word if look.word in STATES else ("empty" if not look.word else repr(look.word[:16]))
        return shown(look.why or f"gate says {said}")
    if max_age > 0 and memory.changed_at is not None and now - memory.changed_at > max_age:
        return shown(f"gate file unchanged for {now - memory.changed_at:.1f} s > GATE_MAX_AGE {max_age:g} s")
    return MASTER_SIGNAL


def first_word(data: bytes) -> str:
    """The first word of a gate file, upper-cased ("" when there is none)."""
    text = data.decode("ascii", "replace").strip()
    return text.split(None, 1)[0].upper() if text else ""


def shown(text: str) -> str:
    """A reason as a heartbeat may carry it: printable, bounded."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return clean[:MAX_REASON]


def gate_of(doc: dict[str, Any]) -> str | None:
    """A heartbeat's gate: None when the member has none configured, else
    `MASTER_SIGNAL` or a bounded reason (anything that is not a string is a reason too)."""
    if "gate" not in doc or doc["gate"] is None:
        return None
    value = doc["gate"]
    return shown(value) if isinstance(value, str) else "gate field unreadable"
