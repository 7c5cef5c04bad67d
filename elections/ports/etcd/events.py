"""`EtcdEvents`: the event streams of the backend port on etcd (docs/design.md §6,
§5.4): one key per event line, `events/<node>/<seq>`, the same lines as a
share's `events/<node>.jsonl` holds. The rules of a line are the event record
layer's (`event_records`); `EtcdEventSink` and `EtcdEventTail` are it over
these streams.

- `append` creates the key of its seq in a transaction that requires the key
  not to exist (never a blind put: an event once written is never
  overwritten); a seq taken is an OSError.
- `last_seq` is the highest seq among a node's keys, valid or not: a key once
  taken is never written again, so the next seq must pass every one.
- `read_new` reads the keys created since the cursor's revision, in creation
  order, at most `PER_CALL` per call; a key of no node or a value too large is
  refused here, every other line judged above. With the pool's watch
  connected and no event key changed since the last call, a call costs no
  request until its fallback timer runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from elections.core.evidence import Refusals
from elections.core.untrusted import EVENT_LINE, TOO_LARGE, WRONG_NODE, Untrusted
from elections.ports.etcd.client import created_at, gateway_int, prefix_end, put, unb64
from elections.ports.etcd.pool import EVENTS, NODE, EtcdPool
from elections.ports.etcd.watch import PrefixWatch
from elections.ports.events.event_records import PoolEventSink, PoolEventTail
from elections.ports.events.event_streams import EventJudge, SeqOf
from stkhost.clock import Clock

T = TypeVar("T")
PER_CALL = 64  # event keys read per call
ANSWER_CAP = 8 << 20  # bytes of one answer (64 lines of at most 64 KiB, base64, with room)
SEQ_DIGITS = 12


def event_key(node: str, seq: int) -> str:
    return f"{EVENTS}{node}/{seq:0{SEQ_DIGITS}d}"


@dataclass
class EventsRead:
    """A reader's cursor: the create_revision of the last key read, and the last full read."""

    after: int = 0
    backlog: bool = False
    read_at: tuple[int, float] | None = None  # (events generation, when) of the last full read


class EtcdEvents:
    def __init__(self, pool: EtcdPool, watch: bool = True) -> None:
        self.pool = pool
        self.where = pool.describe()
        self._watch = watch
        self._watcher: PrefixWatch | None = None

    def run(self, fn: Callable[[], T]) -> T:
        return fn()  # every call of the client has its deadline

    # -- writing ---------------------------------------------------------------------------
    def append(self, node: str, seq: int, line: bytes) -> None:
        key = self.pool.key(event_key(node, seq))
        result = self.pool.client.txn([created_at(key, 0)], [put(key, line)])
        self.pool.touched("events")
        if not result.get("succeeded"):
            raise OSError(f"event {seq} of {node} is already in the pool's log")

    def last_seq(self, node: str, seq_of: SeqOf) -> int:
        rel = f"{EVENTS}{node}/"
        doc = self.pool.client.range(self.pool.key(rel), prefix_end(self.pool.key(rel)), limit=1,
                                     keys_only=True, sort_order="DESCEND", sort_target="KEY")  # fmt: skip
        for kv in doc.get("kvs") or []:
            seq = unb64(kv.get("key")).decode("utf-8", "replace").rpartition("/")[2]
            return int(seq) if seq.isdigit() else 0
        return 0

    # -- reading ---------------------------------------------------------------------------
    def cursor(self) -> EventsRead:
        if self._watch and self._watcher is None:
            self._watcher = self.pool.watching()
        return EventsRead()

    def _unchanged(self, at: EventsRead) -> bool:
        w = self._watcher
        if at.backlog or at.read_at is None or w is None or not w.connected:
            return False
        gen, when = at.read_at
        return gen == w.generation["events"] and time.monotonic() - when < self.pool.fallback

    def read_new(self, at: EventsRead, judge: EventJudge) -> bool:
        if self._unchanged(at):
            return False
        gen = self._watcher.generation["events"] if self._watcher else 0
        opts = {"sort_order": "ASCEND", "sort_target": "CREATE", "min_create_revision": at.after + 1}
        kvs, more = self.pool.bounded_range(EVENTS, PER_CALL, EVENT_LINE.max_bytes, ANSWER_CAP, **opts)
        for kv in kvs:
            at.after = max(at.after, kv.create)
            node, _, seq_text = kv.key[len(EVENTS) :].partition("/")
            source = f"events/{kv.key[len(EVENTS) :][:80]}"
            if not NODE.fullmatch(node) or not seq_text.isdigit():
                judge.refuse(source, Untrusted(WRONG_NODE, "event key is not events/<node>/<seq>"))
            elif kv.value is None:
                too_long = f"an event longer than {EVENT_LINE.max_bytes} bytes"
                judge.refuse(source, Untrusted(TOO_LARGE, too_long))
            else:
                judge.take(node, source, kv.value, named_seq=gateway_int(seq_text))
        at.backlog = more
        at.read_at = (gen, time.monotonic())
        return more


class EtcdEventSink(PoolEventSink):
    """This node's signed events, one key each (the event record layer over `EtcdEvents`)."""

    def __init__(self, pool: EtcdPool, node: str, clock: Clock, key: str) -> None:
        super().__init__(EtcdEvents(pool, watch=False), node, clock, key)


class EtcdEventTail(PoolEventTail):
    """Every node's new, verified events (the event record layer over `EtcdEvents`)."""

    def __init__(self, pool: EtcdPool, key: str, refusals: Refusals | None = None, clock: Clock | None = None,
                 watch: bool = True) -> None:  # fmt: skip
        super().__init__(EtcdEvents(pool, watch=watch), key, refusals, clock)
