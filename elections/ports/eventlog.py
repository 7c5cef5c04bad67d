"""The pool's event log: append-only event files, one writer per node, one
signed event per line (DESIGN.md §6, §5.4).

`JsonlEventSink` appends this node's events to `events/<node>.jsonl`, each
line signed with the pool key (the `EventSink` of processes without a
database, such as the contender script, and the pool's copy of an agent's
history); full files are sealed into segments and old segments retired
(`elections.ports.segments`). `EventTail` (`elections.ports.eventtail`, here
for its users) reads every node's new, verified lines. All I/O goes through a
`Share` (a local folder, or SMB).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from elections.core.lease import sign, signature_ok
from elections.core.untrusted import EVENT_LINE, Untrusted, load_object
from elections.ports.clock import Clock
from elections.ports.eventtail import MAX_FILES, PER_CALL, PER_FILE, EventTail
from elections.ports.host.files import write_atomic
from elections.ports.segments import (
    BASE,
    EVENT_STEM,
    SEALED,
    SUFFIX,
    Retention,
    chains,
    compactor_for,
    first_seq,
    join,
    sealed_name,
)
from elections.ports.share import LocalShare, Share, parent_of
from elections.ports.sharefiles import MAX_SCAN, ShareDeadline, read_regular

__all__ = ["MAX_FILES", "PER_CALL", "PER_FILE", "EventTail", "JsonlEventSink", "Retention", "read_events"]
log = logging.getLogger("stkrelay.eventlog")

TAIL_FOR_SEQ = 256 << 10  # bytes of its own file a restarting writer reads to resume its seq


class JsonlEventSink:
    """Appends this node's signed events to its active file, sealing it into a
    segment once it holds `retention.segment_bytes` (`elections.ports.segments`)
    and then retiring, on a thread of its own, what the retention rule lets
    go. `retention=None`: one file that grows without end (tools, tests).

    A seq is never reused. Readers refuse a seq not above the highest they took
    from this node (a replay, DESIGN.md §5.4) and ingestion is idempotent on it,
    so a reused seq is an event every other agent drops. Resuming from the share
    alone would reuse the seqs of an active file that was deleted (anyone who
    can write the share can delete): with `mark` (a local file, never on the
    share) the writer also remembers the highest seq it wrote, and resumes
    above both. An agent's `DbEventSink` has that memory in its database."""

    def __init__(
        self, path: str | os.PathLike[str], node: str, clock: Clock, key: str = "",
        deadline: ShareDeadline | None = None, share: Share | None = None,
        retention: Retention | None = Retention(),
        mark: str | os.PathLike[str] | None = None,
    ) -> None:  # fmt: skip
        # `path` is a local file, or with `share` the file's path in that share.
        local = Path(path)
        self.share, self.rel = (share, str(path)) if share else (LocalShare(local.parent), local.name)
        self.folder = parent_of(self.rel)
        name = self.rel.rsplit("/", 1)[-1]
        self.stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
        self.node = node
        self.clock = clock
        self.key = key
        self.deadline = deadline
        self.retention = retention
        self.compactor = (
            compactor_for(self.share, self.folder, self.stem, node, key, clock, retention, deadline)
            if retention is not None
            else None
        )
        self.mark = Path(mark) if mark is not None else None
        self._lock = threading.Lock()
        self._seq: int | None = None  # read from the files at the first write (the share may be hung now)

    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None:
        """Append one signed event; `seq` defaults to one more than the last written here.
        Raises OSError, `Untrusted` (a link in its place) or `StoreUnavailable` (a hung share)."""
        if self.deadline is not None:
            rolled = self.deadline.run(lambda: self._record(kind, epoch, reason, seq, extra))
        else:
            rolled = self._record(kind, epoch, reason, seq, extra)
        if rolled and self.compactor is not None:
            self.compactor.kick()

    def last_seq(self) -> int:
        """The highest seq this writer wrote (its mark and the share, read once; then kept)."""
        if self.deadline is not None:
            return self.deadline.run(self._last_written)
        return self._last_written()

    def _last_written(self) -> int:
        with self._lock:
            if self._seq is None:
                self._seq = self._resume()
            return self._seq

    def _record(self, kind: str, epoch: int, reason: str, seq: int | None, extra: dict[str, Any]) -> bool:
        with self._lock:
            if self._seq is None:
                self._seq = self._resume()
            seq = self._seq + 1 if seq is None else seq
            doc = {
                "node": self.node,
                "seq": seq,
                "kind": kind,
                "epoch": epoch,
                "at": self.clock.wall().isoformat(),
                "reason": reason,
                **extra,
            }
            if self.key:
                doc["sig"] = sign(doc, self.key)
            line = json.dumps(doc, ensure_ascii=False) + "\n"
            # Never parents=True: recreating a vanished share's folder would
            # make an empty lease dir appear where the real one was. A link in
            # place of events/ is moved aside: nothing is written through it.
            self.share.ensure_dir(self.folder)
            rolled = self._roll(len(line))
            self.share.append_line(self.rel, line.encode())
            self._seq = max(self._seq, seq)
            self._remember(self._seq)
            return rolled

    def _remember(self, seq: int) -> None:
        """Keep the highest seq written in `mark` (local disk; a failure is only logged)."""
        if self.mark is None:
            return
        try:
            write_atomic(self.mark, f"{seq}\n".encode())
        except OSError as exc:
            log.warning("events seq mark %s not written: %s", self.mark, exc)

    def _remembered(self) -> int:
        if self.mark is None:
            return 0
        try:
            text = self.mark.read_text()[:32].strip()
        except OSError:
            return 0
        return int(text) if text.isdigit() else 0

    def _roll(self, adding: int) -> bool:
        """Seal the active file if this line would take it past the segment size.
        The size is read from the file each time: other writers of this node
        (the supervisor's release, another sink of this process) roll it too."""
        if self.retention is None:
            return False
        try:
            size = self.share.size(self.rel) or 0
        except (OSError, Untrusted):
            return False  # the append says what is wrong
        if size == 0 or size + adding <= self.retention.segment_bytes:
            return False
        first = first_seq(self.share, self.rel)
        target = join(self.folder, sealed_name(self.stem, first if first is not None else self._seq or 0))
        try:
            if self.share.planted(target) or self.share.size(target) is not None:
                # Nothing of this writer's (sealed names are new names): moved aside.
                log.warning("events/%s was in the way of sealing %s: moved aside", target, self.stem)
                self.share.quarantine(target)
            self.share.rename(self.rel, target)
        except FileNotFoundError:
            return False
        except (OSError, Untrusted) as exc:  # held open by a reader (Windows, SMB): the next line tries again
            log.info("events/%s not sealed yet: %s", self.rel, exc)
            return False
        return True

    def _resume(self) -> int:
        """The highest seq this writer wrote: its mark, and its active file, else its newest segment
        or base."""
        return max(self._remembered(), self._resume_from_share())

    def _resume_from_share(self) -> int:
        last = _last_seq(self.share, self.rel, self.key)
        if last or self.retention is None:
            return last
        try:
            sizes, _ = self.share.listing(self.folder, SUFFIX, MAX_SCAN, EVENT_STEM)
        except OSError:
            return 0
        files = chains(sizes).get(self.stem, [])
        for ref in reversed(files):
            if ref.role == SEALED:
                last = max(last, ref.n, _last_seq(self.share, join(self.folder, ref.name), self.key))
                break
        return max([last, *(ref.n for ref in files if ref.role == BASE)])


def read_events(path: str | os.PathLike[str], max_bytes: int = 64 << 20) -> list[dict[str, Any]]:
    """Every complete, well-formed line of one file, unverified (for tools and
    tests; agents read through `EventTail`). A torn last line is skipped."""
    try:
        data = read_regular(Path(path), max_bytes) or b""
    except Untrusted:
        return []
    out = []
    for raw in data[: data.rfind(b"\n") + 1].split(b"\n"):
        try:
            doc = load_object(raw, EVENT_LINE, "event line")
        except Untrusted:
            continue
        out.append(doc)
    return out


def _last_seq(share: Share, rel: str, key: str) -> int:
    """The highest seq among this writer's own valid lines near the end of its file."""
    try:
        size = share.size(rel) or 0
        data = share.read(rel, TAIL_FOR_SEQ, offset=max(0, size - TAIL_FOR_SEQ), chunk=True) or b""
    except (OSError, Untrusted):
        return 0
    best = 0
    for raw in data.split(b"\n"):
        try:
            doc = load_object(raw, EVENT_LINE, "event line")
        except Untrusted:
            continue
        seq = doc.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool) and (not key or signature_ok(doc, key)):
            best = max(best, seq)
    return best
