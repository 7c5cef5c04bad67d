"""Who this agent is, in which pool, with which secret, on which address and ports: the
`identity` section (`KMSN`, `STATION`, `NODE`, `RELAY_TOKEN`, `POOL_KEY`, `NODE_IP`,
`RELAY_PORT`, `WEB_PORT`; E003–E006, E010/E011). The secrets' strength is `stkconfig.web`'s
E018."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw


@dataclass(frozen=True)
class AgentIdentity:
    kmsn: str = ""
    station: str = ""
    node: str = ""  # default: STATION
    node_ip: str = "127.0.0.1"
    relay_port: int = 9530  # and RELAY_PORT + 1 (passthrough)
    relay_token: str = ""
    pool_key: str = ""  # signs every pool record; default RELAY_TOKEN
    web_port: int = 8000


def parse(raw: Raw, known: object, bad: Bad) -> AgentIdentity:
    d = AgentIdentity()
    kmsn, station = raw.text("KMSN"), raw.text("STATION")
    if not kmsn:
        bad("stkrelay.E003", "KMSN", "is not set", "set KMSN to the site's id, e.g. 9999-9999-99-99")
    if not station:
        bad("stkrelay.E003", "STATION", "is not set", "set STATION to this agent's station, e.g. S001")
    token = raw.text("RELAY_TOKEN")
    if not token:
        bad("stkrelay.E004", "RELAY_TOKEN", "is missing",
            "set the site's shared secret (the same on every agent of the KMSN)")  # fmt: skip
    node_ip = d.node_ip
    try:
        node_ip = str(ipaddress.ip_address(raw.text("NODE_IP")))
    except ValueError:
        bad("stkrelay.E005", "NODE_IP", f"{raw.text('NODE_IP')!r} is not an IP address",
            "set the agent's LAN address, e.g. 192.168.1.10")  # fmt: skip
    relay_port = raw.number("RELAY_PORT", bad)
    relay_port = d.relay_port if relay_port is None else relay_port
    web_port = raw.number("WEB_PORT", bad)
    web_port = d.web_port if web_port is None else web_port
    if web_port in (relay_port, relay_port + 1):
        bad("stkrelay.E006", "WEB_PORT", f"{web_port} collides with the relay ports",
            f"RELAY_PORT uses {relay_port} and {relay_port + 1}")  # fmt: skip
    return AgentIdentity(kmsn, station, raw.text("NODE") or station, node_ip, relay_port, token,
                    raw.text("POOL_KEY") or token, web_port)  # fmt: skip
