"""Reading a folder's event files on from a cursor (docs/design.md §6, §5.4):
`EventFiles` hands every node's new complete lines since the last call to the
event record layer (`event_records.PoolEventTail`, which judges each one) and
keeps what it takes to never hand one on twice nor lose one:

- bounded work: at most `PER_FILE` bytes of one file and `PER_CALL` bytes of
  all files per call (a 30 MB file is read over several calls, never whole),
  at most `MAX_FILES` files (`MAX_CHAIN` of one node); a line longer than
  `EVENT_LINE` is skipped; a sealed segment or base counts up to `MAX_SEGMENT`;
- a torn last line (a writer that died mid-append) is left for later and
  picked up once complete, never counted twice, never lost; a file that
  shrank or was replaced (the byte before the read offset is no longer a line
  end) is read again from the start, its old lines skipped as already seen;
- segments (`elections.ports.events.segments`): a node's files are read in order, a
  sealed one under a verified base's cover is retired and not read, one that
  is missing is retired, the lines of a base already seen are copies, and a
  line of a base past its cover is a replay;
- a listing is no snapshot (the writer seals and retires while it runs): a
  file whose first line leaves a gap after the last seq waits a few listings
  for what comes before it, an active file read on must go on from the last
  seq, and the sealed name of an active file found replaced is known again,
  so the writer's own lines are never taken for replays.
"""

from __future__ import annotations

import errno

from elections.core.untrusted import EVENT_LINE, FORGED, TOO_LARGE, TOO_MANY, UNSIGNED, Untrusted, load_object
from elections.ports.events.event_streams import EventJudge
from elections.ports.events.segments import (
    ACTIVE,
    BASE,
    EVENT_STEM,
    MAX_SEGMENT,
    SEALED,
    SUFFIX,
    EventFile,
    chains,
    header_ok,
    join,
    parse_name,
)
from elections.ports.share.share import Share

PER_FILE = 256 << 10  # bytes of one file read per call
PER_CALL = 1 << 20  # bytes of all files read per call
MAX_FILES = 1024  # event files read per pool (every node's segments)
MAX_CHAIN = 64  # event files of one node read (its newest)
GAP_LISTINGS = 3  # listings a file whose first seq leaves a gap waits for what comes before it


class EventFiles:
    """What a reader has read of a folder's event files: its cursor (`ShareEvents.cursor`),
    and the reading on from it; every line read is judged by the record layer.

    Per node the files are read in order (`segments.chains`): bases, sealed
    segments, the active file; the next file of a node is read only once the
    one before it is read to its end, so a node's seqs arrive in order. A
    sealed segment under a verified base's cover is retired: not read; a
    segment that went missing is retired too, never an attack. Nodes take
    turns (round robin) when a call stops at a cap."""

    def __init__(self, share: Share, folder: str, key: str = "") -> None:
        self.share, self.folder = share, folder
        self.key = key  # verifies a base's header (`segments.header_ok`)
        self.offsets: dict[str, int] = {}
        self.covered: dict[str, int] = {}  # node -> the highest `upto` of a verified base
        self._active_first: dict[str, int] = {}  # node -> seq of its active file's first line
        self._was_active: dict[str, int] = {}  # node -> first seq of an active file read, then replaced
        self._rereading: set[str] = set()  # files replaced: lines up to last_seq are not replays
        self._deferred: set[str] = set()  # active files seen replaced once: list again before rereading
        self._midline: set[str] = set()  # files whose offset is inside a line too long to keep
        self._gapped: dict[str, tuple[int, int]] = {}  # files put off for a gap: (last seq then, times)
        self.backlog = False  # True when the last call stopped at a cap: call again soon
        self._cursor = 0  # where the next call starts when the last one stopped at a cap
        self._budget = self._reads = 0
        self._judge: EventJudge | None = None

    @property
    def judge(self) -> EventJudge:
        assert self._judge is not None, "read only within read_new"
        return self._judge

    def _refuse(self, name: str, exc: Untrusted) -> None:
        self.judge.refuse(f"events/{name}", exc)

    def _verify(self, ref: EventFile, raw: bytes) -> None:
        self.judge.take(
            ref.node, f"events/{ref.name}", raw, copy=ref.role == BASE or ref.name in self._rereading,
            upto=ref.n if ref.role == BASE else None,
        )  # fmt: skip

    def read_new(self, judge: EventJudge) -> bool:
        """Hand every new complete line to `judge`; True when a cap stopped the call."""
        self._judge = judge
        try:
            self._new_events()
        finally:
            self._judge = None
        return self.backlog

    def _new_events(self) -> None:
        self.backlog = False
        try:  # one directory listing; files whose size did not move are not opened
            sizes, refused = self.share.listing(self.folder, SUFFIX, MAX_FILES, EVENT_STEM)
        except OSError:
            return
        for exc in refused:
            self._refuse("", exc)
        if not any(exc.cause == TOO_MANY for exc in refused):
            self._forget(sizes)
        by_node = chains(sizes)
        self._budget, self._reads = PER_CALL, 2 * PER_CALL  # bytes consumed, bytes read: both bounded
        nodes = sorted(by_node)
        first = self._cursor % len(nodes) if nodes else 0  # round robin: big files cannot starve others
        for i, node in enumerate(nodes[first:] + nodes[:first]):
            files = by_node[node]
            if len(files) > MAX_CHAIN:
                self._refuse("", Untrusted(TOO_MANY, f"more than {MAX_CHAIN} event files of {node}"))
                files = files[-MAX_CHAIN:]
            for ref in files:
                done = self._read(ref)
                if done is None:  # out of budget: this node goes first next time
                    self.backlog = True
                    self._cursor = first + i
                    return
                if not done:
                    break  # the rest of this file first: the node's later files wait

    def _forget(self, sizes: dict[str, int]) -> None:
        """Drop what is remembered of files no longer there (retired segments).
        An active file that vanished mid-roll keeps its offset until its sealed
        name shows up."""
        for name in [n for n in self.offsets if n not in sizes]:
            ref = parse_name(name)
            if ref is not None and ref.role == ACTIVE and ref.node in self._active_first:
                continue
            self.offsets.pop(name, None)
            for remembered in (self._rereading, self._deferred, self._midline):
                remembered.discard(name)
            self._gapped.pop(name, None)

    def _read(self, ref: EventFile) -> bool | None:
        """Read on in one file: True once it is read to its end, False if the
        rest must wait (a torn last line, a cap), None when the budget is spent."""
        name, node = ref.name, ref.node
        self._hand_over(ref)
        covered = self.covered.get(node, 0)
        if ref.role == SEALED and ref.n <= covered:
            # Retired: what a rule needs of it is in the base. (Checked after the hand-over
            # above: an active file sealed and retired between two looks leaves no offset.)
            return True
        size = ref.size
        if ref.role != ACTIVE and size > MAX_SEGMENT:
            self._refuse(name, Untrusted(TOO_LARGE, f"larger than {MAX_SEGMENT} bytes: the rest is ignored"))
            size = MAX_SEGMENT
        start = self.offsets.get(name, 0)
        if size == start:
            self._rereading.discard(name)
            self._deferred.discard(name)
            return True
        want = min(PER_FILE, self._budget, self._reads)
        if want < EVENT_LINE.max_bytes + 1:
            return None
        if ref.role != ACTIVE:
            want = min(want, size - start) if size > start else want
        try:
            data = self._read_on(ref, start, want, size)
        except (OSError, Untrusted) as exc:
            if isinstance(exc, Untrusted):
                self._refuse(name, exc)
            elif isinstance(exc, FileNotFoundError):
                # Retired, or sealed under its next name, since the listing (the writer's compaction
                # runs on a thread of its own): list again now, not at the next look.
                self.backlog = True
            return False
        if data is None:  # an active file replaced: list again before reading it anew
            self.backlog = True
            return False
        start = self.offsets.get(name, 0)  # 0 if it was found replaced
        self._reads -= len(data)
        end = data.rfind(b"\n") + 1  # only complete lines
        if end == 0:
            return self._without_line_end(ref, data, start, size)
        return self._fold(ref, data, start, end, size)

    def _hand_over(self, ref: EventFile) -> None:
        """Carry what was read of a node's active file over to the name it is read under now:
        its sealed name, or the writer's next active file once the one read was retired."""
        name, node = ref.name, ref.node
        active = f"{node}{SUFFIX}"
        if ref.role == SEALED and name not in self.offsets and self._active_first.get(node) == ref.n:
            # The active file this tail was reading, sealed under its first seq: go on where it was.
            self.offsets[name] = self.offsets.pop(active, 0)
            if active in self._rereading:
                self._rereading.add(name)
            self._rereading.discard(active)
            self._deferred.discard(active)
            del self._active_first[node]
        elif ref.role == SEALED and name not in self.offsets and self._was_active.get(node) == ref.n:
            # The active file this tail read on until it found it replaced (the listing
            # missed its sealed name then): its lines up to last_seq were read, not replayed.
            self._rereading.add(name)
            del self._was_active[node]
        covered = self.covered.get(node, 0)
        if ref.role == ACTIVE and 0 < self._active_first.get(node, 0) <= covered:
            # The active file this tail read was sealed and retired between two looks (an
            # active file is never covered): this one is the writer's next, read from its start.
            self.offsets.pop(name, None)
            self._rereading.add(name)
            del self._active_first[node]

    def _without_line_end(self, ref: EventFile, data: bytes, start: int, size: int) -> bool:
        """Bytes read with no line end in them: a line too long (skipped), a sealed file's
        last fragment, or a torn last line (waits for its end)."""
        name = ref.name
        if len(data) > EVENT_LINE.max_bytes:
            # No line end within more than a line may hold: skip it; the rest follows.
            self._refuse(name, Untrusted(TOO_LARGE, f"a line longer than {EVENT_LINE.max_bytes} bytes"))
            self.offsets[name] = start + len(data)
            self._midline.add(name)
            self._budget -= len(data)
            self.backlog = True
            return False
        if ref.role != ACTIVE and start + len(data) >= size:
            self.offsets[name] = start + len(data)  # a fragment at the end of a sealed file: no line
            return True
        return False  # a torn last line: it costs no budget, and waits for its end

    def _fold(self, ref: EventFile, data: bytes, start: int, end: int, size: int) -> bool:
        """The complete lines of `data[:end]`, read from `start`: verified into `out`."""
        name, node = ref.name, ref.node
        self._budget -= end
        self._midline.discard(name)
        raws = data[:end].split(b"\n")
        if start == 0 and ref.role != BASE and self._gap_before(ref, raws[0]):
            self.backlog = True  # read once the next listing shows what comes before it
            return False
        if start == 0 and ref.role == BASE:
            if not self._cover(ref, raws[0]):
                self.offsets[name] = size
                return True
            raws = raws[1:]
        if start == 0 and ref.role == ACTIVE:
            self._note_first(node, raws[0])
        for raw in raws:
            if raw.strip():
                self._verify(ref, raw)
        self.offsets[name] = start + end
        if start + end < size:
            if ref.role != ACTIVE and start + len(data) >= size:
                self.offsets[name] = size  # a fragment at the end of a sealed file: no line
                return True
            self.backlog = True
            return False
        return True

    def _read_on(self, ref: EventFile, start: int, want: int, size: int) -> bytes | None:
        """`want` bytes from `start`, checking that the byte before is still a line
        end (the file was not replaced by another that grew past `start`). A
        replaced sealed file or base is read again from the start at once; a
        replaced active file only at the next call, after another listing (it
        may just have been sealed, and that name must be read first)."""
        path = join(self.folder, ref.name)
        if start == 0 or ref.name in self._midline:
            return self._read_at(path, want, start)
        data = self._read_at(path, want + 1, start - 1)
        if (
            size >= start
            and data[:1] == b"\n"
            and (ref.role != ACTIVE or self._continues(ref.node, data[1:]))
        ):
            return data[1:]
        if ref.role == ACTIVE and ref.name not in self._deferred:
            self._deferred.add(ref.name)
            return None
        self._deferred.discard(ref.name)
        self._rereading.add(ref.name)  # ingestion is idempotent: lines up to last_seq are skipped
        self.offsets[ref.name] = 0
        if ref.role == ACTIVE and ref.node in self._active_first:  # sealed, its name not listed yet
            self._was_active[ref.node] = self._active_first.pop(ref.node)
        return self._read_at(path, want, 0)

    def _read_at(self, path: str, want: int, offset: int) -> bytes:
        """Up to `want` bytes at `offset`; FileNotFoundError if the file is gone since the listing."""
        data = self.share.read(path, want, offset=offset, chunk=True)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "gone since the listing", path)
        return data

    def _continues(self, node: str, data: bytes) -> bool:
        """The first whole line read on in an active file follows the last seq
        accepted from its node. A file sealed while this tail read it, replaced
        by the writer's next one whose line ends fall at the same offset (lines
        of one length), does not: its line there is newer by more than one."""
        last, end = self.judge.last(node), data.find(b"\n")
        seq = self.judge.signed_seq(node, data[:end]) if last and end > 0 else None
        return seq is None or seq <= last + 1

    def _gap_before(self, ref: EventFile, raw: bytes) -> bool:
        """A file read from its start whose first line is newer by more than one
        than what this tail has: a listing taken while the writer sealed and
        retired may have missed the segments between (a directory listing is no
        snapshot). List again before reading it, up to `GAP_LISTINGS` times
        without anything new read meanwhile; a gap still there is retired."""
        last = max(self.judge.last(ref.node), self.covered.get(ref.node, 0))
        seq = self.judge.signed_seq(ref.node, raw)  # a writer's first seq is 1: a new tail checks too
        waited_at, times = self._gapped.get(ref.name, (last, 0))
        times = times if waited_at == last else 0  # something was read meanwhile: a new gap
        if seq is None or seq <= last + 1 or times >= GAP_LISTINGS:
            self._gapped.pop(ref.name, None)
            return False
        self._gapped[ref.name] = (last, times + 1)
        return True

    def _cover(self, ref: EventFile, raw: bytes) -> bool:
        """A base's header: signed by the pool, naming its own node and cover."""
        try:
            doc = load_object(raw, EVENT_LINE, "base header")
        except Untrusted as exc:
            self._refuse(ref.name, exc)
            return False
        if not header_ok(doc, ref, self.key):
            cause = UNSIGNED if self.key and "sig" not in doc else FORGED
            self._refuse(
                ref.name, Untrusted(cause, "the header of a base is not validly signed for its name")
            )
            return False
        self.covered[ref.node] = max(self.covered.get(ref.node, 0), ref.n)
        return True

    def _note_first(self, node: str, raw: bytes) -> None:
        try:
            seq = load_object(raw, EVENT_LINE, "event line").get("seq")
        except Untrusted:
            return
        if isinstance(seq, int) and not isinstance(seq, bool):
            self._active_first[node] = seq
