"""Watched pools (docs/design.md §11): other KMSNs this agent shows, never contends in.

One `PoolWatcher` per `[pool:<KMSN>]` section (`stkconfig.pools`). Each
look reads that pool's lease, its members' heartbeats and a bounded slice of
its event files through the store factory (`ports.store.stores`: a directory or an
`smb://` share), verifies every record with *that* pool's key (whatever fails
is no evidence, counted in the watcher's own `Refusals` and shown on the panel
like the agent's own), times the lease and the heartbeats on this machine's
monotonic clock, hands the new events to the projector (history rows keyed
`(kmsn, node, seq)`) and writes the view to `DATA_DIR/watched/<KMSN>.json`.

`Watchers` runs each watcher on a thread of its own, and each pool's share has
its own deadline (`SHARE_TIMEOUT` of that section): a watched share that hangs
or goes away makes that pool show as unreachable; it never delays this agent's
own renewals (the worker's loop never waits on a watcher) nor the other pools.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from elections.core.commands import PoolCommands
from elections.core.eligibility import Freshness, judge, observe
from elections.core.evidence import DETAIL_CHARS, Refusals, printable
from elections.core.gate import gate_of
from elections.core.lease import LeaseRead
from elections.core.lease_memory import Memory, replayed, track
from elections.core.untrusted import REPLAYED
from elections.errors import StoreUnavailable
from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import MemberView, PoolView
from elections.ports.store.stores import PoolPlace, open_event_tail, open_store
from elections.runtime.projection import Projector
from stkconfig.model import Config
from stkconfig.parsed import WatchedPool
from stkhost.clock import Clock

log = logging.getLogger("stkrelay.watch")

BACKLOG_PAUSE = 0.05  # seconds between looks while the event files still hold unread lines


class PoolWatcher:
    """One watched pool, read only. `look()` is one bounded cycle."""

    def __init__(
        self, watched: WatchedPool, viewer: str, clock: Clock, local: LocalState, projector: Projector,
        heartbeat_ttl: float, promotion_hold: float, lease_ttl: float,
    ) -> None:  # fmt: skip
        self.kmsn = watched.kmsn
        self.place = PoolPlace.watched(watched)
        self.viewer = viewer  # this agent's node: whose view this is
        self.clock = clock
        self.local = local
        self.projector = projector
        self.heartbeat_ttl, self.promotion_hold, self.lease_ttl = heartbeat_ttl, promotion_hold, lease_ttl
        self.refusals = Refusals()
        self.store = open_store(self.place, watched.node, clock, refusals=self.refusals)
        self.tail = open_event_tail(self.place, clock, refusals=self.refusals)
        self.commands = PoolCommands()
        self.memory = Memory(node=watched.node)
        self.lease: dict[str, Any] | None = None  # the last valid lease's fields
        self.fresh: dict[str, Freshness] = {}
        self._unprojected: list[list[dict[str, Any]]] = []
        self.view = PoolView(kmsn=self.kmsn, node=viewer, watched=True)

    def look(self) -> PoolView:
        """Lease, members, new events; the view written. Never raises for the share."""
        now = self.clock.monotonic()
        reachable, status, detail = True, "unreachable", ""
        try:
            read = self.store.read()
            status, detail = self._fold_lease(read, now)
        except StoreUnavailable as exc:
            reachable, detail = False, str(exc)
        members: dict[str, MemberView] = {}
        if reachable:
            try:
                members = self._members(self.store.read_members(), self.clock.monotonic())
            except StoreUnavailable as exc:
                reachable, detail = False, str(exc)
        if reachable:
            self._ingest()
        lease = self.lease if reachable else None
        self.view = PoolView(
            kmsn=self.kmsn, node=self.viewer, updated=self.clock.monotonic(), lease=lease,
            lease_status=status if reachable else "unreachable", lease_detail=detail,
            store_reachable=reachable, members=members, decision=self._decision(reachable, detail),
            paused=self.commands.paused, lease_seen_at=self.memory.seen_at if lease else None,
            command_clock=self.commands.clock, refusals=self.refusals.to_doc(self.clock.monotonic()),
            watched=True,
        )  # fmt: skip
        self.local.write_watched_pool(self.view)
        return self.view

    @property
    def backlog(self) -> bool:
        return bool(self.tail.backlog or self._unprojected)

    def _fold_lease(self, read: LeaseRead, now: float) -> tuple[str, str]:
        """Time the lease like a follower would (core.lease_memory.track); a replay is refused."""
        rec = read.record
        if replayed(self.memory, read) and rec is not None:
            at, detail = self.clock.wall().isoformat(timespec="seconds"), f"older lease {rec.describe()}"
            if self.refusals.note("relay_leader.json", REPLAYED, detail, at, now):
                log.error("SECURITY: ignoring replayed lease of watched pool %s: %s", self.kmsn, detail)
            return "replayed", read.detail
        self.memory = track(self.memory, read, now, self.lease_ttl)
        if read.status == "valid" and rec is not None:
            self.lease = {"node": rec.node, "epoch": rec.epoch, "ip": rec.ip, "port": rec.port,
                          "renew_seq": rec.renew_seq, "ttl_s": rec.ttl_s, "released": rec.released,
                          "handoff_to": rec.handoff_to}  # fmt: skip
        elif read.status == "missing":
            self.lease = None
        if read.status == "forged":
            log.error("SECURITY: ignoring forged lease of watched pool %s: %s", self.kmsn,
                      printable(read.detail, DETAIL_CHARS))  # fmt: skip
        return read.status, read.detail

    def _members(self, docs: dict[str, dict[str, Any]], now: float) -> dict[str, MemberView]:
        members = {}
        for node, doc in docs.items():
            self.fresh[node] = observe(self.fresh.get(node, Freshness()), doc.get("seq"), now)
            v = judge(node, doc, self.fresh[node], now, self.heartbeat_ttl, self.promotion_hold, gate_of(doc))
            epoch = doc.get("epoch")
            members[node] = MemberView(
                eligible=v.eligible, reasons=v.reasons, age=v.age, priority=v.priority, ip=doc.get("ip"),
                drain=bool(doc.get("drain")), health=doc.get("health"), version=doc.get("version"),
                epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
            )  # fmt: skip
        return members

    def _ingest(self) -> None:
        """New verified events into the command fold and the projector (bounded per look)."""
        while self._unprojected and self.projector.submit(self._unprojected[0], timeout=0, kmsn=self.kmsn):
            self._unprojected.pop(0)
        if self._unprojected:  # the database is behind: read nothing more until it catches up
            return
        try:
            events = self.tail.new_events()
        except StoreUnavailable:
            return
        if events:
            self.commands.apply(events)
            if not self.projector.submit(events, timeout=0, kmsn=self.kmsn):
                self._unprojected.append(events)

    def _decision(self, reachable: bool, detail: str) -> str:
        if not reachable:
            return f"watching: share unreachable: {detail}"
        if self.lease is None:
            return "watching: no valid lease"
        return f"watching: {self.lease['node']} holds epoch {self.lease['epoch']}"


class Watchers:
    """Every watched pool's watcher, each looking every `poll` seconds on its own thread."""

    def __init__(self, watchers: list[PoolWatcher], poll: float) -> None:
        self.watchers = watchers
        self.poll = poll
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_settings(cls, stk: Config, clock: Clock, local: LocalState, projector: Projector) -> Watchers:
        timing = (stk.heartbeat_ttl, stk.promotion_hold, stk.lease_ttl)
        watchers = []
        for w in stk.watched:
            try:
                watchers.append(PoolWatcher(w, stk.node, clock, local, projector, *timing))
            except Exception as exc:  # e.g. its SMB password file went away: that pool only is not watched
                log.error("pool %s is not watched: %s", w.kmsn, exc)
        return cls(watchers, stk.lease_poll)

    def start(self) -> Watchers:
        n = max(len(self.watchers), 1)
        for i, w in enumerate(self.watchers):  # staggered over one poll: 50 pools never look at once
            t = threading.Thread(target=self._run, args=(w, i * self.poll / n), name=f"watch-{w.kmsn}",
                                 daemon=True)  # fmt: skip
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self, watcher: PoolWatcher, offset: float = 0.0) -> None:
        self._stop.wait(offset)
        while not self._stop.is_set():
            try:
                watcher.look()
            except Exception:  # a watched pool is a view: one bad look must not end the watching
                log.exception("watching pool %s failed", watcher.kmsn)
            self._stop.wait(BACKLOG_PAUSE if watcher.backlog else self.poll)
