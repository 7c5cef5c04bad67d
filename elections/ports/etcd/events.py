"""The pool's event log on etcd: one key per signed event line,
`events/<node>/<seq>` (DESIGN.md §6, §5.4), the same lines as
`elections/ports/eventlog.py` writes to `events/<node>.jsonl`.

`EtcdEventSink.record()` creates the key of its next seq in a transaction that
requires the key not to exist (never a blind put: an event once written is
never overwritten). `EtcdEventTail.new_events()` reads the keys created since
its last call, in creation order, at most `PER_CALL` per call (`backlog` says
there is more), and hands on only evidence, exactly as the file tail does:
each line bounded, signed with the pool key, naming the node of its key, with
fields of the right type and range (`check_event`), and with a `seq` higher
than the last accepted from that node; anything else is refused (counted,
logged once per key and cause) and the tail moves past it.
With the pool's watch connected and no event key changed since the last call,
a call costs no request until its fallback timer runs out.
"""

from __future__ import annotations

import json
import logging
import threading
import time
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
    check_event,
    load_object,
)
from elections.ports.clock import Clock
from elections.ports.etcd.client import as_int, created_at, prefix_end, put, unb64
from elections.ports.etcd.pool import EVENTS, NODE, EtcdPool, Kv
from elections.ports.store import SECURITY_CAUSES

log = logging.getLogger("stkrelay.eventlog")

PER_CALL = 64  # event keys read per call
ANSWER_CAP = 8 << 20  # bytes of one answer (64 lines of at most 64 KiB, base64, with room)
SEQ_DIGITS = 12


def event_key(node: str, seq: int) -> str:
    return f"{EVENTS}{node}/{seq:0{SEQ_DIGITS}d}"


class EtcdEventSink:
    def __init__(self, pool: EtcdPool, node: str, clock: Clock, key: str) -> None:
        self.pool = pool
        self.node = node
        self.clock = clock
        self.key = key
        self._lock = threading.Lock()
        self._seq: int | None = None  # read from etcd at the first write

    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None:
        """Create one signed event key; `seq` defaults to one more than the last of this node.
        Raises `StoreUnavailable` (etcd unreachable) or OSError (that seq is already taken)."""
        with self._lock:
            if self._seq is None:
                self._seq = self._last_seq()
            seq = self._seq + 1 if seq is None else seq
            doc = {"node": self.node, "seq": seq, "kind": kind, "epoch": epoch,
                   "at": self.clock.wall().isoformat(), "reason": reason, **extra}  # fmt: skip
            doc["sig"] = sign(doc, self.key)
            key = self.pool.key(event_key(self.node, seq))
            result = self.pool.client.txn(
                [created_at(key, 0)], [put(key, json.dumps(doc, ensure_ascii=False).encode())]
            )
            self.pool.touched("events")
            if not result.get("succeeded"):
                raise OSError(f"event {seq} of {self.node} is already in the pool's log")
            self._seq = max(self._seq, seq)

    def last_seq(self) -> int:
        """The highest seq of this node's event keys (read once, then kept)."""
        with self._lock:
            if self._seq is None:
                self._seq = self._last_seq()
            return self._seq

    def _last_seq(self) -> int:
        """The highest seq among this node's event keys (valid or not: a key once
        taken is never written again, so the next seq must pass every one)."""
        rel = f"{EVENTS}{self.node}/"
        doc = self.pool.client.range(self.pool.key(rel), prefix_end(self.pool.key(rel)), limit=1,
                                     keys_only=True, sort_order="DESCEND", sort_target="KEY")  # fmt: skip
        for kv in doc.get("kvs") or []:
            seq = unb64(kv.get("key")).decode("utf-8", "replace").rpartition("/")[2]
            return int(seq) if seq.isdigit() else 0
        return 0


class EtcdEventTail:
    def __init__(self, pool: EtcdPool, key: str, refusals: Refusals | None = None, clock: Clock | None = None,
                 watch: bool = True) -> None:  # fmt: skip
        self.pool = pool
        self.key = key
        self.clock = clock
        self.refusals = refusals if refusals is not None else Refusals()
        self.watch = pool.watching() if watch else None
        self.last_seq: dict[str, int] = {}
        self.after = 0  # create_revision of the last key read
        self.backlog = False
        self._read_at: tuple[int, float] | None = None  # (events generation, when) of the last full read

    def _refuse(self, source: str, exc: Untrusted) -> None:
        at, now = ((self.clock.wall().isoformat(timespec="seconds"), self.clock.monotonic())
                   if self.clock else ("", None))  # fmt: skip
        if self.refusals.note(source, exc.cause, exc.detail, at, now):
            level = logging.ERROR if exc.cause in SECURITY_CAUSES else logging.WARNING
            prefix = "SECURITY: " if exc.cause in SECURITY_CAUSES else ""
            log.log(level, "%signoring event %s: %s (%s)", prefix, source, exc.detail, exc.cause)

    def _unchanged(self) -> bool:
        w = self.watch
        if self.backlog or self._read_at is None or w is None or not w.connected:
            return False
        gen, at = self._read_at
        return gen == w.generation["events"] and time.monotonic() - at < self.pool.fallback

    def new_events(self) -> list[dict[str, Any]]:
        """New verified events; `StoreUnavailable` when etcd does not answer."""
        if self._unchanged():
            return []
        gen = self.watch.generation["events"] if self.watch else 0
        opts = {"sort_order": "ASCEND", "sort_target": "CREATE", "min_create_revision": self.after + 1}
        kvs, more = self.pool.bounded_range(EVENTS, PER_CALL, EVENT_LINE.max_bytes, ANSWER_CAP, **opts)
        out = []
        for kv in kvs:
            self.after = max(self.after, kv.create)
            doc = self._verify(kv)
            if doc is not None:
                out.append(doc)
        self.backlog = more
        self._read_at = (gen, time.monotonic())
        return out

    def _verify(self, kv: Kv) -> dict[str, Any] | None:
        node, _, seq_text = kv.key[len(EVENTS) :].partition("/")
        source = f"events/{kv.key[len(EVENTS) :][:80]}"
        try:
            if not NODE.fullmatch(node) or not seq_text.isdigit():
                raise Untrusted(WRONG_NODE, "event key is not events/<node>/<seq>")
            if kv.value is None:
                raise Untrusted(TOO_LARGE, f"an event longer than {EVENT_LINE.max_bytes} bytes")
            doc = load_object(kv.value, EVENT_LINE, "event line")
            if not signature_ok(doc, self.key):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, "event line is not validly signed")
            if doc.get("node") != node:
                raise Untrusted(WRONG_NODE, f"event line names node {str(doc.get('node'))[:64]!r}")
            seq = doc.get("seq")
            if not isinstance(seq, int) or isinstance(seq, bool) or seq != as_int(seq_text):
                raise Untrusted(FORGED, "event line's seq is not its key's")
            check_event(doc)  # a field of the wrong type or out of range: this event alone is refused
            last = self.last_seq.get(node, 0)
            if seq <= last:
                raise Untrusted(REPLAYED, f"event seq {seq} ≤ {last} already seen from {node}")
        except Untrusted as exc:
            self._refuse(source, exc)
            return None
        self.last_seq[node] = seq
        return doc
