"""Entry members (issue 26 part 1, docs/design.md §14.1): the member with the router's port-forward;
the `entry` section.

Keys (docs/cloud.md, "Entry members"):

- `ENTRY` (0|1, default 0): this member has the router's port-forward; while
  the pool has a leader it accepts remote clients on `ENTRY_LISTEN` and
  forwards them through the fencing proxy to the leader's relay (`relay.server.entry`).
- `ENTRY_LISTEN` (``addr:port``, ``[v6]:port``; required with `ENTRY = 1`,
  `stkrelay.E200`/`E201`): the public side, where the router forwards to:
  this member's `NODE_IP`, or a VIP the entry members share (it is bound
  with ``IP_FREEBIND``, so a member that does not hold the VIP now listens
  there all the same and gets its packets the moment it does). Port
  ``port`` carries protocol v1, ``port + 1`` passthrough, as on the relay.
- The two ports must not be the relay's, nor the panel's, on the same address
  (`stkrelay.E202`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.raw import Raw


@dataclass(frozen=True)
class EntryKeys:
    entry: bool = False  # ENTRY: the router's port-forward reaches this member (relay.server.entry)
    entry_listen: tuple[str, int] | None = None  # ENTRY_LISTEN parsed


class EntryNeeds(Protocol):
    """What the entry keys read of the sections before them."""

    node_ip: str
    relay_port: int
    web_port: int


def parse_listen(text: str) -> tuple[str, int] | None:
    """``addr:port`` / ``[v6]:port`` → (addr, port), port 1..65534 (port + 1 is passthrough); else None."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        return None
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = str(ipaddress.ip_address(host))
        number = int(port)
    except ValueError:
        return None
    return (address, number) if 1 <= number <= 65534 else None


def parse(raw: Raw, known: EntryNeeds, bad: Bad) -> EntryKeys:
    """`ENTRY`, `ENTRY_LISTEN` parsed, reporting E200–E202: the relay's and the panel's ports may
    not be reused on `NODE_IP` or a wildcard."""
    on, listen = _check(raw, known.node_ip, (known.relay_port, known.relay_port + 1, known.web_port), bad)
    return EntryKeys(on, listen)


def _check(raw: Raw, node_ip: str, taken: tuple[int, ...], bad: Bad) -> tuple[bool, tuple[str, int] | None]:
    on = raw.flag("ENTRY", False)
    text = raw.text("ENTRY_LISTEN")
    if not text:
        if on:
            bad("stkrelay.E200", "ENTRY_LISTEN", "is not set while ENTRY = 1",
                "the address and port the router forwards to, e.g. 192.168.1.10:9540")  # fmt: skip
        return on, None
    listen = parse_listen(text)
    if listen is None:
        bad("stkrelay.E201", "ENTRY_LISTEN", f"{text[:80]!r} is not addr:port",
            "an IP address and a port 1..65534, e.g. 192.168.1.10:9540 or [fd00::1]:9540")  # fmt: skip
        return on, None
    host, port = listen
    shared = host in (node_ip, "0.0.0.0", "::") or node_ip in ("0.0.0.0", "::")
    if shared and {port, port + 1} & set(taken):
        bad("stkrelay.E202", "ENTRY_LISTEN", f"port {port} (and {port + 1}) collides with {sorted(taken)}",
            "pick two free ports for the public side, e.g. 9540 (9541 is its passthrough)")  # fmt: skip
        return on, None
    return on, listen
