"""Old stations for the station door's tests and bench (issue 36): clients that know nothing of
stkrelay. Each dials one address, then its backup, over and over (its own reconnect loop, a
random 0.2-1 s backoff after a drop, as the site's Harbour agents do), speaks the site relay's
framing (a 4-byte big-endian length, then the body: `tests/standin_relay.py`, which echoes every
frame and copies it to every other connection) and sends a numbered message every `RATE` seconds.
Its keepalive (seed 000 §2: `relay_client.prg` has one) is that echo: a connection that brought
nothing back for `SILENCE` seconds is dropped, and the next dial starts at the next address (a
relay that froze with the connection open cannot close it; only the client's own timer can).
What each received, from whom and when (CLOCK_MONOTONIC, one clock for every namespace of this
machine), is kept for the judge.

Each runs on a thread of its own inside a namespace (`netns.Netns.enter`), with blocking sockets.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import struct
import threading
import time
from typing import Any

RATE = 0.05  # seconds between two messages of one station
BACKOFF = (0.2, 1.0)  # a station's redial after a drop or a refusal: uniform in this range
SILENCE = 1.0  # seconds without a byte back (its own echo comes every RATE) before a station drops


class OldStation(threading.Thread):
    """One station: `addresses` tried in order on every (re)connect."""

    def __init__(self, name: str, ns: Any, addresses: list[tuple[str, int]], seed: int = 0) -> None:
        super().__init__(name=f"station-{name}", daemon=True)
        self.station, self.ns, self.addresses = name, ns, addresses
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.received: list[tuple[float, str, int]] = []  # (monotonic, sender, n)
        self.sent: dict[int, float] = {}
        self.connects: list[tuple[float, tuple[str, int]]] = []
        self.refused: list[tuple[float, tuple[str, int], float]] = []  # when, where, seconds to the refusal
        self.errors: list[BaseException] = []
        self.first = 0  # the address the next dial tries first
        self.last_rx = 0.0
        self.silences = 0

    def run(self) -> None:
        try:
            self.ns.enter()
            n = 0
            while not self.stopping.is_set():
                sock = self._dial()
                if sock is None:
                    self.stopping.wait(self.rng.uniform(*BACKOFF))
                    continue
                reader = threading.Thread(target=self._read, args=(sock,), daemon=True)
                reader.start()
                try:
                    while not self.stopping.is_set() and reader.is_alive():
                        if time.monotonic() - self.last_rx > SILENCE:  # the next dial starts past this one
                            self.silences += 1
                            here = self.addresses.index(self.connects[-1][1])
                            self.first = (here + 1) % len(self.addresses)
                            break
                        body = json.dumps({"from": self.station, "n": n}).encode()
                        sock.sendall(struct.pack(">I", len(body)) + body)
                        with self.lock:
                            self.sent[n] = time.monotonic()
                        n += 1
                        self.stopping.wait(RATE)
                except OSError:
                    pass
                finally:
                    # shutdown, not only close: a close leaves the reader blocked in recv() on Linux
                    # (until the peer sends or the join below gives up), which would add seconds to a
                    # drop that the site's stations redial 0.2-1 s after.
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
                    reader.join(2)
                if not self.stopping.is_set():
                    self.stopping.wait(self.rng.uniform(*BACKOFF))
        except BaseException as exc:  # handed to the test
            self.errors.append(exc)

    def _dial(self) -> socket.socket | None:
        order = self.addresses[self.first :] + self.addresses[: self.first]
        for where in order:
            start = time.monotonic()
            try:
                sock = socket.create_connection(where, timeout=1.0)
            except OSError:
                with self.lock:
                    self.refused.append((time.monotonic(), where, time.monotonic() - start))
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.connects.append((time.monotonic(), where))
            self.last_rx = time.monotonic()
            return sock
        return None

    def _read(self, sock: socket.socket) -> None:
        buf = b""
        try:
            while chunk := sock.recv(65536):
                self.last_rx = time.monotonic()
                buf += chunk
                while len(buf) >= 4 and len(buf) >= 4 + (size := struct.unpack(">I", buf[:4])[0]):
                    doc = json.loads(buf[4 : 4 + size])
                    buf = buf[4 + size :]
                    if doc.get("from") != self.station:
                        with self.lock:
                            self.received.append((time.monotonic(), str(doc["from"]), int(doc["n"])))
        except (OSError, ValueError):
            pass
        try:
            sock.shutdown(socket.SHUT_RDWR)  # the writer's next send fails: it redials
        except OSError:
            pass

    def heard_since(self, since: float, others: set[str]) -> float | None:
        """The first time after `since` this station received a message sent after `since` by
        one of `others` (so it crossed the relay that serves now), or None."""
        with self.lock:
            got = list(self.received)
        for at, sender, n in got:
            if at > since and sender in others and self._sent_after(sender, n, since):
                return at
        return None

    def _sent_after(self, sender: str, n: int, since: float) -> bool:
        peer = STATIONS.get(sender)
        if peer is None:
            return False
        with peer.lock:
            sent = peer.sent.get(n)
        return sent is not None and sent > since

    def finish(self) -> None:
        self.stopping.set()
        self.join(5)


STATIONS: dict[str, OldStation] = {}  # by name, for `heard_since` to see when a message was sent


def start_stations(stations: list[OldStation]) -> list[OldStation]:
    STATIONS.clear()
    for station in stations:
        STATIONS[station.station] = station
        station.start()
    return stations
