"""The event-log operations of the backend port (docs/design.md §6, §5.4): each
node's stream of event lines, as bytes. Every rule of what a line must be —
signed, naming its own node, fields in range, a seq that only grows — lives
once, above this port, in `event_records` (`PoolEventSink`, `PoolEventTail`);
a stream never trusts a line, and looks inside one only where its own format
needs it (a share's segments are named by their first seq).

Implemented by `share_events.ShareEvents` (`events/<node>.jsonl` and its
segments, local or over SMB), `etcd.events.EtcdEvents` (`events/<node>/<seq>`)
and `memory_backend.MemoryBackend` (a list per node). A backend's
`event_streams(retention)` opens them.

The contract of every implementation:

- `append(node, seq, line)` adds one line (JSON, no line end: the stream adds
  its own) to `node`'s stream, after every line there, and never over one: a
  seq already taken where the stream can tell (etcd's keys) is an OSError.
- `last_seq(node, seq_of)` is the highest seq the stream holds for `node`,
  `seq_of(raw)` judging a line the stream has to read (None: not one of this
  writer's); what the stream names by seq (a key, a segment) counts as named.
- `cursor()` is a new reader's position (nothing read yet); `read_new(cursor,
  judge)` hands every complete line new since `cursor` to `judge.take`, in
  each node's order, bounded per call (a cap reached: True, call again soon),
  and moves the cursor past every line handed on, accepted or not. What the
  stream itself refuses (a listing too long, a value too large, a key of no
  node) goes to `judge.refuse`.
- `run(fn)` runs one operation under the backend's deadline; a hung store
  raises `StoreUnavailable`; what the store answered (OSError, `Untrusted`)
  passes through as raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from elections.core.untrusted import Untrusted

T = TypeVar("T")
SeqOf = Callable[[bytes], "int | None"]


class EventJudge(Protocol):
    """The event record layer as a stream's read sees it (`event_records.PoolEventTail`)."""

    def take(
        self, node: str, source: str, raw: bytes, copy: bool = False, upto: int | None = None,
        named_seq: int | None = None,
    ) -> bool:  # fmt: skip
        """Judge one line of `node`'s stream (`source` names it in logs and counts); True if
        accepted. `copy`: a seq not above the last is a copy already seen, not a replay;
        `upto`: the line is in a base that covers seqs up to this; `named_seq`: the seq the
        stream names the line by (etcd's key), which the line must carry."""
        ...

    def refuse(self, source: str, exc: Untrusted) -> None: ...

    def last(self, node: str) -> int:
        """The highest seq accepted from `node` (0: none)."""
        ...

    def signed_seq(self, node: str, raw: bytes) -> int | None:
        """The seq of a validly signed line of `node`, else None (not judged: nothing counted)."""
        ...


class EventStreams(Protocol):
    where: str  # shown in logs (never a password)

    def run(self, fn: Callable[[], T]) -> T: ...

    def append(self, node: str, seq: int, line: bytes) -> None: ...

    def last_seq(self, node: str, seq_of: SeqOf) -> int: ...

    def cursor(self) -> Any: ...

    def read_new(self, cursor: Any, judge: EventJudge) -> bool: ...
