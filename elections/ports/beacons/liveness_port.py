"""The supervisor's side of the beacons (docs/design.md §13): the TCP liveness
port it holds, and the `resign` it sends when it releases the lease on SIGTERM.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from collections import Counter

from elections.core.beacons import RESIGN, RESIGN_COPIES, Beacon
from elections.ports.beacons.beacon_config import BeaconConfig, new_boot, subnet_broadcast

log = logging.getLogger("stkrelay.beacons")

MAX_HELD = 256  # connections the liveness port holds; past it, the busiest address loses its oldest


class LivenessPort:
    """The supervisor's TCP liveness port: listens on NODE_IP:BEACON_PORT and
    holds every connection open without reading a byte of meaning. When the
    supervisor dies, the kernel closes them all — that answer is the evidence
    followers wait for. Binding fails loudly (`OSError`): `runagent` then says
    so and runs without beacons (another process holds the port, so followers
    could not tell this agent's death from its life there: the TTL decides).

    A flood of connections cannot close a follower's: past `MAX_HELD`, the
    address holding the most connections loses its oldest (a follower holds
    one), counted in `evicted` and logged once per address."""

    def __init__(self, ip: str, port: int) -> None:
        self.listener = socket.create_server((ip, port), backlog=128)
        self.listener.setblocking(False)
        self._held: dict[socket.socket, str] = {}  # in the order accepted -> peer address
        self.evicted = 0  # connections closed because one address held too many
        self._told: set[str] = set()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()  # close() wakes the thread: no polling
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="liveness-port", daemon=True)

    def start(self) -> LivenessPort:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.listener:
                    self._accept()
                elif sock is not self._wake_r:
                    self._drain(sock)
        for sock in list(self._held):
            sock.close()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def _accept(self) -> None:
        try:
            conn, peer = self.listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self._held[conn] = peer[0]
        self._selector.register(conn, selectors.EVENT_READ)
        while len(self._held) > MAX_HELD:
            busiest = Counter(self._held.values()).most_common(1)[0][0]
            self._forget(next(s for s, ip in self._held.items() if ip == busiest))
            self.evicted += 1
            if busiest not in self._told and len(self._told) < MAX_HELD:
                self._told.add(busiest)
                log.warning("SECURITY: liveness port: %s holds too many connections; closing its oldest",
                            busiest)  # fmt: skip

    def _drain(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._forget(sock)

    def _forget(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        self._held.pop(sock, None)
        sock.close()


def send_resign(config: BeaconConfig, epoch: int, renew_seq: int) -> None:
    """`resign` three times from a process that is not the beacon sender (the
    supervisor releasing on SIGTERM), under a boot of its own."""
    boot = new_boot()
    targets = config.peers or [subnet_broadcast(config.ip)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        with contextlib.suppress(OSError):
            sock.bind((config.ip, 0))
        for seq in range(1, RESIGN_COPIES + 1):
            raw = Beacon(config.kmsn, config.node, config.ip, config.relay_port, RESIGN, epoch, renew_seq,
                         boot, seq).encode(config.key)  # fmt: skip
            for target in targets:
                with contextlib.suppress(OSError):
                    sock.sendto(raw, (target, config.port))
