"""The pool's event log over any `EventStreams` (docs/design.md §6, §5.4), written
once: `PoolEventSink` signs and appends this node's events, `PoolEventTail`
reads every node's new ones and hands on only evidence.

- A line is signed with the pool key on write. A seq is never reused: the
  sink resumes above the highest its stream holds (and, with `mark`, a local
  file that survives the stream's being deleted) — readers refuse a seq not
  above the last they took from that node, so a reused one would be dropped.
- On read every line is bounded and parsed by the guarded reader
  (`core.untrusted`), signed with the pool key, names its own node, carries
  fields of the right type and range (`check_event`: a seq of 2**63 or an
  epoch "x" is refused alone, the rest of the batch goes on), and a seq
  strictly above the last accepted from its node. Anything else is refused —
  counted in `refusals`, logged once per source and cause — and the tail
  moves past it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from elections.core.evidence import DETAIL_CHARS, SOURCE_CHARS, Refusals, printable
from elections.core.lease import sign, signature_ok
from elections.core.untrusted import (
    EVENT_LINE,
    FORGED,
    REPLAYED,
    SECURITY_CAUSES,
    UNSIGNED,
    WRONG_NODE,
    Untrusted,
    check_event,
    load_object,
)
from elections.ports.events.event_streams import EventStreams
from stkhost.clock import Clock
from stkhost.files import write_atomic

log = logging.getLogger("stkrelay.eventlog")


def integer_seq(doc: dict[str, Any]) -> int | None:
    seq = doc.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


class PoolEventSink:
    """Appends this node's signed events to its stream (`EventSink` of `stores`)."""

    def __init__(
        self, streams: EventStreams, node: str, clock: Clock, pool_key: str = "",
        mark: str | os.PathLike[str] | None = None,
    ) -> None:  # fmt: skip
        self.streams = streams
        self.node = node
        self.clock = clock
        self.pool_key = pool_key
        self.mark = Path(mark) if mark is not None else None
        self._lock = threading.Lock()
        self._seq: int | None = None  # read from the stream at the first write (it may be hung now)

    def record(self, kind: str, epoch: int, reason: str, seq: int | None = None, **extra: Any) -> None:
        """Append one signed event; `seq` defaults to one more than the last written here.
        Raises OSError (that seq is taken, the store said no), `Untrusted` (a link in its
        place) or `StoreUnavailable` (a hung store)."""
        self.streams.run(lambda: self._record(kind, epoch, reason, seq, extra))

    def last_seq(self) -> int:
        """The highest seq this writer wrote (its mark and the stream, read once; then kept)."""
        return self.streams.run(self._last_written)

    def _last_written(self) -> int:
        with self._lock:
            return self._resumed()

    def _resumed(self) -> int:
        if self._seq is None:
            self._seq = max(self._remembered(), self.streams.last_seq(self.node, self._own_seq))
        return self._seq

    def _record(self, kind: str, epoch: int, reason: str, seq: int | None, extra: dict[str, Any]) -> None:
        with self._lock:
            last = self._resumed()
            seq = last + 1 if seq is None else seq
            doc = {"node": self.node, "seq": seq, "kind": kind, "epoch": epoch,
                   "at": self.clock.wall().isoformat(), "reason": reason, **extra}  # fmt: skip
            if self.pool_key:
                doc["sig"] = sign(doc, self.pool_key)
            self.streams.append(self.node, seq, json.dumps(doc, ensure_ascii=False).encode())
            self._seq = max(last, seq)
            self._remember(self._seq)

    def _own_seq(self, raw: bytes) -> int | None:
        """The seq of one of this writer's lines, validly signed; else None."""
        try:
            doc = load_object(raw, EVENT_LINE, "event line")
        except Untrusted:
            return None
        seq = integer_seq(doc)
        if seq is None or (self.pool_key and not signature_ok(doc, self.pool_key)):
            return None
        return seq

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


class PoolEventTail:
    """Reads every node's new, verified events since the last call (`EventReader` of `stores`)."""

    def __init__(
        self, streams: EventStreams, pool_key: str = "", refusals: Refusals | None = None,
        clock: Clock | None = None,
    ) -> None:  # fmt: skip
        self.streams = streams
        self.pool_key = pool_key
        self.clock = clock
        self.refusals = refusals if refusals is not None else Refusals()
        self.last_seq: dict[str, int] = {}  # node -> highest seq accepted
        self.cursor = streams.cursor()
        self.backlog = False  # True when the last call stopped at a cap: call again soon
        self._out: list[dict[str, Any]] = []

    def new_events(self) -> list[dict[str, Any]]:
        """New verified events; `StoreUnavailable` when the store does not answer."""
        return self.streams.run(self._new_events)

    def _new_events(self) -> list[dict[str, Any]]:
        self._out = []
        try:
            self.backlog = self.streams.read_new(self.cursor, self)
        finally:
            out, self._out = self._out, []
        return out

    # -- the judge of every line a stream reads (`event_streams.EventJudge`) ------------------
    def refuse(self, source: str, exc: Untrusted) -> None:
        at, now = (
            (self.clock.wall().isoformat(timespec="seconds"), self.clock.monotonic())
            if self.clock
            else ("", None)
        )
        if self.refusals.note(source, exc.cause, exc.detail, at, now):
            level = logging.ERROR if exc.cause in SECURITY_CAUSES else logging.WARNING
            prefix = "SECURITY: " if exc.cause in SECURITY_CAUSES else ""
            log.log(level, "%signoring an event line of %s: %s (%s)", prefix, printable(source, SOURCE_CHARS),
                    printable(exc.detail, DETAIL_CHARS), exc.cause)  # fmt: skip

    def last(self, node: str) -> int:
        return self.last_seq.get(node, 0)

    def take(
        self, node: str, source: str, raw: bytes, copy: bool = False, upto: int | None = None,
        named_seq: int | None = None,
    ) -> bool:  # fmt: skip
        try:
            doc = load_object(raw, EVENT_LINE, "event line")
            if self.pool_key and not signature_ok(doc, self.pool_key):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, "event line is not validly signed")
            if doc.get("node") != node:
                raise Untrusted(WRONG_NODE, f"event line names node {str(doc.get('node'))[:64]!r}")
            seq = integer_seq(doc)
            if seq is None:
                raise Untrusted(FORGED, "event line has no integer seq")
            if named_seq is not None and seq != named_seq:
                raise Untrusted(FORGED, f"event line's seq {seq} is not the {named_seq} it is kept under")
            check_event(doc)  # a field of the wrong type or out of range: this line alone is refused
            if upto is not None and seq > upto:
                raise Untrusted(REPLAYED, f"event seq {seq} in a base that covers seqs up to {upto}")
            last = self.last(node)
            if seq <= last:
                if copy:
                    return False  # a copy kept by compaction, or seen before its file was replaced
                raise Untrusted(REPLAYED, f"event seq {seq} ≤ {last} already seen from {node}")
        except Untrusted as exc:
            self.refuse(source, exc)
            return False
        self.last_seq[node] = seq
        self._out.append(doc)
        return True

    def signed_seq(self, node: str, raw: bytes) -> int | None:
        try:
            doc = load_object(raw, EVENT_LINE, "event line")
        except Untrusted:
            return None
        seq = integer_seq(doc)
        if seq is None or doc.get("node") != node or (self.pool_key and not signature_ok(doc, self.pool_key)):
            return None
        return seq
