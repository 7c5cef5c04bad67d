"""Which of a member's event segments are retired, and which of their lines
must outlive them (the compaction of `events/`, docs/design.md §6).

Pure: no I/O, no clock. The writer of a node's event files (and only it)
decides, on its own clock and from its own lines:

- `retired()`: the newest segments are kept while together (with the active
  file) they fit in `keep_bytes` and their last line is younger than `keep_s`
  on the writer's own wall clock (its own `at` fields, never another
  machine's); every older one is retired. The active file is never retired.
- `Keeper`: the lines a rule still needs when their segment goes, folded
  from the node's own lines in any order: the last `elected` of this node and
  the line with its highest epoch (epochs are never reused), for every
  register of the command fold (`core.commands.PoolCommands`: a member's
  drain mark, the pool's pause) the last command in command order, the last
  promote, the last bind or reset of every station (`core.stations`: a
  station's binding to its credential must outlive any segment) and its
  first ``station_seen``, and the head of this node's published audit chain (the first
  published row is taken as given, so the kept head and every later row still
  verify). Whatever else a retired segment held lives on only in the agents'
  databases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elections.core.commands import order_key
from elections.core.stations import BOUND as STATION_BOUND
from elections.core.stations import SEEN as STATION_SEEN
from elections.core.stations import UNBIND, station_name
from elections.core.untrusted import as_int

SEGMENT_BYTES = 1 << 20  # EVENTS_SEGMENT_BYTES: the active file is sealed once this large
KEEP_BYTES = 4 << 20  # EVENTS_KEEP_BYTES: a node's newest segments kept, active included
KEEP_S = 400 * 86400.0  # EVENTS_KEEP_DAYS: a sealed segment whose last line is older is retired
MAX_TARGETS = 256  # drain registers kept (the newest commands): members of a pool, with room


@dataclass(frozen=True)
class Retention:
    segment_bytes: int = SEGMENT_BYTES
    keep_bytes: int = KEEP_BYTES
    keep_s: float = KEEP_S


@dataclass(frozen=True)
class Segment:
    name: str
    first: int  # the seq its name says it starts at
    size: int
    last_at: float | None  # the writer's wall time of its last line (seconds), None if unknown


def retired(
    segments: list[Segment], active_size: int, keep_bytes: int, keep_s: float, now: float
) -> list[Segment]:
    """The sealed segments to retire, oldest first: all but the newest ones that
    fit, with the active file, in `keep_bytes` and are younger than `keep_s`."""
    ordered = sorted(segments, key=lambda s: s.first)
    total = active_size
    keep = 0
    for seg in reversed(ordered):
        total += seg.size
        too_old = seg.last_at is not None and now - seg.last_at > keep_s
        if total > keep_bytes or too_old:
            break
        keep += 1
    return ordered[: len(ordered) - keep]


@dataclass
class Keeper:
    """The needed lines of one node, as (rank, seq, raw line) per register."""

    kept: dict[str, tuple[tuple[Any, ...], int, bytes]] = field(default_factory=dict)

    def add(self, doc: dict[str, Any], raw: bytes) -> None:
        """Fold one verified line of this node (any order; a line folded twice changes nothing)."""
        seq, kind = as_int(doc.get("seq")), doc.get("kind")
        self._offer("epoch", (as_int(doc.get("epoch")), seq), seq, raw)
        if kind == "elected":
            self._offer("elected", (seq,), seq, raw)
        elif kind == "audit":
            self._offer("audit", (seq,), seq, raw)
        elif kind in ("drain_requested", "undrain_requested") and doc.get("target"):
            self._offer(f"drain:{str(doc['target'])[:64]}", order_key(doc), seq, raw)
            self._bound()
        elif kind in ("pause_requested", "resume_requested"):
            self._offer("pause", order_key(doc), seq, raw)
        elif kind == "promote_requested":
            self._offer("promote", order_key(doc), seq, raw)
        elif kind in (STATION_BOUND, UNBIND):
            name = station_name(doc.get("target" if kind == UNBIND else "station"))
            if name is not None:
                self._offer(f"station:{name}", order_key(doc), seq, raw)
        elif kind == STATION_SEEN:
            name = station_name(doc.get("station"))
            if name is not None:
                self._offer(f"seen:{name}", (-seq,), seq, raw)  # the first sighting

    def _offer(self, register: str, rank: tuple[Any, ...], seq: int, raw: bytes) -> None:
        known = self.kept.get(register)
        if known is None or rank > known[0]:
            self.kept[register] = (rank, seq, raw)

    def _bound(self) -> None:
        drains = sorted((v[0], k) for k, v in self.kept.items() if k.startswith("drain:"))
        for _, register in drains[: max(0, len(drains) - MAX_TARGETS)]:
            del self.kept[register]

    def lines(self) -> list[tuple[int, bytes]]:
        """The kept lines, one per seq, in seq order."""
        return sorted({seq: raw for _, seq, raw in self.kept.values()}.items())
