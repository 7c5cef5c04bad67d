"""The pool's event log: append-only `events/<node>.jsonl` files, one writer
per file, one signed event per line (DESIGN.md §6, §5.4).

`JsonlEventSink` appends this node's events, each line signed with the pool
key (the `EventSink` of processes without a database, such as the contender
script, and the pool's copy of an agent's history). `EventTail` reads every
node's new complete lines since the last call and hands on only evidence:

- bounded work: at most `PER_FILE` bytes of one file and `PER_CALL` bytes of
  all files per call (a 30 MB file is read over several calls, never whole),
  at most `MAX_FILES` files; a line longer than `EVENT_LINE` is skipped;
- every line parsed by the guarded reader (size, nesting), signed with the
  pool key, naming the file's own node, and with a `seq` higher than the last
  accepted from that node: anything else is refused (counted in `refusals`,
  logged once per file and cause) and the tail moves past it;
- a torn last line (a writer that died mid-append) is left for later and
  picked up once complete, never counted twice, never lost; a file that
  shrank (replaced) is read again from the start, its old lines skipped as
  already seen.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from elections.core.evidence import Refusals
from elections.core.lease import sign, signature_ok
from elections.core.untrusted import (
    EVENT_LINE,
    FORGED,
    REPLAYED,
    TOO_LARGE,
    UNSIGNED,
    WRONG_NODE,
    Untrusted,
    load_object,
)
from elections.ports.clock import Clock
from elections.ports.share import LocalShare, Share, parent_of
from elections.ports.sharefiles import ShareDeadline, read_regular

log = logging.getLogger("stkrelay.eventlog")

PER_FILE = 256 << 10  # bytes of one file read per call
PER_CALL = 1 << 20  # bytes of all files read per call
MAX_FILES = 256  # event files read per pool
TAIL_FOR_SEQ = 256 << 10  # bytes of its own file a restarting writer reads to resume its seq
SECURITY = frozenset({UNSIGNED, FORGED, REPLAYED, WRONG_NODE})


class JsonlEventSink:
    def __init__(
        self, path: str | os.PathLike[str], node: str, clock: Clock, key: str = "",
        deadline: ShareDeadline | None = None, share: Share | None = None,
    ) -> None:  # fmt: skip
        # `path` is a local file, or with `share` the file's path in that share.
        local = Path(path)
        self.share, self.rel = (share, str(path)) if share else (LocalShare(local.parent), local.name)
        self.node = node
        self.clock = clock
        self.key = key
        self.deadline = deadline
        self._lock = threading.Lock()
        self._seq: int | None = None  # read from the file at the first write (the share may be hung now)

    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None:
        """Append one signed event; `seq` defaults to one more than the last written here.
        Raises OSError, `Untrusted` (a link in its place) or `StoreUnavailable` (a hung share)."""
        if self.deadline is not None:
            self.deadline.run(lambda: self._record(kind, epoch, reason, seq, extra))
        else:
            self._record(kind, epoch, reason, seq, extra)

    def _record(self, kind: str, epoch: int, reason: str, seq: int | None, extra: dict[str, Any]) -> None:
        with self._lock:
            if self._seq is None:
                self._seq = _last_seq(self.share, self.rel, self.key)
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
            self.share.ensure_dir(parent_of(self.rel))
            self.share.append_line(self.rel, line.encode())
            self._seq = seq


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


class EventTail:
    """Reads new, verified, complete lines of every events/*.jsonl since the last call."""

    def __init__(
        self,
        events_dir: str | os.PathLike[str],
        key: str = "",
        refusals: Refusals | None = None,
        clock: Clock | None = None,
        deadline: ShareDeadline | None = None,
        share: Share | None = None,
    ) -> None:
        # `events_dir` is a local folder, or with `share` the folder's path in that share.
        self.share, self.folder = (share, str(events_dir)) if share else (LocalShare(events_dir), "")
        self.clock = clock
        self.deadline = deadline
        self.key = key
        self.refusals = refusals if refusals is not None else Refusals()
        self.offsets: dict[str, int] = {}
        self.last_seq: dict[str, int] = {}  # node -> highest seq accepted
        self._rereading: set[str] = set()  # files replaced: lines up to last_seq are not replays
        self.backlog = False  # True when the last call stopped at a cap: call again soon
        self._cursor = 0  # where the next call starts when the last one stopped at a cap

    def _refuse(self, name: str, exc: Untrusted) -> None:
        at, now = (
            (self.clock.wall().isoformat(timespec="seconds"), self.clock.monotonic())
            if self.clock
            else ("", None)
        )
        if self.refusals.note(f"events/{name}", exc.cause, exc.detail, at, now):
            level = logging.ERROR if exc.cause in SECURITY else logging.WARNING
            prefix = "SECURITY: " if exc.cause in SECURITY else ""
            log.log(level, "%signoring a line of events/%s: %s (%s)", prefix, name, exc.detail, exc.cause)

    def _verify(self, name: str, raw: bytes) -> dict[str, Any] | None:
        node = name[: -len(".jsonl")]
        try:
            doc = load_object(raw, EVENT_LINE, "event line")
            if self.key and not signature_ok(doc, self.key):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, "event line is not validly signed")
            if doc.get("node") != node:
                raise Untrusted(WRONG_NODE, f"event line names node {str(doc.get('node'))[:64]!r}")
            seq = doc.get("seq")
            if not isinstance(seq, int) or isinstance(seq, bool):
                raise Untrusted(FORGED, "event line has no integer seq")
            last = self.last_seq.get(node, 0)
            if seq <= last:
                if name in self._rereading:
                    return None  # seen before the file was replaced
                raise Untrusted(REPLAYED, f"event seq {seq} ≤ {last} already seen from {node}")
        except Untrusted as exc:
            self._refuse(name, exc)
            return None
        self.last_seq[node] = seq
        return doc

    def new_events(self) -> list[dict[str, Any]]:
        """New verified events; `StoreUnavailable` when the share is hung (with a deadline)."""
        if self.deadline is not None:
            return self.deadline.run(self._new_events)
        return self._new_events()

    def _new_events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        self.backlog = False
        try:  # one directory listing; files whose size did not move are not opened
            sizes, refused = self.share.listing(self.folder, ".jsonl", MAX_FILES)
        except OSError:
            return out
        for exc in refused:
            self._refuse("", exc)
        budget, reads = PER_CALL, 2 * PER_CALL  # bytes consumed, bytes read: both bounded per call
        names = sorted(sizes)
        first = self._cursor % len(names) if names else 0  # round robin: big files cannot starve others
        for i, name in enumerate(names[first:] + names[:first]):
            start = self.offsets.get(name, 0)
            if sizes[name] == start:
                self._rereading.discard(name)
                continue
            if sizes[name] < start:
                start = 0  # the file was replaced: read it again (ingestion is idempotent)
                self._rereading.add(name)
            want = min(PER_FILE, budget, reads)
            if want < EVENT_LINE.max_bytes + 1:
                self.backlog = True
                self._cursor = first + i
                break
            try:
                rel = f"{self.folder}/{name}" if self.folder else name
                data = self.share.read(rel, want, offset=start, chunk=True) or b""
            except (OSError, Untrusted) as exc:
                if isinstance(exc, Untrusted):
                    self._refuse(name, exc)
                continue
            reads -= len(data)
            end = data.rfind(b"\n") + 1  # only complete lines
            if end == 0:
                if len(data) > EVENT_LINE.max_bytes:
                    # No line end within more than a line may hold: skip it; the rest follows.
                    self._refuse(
                        name, Untrusted(TOO_LARGE, f"a line longer than {EVENT_LINE.max_bytes} bytes")
                    )
                    self.offsets[name] = start + len(data)
                    budget -= len(data)
                    self.backlog = True
                continue  # else a torn last line: it costs no budget, and waits for its end
            budget -= end
            for raw in data[:end].split(b"\n"):
                if raw.strip():
                    doc = self._verify(name, raw)
                    if doc is not None:
                        out.append(doc)
            self.offsets[name] = start + end
            if start + len(data) < sizes[name]:
                self.backlog = True
        return out
