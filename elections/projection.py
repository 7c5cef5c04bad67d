"""The pool's event files, projected into this agent's database.

Every node appends only to its own `events/<node>.jsonl`; every agent ingests
all of them, idempotently on `(node, seq)`, so the failover and audit history
is the same on every agent's panel. Reading resumes from the last complete
line: a torn last line (a writer that died mid-append) is left for later and
picked up once complete, never counted twice, never lost.

`PoolCommands` folds the operator commands seen so far into the pool's state:
which members are drained, whether automatic failover is paused, and pending
promotes.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger("stkrelay.projection")


class EventTail:
    """Reads new complete lines of every events/*.jsonl since the last call."""

    def __init__(self, events_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(events_dir)
        self.offsets: dict[str, int] = {}

    def new_events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:  # one directory listing; files whose size did not move are not opened
            with os.scandir(self.dir) as it:
                sizes = {e.name: e.stat().st_size for e in it if e.name.endswith(".jsonl")}
        except OSError:
            return out
        for name in sorted(sizes):
            path = self.dir / name
            start = self.offsets.get(name, 0)
            if sizes[name] == start:
                continue
            if sizes[name] < start:
                start = 0  # the file was replaced: read it again (ingestion is idempotent)
            try:
                with open(path, "rb") as fh:
                    fh.seek(start)
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # only complete lines
            for raw in data[:end].split(b"\n"):
                if not raw.strip():
                    continue
                try:
                    doc = json.loads(raw)
                except ValueError:
                    log.warning("skipping a malformed line in %s", path)
                    continue
                if isinstance(doc, dict) and isinstance(doc.get("seq"), int) and doc.get("node"):
                    out.append(doc)
            self.offsets[name] = start + end
        return out


def ingest(kmsn: str, events: list[dict[str, Any]]) -> int:
    """Insert events into ElectionEvent, ignoring (node, seq) already there."""
    from .models import ElectionEvent

    rows = []
    known = {k for k, _ in ElectionEvent.KINDS}
    for e in events:
        try:
            at = datetime.fromisoformat(str(e.get("at")))
        except ValueError:
            at = datetime.now(UTC)
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        kind = str(e.get("kind"))
        detail = {k: v for k, v in e.items() if k not in ("node", "seq", "kind", "epoch", "at", "reason")}
        if kind not in known:
            detail["unknown_kind"] = True
        rows.append(ElectionEvent(
            kmsn=kmsn, node=str(e["node"]), seq=int(e["seq"]), epoch=int(e.get("epoch") or 0),
            kind=kind[:32], reason=str(e.get("reason", "")), observed_at=at, detail=detail,
        ))  # fmt: skip
    if rows:
        ElectionEvent.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    return len(rows)


@dataclass
class PoolCommands:
    """Operator commands folded in the order this agent observed them."""

    drained: dict[str, bool] = field(default_factory=dict)
    paused: bool = False
    promotes: list[dict[str, Any]] = field(default_factory=list)  # pending, newest last

    def apply(self, events: list[dict[str, Any]]) -> None:
        for e in sorted(events, key=lambda e: (str(e.get("at")), e.get("node"), e.get("seq"))):
            kind, target = e.get("kind"), e.get("target")
            if kind == "drain_requested" and target:
                self.drained[str(target)] = True
            elif kind == "undrain_requested" and target:
                self.drained[str(target)] = False
            elif kind == "pause_requested":
                self.paused = True
            elif kind == "resume_requested":
                self.paused = False
            elif kind == "promote_requested" and target:
                self.promotes.append(e)
                del self.promotes[:-16]

    def promote_at(self, epoch: int) -> str | None:
        """The target of the newest promote issued against `epoch`, if any."""
        for e in reversed(self.promotes):
            if e.get("expected_epoch") in (None, epoch) and int(e.get("epoch") or 0) == epoch:
                return str(e["target"])
        return None
