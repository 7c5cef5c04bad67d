"""The beacon keys of `stk.ini` (docs/design.md §13): the `beacons` section.

- `BEACON_INTERVAL` (seconds, default 0.2): how often this member sends a
  signed beacon (jittered ±20 %). `0` switches beacons off, and with them the
  liveness port and every early reaction: the pool then behaves exactly as
  with the lease alone. Otherwise 0.05..`LEASE_RENEW`/2 — a beacon slower than
  that could not tell anyone anything before the next lease read
  (`stkrelay.E030`).
- `BEACON_PORT` (default `RELAY_PORT + 2`): UDP beacons and the supervisor's
  TCP liveness port; it must not be one of the relay ports or the web port
  (`stkrelay.E031`). The same on every member of the pool.
- `BEACON_PEERS` (comma list of addresses, empty = the broadcast address of
  `NODE_IP`'s subnet): where beacons go when broadcast does not reach every
  member (routed sites, Wi-Fi that drops broadcast). Bad entries are
  `stkrelay.E032`.

The serving right (docs/design.md §15) adds no key: its window `W` and silence `S`
are derived from `BEACON_INTERVAL` (`elections.core.serving.ServingTiming`:
W = 7.5 intervals, S = W × 1.01/0.99 + 1.2 intervals + 0.05 s, 1.5 s and 1.82 s
at 0.2 s). `S` must be shorter than `LEASE_TTL`, or a follower could never take
over before the TTL anyway (`stkrelay.E130`: lower BEACON_INTERVAL).

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value and leaves its default.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.raw import Raw

BEACON_INTERVAL = 0.2  # BEACON_INTERVAL's default, seconds
DEFAULT_INTERVAL = BEACON_INTERVAL
MIN_INTERVAL = 0.05


@dataclass(frozen=True)
class Beacons:
    beacon_interval: float = BEACON_INTERVAL  # 0: off
    beacon_port: int = 9532
    beacon_peers: list[str] = field(default_factory=list)


class BeaconsNeed(Protocol):
    """What the beacons read of the sections before them."""

    lease_renew: float
    lease_ttl: float
    relay_port: int
    web_port: int


def parse(raw: Raw, known: BeaconsNeed, bad: Bad) -> Beacons:
    interval = _interval(raw.text("BEACON_INTERVAL"), known.lease_renew, bad)
    _check_serving(interval, known.lease_ttl, bad)
    port = _port(raw.text("BEACON_PORT"), known.relay_port, known.web_port, bad)
    return Beacons(interval, port, _peers(raw.text("BEACON_PEERS"), bad))


def _interval(text: str, lease_renew: float, bad: Bad) -> float:
    try:
        value = float(text)
    except ValueError:
        bad("stkrelay.E030", "BEACON_INTERVAL", f"{text!r} is not a number",
            "set BEACON_INTERVAL to seconds between beacons, e.g. 0.2 (0 = beacons off)")  # fmt: skip
        return 0.0
    if value == 0:
        return 0.0
    if not MIN_INTERVAL <= value <= lease_renew / 2:
        bad("stkrelay.E030", "BEACON_INTERVAL", f"{value:g} is out of range",
            f"use 0 (off) or {MIN_INTERVAL:g}..{lease_renew / 2:g} (LEASE_RENEW / 2), e.g. 0.2")  # fmt: skip
        return 0.0
    return value


def _check_serving(interval: float, lease_ttl: float, bad: Bad) -> None:
    """E130: the serving right's derived silence S must come before the TTL."""
    from elections.core.serving import WINDOW_INTERVALS, ServingTiming

    if interval <= 0:
        return
    timing = ServingTiming.of(interval)
    if timing.silence >= lease_ttl:
        most = lease_ttl / (timing.silence / interval)
        what = (f"{interval:g} s makes the serving right's silence S {timing.silence:.2f} s "
                f"(W {timing.window:.2f} s = {WINDOW_INTERVALS:g} intervals) ≥ LEASE_TTL {lease_ttl:g} s: "
                "no takeover could come before the TTL")  # fmt: skip
        bad("stkrelay.E130", "BEACON_INTERVAL", what,
            f"use a BEACON_INTERVAL below {most:.2f} s, e.g. 0.2, or 0 (beacons off)")  # fmt: skip


def _port(text: str, relay_port: int, web_port: int, bad: Bad) -> int:
    default = relay_port + 2 if relay_port <= 65533 else relay_port - 1
    if not text:
        port = default
    else:
        try:
            port = int(text)
        except ValueError:
            bad("stkrelay.E031", "BEACON_PORT", f"{text!r} is not a port", f"e.g. {default} (RELAY_PORT + 2)")
            return default
        if not 1 <= port <= 65535:
            bad("stkrelay.E031", "BEACON_PORT", f"{port} is out of range", "use 1..65535")
            return default
    if port in (relay_port, relay_port + 1, web_port):
        hint = f"RELAY_PORT uses {relay_port}, {relay_port + 1}, WEB_PORT {web_port}; e.g. {default}"
        bad("stkrelay.E031", "BEACON_PORT", f"{port} collides with the relay or web ports", hint)
    return port


def _peers(text: str, bad: Bad) -> list[str]:
    """BEACON_PEERS: IPv4 addresses (beacons go to each, at BEACON_PORT)."""
    peers: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            address = ipaddress.ip_address(item)
        except ValueError:
            bad("stkrelay.E032", "BEACON_PEERS", f"{item!r} is not an IP address",
                "list the members' addresses, e.g. 192.168.1.10,192.168.1.11")  # fmt: skip
            continue
        if address.version != 4:
            bad("stkrelay.E032", "BEACON_PEERS", f"{item!r} is not IPv4", "beacons are IPv4 datagrams")
            continue
        peers.append(str(address))
    return peers
