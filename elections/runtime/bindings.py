"""The worker's half of station bindings (`elections.core.stations`).

`PoolBindings` folds the pool's verified station events (handed in by the
agent's ingest, and at start-up this agent's own database, so that a binding
outlives deleted event files across a restart), publishes the fold to
``DATA_DIR/stations.json`` for the relay and the panel once the event tail
has caught up (a partial fold must never unbind anyone), and, while this
agent leads, turns what its relay reports in ``relay.json``
(`relay.server.bindings.StationBindings.snapshot`) into pool events:

- a station admitted with its credential that the fold does not hold bound
  → ``station_bound``, with the next Lamport clock;
- a station first admitted with the site token → ``station_seen``;
- site-token registrations refused for a bound station → an
  ``impersonation`` security event in `Refusals` (the panel's banner and
  ``stkrelay_security_events{cause="impersonation"}``).

Events are written by a thread of its own (`DbEventSink.record` touches the
share, which may hang): the election cycle only queues them, never waits.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from elections.core.evidence import DETAIL_CHARS, Refusals, printable
from elections.core.stations import BOUND, EVENT_KINDS, SEEN, StationBook, station_name
from elections.core.untrusted import IMPERSONATION
from elections.ports.local.localstate import LocalState, RelayStatus
from elections.ports.store.stores import TransitionSink
from stkhost.clock import Clock

log = logging.getLogger("stkrelay.bindings")

MAX_QUEUED = 256
MAX_PER_LOOK = 64  # stations taken from one relay.json


class PoolBindings:
    def __init__(self, local: LocalState, sink: TransitionSink, refusals: Refusals, clock: Clock) -> None:
        self.local, self.sink, self.refusals, self.clock = local, sink, refusals, clock
        self.book = StationBook()
        self._dirty = True
        self._lock = threading.Lock()
        self._asked: set[tuple[str, str]] = set()  # (kind, station) queued or written, not yet folded
        self._queue: queue.Queue[tuple[str, str, int, int]] = queue.Queue(MAX_QUEUED)
        self._refused: dict[tuple[int | None, str], int] = {}  # (relay pid, station) -> refusals noted
        # `sink`: a `runtime.projection.DbEventSink` (a row here, the line on the share: both, or an OSError)
        threading.Thread(target=self._write_loop, name="station-events", daemon=True).start()

    # -- the fold ------------------------------------------------------------------
    def fold(self, events: list[dict[str, Any]]) -> None:
        if self.book.apply(events):
            self._dirty = True
        with self._lock:
            self._asked = {(k, s) for k, s in self._asked if not self._folded(k, s)}

    def seed(self, kmsn: str) -> None:
        """Fold what this agent's database holds of the pool's station events."""
        from elections.models import ElectionEvent

        rows = ElectionEvent.objects.filter(kmsn=kmsn, kind__in=EVENT_KINDS).values_list(
            "node", "seq", "kind", "epoch", "detail"
        )
        self.book.apply([{**(d if isinstance(d, dict) else {}), "node": n, "seq": q, "kind": k, "epoch": e}
                         for n, q, k, e, d in rows.iterator()])  # fmt: skip

    def publish(self, caught_up: bool) -> None:
        """Write stations.json if the fold changed and the tail has read everything."""
        if not (self._dirty and caught_up):
            return
        try:
            self.local.write_stations(self.book.to_doc())
            self._dirty = False
        except OSError as exc:
            log.warning("cannot write stations.json in %s: %s", self.local.dir, exc)

    def _folded(self, kind: str, station: str) -> bool:
        return self.book.is_bound(station) if kind == BOUND else station in self.book.keys

    # -- what the leader's relay reports -------------------------------------------------
    def learn(self, status: RelayStatus, epoch: int, command_clock: int) -> None:
        """Turn the relay's report (relay.json, of this epoch) into pool events and alarms."""
        if not status.serving() or status.epoch != epoch:
            return
        report = status.snapshot.get("stations")
        if not isinstance(report, dict):
            return
        clock = max(command_clock, self.book.clock) + 1
        for kind, names in ((BOUND, report.get("credential")), (SEEN, report.get("token"))):
            for name in (names if isinstance(names, list) else [])[:MAX_PER_LOOK]:
                station = station_name(name)
                if station is not None and not self._folded(kind, station):
                    self._ask(kind, station, epoch, clock)
        refused = report.get("refused")
        if isinstance(refused, dict):
            for name, entry in list(refused.items())[:MAX_PER_LOOK]:
                self._alarm(status.pid, str(name)[:64], entry)

    def _ask(self, kind: str, station: str, epoch: int, clock: int) -> None:
        with self._lock:
            if (kind, station) in self._asked:
                return
            try:
                self._queue.put_nowait((kind, station, epoch, clock))
            except queue.Full:
                return  # asked again at the next look
            self._asked.add((kind, station))

    def _alarm(self, pid: int | None, station: str, entry: object) -> None:
        if not isinstance(entry, dict):
            return
        count, peer = entry.get("count"), str(entry.get("peer", "?"))[:80]
        if not isinstance(count, int) or isinstance(count, bool):
            return
        new = count - self._refused.get((pid, station), 0)
        if new <= 0:
            return
        for old in [k for k in self._refused if k[0] != pid]:  # an earlier relay's counts
            del self._refused[old]
        self._refused[(pid, station)] = count
        detail = (f"the site token was refused for station {station}, bound to its credential: "
                  f"{new} registration(s), last from {peer}")  # fmt: skip
        at = self.clock.wall().isoformat(timespec="seconds")
        if self.refusals.note(f"relay:{station}", IMPERSONATION, detail, at, self.clock.monotonic()):
            log.error("SECURITY: %s", printable(detail, DETAIL_CHARS))  # it quotes a station's name
        self.refusals.counts[IMPERSONATION] += new - 1

    # -- the writer ----------------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            kind, station, epoch, clock = self._queue.get()
            try:
                if kind == BOUND:
                    self.sink.record(BOUND, epoch, f"{station} registered with its station credential: "
                                     "the site token is refused for it from now on", required=True,
                                     station=station, clock=clock)  # fmt: skip
                else:
                    self.sink.record(SEEN, epoch, f"{station} registered with the site token", required=True,
                                     station=station, key="token")  # fmt: skip
                log.info("recorded %s for %s", kind, station)
            except Exception as exc:  # the share or the database: asked again at the next look
                log.warning("could not record %s for %s: %s", kind, station, exc)
                with self._lock:
                    self._asked.discard((kind, station))
