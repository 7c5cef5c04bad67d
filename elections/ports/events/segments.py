"""A node's event files on the share, segmented, and their compaction
(docs/design.md §6; what is kept is decided in `elections.core.retention`).

Names, in `events/`, for node `N` (the same listing holds every node's):

- `N.jsonl`: the active segment, the only one written (appended). It is the
  old single-file format too: a pool's existing files are read as they are.
- `N@<first>.jsonl` (`first`: twelve digits or more, the seq of its first line): a
  sealed segment. When the active file reaches `segment_bytes` its writer
  renames it so (a reader that was reading it knows it by that first seq and
  goes on where it was) and starts a new active file. Sealed files never
  change again.
- `N@<upto>.base.jsonl`: the lines a rule still needs from every retired
  segment up to seq `upto` (`core.retention.Keeper`), copied verbatim (their
  own signatures), after one signed header line `{"node", "base": upto,
  "sig"}`. A reader that verified the header skips every sealed segment whose
  first seq is at most `upto` (it is retired, its needed lines are here) and
  lines of the base it has already seen; a header it cannot verify makes the
  whole file no evidence, so a planted base cannot hide real segments.

Only the writer retires its own segments (`Compactor`, in the writer's
process, a bounded amount of share I/O per step): it writes the new base
(temp file + rename), then deletes the retired sealed files and older bases.
A crash in between leaves files a reader already skips. Files of another node
are never touched; a missing older segment is, for a reader, one retired.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from elections.core.lease import sign, signature_ok
from elections.core.retention import Keeper, Retention, Segment, retired
from elections.core.untrusted import EVENT_LINE, Untrusted, check_event, load_object
from elections.ports.share.share import Share
from elections.ports.share.sharefiles import ShareDeadline
from stkhost.clock import Clock

log = logging.getLogger("stkrelay.eventlog")
T = TypeVar("T")
Line = tuple[dict[str, Any], bytes]  # a verified line: parsed, and as written

SUFFIX = ".jsonl"
# The stem of an event file: a node id, then for a sealed segment or a base `@` and twelve digits
# (up to nineteen: a seq up to core.untrusted.MAX_COUNTER, which `{n:012d}` writes in full).
EVENT_STEM = re.compile(r"(?P<node>[A-Za-z0-9][A-Za-z0-9_.-]{0,63}?)(?:@(?P<n>\d{12,19})(?P<base>\.base)?)?")
ACTIVE, SEALED, BASE = 0, 1, 2
MAX_SEGMENT = 64 << 20  # bytes of a sealed segment or base a reader reads at most
MAX_OWN = 1 << 30  # bytes of its own sealed segment the compactor folds at most (an old single file)
READ_CHUNK = 1 << 20  # bytes the compactor reads per share operation
HEAD = 64 << 10  # bytes read to find a file's first line


@dataclass(frozen=True)
class EventFile:
    name: str
    node: str
    role: int  # ACTIVE, SEALED or BASE
    n: int  # first seq (SEALED), upto (BASE), 0 (ACTIVE)
    size: int

    @property
    def order(self) -> tuple[int, int]:
        """Reading order within a node: bases, sealed segments by seq, the active file last."""
        return ({BASE: 0, SEALED: 1, ACTIVE: 2}[self.role], self.n)


def parse_name(name: str, size: int = 0) -> EventFile | None:
    if not name.endswith(SUFFIX):
        return None
    m = EVENT_STEM.fullmatch(name[: -len(SUFFIX)])
    if m is None:
        return None
    if m["n"] is None:
        return EventFile(name, m["node"], ACTIVE, 0, size)
    return EventFile(name, m["node"], BASE if m["base"] else SEALED, int(m["n"]), size)


def sealed_name(stem: str, first: int) -> str:
    return f"{stem}@{first:012d}{SUFFIX}"


def base_name(stem: str, upto: int) -> str:
    return f"{stem}@{upto:012d}.base{SUFFIX}"


def chains(sizes: dict[str, int]) -> dict[str, list[EventFile]]:
    """The listed files by node, each in reading order."""
    out: dict[str, list[EventFile]] = {}
    for name, size in sizes.items():
        ref = parse_name(name, size)
        if ref is not None:
            out.setdefault(ref.node, []).append(ref)
    for refs in out.values():
        refs.sort(key=lambda r: r.order)
    return out


def base_header(node: str, upto: int, key: str) -> dict[str, Any]:
    doc: dict[str, Any] = {"node": node, "base": upto}
    if key:
        doc["sig"] = sign(doc, key)
    return doc


def header_ok(doc: dict[str, Any], ref: EventFile, key: str) -> bool:
    return (
        set(doc) <= {"node", "base", "sig"}
        and doc.get("node") == ref.node
        and doc.get("base") == ref.n
        and (not key or signature_ok(doc, key))
    )


def join(folder: str, name: str) -> str:
    """A file's path in the share from its folder's ('' is the share's own folder)."""
    return f"{folder}/{name}" if folder else name


def lines_of(data: bytes) -> list[bytes]:
    return [raw for raw in data[: data.rfind(b"\n") + 1].split(b"\n") if raw.strip()]


def first_seq(share: Share, rel: str) -> int | None:
    """The seq of the first complete line of a file (None if it has none)."""
    try:
        data = share.read(rel, HEAD, chunk=True) or b""
    except (OSError, Untrusted):
        return None
    raw = data.split(b"\n", 1)[0] if b"\n" in data else b""
    try:
        seq = load_object(raw, EVENT_LINE, "event line").get("seq")
    except Untrusted:
        return None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _wall(doc: dict[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(str(doc.get("at"))).timestamp()
    except (TypeError, ValueError, OverflowError):
        return None


class Compactor:
    """Retires the sealed segments of one node that the retention rule lets go.

    `run()` does it all, as many short share operations (each under the
    deadline, so a lease renewal waits for at most one of them); `kick()` runs
    it on a thread of its own, once at a time."""

    def __init__(
        self, share: Share, folder: str, stem: str, node: str, key: str, clock: Clock, rule: Retention,
        deadline: ShareDeadline | None = None,
    ) -> None:  # fmt: skip
        self.share, self.folder, self.stem, self.node, self.key = share, folder, stem, node, key
        self.clock, self.rule, self.deadline = clock, rule, deadline
        self._ages: dict[str, float | None] = {}  # sealed files never change: their age is read once
        self._lock = threading.Lock()
        self._again = False
        self._thread: threading.Thread | None = None
        self.retired_total = 0

    def _io(self, fn: Callable[[], T]) -> T:
        return self.deadline.run(fn) if self.deadline is not None else fn()

    def kick(self) -> None:
        with self._lock:
            self._again = True
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._loop, name=f"compact-{self.stem}", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._again:
                    return
                self._again = False
            try:
                self.run()
            except Exception as exc:  # the share went away, a file was planted: next roll tries again
                log.warning("event segments of %s not compacted: %s", self.node, exc)

    def join(self, timeout: float = 30.0) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def mine(self) -> list[EventFile]:
        sizes, _ = self._io(lambda: self.share.listing(self.folder, SUFFIX, 4096, EVENT_STEM))
        return chains(sizes).get(self.stem, [])

    def run(self) -> int:
        """Retire what the rule lets go; the number of files removed."""
        files = self.mine()
        bases = [f for f in files if f.role == BASE]
        base, base_lines = self._newest_base(bases)
        upto = base.n if base is not None else 0
        sealed = [f for f in files if f.role == SEALED]
        covered = [f for f in sealed if f.n <= upto]  # left by a crash after the base was written
        live = [f for f in sealed if f.n > upto]
        active = next((f.size for f in files if f.role == ACTIVE), 0)
        segments = [Segment(f.name, f.n, f.size, self._age(f)) for f in live]
        going = retired(
            segments, active, self.rule.keep_bytes, self.rule.keep_s, self.clock.wall().timestamp()
        )
        removed = 0
        if going:
            keeper = Keeper()
            for doc, raw in base_lines:
                keeper.add(doc, raw)
            for seg in going:
                upto = max(upto, seg.first, self._fold(join(self.folder, seg.name), keeper))
            header = json.dumps(base_header(self.node, upto, self.key)).encode() + b"\n"
            body = header + b"".join(raw + b"\n" for _, raw in keeper.lines())
            path = join(self.folder, base_name(self.stem, upto))
            self._io(lambda: self.share.replace(path, body, tag=self.node))
            covered += [f for f in live if f.name in {s.name for s in going}]
        # Older bases are superseded; one whose header does not verify and names a higher
        # seq is left alone (readers refuse it; it may be a base under another key).
        bases = [b for b in bases if b.n < upto or (base is not None and b.n < base.n)]
        for f in covered + bases:
            try:
                self._io(partial(self.share.unlink, join(self.folder, f.name)))
                removed += 1
            except FileNotFoundError:
                pass
            self._ages.pop(f.name, None)
        self.retired_total += removed
        return removed

    def _newest_base(self, bases: list[EventFile]) -> tuple[EventFile | None, list[Line]]:
        """The newest base whose header verifies, and its lines (this node's, signed, in its cover)."""
        for ref in sorted(bases, key=lambda b: b.n, reverse=True):
            path = join(self.folder, ref.name)
            data = self._io(partial(self.share.read, path, READ_CHUNK, chunk=True)) or b""
            raws = lines_of(data)
            try:
                head = load_object(raws[0], EVENT_LINE, "base header") if raws else {}
            except Untrusted:
                continue
            if header_ok(head, ref, self.key):
                return ref, [
                    (d, r) for d, r in map(self._own, raws[1:]) if d is not None and d["seq"] <= ref.n
                ]
        return None, []

    def _own(self, raw: bytes) -> tuple[dict[str, Any] | None, bytes]:
        """A line of this node, validly signed, with fields in range (`check_event`); else (None, raw)."""
        try:
            doc = load_object(raw, EVENT_LINE, "event line")
        except Untrusted:
            return None, raw
        seq = doc.get("seq")
        if doc.get("node") != self.node or not isinstance(seq, int) or isinstance(seq, bool):
            return None, raw
        if self.key and not signature_ok(doc, self.key):
            return None, raw
        try:
            check_event(doc)  # a seq past MAX_COUNTER would name a base no reader can find
        except Untrusted:
            return None, raw
        return doc, raw

    def _fold(self, path: str, keeper: Keeper) -> int:
        """Fold a sealed segment's lines into `keeper`, a chunk per share operation; its highest seq."""
        offset, best = 0, 0
        while offset < MAX_OWN:
            data = self._io(partial(self.share.read, path, READ_CHUNK, offset=offset, chunk=True)) or b""
            end = data.rfind(b"\n") + 1
            if end == 0:
                break  # the end, or a fragment no line fits in: nothing more to keep
            for raw in lines_of(data[:end]):
                doc, _ = self._own(raw)
                if doc is not None:
                    keeper.add(doc, raw)
                    best = max(best, doc["seq"])
            offset += end
        return best

    def _age(self, ref: EventFile) -> float | None:
        """The writer's wall time of a sealed segment's last line (read once per file)."""
        if ref.name not in self._ages:
            start = max(0, ref.size - HEAD)
            path = join(self.folder, ref.name)
            data = self._io(lambda: self.share.read(path, HEAD, offset=start, chunk=True)) or b""
            at = None
            for raw in reversed(lines_of(data)):
                doc, _ = self._own(raw)
                if doc is not None:
                    at = _wall(doc)
                    break
            self._ages[ref.name] = at
        return self._ages[ref.name]


_compactors: dict[tuple[str, str, str], Compactor] = {}
_compactors_lock = threading.Lock()


def compactor_for(
    share: Share, folder: str, stem: str, node: str, key: str, clock: Clock, rule: Retention,
    deadline: ShareDeadline | None = None,
) -> Compactor:  # fmt: skip
    """The one compactor of this process for a node's files (every sink of it shares it)."""
    ident = (share.where, folder, stem)  # no I/O: the share may be hung
    with _compactors_lock:
        found = _compactors.get(ident)
        if found is None or found.key != key or found.rule != rule:
            found = _compactors[ident] = Compactor(share, folder, stem, node, key, clock, rule, deadline)
        return found
