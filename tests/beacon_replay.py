"""A replayer on the LAN: capture a leader's signed beacons as anyone on the segment receives
them (a broadcast), and send them again later (issue 40: `tests/test_agents_replayed_beacons.py`,
the chaos run's `beacon_replay` fault). It holds no key: it only repeats what it heard."""

from __future__ import annotations

import socket
import threading
import time

from elections.core.beacons import LEADER, parse_beacon
from elections.core.untrusted import Untrusted


def capture(broadcast: str, port: int, node: str, count: int, token: str, kmsn: str,
            within: float) -> list[bytes]:  # fmt: skip
    """Up to `count` leader beacons of `node` heard on `broadcast:port` within `within` seconds
    (signature checked only to pick them out of the others' beacons)."""
    got: list[bytes] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.bind((broadcast, port))
        deadline = time.monotonic() + within
        while len(got) < count and (left := deadline - time.monotonic()) > 0:
            sock.settimeout(min(left, 1.0))
            try:
                data, _ = sock.recvfrom(2048)
            except TimeoutError:
                continue
            try:
                beacon = parse_beacon(data, token, kmsn)
            except Untrusted:
                continue
            if beacon.node == node and beacon.role == LEADER:
                got.append(data)
    return got


def replay(beacons: list[bytes], broadcast: str, port: int, source: str, every: float,
           stop: threading.Event) -> int:  # fmt: skip
    """Send `beacons` again in their order, one each `every` s, to `broadcast:port` from `source`
    (the dead leader's own address, where it is free: what a replayer would choose); how many."""
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.bind((source, 0))
        for data in beacons:
            if stop.wait(every):
                break
            sock.sendto(data, (broadcast, port))
            sent += 1
    return sent
