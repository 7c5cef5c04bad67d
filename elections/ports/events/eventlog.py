"""The pool's event log on a share, as its users open it (docs/design.md §6, §5.4):
`JsonlEventSink` and `EventTail` are the event record layer
(`event_records.PoolEventSink`, `PoolEventTail`: every rule, written once)
over a folder's event files (`share_events.ShareEvents`), from a local path or
a path in a `Share`; `read_events` reads one file unverified, for tools.

`JsonlEventSink` appends this node's events to `events/<node>.jsonl`, each
line signed with the pool key (the `EventSink` of processes without a
database, such as the contender script, and the pool's copy of an agent's
history); full files are sealed into segments and old segments retired
(`elections.ports.events.segments`). `EventTail` reads every node's new, verified
lines. All I/O goes through a `Share` (a local folder, or SMB).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from elections.core.evidence import Refusals
from elections.core.retention import Retention
from elections.core.untrusted import EVENT_LINE, Untrusted, load_object
from elections.ports.events.event_records import PoolEventSink, PoolEventTail
from elections.ports.events.eventtail import MAX_FILES, PER_CALL, PER_FILE, EventFiles
from elections.ports.events.segments import SUFFIX
from elections.ports.events.share_events import ShareEvents
from elections.ports.share.share import LocalShare, Share, parent_of
from elections.ports.share.sharefiles import ShareDeadline, read_regular
from stkhost.clock import Clock

__all__ = ["MAX_FILES", "PER_CALL", "PER_FILE", "EventTail", "JsonlEventSink", "Retention", "read_events"]


class JsonlEventSink(PoolEventSink):
    """Appends this node's signed events to its active file, sealing it into a
    segment once it holds `retention.segment_bytes` (`elections.ports.events.segments`)
    and then retiring, on a thread of its own, what the retention rule lets
    go. `retention=None`: one file that grows without end (tools, tests).

    A seq is never reused. Readers refuse a seq not above the highest they took
    from this node (a replay, docs/design.md §5.4) and ingestion is idempotent on it,
    so a reused seq is an event every other agent drops. Resuming from the share
    alone would reuse the seqs of an active file that was deleted (anyone who
    can write the share can delete): with `mark` (a local file, never on the
    share) the writer also remembers the highest seq it wrote, and resumes
    above both. An agent's `DbEventSink` has that memory in its database."""

    streams: ShareEvents

    def __init__(
        self, path: str | os.PathLike[str], node: str, clock: Clock, key: str = "",
        deadline: ShareDeadline | None = None, share: Share | None = None,
        retention: Retention | None = Retention(),
        mark: str | os.PathLike[str] | None = None,
    ) -> None:  # fmt: skip
        # `path` is a local file, or with `share` the file's path in that share.
        local = Path(path)
        share, rel = (share, str(path)) if share else (LocalShare(local.parent), local.name)
        name = rel.rsplit("/", 1)[-1]
        stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
        streams = ShareEvents(share, parent_of(rel), key, clock, retention, deadline, stems={node: stem})
        super().__init__(streams, node, clock, key, mark)
        self.compactor = streams.compactor(node)


class EventTail(PoolEventTail):
    """Reads new, verified, complete lines of every node's event files since the last call
    (`eventtail.EventFiles`: how; `event_records.PoolEventTail`: what is evidence)."""

    cursor: EventFiles

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
        share, folder = (share, str(events_dir)) if share else (LocalShare(Path(events_dir)), "")
        streams = ShareEvents(share, folder, key, clock, None, deadline)
        super().__init__(streams, key, refusals, clock)

    @property
    def offsets(self) -> dict[str, int]:
        """How far each file was read (name -> bytes)."""
        return self.cursor.offsets


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
