"""The cloud's epoch fence and its records of tunnels (docs/design.md §14). Pure.

Per KMSN the cloud keeps the highest epoch it has accepted a tunnel with. A
tunnel asking to be accepted (`EpochFence.judge`) is:

- ``stale``   its epoch is below that: refused with ``stale_epoch``;
- ``stale``   its epoch equals it but another node holds it (an epoch names one
              leader, so one of the two lies): refused;
- ``accept``  its epoch is higher, or equal from the same node (that leader
              reconnecting after a blip): accepted, and any open tunnel of the
              KMSN is replaced at once.

`TunnelBook` is what the cloud shows of its tunnels: the current one per KMSN
and the closed ones (bounded history), each with its epoch, node, the times it
opened and closed (the transport's monotonic clock, passed in) and what it
carried. ``one tunnel per KMSN at any instant`` is checkable from it: the
book closes the old record before it opens the new one, at the same instant.
No clock reads, no I/O: the transport persists `EpochFence.epochs` itself.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Literal

HISTORY = 200

Verdict = Literal["accept", "stale"]


@dataclass
class EpochFence:
    epochs: dict[str, int] = field(default_factory=dict)  # kmsn -> highest accepted epoch
    holders: dict[str, str] = field(default_factory=dict)  # kmsn -> node that holds it

    def judge(self, kmsn: str, epoch: int, node: str) -> tuple[Verdict, str]:
        """May a tunnel of (`kmsn`, `epoch`, `node`) be accepted? And why (or why not)."""
        highest = self.epochs.get(kmsn)
        if highest is None or epoch > highest:
            return "accept", f"epoch {epoch} is the highest seen for {kmsn}"
        if epoch < highest:
            return "stale", f"epoch {epoch} < {highest}, already accepted for {kmsn}"
        if self.holders.get(kmsn, node) != node:
            return "stale", f"epoch {epoch} of {kmsn} is held by {self.holders[kmsn]}, not {node}"
        return "accept", f"{node} reconnects with epoch {epoch}"

    def accept(self, kmsn: str, epoch: int, node: str) -> None:
        """Record that the tunnel was accepted (after `judge` said so)."""
        if epoch < self.epochs.get(kmsn, epoch):
            raise ValueError(f"epoch {epoch} of {kmsn} goes back on {self.epochs[kmsn]}")
        self.epochs[kmsn], self.holders[kmsn] = epoch, node

    def to_doc(self) -> dict:
        return {k: {"epoch": e, "node": self.holders.get(k, "")} for k, e in sorted(self.epochs.items())}

    @classmethod
    def from_doc(cls, doc: object) -> EpochFence:
        """The fence from a saved document; entries that are not well formed are skipped."""
        fence = cls()
        if not isinstance(doc, dict):
            return fence
        for kmsn, entry in doc.items():
            if not isinstance(entry, dict):
                continue
            epoch, node = entry.get("epoch"), entry.get("node")
            if (
                isinstance(kmsn, str)
                and isinstance(epoch, int)
                and not isinstance(epoch, bool)
                and epoch >= 0
            ):
                fence.epochs[kmsn], fence.holders[kmsn] = epoch, node if isinstance(node, str) else ""
        return fence


@dataclass
class TunnelRecord:
    id: int
    kmsn: str
    epoch: int
    node: str
    opened: float
    closed: float | None = None
    reason: str = ""
    streams: int = 0  # remote clients it carried
    bytes_in: int = 0  # from the site
    bytes_out: int = 0  # to the site
    discarded: int = 0  # bytes that arrived after it was closed (never delivered)

    def as_dict(self, now: float) -> dict:
        doc = asdict(self)
        doc["age_s"] = round((self.closed if self.closed is not None else now) - self.opened, 3)
        return doc


class TunnelBook:
    """The current tunnel per KMSN, and the closed ones."""

    def __init__(self, history: int = HISTORY) -> None:
        self.current: dict[str, TunnelRecord] = {}
        self.closed: deque[TunnelRecord] = deque(maxlen=history)
        self._next = 0

    def open(self, kmsn: str, epoch: int, node: str, now: float) -> tuple[TunnelRecord, TunnelRecord | None]:
        """A new current tunnel for `kmsn`; returns it and the one it replaced (closed)."""
        old = self.current.get(kmsn)
        if old is not None:
            self.close(old, now, f"replaced by epoch {epoch} ({node})")
        self._next += 1
        record = TunnelRecord(self._next, kmsn, epoch, node, now)
        self.current[kmsn] = record
        return record, old

    def close(self, record: TunnelRecord, now: float, reason: str) -> None:
        if record.closed is not None:
            return
        record.closed, record.reason = now, reason
        if self.current.get(record.kmsn) is record:
            del self.current[record.kmsn]
        self.closed.append(record)

    def is_current(self, record: TunnelRecord) -> bool:
        return self.current.get(record.kmsn) is record

    def records(self, now: float) -> list[dict]:
        """Every record, closed ones first, oldest first."""
        both = [*self.closed, *sorted(self.current.values(), key=lambda r: r.id)]
        return [r.as_dict(now) for r in both]


def overlaps(records: list[dict]) -> list[tuple[int, int]]:
    """Pairs of record ids of one KMSN whose open intervals overlap (should be none)."""
    out = []
    by_kmsn: dict[str, list[dict]] = {}
    for r in records:
        by_kmsn.setdefault(r["kmsn"], []).append(r)
    for rs in by_kmsn.values():
        rs.sort(key=lambda r: (r["opened"], r["id"]))
        for a, b in itertools.pairwise(rs):
            if a["closed"] is None or a["closed"] > b["opened"]:
                out.append((a["id"], b["id"]))
    return out
