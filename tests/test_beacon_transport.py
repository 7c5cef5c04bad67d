"""The beacons' transport on real loopback sockets (ports/beacons/beacons.py,
ports/beacons/liveness_port.py): two members, a leader whose supervisor holds the
liveness port and a follower watching it. Evidence of death needs both the
host's answer and the beacons' silence; either alone is none."""

import time

import pytest
from harness import free_port, wait_until

from elections.core.beacon_board import Reaction, Standing
from elections.core.serving import ACKED, LEASE
from elections.ports.beacons.beacon_config import BeaconConfig
from elections.ports.beacons.beacons import BeaconService
from elections.ports.beacons.liveness_port import MAX_HELD, LivenessPort

KEY = "pool-key-0123456789abcdef"
KMSN = "9999-9999-99-99"
LEADER_IP, FOLLOWER_IP = "127.0.0.31", "127.0.0.32"


@pytest.fixture
def pair():
    port = free_port(LEADER_IP)
    leader = BeaconService(
        BeaconConfig(KMSN, "S001", LEADER_IP, 9530, KEY, 0.1, port, [FOLLOWER_IP]),
        lambda: Standing("S001", leader_epoch=7, seen_key=("S001", 7, 4), renew_seq=4), lambda r: None,
        time.monotonic,
    )  # fmt: skip
    reactions = []
    follower = BeaconService(
        BeaconConfig(KMSN, "S002", FOLLOWER_IP, 9530, KEY, 0.1, port, [LEADER_IP]),
        lambda: Standing("S002", seen_key=("S001", 7, 4), holder_ip=LEADER_IP, max_epoch=7), reactions.append,
        time.monotonic,
    )  # fmt: skip
    liveness = LivenessPort(LEADER_IP, port).start()
    leader.start()
    follower.start()
    assert leader.failed is None and follower.failed is None
    wait_until(lambda: follower.snapshot()["liveness"]["state"] == "connected", 5, "the liveness connection")
    wait_until(lambda: follower.leader_key("S001", 0.5) == ("S001", 7, 4), 5, "the leader's beacons")
    yield leader, follower, liveness, reactions
    for service in (leader, follower):
        service.stop()
    liveness.close()


def serving_by_acks(leader: BeaconService, follower: BeaconService) -> None:
    """The leader's right of epoch 7 in `ack` mode, told in its beacons, heard by the follower."""
    with leader.lock:
        leader.book.taken(7, "silent", 3, None, leader.gate_clock())
        right = leader.book.right
        assert right is not None
        right.mode = ACKED
    leader.serving_told(7)

    def heard() -> bool:
        with follower.lock:
            adh = follower.book.adherence
            return adh is not None and adh.mode == ACKED

    wait_until(heard, 3, "the follower hearing `serve: ack`")


def test_the_supervisors_end_and_the_beacons_silence_together_are_evidence(pair):
    leader, follower, liveness, reactions = pair
    serving_by_acks(leader, follower)
    assert follower.evidence("S001", 7) is None
    leader.stop()
    liveness.close()  # the whole agent is gone: the kernel ends the connection
    why = wait_until(lambda: follower.evidence("S001", 7), 3, "the evidence")
    assert "S001's agent is gone" in why
    wait_until(lambda: any("agent is gone" in r.why for r in reactions), 2, "the follower to be told")
    assert follower.evidence("S001", 6) is None  # about another epoch: none


def test_no_evidence_of_a_holder_heard_serving_by_the_lease_alone(pair):
    """Rule 7's guard: the supervisor's end and the beacons' silence, which an on-path writer of
    TCP resets can forge, count only against a holder heard saying it serves by acks. One serving
    by the lease alone is shut only by its renew deadline: the TTL takes it."""
    leader, follower, liveness, reactions = pair
    with follower.lock:  # up for longer than S: no restart rule keeps it from adhering
        follower.book.started = float("-inf")

    def adhered() -> tuple[str, int, str] | None:
        with follower.lock:
            adh = follower.book.adherence
            return None if adh is None else (adh.node, adh.epoch, adh.mode)

    assert wait_until(adhered, 3, "the follower adhering to the leader") == ("S001", 7, LEASE)
    leader.stop()
    liveness.close()
    wait_until(lambda: follower.snapshot()["liveness"]["state"] in ("ended", "refused"), 3, "the answer")
    end = time.monotonic() + 1.0  # ten beacon intervals of silence on top of the answer
    while time.monotonic() < end:
        assert follower.evidence("S001", 7) is None
        time.sleep(0.05)
    assert not any("agent is gone" in r.why for r in reactions)


def test_the_beacons_silence_alone_is_no_evidence(pair):
    leader, follower, _, _ = pair
    leader.stop()  # a frozen worker, or a cut path for datagrams only: the supervisor still answers
    time.sleep(1.0)  # 10 beacon intervals of silence
    assert follower.snapshot()["liveness"]["state"] == "connected"
    assert follower.evidence("S001", 7) is None


def test_a_holder_whose_beacons_stop_is_quiet_within_a_few_intervals_and_told_once(pair):
    """For the station door (relay/server/station_door.py): long before the silence S, a
    follower says its holder went quiet (in its pool view: `snapshot()["quiet"]`), told once;
    evidence it is not."""
    leader, follower, _, _ = pair
    told = []
    follower.on_quiet = lambda: told.append(follower.quiet)
    time.sleep(0.5)
    assert follower.quiet is None and follower.snapshot()["quiet"] is None and told == []
    leader.stop()
    stopped = time.monotonic()
    wait_until(lambda: follower.quiet == "S001", 3, "the holder quiet")
    assert 0.3 - 0.05 <= time.monotonic() - stopped < 2.0  # 3 intervals of 0.1 s, looked at twice an interval
    assert follower.snapshot()["quiet"] == "S001"
    time.sleep(0.3)
    assert told == ["S001"] and follower.evidence("S001", 7) is None


def test_the_hosts_answer_while_the_leader_beacons_is_no_evidence(pair):
    _, follower, liveness, _ = pair
    liveness.close()  # ended and refused, as injected resets would make it
    wait_until(lambda: follower.snapshot()["liveness"]["state"] in ("ended", "refused"), 3, "the answer")
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        assert follower.evidence("S001", 7) is None
        time.sleep(0.05)


def test_our_own_beacon_back_from_our_address_is_an_echo_and_from_another_a_counted_replay():
    import socket

    port = free_port(LEADER_IP)
    spy_ip = "127.0.0.33"
    spy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    spy.bind((spy_ip, port))
    spy.settimeout(5)
    leader = BeaconService(
        BeaconConfig(KMSN, "S001", LEADER_IP, 9530, KEY, 0.1, port, [spy_ip]),
        lambda: Standing("S001", leader_epoch=7, seen_key=("S001", 7, 4), renew_seq=4), lambda r: None,
        time.monotonic,
    )  # fmt: skip
    leader.start()
    try:
        ours, _ = spy.recvfrom(2048)  # one of the leader's beacons, as anyone on the path sees it
        spy.sendto(ours, (LEADER_IP, port))  # sent back from another address: a replay of ours
        from_us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        from_us.bind((LEADER_IP, 0))
        from_us.sendto(ours, (LEADER_IP, port))  # from our own address: our broadcast come back
        from_us.close()

        def counted():  # type: ignore[no-untyped-def]
            snap = leader.snapshot()
            return snap if snap["echoes"] >= 1 and snap["refusals"]["counts"].get("replayed") else None

        snap = wait_until(counted, 5, "the echo and the replay counted")
        assert snap["echoes"] == 1 and snap["refusals"]["counts"] == {"replayed": 1}
        (refusal,) = snap["refusals"]["recent"]
        assert refusal["source"] == f"beacon from {spy_ip}" and "our own beacon" in refusal["detail"]
        assert snap["accepted"] == 0  # neither is anyone's evidence
    finally:
        leader.stop()
        spy.close()


def test_a_flood_of_connections_to_the_liveness_port_closes_none_of_a_followers_and_is_no_evidence(pair):
    import socket

    _, follower, liveness, _ = pair
    flood: list[socket.socket] = []
    since = follower.liveness.at  # when its connection was made: a reconnect would move it
    try:
        for _ in range(3 * MAX_HELD):  # one host of the LAN opening connections as fast as it can
            sock = socket.socket()
            sock.bind(("127.0.0.33", 0))
            sock.connect((LEADER_IP, liveness.listener.getsockname()[1]))
            flood.append(sock)
        wait_until(lambda: liveness.evicted >= 2 * MAX_HELD - 1, 10, "the flood to be cut back")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # the follower's own connection was never the one closed
            assert follower.snapshot()["liveness"]["state"] == "connected"
            assert follower.evidence("S001", 7) is None
            time.sleep(0.05)
        assert follower.liveness.at == since, "the follower's liveness connection was closed by the flood"
        assert len(liveness._held) <= MAX_HELD
    finally:
        for sock in flood:
            sock.close()


def test_a_leader_beacons_serve_ack_as_soon_as_its_gate_is_published_not_at_its_next_interval():
    """A follower takes a frozen leader over on silence only if it heard `serve: ack` (rule 3a);
    until then a freeze is the TTL's. So the first beacon saying it goes out when the gate is
    published (`serving_told`), not up to an interval later (here 5 s: at least 4 s)."""
    port = free_port(LEADER_IP)
    leader = BeaconService(
        BeaconConfig(KMSN, "S001", LEADER_IP, 9530, KEY, 5.0, port, [FOLLOWER_IP]),
        lambda: Standing("S001", leader_epoch=7, seen_key=("S001", 7, 4), renew_seq=4), lambda r: None,
        time.monotonic,
    )  # fmt: skip
    follower = BeaconService(
        BeaconConfig(KMSN, "S002", FOLLOWER_IP, 9530, KEY, 5.0, port, [LEADER_IP]),
        lambda: Standing("S002", seen_key=("S001", 7, 4), holder_ip=LEADER_IP, max_epoch=7), lambda r: None,
        time.monotonic,
    )  # fmt: skip

    def mode() -> str | None:
        with follower.lock:
            adh = follower.book.adherence
            return None if adh is None else adh.mode

    with leader.lock:  # an epoch taken on the TTL serves by the lease until a majority acks
        leader.book.taken(7, "expired", 3, None, leader.gate_clock())
    with follower.lock:  # up for longer than S (44 s at this interval): no restart rule to wait out
        follower.book.started = float("-inf")
    follower.start()
    leader.start()
    try:
        assert leader.failed is None and follower.failed is None
        assert wait_until(mode, 3, "the leader's first beacon") == LEASE
        with leader.lock:  # a majority acked (ServingRight.settle): ACKED, its gate not yet published
            right = leader.book.right
            assert right is not None
            right.mode = ACKED
        assert leader.serving_untold(7)
        heard = time.monotonic()
        leader.serving_told(7)
        wait_until(lambda: mode() == ACKED, 2.0, "the follower hearing `serve: ack`")
        assert time.monotonic() - heard < 2.0
        assert not leader.serving_untold(7)
    finally:
        leader.stop()
        follower.stop()


def test_a_lost_claims_pause_ends_at_the_first_leader_beacon_of_a_newer_epoch(pair):
    """`winner_heard` (the elector's pause after a lost claim): True at once for a leader beacon
    of an epoch above the one asked about, heard before or during the wait; False only after
    the whole wait when none came (the pair's leader beacons epoch 7)."""
    _, follower, _, _ = pair
    start = time.monotonic()
    assert follower.winner_heard(6, 5.0) is True
    assert time.monotonic() - start < 2.0
    start = time.monotonic()
    assert follower.winner_heard(7, 0.3) is False
    assert time.monotonic() - start >= 0.3 - 0.01


def test_followers_of_a_silent_leader_take_it_over_the_moment_their_quiet_reaches_s_not_an_interval_later():
    """Three members; the leader (serving by acks) stops beaconing, its supervisor still answering
    (a frozen worker: no evidence). Each follower's quiet reaches `S` within moments of the
    other's, and each needs the other's report of it (`silent_holder`): a follower beacons the
    instant its quiet reaches S, and looks again when another's beacon comes while the holder is
    quiet. The takeover is asked within a fraction of an interval of S, not at the next of its
    looks twice an interval after the other's next beacon (0.3-0.6 s here)."""
    interval, third = 0.6, "127.0.0.33"
    port = free_port(LEADER_IP)
    leader = BeaconService(
        BeaconConfig(KMSN, "S001", LEADER_IP, 9530, KEY, interval, port, [FOLLOWER_IP, third]),
        lambda: Standing("S001", leader_epoch=7, seen_key=("S001", 7, 4), renew_seq=4), lambda r: None,
        time.monotonic, members=lambda: 3,
    )  # fmt: skip
    asked: list[tuple[str, float]] = []

    def follower(node: str, ip: str, other: str) -> BeaconService:
        def react(r: Reaction) -> None:
            if "silent for" in r.why:
                asked.append((node, time.monotonic()))

        return BeaconService(
            BeaconConfig(KMSN, node, ip, 9530, KEY, interval, port, [LEADER_IP, other]),
            lambda: Standing(node, seen_key=("S001", 7, 4), holder_ip=LEADER_IP, max_epoch=7), react,
            time.monotonic, members=lambda: 3,
        )  # fmt: skip

    followers = [follower("S002", FOLLOWER_IP, third), follower("S003", third, FOLLOWER_IP)]
    with leader.lock:  # taken on silence: serving by acks from its first beacon
        leader.book.taken(7, "silent", 3, None, leader.gate_clock())
    for f in followers:
        with f.lock:  # up for longer than S: no restart rule to wait out
            f.book.started = float("-inf")
    liveness = LivenessPort(LEADER_IP, port).start()
    services = [*followers, leader]
    for service in services:
        service.start()
    try:
        assert all(s.failed is None for s in services)

        def adhered() -> bool:
            with followers[0].lock, followers[1].lock:
                return all(f.book.adherence is not None and f.book.adherence.mode == ACKED for f in followers)

        wait_until(adhered, 5, "both followers adhering to the leader, which serves by acks")
        time.sleep(2 * interval)  # each has heard the other's beacons (acks of the leader)
        leader.stop()  # its beacons stop; its supervisor (the liveness port) still answers
        wait_until(lambda: asked, 15, "a follower asking for the early takeover")
        node, at = asked[0]
        f = next(f for f in followers if f.config.node == node)
        with f.lock:
            adh = f.book.adherence
            assert adh is not None
            s_reached = adh.heard_at + f.book.timing.silence
        assert 0 <= at - s_reached < interval / 2 - 0.05, (at - s_reached, asked)
    finally:
        for service in services:
            service.stop()
        liveness.close()
