"""`ShareEvents`: the event streams of the backend port on a share's folder
(docs/design.md §6), local or mounted (`share.LocalShare`) or over SMB
(`smbshare.SmbShare`): node `N`'s stream is `events/N.jsonl`, one line per
event, appended; full files are sealed into segments and old segments retired
by the writer (`elections.ports.events.segments`). Reading them is
`eventtail.EventFiles`: offsets, torn lines, segments, replaced files.

Never `parents=True`: recreating a vanished share's folder would make an
empty lease dir appear where the real one was. A link in place of `events/`
is moved aside: nothing is written through it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

from elections.core.retention import Retention
from elections.core.untrusted import Untrusted
from elections.ports.events.event_streams import EventJudge, SeqOf
from elections.ports.events.eventtail import EventFiles
from elections.ports.events.segments import (
    BASE,
    EVENT_STEM,
    SEALED,
    SUFFIX,
    Compactor,
    chains,
    compactor_for,
    first_seq,
    join,
    sealed_name,
)
from elections.ports.share.share import Share
from elections.ports.share.sharefiles import MAX_SCAN, ShareDeadline
from stkhost.clock import Clock

log = logging.getLogger("stkrelay.eventlog")
T = TypeVar("T")

EVENTS_DIR = "events"
TAIL_FOR_SEQ = 256 << 10  # bytes of its own file a restarting writer reads to resume its seq


class ShareEvents:
    """The event files of a folder of `share`. `retention=None`: a node's file grows
    without end (tools, tests); `stems` names a node's file when it is not `<node>`."""

    def __init__(
        self, share: Share, folder: str, pool_key: str, clock: Clock | None,
        retention: Retention | None = Retention(), deadline: ShareDeadline | None = None,
        stems: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.share = share
        self.where = share.where
        self.folder = folder
        self.pool_key = pool_key  # signs the bases the compactor writes, verifies their headers
        self.clock = clock
        self.retention = retention
        self.deadline = deadline
        self.stems = dict(stems or {})
        self._written: dict[str, int] = {}  # node -> the highest seq appended here

    def run(self, fn: Callable[[], T]) -> T:
        return self.deadline.run(fn) if self.deadline is not None else fn()

    def _rel(self, node: str) -> tuple[str, str]:
        stem = self.stems.get(node, node)
        return stem, join(self.folder, stem + SUFFIX)

    def compactor(self, node: str) -> Compactor | None:
        """The one compactor of this process for `node`'s files (None without retention)."""
        if self.retention is None or self.clock is None:
            return None
        stem, _ = self._rel(node)
        return compactor_for(self.share, self.folder, stem, node, self.pool_key, self.clock, self.retention,
                             self.deadline)  # fmt: skip

    # -- writing ---------------------------------------------------------------------------
    def append(self, node: str, seq: int, line: bytes) -> None:
        stem, rel = self._rel(node)
        data = line + b"\n"
        self.share.ensure_dir(self.folder)
        rolled = self._roll(stem, rel, len(data), self._written.get(node) or seq - 1)
        self.share.append_line(rel, data)
        self._written[node] = max(self._written.get(node, 0), seq)
        compactor = self.compactor(node) if rolled else None
        if compactor is not None:
            compactor.kick()

    def _roll(self, stem: str, rel: str, adding: int, last: int) -> bool:
        """Seal the active file if this line would take it past the segment size.
        The size is read from the file each time: other writers of this node
        (the supervisor's release, another sink of this process) roll it too."""
        if self.retention is None:
            return False
        try:
            size = self.share.size(rel) or 0
        except (OSError, Untrusted):
            return False  # the append says what is wrong
        if size == 0 or size + adding <= self.retention.segment_bytes:
            return False
        first = first_seq(self.share, rel)
        target = join(self.folder, sealed_name(stem, first if first is not None else last))
        try:
            if self.share.planted(target) or self.share.size(target) is not None:
                # Nothing of this writer's (sealed names are new names): moved aside.
                log.warning("events/%s was in the way of sealing %s: moved aside", target, stem)
                self.share.quarantine(target)
            self.share.rename(rel, target)
        except FileNotFoundError:
            return False
        except (OSError, Untrusted) as exc:  # held open by a reader (Windows, SMB): the next line tries again
            log.info("events/%s not sealed yet: %s", rel, exc)
            return False
        return True

    def last_seq(self, node: str, seq_of: SeqOf) -> int:
        """The highest seq of `node`'s own lines: its active file, else its newest segment or base."""
        stem, rel = self._rel(node)
        last = self._last_in(rel, seq_of)
        if last or self.retention is None:
            return last
        try:
            sizes, _ = self.share.listing(self.folder, SUFFIX, MAX_SCAN, EVENT_STEM)
        except OSError:
            return 0
        files = chains(sizes).get(stem, [])
        for ref in reversed(files):
            if ref.role == SEALED:
                last = max(last, ref.n, self._last_in(join(self.folder, ref.name), seq_of))
                break
        return max([last, *(ref.n for ref in files if ref.role == BASE)])

    def _last_in(self, rel: str, seq_of: SeqOf) -> int:
        """The highest seq among the writer's own valid lines near the end of a file."""
        try:
            size = self.share.size(rel) or 0
            data = self.share.read(rel, TAIL_FOR_SEQ, offset=max(0, size - TAIL_FOR_SEQ), chunk=True) or b""
        except (OSError, Untrusted):
            return 0
        return max((seq_of(raw) or 0 for raw in data.split(b"\n")), default=0)

    # -- reading ---------------------------------------------------------------------------
    def cursor(self) -> EventFiles:
        return EventFiles(self.share, self.folder, self.pool_key)

    def read_new(self, cursor: EventFiles, judge: EventJudge) -> bool:
        return cursor.read_new(judge)


def events_of(share: Share, pool_key: str, clock: Clock, retention: Retention) -> ShareEvents:
    """The pool's event streams in `events/` of its share, with its retention (`EVENTS_*`)."""
    return ShareEvents(share, EVENTS_DIR, pool_key, clock, retention, share.deadline)
