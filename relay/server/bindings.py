"""Which stations the relay holds to their credentials (`elections.core.stations`).

Pure: no I/O, no clock, no threads; the relay's loop calls every method. The
pool's bindings (`bound`) arrive from outside — the standby relay
(`relay.server.binding_feed.BindingFeed`) reads this agent's ``DATA_DIR/stations.json``
off the loop and hands each new set in with `replace()`; a registration never
waits for a read. What the relay learns itself is reported in `snapshot()`
(relay.json), and the worker turns it into pool events:

- ``credential``: stations admitted with their station credential that the
  pool does not yet hold bound. Held here (`holds`) from that moment, so the
  site token cannot take the station in the seconds before the worker's
  ``station_bound`` comes back as `bound`, and until the pool has decided
  about the station since (its bind or reset clock, `at`, moved past the one
  known at admission: a reset given meanwhile wins, and is not undone by a
  report of the old admission);
- ``token``: stations admitted with the site token (bounded);
- ``refused``: per station, how many site-token registrations were refused
  because it is bound, and from which peer last (the worker raises them as
  ``impersonation`` security events).

Viewers are never refused: a viewer names the station it watches, not itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from relay.server.routing import VIEWER

MAX_TRACKED = 1024  # stations per list in the snapshot; more are not reported (counted in `untracked`)
BOUND_REFUSAL = (
    "station {station} is bound to its station credential: the site token is refused for it "
    "(an operator can reset the binding: relayctl unbind {station})"
)


class StationBindings:
    def __init__(self, bound: Iterable[str] = ()) -> None:
        self.bound: frozenset[str] = frozenset(bound)
        self.at: dict[str, int] = {}  # station -> the clock of the pool's last bind or reset of it
        self.loaded = False  # a `replace()` has happened (the pool's bindings are known)
        # admitted with the credential, not (yet) bound by the pool: station -> its clock then
        self.credential: dict[str, int] = {}
        self.token: dict[str, None] = {}
        self.refused: dict[str, dict[str, Any]] = {}
        self.untracked = 0

    def replace(self, bound: frozenset[str], at: dict[str, int] | None = None) -> None:
        """The pool's bindings as last read; a station it has decided about since
        its credential was admitted here needs no holding any more."""
        self.bound, self.at, self.loaded = bound, dict(at or {}), True
        for station in [s for s, then in self.credential.items() if s in bound or self.at.get(s, -1) > then]:
            del self.credential[station]

    def holds(self, station: str) -> bool:
        return station in self.bound or station in self.credential

    def refusal(
        self, role: str, station: str, station_key: bool, peer: str, held: str | None = None
    ) -> str | None:
        """Why a registration may not be admitted (None: it may); counts the refusal.
        `held`: the router's refusal (a live credential holder has the station), if any."""
        if held is None and (station_key or role == VIEWER or not self.holds(station)):
            return None
        entry = self.refused.get(station)
        if entry is None:
            if len(self.refused) >= MAX_TRACKED:
                self.untracked += 1
                entry = self.refused.setdefault("*", {"count": 0, "peer": ""})
            else:
                entry = self.refused.setdefault(station, {"count": 0, "peer": ""})
        entry["count"] += 1
        entry["peer"] = peer[:80]
        return held or BOUND_REFUSAL.format(station=station[:64])

    def admitted(self, role: str, station: str, station_key: bool) -> None:
        """A registration was admitted: remember which key its station used."""
        if role == VIEWER:
            return
        if station_key:
            if station not in self.bound and station not in self.credential:
                self._add(self.credential, station, self.at.get(station, -1))
        elif station not in self.token:
            self._add(self.token, station, None)

    def _add(self, into: dict[str, Any], station: str, value: Any) -> None:
        if len(into) >= MAX_TRACKED:
            self.untracked += 1
            return
        into[station] = value

    def snapshot(self) -> dict[str, Any]:
        return {
            "loaded": self.loaded,
            "bound": len(self.bound),
            "credential": list(self.credential),
            "token": list(self.token),
            "refused": {s: dict(v) for s, v in self.refused.items()},
            "untracked": self.untracked,
        }
