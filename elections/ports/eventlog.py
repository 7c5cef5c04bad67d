"""The pool's event log: append-only `events/<node>.jsonl` files, one writer
per file, one event per line.

`JsonlEventSink` appends this node's events (the `EventSink` of processes
without a database, such as the contender script, and the pool's copy of an
agent's history). `EventTail` reads every node's new complete lines since the
last call: a torn last line (a writer that died mid-append) is left for later
and picked up once complete, never counted twice, never lost.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from elections.ports.clock import Clock

log = logging.getLogger("stkrelay.eventlog")


class JsonlEventSink:
    def __init__(self, path: str | os.PathLike[str], node: str, clock: Clock) -> None:
        self.path = Path(path)
        self.node = node
        self.clock = clock
        self._lock = threading.Lock()
        self._seq = _last_seq(self.path)

    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None:
        """Append one event; `seq` defaults to one more than the last written here."""
        with self._lock:
            self._seq = self._seq + 1 if seq is None else seq
            doc = {
                "node": self.node,
                "seq": self._seq,
                "kind": kind,
                "epoch": epoch,
                "at": self.clock.wall().isoformat(),
                "reason": reason,
                **extra,
            }
            line = json.dumps(doc, ensure_ascii=False) + "\n"
            # Never parents=True: recreating a vanished share's folder would
            # make an empty lease dir appear where the real one was.
            self.path.parent.mkdir(exist_ok=True)
            with open(self.path, "ab") as fh:
                if fh.tell() > 0 and not _ends_with_newline(self.path):
                    # A previous writer died mid-line: end that fragment so this
                    # event stays a line of its own (readers skip the fragment).
                    line = "\n" + line
                fh.write(line.encode())


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete line; a torn last line (writer died mid-append) is skipped."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for raw in data.split(b"\n")[:-1] if not data.endswith(b"\n") else data.split(b"\n"):
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _last_seq(path: Path) -> int:
    seqs = [e.get("seq", 0) for e in read_events(path)]
    return max((s for s in seqs if isinstance(s, int)), default=0)


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
