"""Stations bound to their credentials: the fold of the pool's station events.

Pure: no I/O, no clock. A station that has once registered with its station
credential (docs/design.md §8) is **bound**: from then on the relay refuses the
site-wide token for it (``bad_auth``), whichever agent leads and however often
agents restart, until an operator resets the binding. The binding is not a
file of its own: it is three kinds of signed event lines in the pool's event
log (docs/design.md §6, signed with `POOL_KEY`, verified and replay-checked by the
event tail before anything here sees them), folded alike by every agent:

- ``station_bound`` (``station``, ``clock``): written by the leader's worker
  when its relay admitted ``station`` with the station's credential and the
  fold did not hold it bound;
- ``unbind_requested`` (``target``, ``clock``, actor...): the operator's reset,
  written by the steering service like a drain (`core.commands`);
- ``station_seen`` (``station``, ``key``): the leader saw ``station`` register
  with the site token for the first time (what `relayctl credential --all`
  and the panel list; it binds nothing).

Order without wall clocks, as for commands (`core.commands`): a bind and a
reset of one station form one register, holding the value of the last of them
in ``(clock, node, seq)`` order, whatever order the files were read in. A bind
takes the Lamport clock one above every command and bind its writer had folded,
so a reset given after seeing a bind wins over it, and a bind after a reset
wins over the reset. A forged, unsigned or replayed line never reaches the
fold: the tail refuses it (counted as a security event), so it is no evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elections.core.commands import OrderKey, order_key

BOUND = "station_bound"
SEEN = "station_seen"
UNBIND = "unbind_requested"
EVENT_KINDS = (BOUND, SEEN, UNBIND)
STATION_KEY = "station"  # `key` of a session: its station credential
SITE_TOKEN = "token"  # `key` of a session: the site-wide RELAY_TOKEN
MAX_STATIONS = 1024  # bind registers, and seen names, per pool; a name past either cap is counted, not folded
MAX_NAME = 64


def station_name(value: object) -> str | None:
    """`value` if it is a plausible station name (a non-empty string of at most
    MAX_NAME printable characters), else None: names come from event lines."""
    if isinstance(value, str) and 0 < len(value) <= MAX_NAME and value.isprintable():
        return value
    return None


@dataclass
class StationBook:
    """Every station the pool knows: bound or not, and the key it was seen with."""

    bound: dict[str, bool] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # station -> SITE_TOKEN: seen with the site token
    clock: int = 0  # the highest clock of a bind or reset folded
    overflow: int = 0  # names not folded: over MAX_STATIONS
    _at: dict[str, OrderKey] = field(default_factory=dict)

    def apply(self, events: list[dict[str, Any]]) -> bool:
        """Fold station events (others are ignored), in any order, any batching;
        an event folded again changes nothing. True if the binding of any
        station or the set of known stations changed."""
        changed = False
        for e in events:
            kind = e.get("kind")
            if kind not in EVENT_KINDS:
                continue
            name = station_name(e.get("target") if kind == UNBIND else e.get("station"))
            if name is None or not self._room_for(name, kind):
                continue
            if kind == SEEN:
                if name not in self.keys:
                    self.keys[name] = SITE_TOKEN
                    changed = True
                continue
            key = order_key(e)
            self.clock = max(self.clock, key[0])
            if name not in self._at or key > self._at[name]:
                self._at[name] = key
                was = self.bound.get(name)
                self.bound[name] = kind == BOUND
                changed = changed or was != self.bound[name]
        return changed

    def _room_for(self, name: str, kind: str) -> bool:
        """Seen names and bind registers have caps of their own: a client with the
        site token that registers as thousands of names cannot crowd out a binding."""
        table: dict[str, Any] = self.keys if kind == SEEN else self.bound
        if name in table or len(table) < MAX_STATIONS:
            return True
        self.overflow += 1
        return False

    def is_bound(self, station: str) -> bool:
        return self.bound.get(station, False)

    def bound_stations(self) -> list[str]:
        return sorted(s for s, b in self.bound.items() if b)

    def known(self) -> list[str]:
        """Every station seen registering or ever bound, sorted."""
        return sorted(self.keys.keys() | self.bound.keys())

    def to_doc(self) -> dict[str, Any]:
        """What `DATA_DIR/stations.json` holds. The relay reads `bound`, and `at`:
        the clock of each station's last bind or reset, which tells it that the
        pool has decided about a station since it admitted its credential."""
        known = {s: STATION_KEY if self.is_bound(s) else SITE_TOKEN for s in self.known()}
        at = {s: key[0] for s, key in sorted(self._at.items())}
        return {"bound": self.bound_stations(), "known": known, "at": at, "clock": self.clock}
