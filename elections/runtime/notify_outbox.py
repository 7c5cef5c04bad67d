"""The webhook's queue, kept in `DATA_DIR/webhook-outbox.json` (`elections.runtime.notify`).

A bounded FIFO of event documents and the history cursor of the feed that fills
it (`notify_feed.EventFeed`: the id of the last history row it looked at), in one
file replaced atomically at every change (`write_atomic`): an event is in the file
before the feed moves past its row, and leaves it only once delivered or given
up. A worker killed in the middle of a POST sends that event again when it starts
(at-least-once; the receiver drops the repeat on its id), and the rows written
while it was down (a `relayctl pause` meanwhile) are still offered after the
cursor. The file is this agent's own (DATA_DIR is 0700), read bounded all the
same: one that is too big, not JSON or not this shape is set aside with a
warning and the queue starts empty, never a crash.

Full (`limit` events): the oldest is dropped and `dropped(doc)` told. The sender takes the
oldest event that is due (`due`: an event waiting out its retry's backoff is passed over,
issue 42: a failing receiver held every event behind one for 16 s); `depth()` says how many
wait and since when the oldest (this machine's monotonic clock: an event loaded from the
file waits since this start), for /metrics. Why a file
and not the agent's Redis: the packaged Redis keeps nothing on disk (`--save ""
--appendonly no`) and is `PartOf=` the agent's unit, so `systemctl restart`
would empty it; the file survives a restart, a reboot and a Redis restart alike.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stkhost.files import write_atomic

log = logging.getLogger("stkrelay.notify")

OUTBOX_FILE = "webhook-outbox.json"
DOC_BYTES = 16 * 1024  # the most one event document may take in the file, for the read's bound


class NotifyOutbox:
    def __init__(self, path: Path | None, limit: int, dropped: Callable[[dict[str, Any]], None]) -> None:
        self.path, self.limit, self.dropped = path, limit, dropped
        self._docs: collections.deque[dict[str, Any]] = collections.deque()
        self._queued_at: dict[str, float] = {}  # id -> when it was queued (monotonic), for `depth`
        self._cursor: int | None = None
        self._wake = threading.Condition()
        self._unwritten = False  # the last write failed: say so once, not at every event
        self._load()

    # -- what the feed does -------------------------------------------------------------
    @property
    def cursor(self) -> int | None:
        """The id of the last history row the feed looked at, as persisted (None: never)."""
        with self._wake:
            return self._cursor

    def extend(self, docs: list[dict[str, Any]], cursor: int | None = None) -> None:
        """Queue `docs` (one already queued, by id, is not queued twice) and move the cursor, in one write."""
        if not docs and (cursor is None or cursor == self._cursor):
            return
        gone: list[dict[str, Any]] = []
        with self._wake:
            queued = {d["id"] for d in self._docs}
            for doc in docs:
                if doc["id"] in queued:
                    continue
                if len(self._docs) >= self.limit:
                    gone.append(self._docs.popleft())
                    self._queued_at.pop(gone[-1]["id"], None)
                self._docs.append(doc)
                self._queued_at[doc["id"]] = time.monotonic()
                queued.add(doc["id"])
            if cursor is not None:
                self._cursor = cursor
            self._save()
            self._wake.notify_all()
        for doc in gone:  # outside the lock: the callback audits, which writes to the database
            self.dropped(doc)

    # -- what the sender does ---------------------------------------------------------
    def head(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The oldest event, left in the queue until `done`; waits for one (None after `timeout`)."""
        with self._wake:
            if not self._docs:
                self._wake.wait_for(lambda: bool(self._docs), timeout)
            return self._docs[0] if self._docs else None

    def due(
        self, not_before: dict[str, float], now: float, retrying: int
    ) -> tuple[dict[str, Any] | None, float | None]:
        """The oldest event that may be tried now, left in the queue until `done`: one whose
        retry's backoff is over (`not_before`: id -> when it may be tried again), or one never
        tried while fewer than `retrying` events wait on retries (with as many, the others wait:
        a receiver that is down is not sent the whole queue). Else (None, seconds until the
        first retry is due; None when nothing is)."""
        with self._wake:
            held = len(not_before) >= retrying
            soonest: float | None = None
            for doc in self._docs:
                at = not_before.get(doc["id"])
                if (at is None and not held) or (at is not None and at <= now):
                    return doc, None
                if at is not None:
                    soonest = at if soonest is None else min(soonest, at)
            return None, None if soonest is None else max(0.0, soonest - now)

    def wait(self, timeout: float | None) -> None:
        """Until an event is queued, or `timeout` seconds (None: until one is)."""
        with self._wake:
            self._wake.wait(timeout)

    def depth(self) -> tuple[int, float | None]:
        """How many events wait, and since when the oldest (monotonic; None when none)."""
        with self._wake:
            return len(self._docs), min(self._queued_at.values(), default=None)

    def done(self, doc_id: str) -> None:
        """The event `doc_id` was delivered or given up: out of the queue (no-op if it was dropped)."""
        with self._wake:
            before = len(self._docs)
            self._docs = collections.deque(d for d in self._docs if d["id"] != doc_id)
            self._queued_at.pop(doc_id, None)
            if len(self._docs) != before:
                self._save()

    def __len__(self) -> int:
        with self._wake:
            return len(self._docs)

    # -- the file --------------------------------------------------------------------------
    def _save(self) -> None:
        if self.path is None:
            return
        body = json.dumps({"cursor": self._cursor, "queue": list(self._docs)}, ensure_ascii=False)
        try:
            write_atomic(self.path, body.encode(), tag=str(os.getpid()))
        except OSError as exc:
            if not self._unwritten:
                log.warning("webhook queue not written to %s (kept in memory only): %s", self.path, exc)
            self._unwritten = True
            return
        if self._unwritten:
            log.info("webhook queue written to %s again", self.path)
        self._unwritten = False

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read((self.limit + 1) * DOC_BYTES + 1)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("webhook queue %s not read (starting empty): %s", self.path, exc)
            return
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            doc = None
        queue = doc.get("queue") if isinstance(doc, dict) else None
        cursor = doc.get("cursor") if isinstance(doc, dict) else None
        if not isinstance(queue, list) or not (cursor is None or type(cursor) is int):
            log.warning("webhook queue %s is not one this agent wrote: set aside, starting empty", self.path)
            self._set_aside()
            return
        docs = [d for d in queue if _valid(d)][-self.limit :]
        self._docs.extend(docs)
        self._queued_at = dict.fromkeys((d["id"] for d in docs), time.monotonic())
        self._cursor = cursor
        if docs:
            log.info("webhook queue: %d event(s) from before this start, sent again", len(docs))

    def _set_aside(self) -> None:
        assert self.path is not None
        try:
            os.replace(self.path, self.path.with_suffix(".json.bad"))
        except OSError as exc:
            log.warning("webhook queue %s not set aside: %s", self.path, exc)


def _valid(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("id"), str)
        and 0 < len(doc["id"]) <= 300
        and isinstance(doc.get("kind"), str)
        and isinstance(doc.get("epoch"), int)
    )
