"""The quiet leader's rule (issue 22, `BeaconLink.hears_all`): a leader reads the share less
while every other member's beacon came within `LEADER_QUIET_INTERVALS`; a member unheard
longer puts it back to polling at once."""

from __future__ import annotations

from elections.core.beacon_board import Standing
from elections.core.beacons import Beacon
from elections.ports.beacons.beacon_config import BeaconConfig
from elections.runtime.beacon_link import LEADER_QUIET_INTERVALS, BeaconLink

KEY = "pool-key-0123456789abcdef"
KMSN = "9999-9999-99-99"
INTERVAL = 0.2
LEADER = Standing("S001", leader_epoch=7, seen_key=("S001", 7, 4), max_epoch=7)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def link(clock: Clock) -> BeaconLink:
    config = BeaconConfig(KMSN, "S001", "10.0.0.1", 9530, KEY, INTERVAL, 9532)
    return BeaconLink(config, elector=None, cycle=lambda why: None, monotonic=clock)  # type: ignore[arg-type]


def hear(bl: BeaconLink, node: str, seq: int, at: float) -> None:
    raw = Beacon(KMSN, node, f"10.0.0.{node[-1]}", 9530, "follower", 7, 4, "b" * 16, seq).encode(KEY)
    assert bl.service.board.receive(raw, f"10.0.0.{node[-1]}", at, LEADER) is None
    assert bl.service.board.heard_from(node, at, 0.0)  # the board took it


def test_a_member_beaconing_late_under_load_keeps_the_leader_quiet():
    clock = Clock()
    bl = link(clock)
    others = {f"S00{i}" for i in range(2, 10)}
    for node in others:
        hear(bl, node, 1, clock.now)
    clock.now += 0.9  # three intervals and a half without S005: a loaded machine, not a lost member
    for node in others - {"S005"}:
        hear(bl, node, 2, clock.now)
    assert bl.hears_all(others)


def test_a_member_unheard_past_the_window_puts_the_leader_back_to_polling():
    clock = Clock()
    bl = link(clock)
    others = {"S002", "S003"}
    for node in others:
        hear(bl, node, 1, clock.now)
    clock.now += LEADER_QUIET_INTERVALS * INTERVAL - 0.01
    hear(bl, "S002", 2, clock.now)
    assert bl.hears_all(others)
    clock.now += 0.02
    assert not bl.hears_all(others)  # S003 silent for more than the window
    assert not bl.hears_all(others | {"S004"})  # a member never heard: never quiet
