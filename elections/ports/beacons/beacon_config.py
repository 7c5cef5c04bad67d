"""What a member's beacons are sent with (docs/design.md §13): `BeaconConfig`, a boot's
random id (`new_boot`) and where a broadcast goes (`subnet_broadcast`).

Apart from the transport (`ports.beacons`, asyncio) so that the supervisor, which
holds the liveness port and sends `resign` (`ports.liveness_port`), loads neither
asyncio nor the board (issue 41: ~3 MiB of it, for a dataclass and two functions).
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import subprocess
from dataclasses import dataclass, field


def new_boot() -> str:
    return secrets.token_hex(8)


def subnet_broadcast(ip: str) -> str:
    """The broadcast address of the subnet of the interface holding `ip`
    (`ip -j addr`); 127.255.255.255 for loopback, a /24 if none is found."""
    address = ipaddress.ip_address(ip)
    try:
        out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, timeout=5).stdout
        for link in json.loads(out or "[]"):
            for info in link.get("addr_info", []):
                if info.get("local") == ip:
                    net = ipaddress.ip_network(f"{ip}/{info.get('prefixlen', 24)}", strict=False)
                    return str(info.get("broadcast") or net.broadcast_address)
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    if address.is_loopback:
        return "127.255.255.255"
    return str(ipaddress.ip_network(f"{ip}/24", strict=False).broadcast_address)


@dataclass
class BeaconConfig:
    kmsn: str
    node: str
    ip: str  # NODE_IP
    relay_port: int
    key: str  # POOL_KEY
    interval: float
    port: int  # BEACON_PORT
    peers: list[str] = field(default_factory=list)
    store: str = ""  # this member's lease store as it names it (core.beacons "store"; "" = not said)
    ttl: float = 10.0  # LEASE_TTL: how long a right taken on silence waits before it may fall back
    seq_file: str = ""  # DATA_DIR/beacon_seqs.json: the board's replay memory across a restart ("" = none)
