"""The command nudge (issue 22), pure: a signed datagram naming an event line
makes its receiver read the event files once. Hostile nudges (forged,
unsigned, another KMSN, replayed, a flood, oversized, nested) are counted and
never asked to be acted on; a replayed one costs no read at all."""

import json

import pytest

from elections.core.beacons import Beacon
from elections.core.lease import sign
from elections.core.nudge import MAX_BYTES, PER_SOURCE, TOTAL, Nudge, NudgeBoard, is_nudge, parse_nudge
from elections.core.untrusted import Untrusted
from elections.ports.beacons.beacon_config import subnet_broadcast
from elections.ports.beacons.nudge import nudge_targets

KEY = "pool-key-0123456789abcdef"
KMSN = "9999-9999-99-99"


def nudge(node="S002", seq=41, kind="promote_requested", kmsn=KMSN):
    return Nudge(kmsn, node, seq, kind)


def none(node: str) -> int:
    return 0


def tampered(**change):
    doc = json.loads(nudge().encode(KEY))
    doc.update(change)
    return json.dumps(doc, separators=(",", ":")).encode()


def test_a_nudge_round_trips_signed_and_is_told_from_a_beacon_by_its_first_bytes():
    data = nudge().encode(KEY)
    assert len(data) <= MAX_BYTES and is_nudge(data)
    assert parse_nudge(data, KEY, KMSN) == nudge()
    doc = json.loads(data)
    assert doc["sig"] == sign({k: v for k, v in doc.items() if k != "sig"}, KEY)
    beacon = Beacon(KMSN, "nudge", "10.0.0.1", 9530, "leader", 1, 1, "0123456789abcdef", 1).encode(KEY)
    assert not is_nudge(beacon)  # even a node named "nudge" beacons as a beacon


HOSTILE = [
    ("a bad signature", tampered(seq=42), "forged"),
    ("no signature", b'{"nudge":1,"kmsn":"9999-9999-99-99","node":"S002","seq":41,"kind":"x"}', "unsigned"),
    ("another pool's", nudge(kmsn="1111-1111-11-11").encode(KEY), "wrong_kmsn"),
    ("signed with another key", nudge().encode("another-key"), "forged"),
    ("a seq of the wrong type", tampered(seq="41"), "not_object"),
    ("a seq of zero", tampered(seq=0), "not_object"),
    ("a boolean version", tampered(nudge=True), "not_object"),
    ("nested", b'{"nudge":1,"kmsn":{"a":{"b":1}}}', "too_deep"),
    ("oversized", b'{"nudge":1,"kind":"' + b"x" * MAX_BYTES + b'"}', "too_large"),
    ("not JSON", b'{"nudge":1,' + b"\xff" * 20, "not_utf8"),
    ("truncated", nudge().encode(KEY)[:-9], "not_json"),
]


@pytest.mark.parametrize(("what", "data", "cause"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_nudge_is_refused_with_its_cause_counted_and_not_acted_on(what, data, cause):
    with pytest.raises(Untrusted) as exc:
        parse_nudge(data, KEY, KMSN)
    assert exc.value.cause == cause
    board = NudgeBoard(KMSN, KEY)
    assert board.receive(data, "10.0.0.9", 1.0, none) is None
    assert board.refusals.counts == {cause: 1} and board.accepted == 0


def test_a_nudge_is_acted_on_once_and_a_replay_of_it_costs_nothing():
    board = NudgeBoard(KMSN, KEY)
    data = nudge().encode(KEY)
    assert board.receive(data, "10.0.0.2", 1.0, none) == nudge()
    # Sent again before the line was read, or after: never a second read.
    assert board.receive(data, "10.0.0.2", 1.1, none) is None
    assert board.receive(data, "10.0.0.7", 1.2, lambda node: 41) is None
    assert board.refusals.counts == {"replayed": 2} and board.accepted == 1


def test_a_nudge_naming_a_line_already_folded_is_a_replay():
    board = NudgeBoard(KMSN, KEY)
    folded = {"S002": 41}.get
    assert board.receive(nudge(seq=40).encode(KEY), "10.0.0.2", 1.0, lambda n: folded(n, 0)) is None
    assert board.receive(nudge(seq=41).encode(KEY), "10.0.0.2", 1.0, lambda n: folded(n, 0)) is None
    assert board.receive(nudge(seq=42).encode(KEY), "10.0.0.2", 1.0, lambda n: folded(n, 0)) == nudge(seq=42)
    assert board.refusals.counts == {"replayed": 2}


def test_a_nudge_goes_to_each_agent_once():
    peers = ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
    assert nudge_targets("127.0.0.22", "127.0.0.21", peers) == ["127.0.0.22", "127.0.0.21", "127.0.0.23"]
    assert nudge_targets(None, "127.0.0.21", peers) == peers
    # The broadcast reaches the leader already: no unicast besides (its copy would read as a replay).
    assert nudge_targets("10.1.2.3", "10.1.2.9", []) == [subnet_broadcast("10.1.2.9")]


def test_a_flood_from_one_address_is_dropped_before_parsing_and_others_still_get_through():
    board = NudgeBoard(KMSN, KEY)
    garbage = b'{"nudge":1,' + b"x" * 100
    for _ in range(10_000):
        board.receive(garbage, "10.0.0.66", 5.0, none)
    assert board.dropped == 10_000 - PER_SOURCE
    assert board.refusals.counts["too_many"] == 10_000 - PER_SOURCE
    assert board.refusals.counts["not_json"] == PER_SOURCE  # parsed: only what the budget admitted
    assert board.receive(nudge().encode(KEY), "10.0.0.2", 5.0, none) == nudge()


def test_everyone_together_is_bounded_too():
    board = NudgeBoard(KMSN, KEY)
    admitted = sum(
        board.receive(nudge(seq=i + 1).encode(KEY), f"10.0.{i // 200}.{i % 200}", 7.0, none) is not None
        for i in range(1000)
    )
    assert admitted == TOTAL
    # A second later the budget is back.
    assert board.receive(nudge(seq=5000).encode(KEY), "10.9.9.9", 8.0, none) == nudge(seq=5000)


def test_a_command_given_on_the_leaders_own_host_is_acted_on_at_once():
    # relayctl on the leader's machine writes the command as the leader's own node and nudges from
    # its address: the leader must fold it now, not at its next renewal (it used to be dropped as an
    # echo: a promote given there took a LEASE_RENEW, 2.4 s in bench/switchover).
    board = NudgeBoard(KMSN, KEY, node="S001", ip="127.0.0.21")
    given = Nudge(KMSN, "S001", 8, "promote_requested")
    raw = given.encode(KEY)
    assert board.receive(raw, "127.0.0.21", 0.0, lambda node: 7) == given
    assert board.accepted == 1 and board.echoes == 0 and board.refusals.counts == {}
    assert board.receive(raw, "127.0.0.21", 0.1, lambda node: 7) is None  # the same, back by broadcast
    assert board.echoes == 1 and board.refusals.counts == {}


def test_a_members_own_nudge_back_by_broadcast_is_its_echo_not_a_replay():
    board = NudgeBoard(KMSN, KEY, node="S001", ip="127.0.0.21")
    raw = Nudge(KMSN, "S001", 7, "promote_requested").encode(KEY)
    assert board.receive(raw, "127.0.0.21", 0.0, lambda node: 7) is None
    assert board.refusals.counts == {} and board.echoes == 1 and board.accepted == 0
    assert board.receive(raw, "127.0.0.99", 1.0, lambda node: 7) is None  # the same bytes from elsewhere
    assert board.refusals.counts == {"replayed": 1} and board.echoes == 1


def test_a_pool_members_nudge_of_a_line_already_read_is_an_echo_from_its_own_address_only():
    # Routine work (issue 42): a drain's audit row is read from the share before its nudge comes;
    # the nudge, from the writer's own address (where its beacons come from), is no security event.
    board = NudgeBoard(KMSN, KEY, node="S001", ip="127.0.0.21")
    raw = nudge(seq=41).encode(KEY)
    beacons_from = {"S002": "10.0.0.2"}.get
    assert board.receive(raw, "10.0.0.2", 1.0, lambda node: 41, beacons_from) is None
    assert board.refusals.counts == {} and board.echoes == 1
    # The same bytes from any other address are still a replay.
    assert board.receive(raw, "10.0.0.7", 1.1, lambda node: 41, beacons_from) is None
    assert board.refusals.counts == {"replayed": 1} and board.echoes == 1
    # A member never heard has no address here: its copy is refused as before.
    assert board.receive(raw, "10.0.0.2", 1.2, lambda node: 41) is None
    assert board.refusals.counts == {"replayed": 2}
