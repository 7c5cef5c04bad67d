"""The serving right under beacon loss (docs/design.md §15, issue 22): a real 3-agent
site (default timing: TTL 10, beacons every 0.2 s) whose beacons all pass
through a lossy forwarder — 30 % dropped, the rest delayed 20–80 ms — for
`STK_LOSS_MINUTES` (default 10): not one leader change, and the leader's relay
never stops serving. A chaos test (`make chaos`): long, and judged by what a
client sees. This kernel has no netem, so the loss is a userspace forwarder:
each agent's `BEACON_PEERS` names the others' forwarders, each forwarder
(127.0.0.3x, same port) drops or delays, then hands the datagram on.
"""

import heapq
import os
import random
import socket
import threading
import time

import pytest
from harness import DEFAULT, listening, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.agents]
MINUTES = float(os.environ.get("STK_LOSS_MINUTES", "10"))


class LossyForwarder:
    """UDP on `listen` → `target`, dropping `loss` of the datagrams and delaying the rest."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], loss: float,
                 delay: tuple[float, float], seed: int) -> None:  # fmt: skip
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(listen)
        self.sock.settimeout(0.2)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.target, self.loss, self.delay = target, loss, delay
        self.rng = random.Random(seed)
        self.queue: list[tuple[float, int, bytes]] = []
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.passed = self.dropped = 0
        self.n = 0
        for job in (self._receive, self._send):
            threading.Thread(target=job, daemon=True).start()

    def _receive(self) -> None:
        while not self.stopping.is_set():
            try:
                data, _ = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            except OSError:
                return
            if self.rng.random() < self.loss:
                self.dropped += 1
                continue
            with self.cond:
                self.n += 1
                heapq.heappush(self.queue, (time.monotonic() + self.rng.uniform(*self.delay), self.n, data))
                self.cond.notify()

    def _send(self) -> None:
        while not self.stopping.is_set():
            with self.cond:
                while not self.queue and not self.stopping.is_set():
                    self.cond.wait(0.2)
                if not self.queue:
                    continue
                at, _, data = self.queue[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                heapq.heappop(self.queue)
            try:
                self.out.sendto(data, self.target)
                self.passed += 1
            except OSError:
                pass

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()


@pytest.mark.timeout(MINUTES * 60 + 300)
def test_thirty_percent_beacon_loss_with_delay_for_ten_minutes_changes_no_leader(site_factory):
    site = site_factory(3, timing=DEFAULT)
    port = int(site.agents[0].setting("RELAY_PORT")) + 2
    proxy = {a.name: f"127.0.0.{31 + i}" for i, a in enumerate(site.agents)}
    forwarders = [LossyForwarder((proxy[a.name], port), (a.ip, port), 0.3, (0.02, 0.08), seed=i)
                  for i, a in enumerate(site.agents)]  # fmt: skip
    try:
        for agent in site.agents:
            peers = ",".join(proxy[o.name] for o in site.agents if o is not agent)
            agent.ini.write_text(agent.ini.read_text() + f"BEACON_PEERS = {peers}\n")
        site.start()
        first = site.wait_settled(timeout=60)
        leader = site.by_name(first.node)
        relay_port = int(leader.setting("RELAY_PORT"))
        until = time.monotonic() + MINUTES * 60
        looks = 0
        while time.monotonic() < until:
            rec = site.lease()
            assert rec is not None and (rec.node, rec.epoch) == (first.node, first.epoch), (looks, rec)
            if looks % 20 == 0:  # every ~10 s: the relay still serves (a client registers)
                wait_until(lambda: listening(leader.ip, relay_port), 5, "the leader's relay to listen")
            looks += 1
            time.sleep(0.5)
        elected = [e for a in site.agents for k, e, _ in a.history() if k == "elected"]
        assert set(elected) == {first.epoch}, elected
        dropped = sum(f.dropped for f in forwarders)
        passed = sum(f.passed for f in forwarders)
        assert 0.25 < dropped / max(1, dropped + passed) < 0.35, (dropped, passed)
        print(f"{MINUTES:g} min, {dropped} of {dropped + passed} beacons dropped: no leader change")
    finally:
        for f in forwarders:
            f.stop()
