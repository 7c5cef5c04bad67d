"""`MemoryBackend`: the backend port on a dict, in this process (in-process
tests of the runtime: `tests/memstore.py`). The records above it are the real
ones (`records.PoolStore`): signed, verified, refused as on a share.

A revision is a counter of the writes to a key ("" for no record, as a
share's read of no file says it); `cas` and `claim` hold one lock, so a claim
is atomic against every other writer of the dict.

It is its own event streams too (`event_streams.EventStreams`): a list of
lines per node, appended, read on from a cursor (node -> lines read) at most
`EVENTS_PER_CALL` lines a call; the event record layer above is the real one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from elections.core.retention import Retention
from elections.core.skew import ClockReading, from_window
from elections.core.untrusted import LEASE, TOO_LARGE, Untrusted
from elections.ports.events.event_streams import EventJudge, SeqOf
from elections.ports.store.backend import (
    LEASE_KEY,
    Build,
    Claimed,
    Got,
    Listing,
    Refuse,
    WriteOutcome,
    log_only,
    plain_details,
    poll_wait,
)

T = TypeVar("T")
EVENTS_PER_CALL = 64  # event lines handed on per call


class MemoryBackend:
    counter_key = None
    reads_one_by_one = True
    record_end = b"\n"

    def __init__(
        self, name: str = "memory", of: MemoryBackend | None = None, refuse: Refuse = log_only
    ) -> None:
        self.name = name
        self.where = name
        self.refuse = refuse  # the record layer's count-and-log (`backend.counted`)
        if of is None:
            self.data: dict[str, bytes] = {}
            self._revision: dict[str, int] = {}
            self._writes = [0]
            self._stamp: dict[str, float] = {}  # key -> when it was last written, on this process's clock
            self._lock = threading.RLock()
            self.event_lines: dict[str, list[bytes]] = {}  # node -> its stream of lines, in order
        else:  # another client of the same records (another machine's view)
            self.data, self._revision, self._writes, self._lock = of.data, of._revision, of._writes, of._lock
            self._stamp, self.event_lines = of._stamp, of.event_lines

    def client(self) -> MemoryBackend:
        """Another client of these records, with its own record layer above it."""
        return MemoryBackend(self.name, of=self)

    def describe(self) -> str:
        return self.name

    def details(self) -> dict[str, Any]:
        return plain_details(self.name)

    def source(self, key: str) -> str:
        return key

    def run(self, fn: Callable[[], T]) -> T:
        with self._lock:
            return fn()

    # -- reading ---------------------------------------------------------------------
    def revision(self, key: str) -> str:
        return str(self._revision[key]) if key in self.data else ""

    def get(self, key: str, max_bytes: int, fresh: bool = False) -> Got:
        with self._lock:
            raw = self.data.get(key)
            if raw is not None and len(raw) > max_bytes:
                return Got(None, self.revision(key), refused=Untrusted(TOO_LARGE, f"{key} is too large"))
            return Got(raw, self.revision(key))

    def names(self, prefix: str, limit: int) -> set[str]:
        with self._lock:
            return {k[len(prefix) :] for k in sorted(self.data) if k.startswith(prefix)}

    def list(self, prefix: str, limit: int, max_bytes: int, fresh: bool = False) -> Listing:
        with self._lock:
            out = Listing()
            for name in sorted(self.names(prefix, limit)):
                if len(out.found) >= limit:
                    out.refused.append(Untrusted("too_many", f"more than {limit} records under {prefix}"))
                    break
                out.found[name] = self.get(prefix + name, max_bytes)
            return out

    # -- writing -----------------------------------------------------------------------
    def put(self, key: str, data: bytes | None) -> None:
        """A write without a compare (what anyone may do; also the tests' arranging)."""
        with self._lock:
            if data is None:
                self.data.pop(key, None)
            else:
                self.data[key] = data
            self._writes[0] += 1
            self._revision[key] = self._writes[0]
            self._stamp[key] = time.time()

    def cas(
        self, key: str, data: bytes, expected: str | None, fence: Callable[[], bool] | None = None,
        hold_s: float | None = None, renewal: bool = False,
    ) -> tuple[WriteOutcome, str]:  # fmt: skip
        with self._lock:
            if expected is not None and self.revision(key) != expected:
                return WriteOutcome.CHANGED, ""
            if fence is not None and not fence():
                return WriteOutcome.FENCED, ""
            self.put(key, data)
            return WriteOutcome.WRITTEN, self.revision(key)

    def claim(self, expect: str, build: Build) -> Claimed:
        with self._lock:
            if self.revision(LEASE_KEY) != expect:
                return Claimed(WriteOutcome.CHANGED)
            writes = list(build(self.get(LEASE_KEY, LEASE.max_bytes)) or ())
            if not writes or any(
                w.expected is not None and self.revision(w.key) != w.expected for w in writes
            ):
                return Claimed(WriteOutcome.CHANGED)
            for write in writes:  # in order: the claims, then the lease
                self.put(write.key, write.data)
            return Claimed(WriteOutcome.WRITTEN, {w.key: self.revision(w.key) for w in writes})

    def delete(self, key: str) -> bool:
        with self._lock:
            if key not in self.data:
                return False
            self.put(key, None)
            return True

    def wait_change(self, key: str, timeout: float, stop: threading.Event | None = None) -> bool:
        return poll_wait(timeout, stop)

    def measure_clock(self, key: str, window: tuple[float, float] | None) -> ClockReading | None:
        """The time the dict took this member's last write, on this process's clock."""
        stamp = self._stamp.get(key)
        if window is None or stamp is None:
            return None
        return from_window(*window, stamp, 0.0, "memory")

    # -- the event log ------------------------------------------------------------------
    def event_streams(self, retention: Retention | None = None) -> MemoryBackend:
        return self

    def append(self, node: str, seq: int, line: bytes) -> None:
        with self._lock:
            self.event_lines.setdefault(node, []).append(line)

    def last_seq(self, node: str, seq_of: SeqOf) -> int:
        with self._lock:
            return max((seq_of(raw) or 0 for raw in self.event_lines.get(node, [])), default=0)

    def cursor(self) -> dict[str, int]:
        return {}

    def read_new(self, cursor: dict[str, int], judge: EventJudge) -> bool:
        with self._lock:
            budget = EVENTS_PER_CALL
            for node in sorted(self.event_lines):
                lines = self.event_lines[node]
                for raw in lines[cursor.get(node, 0) : cursor.get(node, 0) + budget]:
                    cursor[node] = cursor.get(node, 0) + 1
                    budget -= 1
                    judge.take(node, f"events/{node}", raw)
                if budget == 0:
                    return any(cursor.get(n, 0) < len(ls) for n, ls in self.event_lines.items())
            return False
