"""Sending a command nudge (`elections.core.nudge`): one signed datagram to the
leader's `BEACON_PORT` and to the pool's beacon targets (`BEACON_PEERS`, else
the broadcast address of `NODE_IP`'s subnet), from `NODE_IP`.

Best effort by design: the command is on the share already, and every agent
finds it at its next look without the nudge. Sending never raises, never
waits for an answer (there is none), and with beacons off sends nothing (no
agent listens).
"""

from __future__ import annotations

import logging
import socket

from elections.core.nudge import Nudge
from elections.ports.beacons.beacon_config import subnet_broadcast
from stkconfig.model import Config

log = logging.getLogger("stkrelay.beacons")


def nudge_targets(leader_ip: str | None, node_ip: str, peers: list[str]) -> list[str]:
    """The leader's address first, then the beacons' targets, each once. Without
    BEACON_PEERS only the subnet's broadcast: it reaches the leader as the beacons do,
    and a unicast to the leader besides would arrive twice, the second copy counted as
    a replayed nudge (a security refusal on the leader's panel for every command)."""
    if not peers:
        return [subnet_broadcast(node_ip)]
    out = [leader_ip] if leader_ip else []
    for target in peers:
        if target not in out:
            out.append(target)
    return out


def send_nudge(nudge: Nudge, key: str, source_ip: str, port: int, targets: list[str]) -> int:
    """Send `nudge` to each of `targets` at `port`; how many datagrams left."""
    try:
        raw = nudge.encode(key)
    except ValueError as exc:  # a node id or KMSN far beyond any real one
        log.warning("nudge not sent: %s", exc)
        return 0
    sent = 0
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            try:
                sock.bind((source_ip, 0))  # from this member's address, as its beacons come
            except OSError:
                pass  # the kernel picks one: the nudge is judged by its signature, not its source
            for target in targets:
                try:
                    sock.sendto(raw, (target, port))
                    sent += 1
                except OSError as exc:
                    log.debug("nudge to %s not sent: %s", target, exc)
    except OSError as exc:
        log.debug("nudge not sent: %s", exc)
    return sent


def nudge_pool(stk: Config, leader_ip: str | None, node: str, seq: int, kind: str) -> int:
    """Tell this agent's own pool (its `Config`) that `node` wrote event `seq`."""
    if stk.beacon_interval <= 0 or seq <= 0:
        return 0
    nudge = Nudge(stk.kmsn, node, seq, kind)
    targets = nudge_targets(leader_ip, stk.node_ip, stk.beacon_peers)
    return send_nudge(nudge, stk.pool_key, stk.node_ip, stk.beacon_port, targets)
