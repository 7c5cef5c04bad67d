"""The relay side's files in the data directory: `entry.json`, `stations.json`, `addresses.json`.

`LocalState` reads and writes them; reading never raises: what is not an entry
reads as the empty value.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from elections.core.untrusted import as_float, as_int, as_text
from stkhost.processes import pid_alive

MAX_HELD_ADDRESSES = 16  # a leader holds a VIP and a secondary IP or so; more are not ours
HELD_KINDS = ("vip", "secondary_ip")
MAX_STATIONS_SHOWN = 4096  # names read from stations.json; more are not ours


@dataclass(frozen=True)
class EntryStatus:
    """`entry.json`: an entry member's public side, as `relay.server.entry` tells it."""

    pid: int | None = None
    listen: str = ""  # ENTRY_LISTEN, as shown
    listening: bool = False
    updated: float | None = None  # monotonic
    target: dict[str, Any] | None = None  # the leader it forwards to now: epoch, node, ip, port
    sessions: int = 0  # remote clients on protocol v1 now
    streams: int = 0  # passthrough connections now
    repointed: int = 0  # leader changes followed
    proxy: dict[str, Any] = field(default_factory=dict)  # relay.server.fencing_proxy.FencingProxy.snapshot()
    error: str = ""

    @property
    def exists(self) -> bool:
        return self.updated is not None

    def fresh(self, now: float, within: float = 3.0) -> bool:
        """Written within `within` seconds (it writes every second) by a process that lives."""
        return (self.updated is not None and 0 <= now - self.updated <= within
                and self.pid is not None and pid_alive(self.pid))  # fmt: skip

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> EntryStatus:
        target = doc.get("target")
        proxy = doc.get("proxy")
        return cls(
            pid=as_int(doc.get("pid"), None),
            listen=as_text(doc.get("listen"))[:80],
            listening=doc.get("listening") is True,
            updated=as_float(doc.get("updated")),
            target=target if isinstance(target, dict) else None,
            sessions=as_int(doc.get("sessions")),
            streams=as_int(doc.get("streams")),
            repointed=as_int(doc.get("repointed")),
            proxy=proxy if isinstance(proxy, dict) else {},
            error=as_text(doc.get("error"))[:300],
        )


@dataclass(frozen=True)
class StationsFile:
    """`stations.json`: the pool's station bindings as this agent's worker folded
    them (`core.stations.StationBook.to_doc`). `exists` is False before the
    worker's first complete fold: readers then keep what they had."""

    exists: bool = False
    bound: frozenset[str] = frozenset()
    known: dict[str, str] = field(default_factory=dict)  # station -> "station" | "token"
    at: dict[str, int] = field(default_factory=dict)  # station -> clock of its last bind or reset

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> StationsFile:
        bound, known, at = doc.get("bound"), doc.get("known"), doc.get("at")
        if not isinstance(bound, list):
            return cls()
        names = frozenset(s for s in bound[:MAX_STATIONS_SHOWN] if isinstance(s, str) and 0 < len(s) <= 64)
        keys = {}
        if isinstance(known, dict):
            for station, key in list(known.items())[:MAX_STATIONS_SHOWN]:
                if isinstance(station, str) and len(station) <= 64:
                    keys[station] = "station" if key == "station" else "token"
        clocks = {}
        if isinstance(at, dict):
            for station, clock in list(at.items())[:MAX_STATIONS_SHOWN]:
                if isinstance(station, str) and len(station) <= 64 and as_int(clock, None) is not None:
                    clocks[station] = clock
        return cls(True, names, keys, clocks)


@dataclass(frozen=True)
class HeldAddress:
    """One address an executor took for this leader (`assign_vip`, `assign_secondary_ip`)."""

    address: str  # canonical (ipaddress), IPv4 or IPv6
    epoch: int  # the epoch it was taken for: the relay of another epoch does not serve it
    kind: str = "vip"  # "vip" | "secondary_ip"
    executor: str = ""  # vip, aws, oci, azure
    target: str = ""  # the action's target, for people

    @classmethod
    def from_doc(cls, doc: Any) -> HeldAddress | None:
        """One entry of `addresses.json`, or None if it is not one (never raises)."""
        if not isinstance(doc, dict):
            return None
        epoch, text = as_int(doc.get("epoch"), None), doc.get("address")
        if epoch is None or not isinstance(text, str) or len(text) > 64:
            return None
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            return None
        if ip.is_unspecified or ip.is_multicast:
            return None
        kind = as_text(doc.get("kind"))
        kind = kind if kind in HELD_KINDS else "vip"
        return cls(str(ip), epoch, kind, as_text(doc.get("executor"))[:32], as_text(doc.get("target"))[:200])


def held_addresses_of(doc: dict[str, Any]) -> tuple[HeldAddress, ...]:
    """The entries of an `addresses.json` document that are entries, at most
    MAX_HELD_ADDRESSES, one per address (the last one written wins)."""
    entries = doc.get("addresses")
    if not isinstance(entries, list):
        return ()
    found: dict[str, HeldAddress] = {}
    for raw in entries[: MAX_HELD_ADDRESSES * 4]:
        held = HeldAddress.from_doc(raw)
        if held is not None:
            found.pop(held.address, None)
            found[held.address] = held
    return tuple(found.values())[-MAX_HELD_ADDRESSES:]
