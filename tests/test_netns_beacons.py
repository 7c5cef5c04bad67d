"""Beacons on a LAN of network namespaces (tests/netns.py: one namespace per
agent, a bridge, veth pairs; the share a directory every namespace sees):
subnet broadcast and `BEACON_PEERS` unicast both carry them, kill -9 of the
leader's agent moves the lease within seconds, a cut cable on the leader's
side is taken over on the majority's silence (the serving right, docs/design.md §15:
no evidence of death, but the old gate shut first), and 30 % beacon loss with delay
causes no failover.

This kernel has no sch_netem (nor act_gact), so loss and delay are made by a
forwarder on the LAN: every agent sends its beacons to it (`BEACON_PEERS`), and
it passes each datagram on to every other agent with 30 % dropped and 0-60 ms
of delay — real datagrams on a real bridge, shaped in user space.

Marked `chaos`: they take minutes (`make chaos`); `STK_LOSS_SECONDS` sets the
length of the loss run (default 600 s, the issue's 10 minutes).
"""

import heapq
import json
import os
import random
import socket
import threading
import time

import pytest
from harness import DEFAULT, wait_until
from netns import SUBNET, NetnsSite, available

pytestmark = [pytest.mark.agents, pytest.mark.chaos]

BEACON_PORT = 9532  # RELAY_PORT (9530 in every namespace) + 2


@pytest.fixture
def netns_site(tmp_path, request):
    why = available()
    if why:
        pytest.skip(why)
    sites = []
    request.node.stk_sites = sites

    def make(n=3, **kw):
        sites.append(NetnsSite(tmp_path / f"site{len(sites)}", n=n, **kw))
        return sites[-1]

    yield make
    for site in sites:
        site.stop()


def beacons_of(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text()).get("beacons", {})
    except (OSError, ValueError):
        return {}


def everyone_hears_everyone(site) -> bool:
    for agent in site.agents:
        heard = beacons_of(agent).get("members", {})
        others = {a.name for a in site.agents if a is not agent}
        if not others <= set(heard) or any(heard[n]["age_s"] > 1.5 for n in others):
            return False
    return True


def kill_9_moves_the_lease_within_seconds(site) -> float:
    first = site.wait_settled(timeout=90)
    seq = first.renew_seq
    wait_until(lambda: (site.lease() or first).renew_seq > seq, 10, "a renewal")
    site.by_name(first.node).kill9()
    killed = time.monotonic()
    new = wait_until(
        lambda: (r := site.lease()) and r.epoch > first.epoch and r, 30, "a new lease", every=0.01
    )
    took = time.monotonic() - killed
    assert took < 3.0, f"the new lease came {took:.2f} s after kill -9 (TTL 10)"
    winner = site.by_name(new.node)
    wait_until(lambda: ("elected", new.epoch) in [(k, e) for k, e, _ in winner.history()], 10, "the row")
    reasons = [r for k, e, r in winner.history() if (k, e) == ("elected", new.epoch)]
    assert "agent is gone" in reasons[0], reasons
    return took


def test_subnet_broadcast_carries_the_beacons_and_kill_9_moves_the_lease(netns_site):
    site = netns_site(3, timing=DEFAULT)
    site.start()
    wait_until(lambda: everyone_hears_everyone(site), 90, "every agent to hear the others")
    assert beacons_of(site.agents[0])["targets"] == [f"{SUBNET}.255"]
    print(f"kill -9 -> new lease in {kill_9_moves_the_lease_within_seconds(site):.2f} s (broadcast)")


def test_beacon_peers_unicast_carries_them_and_kill_9_moves_the_lease(netns_site):
    peers = ",".join(f"{SUBNET}.{11 + i}" for i in range(3))
    site = netns_site(3, timing=DEFAULT, extra={"BEACON_PEERS": peers})
    site.start()
    wait_until(lambda: everyone_hears_everyone(site), 90, "every agent to hear the others")
    assert beacons_of(site.agents[0])["targets"] == peers.split(",")
    print(f"kill -9 -> new lease in {kill_9_moves_the_lease_within_seconds(site):.2f} s (unicast)")


def test_a_cut_cable_on_the_leaders_side_is_taken_over_on_the_majoritys_silence(netns_site):
    """No evidence of death (a cut cable answers nothing), but the serving right
    (docs/design.md §15): the leader served by acks, so its gate shut W after the cut,
    and the two others, silent about it for S, take over within seconds."""
    site = netns_site(3, share="lan", timing=DEFAULT)  # the cut takes the leader's share with it
    site.start()
    first = site.wait_settled(timeout=90)
    wait_until(lambda: everyone_hears_everyone(site), 30, "every agent to hear the others")
    seq = first.renew_seq
    wait_until(lambda: (site.lease() or first).renew_seq > seq, 10, "a renewal")  # the TTL's worst case
    leader = site.by_name(first.node)
    site.cut(leader)
    cut = time.monotonic()
    new = site.wait_leader(timeout=10 + 2 + 10, other_than=first.node)
    took = time.monotonic() - cut
    assert took <= 6.0, f"taken over {took:.2f} s after the cut (S 1.82 s; the TTL would be 10 s)"
    winner = site.by_name(new.node)
    wait_until(lambda: ("elected", new.epoch) in [(k, e) for k, e, _ in winner.history()], 10, "the row")
    reasons = [r for k, e, r in winner.history() if (k, e) == ("elected", new.epoch)]
    assert "silent for" in reasons[0], reasons
    wait_until(lambda: leader.state().get("leader") is False, 15, "the cut-off leader to step down")
    site.mend(leader)
    wait_until(lambda: "follow" in leader.state().get("decision", ""), 40, "the mended agent to follow")
    assert site.lease().node == new.node


class LossyHub:
    """A forwarder on the LAN: each datagram to it goes on to every other agent,
    `loss` of them dropped, each after 0..`delay` seconds."""

    def __init__(self, sock: socket.socket, agents: list[str], loss: float, delay: float) -> None:
        self.sock, self.agents, self.loss, self.delay = sock, agents, loss, delay
        self.rng = random.Random(7)
        self.queue: list[tuple[float, int, bytes, str]] = []
        self.wake = threading.Condition()
        self.stopped = False
        self.passed = self.dropped = 0
        self._n = 0
        self.threads = [threading.Thread(target=self._receive, daemon=True),
                        threading.Thread(target=self._send, daemon=True)]  # fmt: skip
        for t in self.threads:
            t.start()

    def _receive(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stopped:
            try:
                data, (source, _) = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            with self.wake:
                for target in self.agents:
                    if target == source:
                        continue
                    if self.rng.random() < self.loss:
                        self.dropped += 1
                        continue
                    self._n += 1
                    at = time.monotonic() + self.rng.uniform(0, self.delay)
                    heapq.heappush(self.queue, (at, self._n, data, target))
                self.wake.notify()

    def _send(self) -> None:
        while not self.stopped:
            with self.wake:
                while not self.queue or self.queue[0][0] > time.monotonic():
                    self.wake.wait(0.01 if self.queue else 0.2)
                    if self.stopped:
                        return
                _, _, data, target = heapq.heappop(self.queue)
            self.sock.sendto(data, (target, BEACON_PORT))
            self.passed += 1

    def stop(self) -> None:
        self.stopped = True
        for t in self.threads:
            t.join(2)
        self.sock.close()


@pytest.mark.timeout(float(os.environ.get("STK_LOSS_SECONDS", "600")) + 300)  # the loss lasts 10 minutes
def test_30_percent_beacon_loss_with_delay_causes_no_failover(netns_site):
    seconds = float(os.environ.get("STK_LOSS_SECONDS", "600"))
    agents = [f"{SUBNET}.{11 + i}" for i in range(3)]
    site = netns_site(3, timing=DEFAULT, extra={"BEACON_PEERS": f"{SUBNET}.200"})  # the observer's address

    def bound() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((f"{SUBNET}.200", BEACON_PORT))
        return sock

    hub = LossyHub(site.observer.call_in(bound), agents, loss=0.3, delay=0.06)
    try:
        site.start()
        first = site.wait_settled(timeout=90)
        wait_until(lambda: everyone_hears_everyone(site), 30, "every agent to hear the others")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rec = site.lease()
            assert rec is not None and (rec.node, rec.epoch) == (first.node, first.epoch), rec
            time.sleep(0.2)
        for agent in site.agents:
            heard = beacons_of(agent)["members"]
            for node, stats in heard.items():
                assert 0.2 < stats["loss"] < 0.4, (agent.name, node, stats)
        assert all(kind != "elected" or epoch == first.epoch for kind, epoch, _ in site.agents[0].history())
        print(
            f"{seconds:.0f} s at 30 % loss: {hub.passed} beacons passed, {hub.dropped} dropped, no failover"
        )
    finally:
        hub.stop()
