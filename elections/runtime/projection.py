"""The pool's history in this agent's database.

Every node appends only to its own `events/<node>.jsonl`; every agent ingests
all of them (`ingest`), idempotently on `(kmsn, node, seq)` (its own pool's and
every watched pool's), so the failover and
audit history is the same on every agent's panel. `Projector` does the
inserts on a thread of its own, off the renewal path: the cycle hands it the
verified events and moves on (a bounded queue; when it is full the oldest
batch waits in the tail's place, never in memory without bound). `DbEventSink`
is how this agent records its own transitions: a row here first (the database
hands out the seq), then the same event on the share. Several writers of one
node (the worker's threads, the web's audit, the supervisor's release) take
`DATA_DIR/events.lock` around both steps, so the pool's log holds this node's
seqs in order: a reader refuses a seq below one it took (a replay).
"""

from __future__ import annotations

import logging
import queue
import threading
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from elections.core.untrusted import BAD_FIELD, Untrusted, check_event
from elections.errors import StoreUnavailable
from elections.ports.store.stores import EventSink, PoolPlace, open_event_sink
from stkconfig.model import Config
from stkconfig.parsed import WatchedPool
from stkhost.clock import SystemClock
from stkhost.locks import exclusive
from stkhost.retry import Backoff, retry

log = logging.getLogger("stkrelay.projection")

SEQ_RACE = Backoff(tries=20)  # two local processes (worker, supervisor) may take the same seq
ORDER_LOCK = "events.lock"  # in DATA_DIR; a watched pool's is events-<KMSN>.lock
ORDER_WAIT_S = 2.0  # for another writer of this node to finish its line; then the row alone


class DbEventSink:
    """Writes each transition as an ElectionEvent row and to the pool's
    `events/<node>.jsonl` (the file is best effort: the share may be down)."""

    def __init__(
        self, kmsn: str, node: str, pool_log: EventSink | None, order_lock: str | Path | None = None
    ) -> None:
        self.kmsn = kmsn
        self.node = node
        self.pool_log = pool_log
        self.order_lock = order_lock  # a local file: one writer of this node at a time (None: this one alone)
        self._pool_last: int | None = None  # this node's highest seq in the pool's log, once read
        self.last_seq: int | None = None  # the seq of the last line this sink put on the share

    def _floor(self) -> int:
        """This node's highest seq in the pool's log: a database started afresh (a new disk, a
        container without its volume) must not hand out seqs the pool already holds, which
        every reader would drop. Read once; 0 while the store does not answer."""
        if self._pool_last is None and self.pool_log is not None:
            try:
                self._pool_last = self.pool_log.last_seq()
            except (OSError, ValueError, StoreUnavailable) as exc:
                log.warning("pool event log not read: %s", exc)
        return self._pool_last or 0

    def record(self, kind: str, epoch: int, reason: str, required: bool = False, **extra: Any) -> int | None:
        """One history row, then the pool's line; the line's seq once it is on the
        share (None if it is not). With `required` (operator commands), a pool
        line that cannot be written raises OSError."""
        from django.db import IntegrityError, transaction
        from django.db.models import Max
        from django.utils import timezone

        from elections.models import ElectionEvent

        floor = self._floor()

        def insert() -> int:
            mine = ElectionEvent.objects.filter(kmsn=self.kmsn, node=self.node)
            seq = max(mine.aggregate(m=Max("seq"))["m"] or 0, floor) + 1
            with transaction.atomic():
                ElectionEvent.objects.create(
                    kmsn=self.kmsn, node=self.node, seq=seq, epoch=epoch, kind=kind, reason=reason,
                    observed_at=timezone.now(), detail=extra,
                )  # fmt: skip
            return seq

        # Several local writers may record (the worker, the web, the supervisor's release on
        # shutdown): the database hands out the seq, and the order lock keeps the pool's lines
        # in that order (seq 2 on the pool before seq 1 would make every reader drop seq 1).
        order = exclusive(self.order_lock, ORDER_WAIT_S) if self.order_lock else nullcontext(True)
        with order as in_order:
            seq = retry(insert, on=IntegrityError, backoff=SEQ_RACE)
            if self.pool_log is None:
                return None
            try:
                if not in_order:
                    raise OSError(
                        f"another writer of {self.node} held {self.order_lock} for {ORDER_WAIT_S:g} s"
                    )
                self.pool_log.record(kind, epoch, reason, seq=seq, **extra)
            except (OSError, ValueError, StoreUnavailable) as exc:  # ValueError: Untrusted (a planted link)
                if required:
                    raise OSError(f"pool event log not written: {exc}") from exc
                log.warning("pool event log not written: %s", exc)
                return None
        self.last_seq = seq
        return seq


def pool_event_sink(stk: Config) -> DbEventSink:
    """This agent's history sink, from its configuration: rows in its
    database, mirrored to the pool's `events/<node>.jsonl`."""
    lock = Path(stk.data_dir) / ORDER_LOCK if stk.data_dir else None
    return DbEventSink(stk.kmsn, stk.node, open_event_sink(PoolPlace.of(stk), stk.node, SystemClock()), lock)


def watched_event_sink(watched: WatchedPool, data_dir: str = "") -> DbEventSink:
    """This agent's sink in a watched pool (`stkconfig.parsed.WatchedPool`):
    rows in its database under that KMSN, mirrored to `events/<NODE>.jsonl` on
    that pool's share, signed with that pool's key. Operator commands only: the
    agent never contends there."""
    place = PoolPlace.watched(watched)
    lock = Path(data_dir) / f"events-{watched.kmsn}.lock" if data_dir else None
    return DbEventSink(watched.kmsn, watched.node, open_event_sink(place, watched.node, SystemClock()), lock)


def ingest(kmsn: str, events: list[dict[str, Any]]) -> int:
    """Insert events into ElectionEvent, ignoring (node, seq) already there; the rows offered.

    Each event is checked on its own (`core.untrusted.check_event`; the tails
    refuse such lines already, this is the database's own guard): one whose
    field has the wrong type or is out of range for the database is skipped and
    logged, never the reason the rest of the batch is lost. Should the database
    still refuse the batch, its rows are inserted one by one."""
    from django.db import DatabaseError

    from elections.models import ElectionEvent

    rows = []
    known = {k for k, _ in ElectionEvent.KINDS}
    for e in events:
        try:
            rows.append(_row(kmsn, e, known))
        except (Untrusted, KeyError) as exc:
            log.error("SECURITY: not projecting event %s of %s: %s", _seq_of(e), str(e.get("node"))[:64], exc)
    if not rows:
        return 0
    try:
        ElectionEvent.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
        return len(rows)
    except (DatabaseError, OverflowError, ValueError, TypeError) as exc:
        log.warning("%d events refused as a batch (%s): inserting them one by one", len(rows), exc)
    inserted = 0
    for row in rows:
        try:
            ElectionEvent.objects.bulk_create([row], ignore_conflicts=True)
            inserted += 1
        except (DatabaseError, OverflowError, ValueError, TypeError) as exc:
            log.error("SECURITY: not projecting event %s of %s: %s", row.seq, row.node, exc)
    return inserted


def _row(kmsn: str, e: dict[str, Any], known: set[str]) -> Any:
    """One ElectionEvent (unsaved) from a verified event; `Untrusted` if a field is unfit."""
    from elections.models import ElectionEvent

    check_event(e)
    if not isinstance(e["node"], str):
        raise Untrusted(BAD_FIELD, f"event names node {e['node']!r:.64}, not text")
    kind = e["kind"]
    detail = {k: v for k, v in e.items() if k not in ("node", "seq", "kind", "epoch", "at", "reason")}
    if kind not in known:
        detail["unknown_kind"] = True
    return ElectionEvent(
        kmsn=kmsn, node=e["node"], seq=e["seq"], epoch=e.get("epoch") or 0, kind=kind[:32],
        reason=str(e.get("reason") or ""), observed_at=_observed_at(e.get("at")), detail=detail,
    )  # fmt: skip


def _observed_at(text: Any) -> datetime:
    """The writer's `at` (another machine's clock: shown, never compared), now if unusable;
    a time whose UTC form leaves the calendar (9999-12-31T23:59-23:00) is unusable too."""
    try:
        at = datetime.fromisoformat(str(text))
        return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        return datetime.now(UTC)


def _seq_of(e: dict[str, Any]) -> str:
    return repr(e.get("seq"))[:32]


class Projector:
    """Inserts events into this agent's database on a thread of its own."""

    def __init__(self, kmsn: str, max_batches: int = 8) -> None:
        self.kmsn = kmsn  # this agent's own pool: batches without a KMSN are its
        self._queue: queue.Queue[tuple[str, list[dict[str, Any]]]] = queue.Queue(max_batches)
        self._thread = threading.Thread(target=self._loop, name="projector", daemon=True)
        self._thread.start()

    def submit(self, events: list[dict[str, Any]], timeout: float = 1.0, kmsn: str | None = None) -> bool:
        """Queue a batch of pool `kmsn`'s events (default: this agent's pool); False
        if the queue stayed full for `timeout` (the caller keeps the batch)."""
        try:
            self._queue.put((kmsn or self.kmsn, events), timeout=timeout)
            return True
        except queue.Full:
            return False

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every queued batch is in the database (tests, shutdown)."""
        done = threading.Event()
        if not self.submit([{"__drained__": done}], timeout):
            return False
        return done.wait(timeout)

    def _loop(self) -> None:
        from django.db import connection

        while True:
            kmsn, batch = self._queue.get()
            marker = [e for e in batch if "__drained__" in e]
            if marker:
                marker[0]["__drained__"].set()
                continue
            try:
                ingest(kmsn, batch)
            except Exception:  # the history is a projection: a failed batch must not stop the next
                log.exception("could not project %d events", len(batch))
                connection.close()
