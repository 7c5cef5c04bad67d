"""Who answers ARP for an address on a LAN (the VIP executor's `observe`).

`arp_probe(ifname, address, window, most)` sends an RFC 5227 probe — an ARP request
for `address` with sender address 0.0.0.0, so no neighbour's cache changes —
twice from a raw AF_PACKET socket on `ifname` (CAP_NET_RAW), and collects for
`window` seconds the MACs of the replies that claim `address` (at most `most`;
short or foreign frames are skipped). Anyone on the LAN can answer: what it
finds is shown, never acted on by itself.

It runs in the agent's own process, or, for an interface in another network
namespace (`VIP_NETNS`), as `python -c SCRIPT` under `ip netns exec`: the
function is written free of this package's imports so that its source is the
script.
"""

from __future__ import annotations

import inspect


def arp_probe(ifname: str, address: str, window: float, most: int) -> list[str]:
    import select
    import socket
    import struct
    import time

    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806)) as s:
        s.bind((ifname, 0x0806))
        mac = s.getsockname()[4]
        ip = socket.inet_aton(address)
        arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + b"\0" * 4 + b"\0" * 6 + ip
        frame = b"\xff" * 6 + mac + struct.pack("!H", 0x0806) + arp
        frame += b"\0" * (60 - len(frame))
        seen: list[str] = []
        start, sent = time.monotonic(), 0
        while True:
            now = time.monotonic() - start
            if sent < 2 and now >= sent * window / 3:
                s.send(frame)
                sent += 1
            if now >= window or len(seen) >= most:
                return seen
            ready, _, _ = select.select([s], [], [], min(window - now, window / 3))
            if not ready:
                continue
            data = s.recv(128)
            if len(data) < 42 or data[12:14] != b"\x08\x06":
                continue
            op = struct.unpack("!H", data[20:22])[0]
            sha, spa = data[22:28], data[28:32]
            if op == 2 and spa == ip and sha != mac and sha.hex(":") not in seen:
                seen.append(sha.hex(":"))


# Prints one JSON list of the MACs that answered: ifname address window most.
SCRIPT = (
    inspect.getsource(arp_probe)
    + "\nimport json, sys\n"
    + "print(json.dumps(arp_probe(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))))\n"
)
