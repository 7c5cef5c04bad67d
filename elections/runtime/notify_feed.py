"""What the notifier is told (`elections.runtime.notify`): the pool's history rows as they
reach this agent's database, and the refusals this agent counts.

`EventFeed` reads the new rows of this agent's pool every `FEED_EVERY`, whichever
process and member recorded them (the worker's elector, the panel's or `relayctl`'s
commands, the supervisor's release, another member's rows ingested from the share).
For each, `notify.sends` says whether this agent POSTs it (one agent sends each: a
member's own failovers by that member, an operator command by the leader of the
epoch it was issued in), and `notify.Roles` whether it changes this agent's role.
The last row looked at is persisted with the webhook's queue (`notify_outbox`):
after a restart the feed goes on from there, so a row that reached the database
while the worker was down, or just before it was killed, is still sent. Without a
persisted cursor (the first start, or a database made afresh since: filled again
from the share) only news is sent, and role changes are only ever run for news:
this agent's own rows written from the feed's start on (by this machine's clock),
other members' rows of the pool's current epoch or later (`first_epoch`: their
timestamps are other machines' clocks, never compared with this one's).

`SecurityWatch` turns the refusals this agent counted (forged, replayed, oversized,
impersonating, split-brain records or datagrams: `pool.json`'s `refusals`, the
`stkrelay_security_events_total` counters) into `security` events, coalesced: the
first refusal after a quiet spell is posted at once, then at most one event per
`WEBHOOK_SECURITY_EVERY` seconds carries every refusal counted meanwhile (counts by
cause, the latest few with their source). A hostile LAN or share can make the
counts grow, never the number of events past one a window.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from elections.core.evidence import DETAIL_CHARS, SOURCE_CHARS, printable
from elections.ports.local.localstate import LocalState
from elections.runtime.notify import COMMAND_KINDS, SECURITY, Notifier, Roles, payload, sends
from stkconfig.model import Config

log = logging.getLogger("stkrelay.notify")

FEED_EVERY = 0.25  # seconds between two looks at the history for new rows
RECENT_SHOWN = 5  # refusals named in one security event (the newest)
LIVE_MARGIN = 5.0  # seconds before the feed started from which another member's rows are news


class SecurityWatch:
    """Counts of refusals (cause -> total since the worker started) in, at most one event out per
    `every` seconds. Pure: the caller passes its monotonic time."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.base: dict[str, int] | None = None  # the totals at the last look (None: never looked)
        self.pending: dict[str, int] = {}  # counted since the last event
        self.last_sent: float | None = None

    def look(self, totals: dict[str, int], now: float) -> dict[str, int] | None:
        """The counts by cause an event should carry now, or None."""
        if self.base is None:  # the refusals before this start were the previous run's to tell
            self.base = dict(totals)
            return None
        restarted = any(n < self.base.get(cause, 0) for cause, n in totals.items())
        for cause, n in totals.items():
            new = n if restarted else n - self.base.get(cause, 0)
            if new > 0:
                self.pending[cause] = self.pending.get(cause, 0) + new
        self.base = dict(totals)
        if not self.pending or (self.last_sent is not None and now - self.last_sent < self.every):
            return None
        out, self.pending, self.last_sent = self.pending, {}, now
        return out


def totals_of(refusals: object) -> dict[str, int]:
    counts = refusals.get("counts") if isinstance(refusals, dict) else None
    if not isinstance(counts, dict):
        return {}
    return {printable(k, 40): v for k, v in list(counts.items())[:64] if type(v) is int and v >= 0}


def recent_of(refusals: object) -> list[dict[str, Any]]:
    """The newest refusals as the webhook quotes them: their text in `evidence.SAFE` and bounded
    (as `Refusals.note` keeps it, and again here: a chat may render whatever reaches it)."""
    recent = refusals.get("recent") if isinstance(refusals, dict) else None
    if not isinstance(recent, list):
        return []
    return [_quoted(r) for r in recent[:RECENT_SHOWN] if isinstance(r, dict)]


def _quoted(refusal: dict[str, Any]) -> dict[str, Any]:
    def text(name: str, limit: int) -> str:
        value = refusal.get(name)
        return printable(value, limit) if isinstance(value, str) else ""

    count = refusal.get("count")
    return {"source": text("source", SOURCE_CHARS), "cause": text("cause", 40),
            "detail": text("detail", DETAIL_CHARS), "count": count if type(count) is int else 0,
            "last_at": text("last_at", 40)}  # fmt: skip


class EventFeed:
    def __init__(self, notifier: Notifier, data_dir: str, every: float = FEED_EVERY) -> None:
        self.notifier, self.every = notifier, every
        self.local = LocalState(data_dir) if data_dir else None
        self.security = SecurityWatch(notifier.cfg.webhook_security_every)
        self._security_seq = 0
        self.replay = False  # True: going on from a persisted cursor (`_start_at`)
        self.roles = Roles(notifier.node)  # drained or not: from the history at the start (`_start_at`)
        self.first_epoch = 0  # the pool's epoch when the feed started (`_start_at`)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notify-feed", daemon=True)

    def start(self) -> EventFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _epoch(self) -> int:
        """The epoch of the lease this agent's view holds (0: none)."""
        epoch = (self.local.pool().lease or {}).get("epoch") if self.local is not None else None
        return epoch if type(epoch) is int else 0

    # -- the rows ----------------------------------------------------------------------------
    def _rows(self, last: int, since: datetime) -> int:
        from elections.models import ElectionEvent

        n = self.notifier
        rows = list(ElectionEvent.objects.filter(kmsn=n.kmsn, id__gt=last).order_by("id")[:500])
        if not rows:
            return last
        epochs = {ev.epoch for ev in rows if ev.kind in COMMAND_KINDS}
        elected = ElectionEvent.objects.filter(kmsn=n.kmsn, kind="elected", epoch__in=epochs)
        leaders = dict(elected.values_list("epoch", "node")) if epochs else {}  # an epoch has one leader
        docs = []
        for ev in rows:
            live = ev.observed_at >= since if ev.node == n.node else ev.epoch >= self.first_epoch
            detail = ev.detail if isinstance(ev.detail, dict) else {}
            led, known = leaders.get(ev.epoch) == n.node, ev.epoch in leaders
            if (live or self.replay) and sends(ev.kind, ev.node, n.node, led, known):
                docs.append(payload(n.kmsn, ev.node, ev.seq, ev.kind, ev.epoch, ev.reason,
                                    ev.observed_at.isoformat(), detail, sender=n.node))  # fmt: skip
            role = self.roles.fold(ev.kind, ev.node, detail)
            if role is not None and live:
                n.role_changed(role, ev.epoch, str(detail.get("cause") or ev.kind))
        newest: int = rows[-1].id
        n.post(docs, cursor=newest)
        return newest

    def _start_at(self) -> int:
        """Where the rows of interest begin: after the persisted cursor, or after the newest row."""
        from django.db.models import Max

        from elections.models import ElectionEvent

        n = self.notifier
        rows = ElectionEvent.objects.filter(kmsn=n.kmsn)
        newest = rows.aggregate(m=Max("id"))["m"] or 0
        drains = rows.filter(kind__in=("drain_requested", "undrain_requested"), detail__target=n.node)
        last_drain = drains.order_by("-id").values_list("kind", flat=True).first()
        self.roles = Roles(n.node, drained=last_drain == "drain_requested")
        # leadership.json outlives a database made afresh: old rows filled in again are not news.
        elected = rows.filter(kind="elected").aggregate(m=Max("epoch"))["m"] or 0
        self.first_epoch = max(elected, self.local.leadership().max_epoch if self.local is not None else 0)
        cursor = self.notifier.outbox.cursor if self.notifier.cfg.webhook_url else None
        if cursor is None or cursor > newest:  # never ran, or a database made afresh since
            return newest
        self.replay = True  # the rows after the cursor are news, however old
        return cursor

    # -- the refusals -------------------------------------------------------------------------
    def _refusals(self) -> None:
        n = self.notifier
        if self.local is None or not n.cfg.webhook_url:
            return
        refusals = self.local.pool().refusals
        counts = self.security.look(totals_of(refusals), time.monotonic())
        if counts is None:
            return
        epoch = self._epoch()
        now = time.time()
        self._security_seq += 1
        ms = int(now * 1000)
        shown = ", ".join(f"{cause} {k}" for cause, k in sorted(counts.items()))
        doc = payload(n.kmsn, n.node, 0, SECURITY, epoch, f"refused as evidence: {shown}",
                      _iso(now), {"counts": counts, "totals": totals_of(refusals),
                                  "recent": recent_of(refusals)}, sender=n.node)  # fmt: skip
        doc["id"], doc["seq"] = f"{n.kmsn}/{n.node}/security/{ms}.{self._security_seq}", None
        log.warning("security events (%s): posted to the webhook", shown)
        n.post([doc])

    def _run(self) -> None:
        from django.db import DatabaseError, close_old_connections
        from django.utils import timezone

        last: int | None = None
        since = timezone.now() - timedelta(seconds=LIVE_MARGIN)
        while not self._stop.is_set():
            try:
                if last is None:
                    last = self._start_at()
                last = self._rows(last, since)
            except DatabaseError as exc:
                log.warning("notify: history not read: %s", exc)
            finally:
                close_old_connections()
            try:
                self._refusals()
            except Exception:  # a metric's file, never a reason for the feed to stop
                log.exception("notify: refusals not looked at")
            self._stop.wait(self.every)


def _iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def start_for(stk: Config) -> EventFeed | None:
    """The notifier of this agent (its `Config`) and its feed, started; None when neither
    `ON_ROLE_CHANGE` nor `WEBHOOK_URL` is set. Called once, by the worker (`runtime.agent`)."""
    cfg = stk.notify
    if cfg is None or not cfg.configured:
        return None
    return EventFeed(Notifier(cfg, stk.kmsn, stk.node, data_dir=stk.data_dir), stk.data_dir).start()
