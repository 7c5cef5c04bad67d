"""Append-only JSONL event files: one writer per file, one event per line.

`JsonlEventSink` is the `EventSink` used by processes without a database (the
contender script) and by agents for the pool's `events/<node>.jsonl`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from .clock import Clock


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
