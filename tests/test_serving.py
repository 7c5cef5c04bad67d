"""The serving right's pure pieces (`elections.core.serving`, docs/design.md §15);
the rule as a whole is checked on the pool model (`tests/test_serving_model.py`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from elections.core.beacons import Beacon, parse_beacon
from elections.core.lease import sign
from elections.core.serving import (
    ACKED,
    DRIFT,
    LEASE,
    AckReport,
    Adherence,
    ServingTiming,
    adhere,
    said_acks,
    silence_for,
    silent_holder,
)
from elections.core.serving_book import ServingBook
from elections.core.untrusted import Untrusted

KEY, KMSN = "k" * 32, "9999-9999-99-99"
T = ServingTiming.of(0.2)
BOOT, OTHER = "a" * 16, "b" * 16


def test_the_silence_outlasts_the_window_on_the_fastest_and_slowest_clocks():
    assert (T.window, round(T.silence, 3)) == (1.5, 1.82)
    assert T.silence * (1 - DRIFT) > T.window * (1 + DRIFT) + 0.2  # real S beats real W by an interval
    assert silence_for(3.0, 0.5) > 3.0 * (1 + DRIFT) / (1 - DRIFT) + 0.5


def test_a_leader_serves_by_acks_only_while_a_majority_heard_it_within_the_window():
    book = ServingBook("S001", BOOT, T, ttl=10)
    book.taken(7, "first", 3, None, 100.0)
    assert book.bound(7, 3, 100.0) is None  # LEASE mode until a majority acks: the renew deadline alone
    for seq, at in ((1, 100.0), (2, 100.2), (3, 100.4)):
        assert book.outgoing(7, seq, 3, at) == {"serve": LEASE}
    ack = Beacon(KMSN, "S002", "10.0.0.2", 9530, "follower", 7, 0, OTHER, 9, ack_node="S001", ack_epoch=7,
                 ack_boot=BOOT, ack_seq=2)  # fmt: skip
    assert book.heard(ack, 7, 7, 100.5) is True
    assert book.heard(ack, 7, 7, 100.6) is False  # no newer beacon of ours: no news
    assert book.bound(7, 3, 100.6) == pytest.approx(100.2 + 1.5)  # ACKED now: W from the acked beacon's send
    assert book.outgoing(7, 4, 3, 100.6) == {"serve": LEASE}  # not said until the gate was published
    assert book.told(7) is True  # news: the caller beacons at once (ports.beacons.beacons.serving_told)
    assert book.told(7) is False
    assert book.outgoing(7, 5, 3, 100.8) == {"serve": ACKED}
    assert book.bound(7, 5, 100.8) == 100.8  # of five members two must ack besides us: shut
    assert book.lapsed(7, 3, 101.6) is None and book.lapsed(7, 3, 101.8)
    forged = Beacon(KMSN, "S003", "10.0.0.3", 9530, "follower", 7, 0, OTHER, 9, ack_node="S001", ack_epoch=7,
                    ack_boot="c" * 16, ack_seq=5)  # fmt: skip
    assert book.heard(forged, 7, 7, 101.0) is False  # another boot's seq 5 is not our seq 5


def test_an_epoch_taken_on_silence_is_shut_until_acked_and_keeps_off_the_lease_for_a_ttl():
    book = ServingBook("S002", BOOT, T, ttl=10)
    book.taken(8, "silent", 3, None, 50.0)
    assert book.bound(8, 3, 50.0) == 50.0 and book.lapsed(8, 3, 55.0) is None
    assert book.lapsed(8, 3, 60.5)  # a TTL (with drift) later the old holder's deadline has passed
    assert book.bound(9, 3, 50.0) == 50.0  # an epoch never taken through the book: shut


def test_a_member_sticks_to_the_leader_it_heard_within_the_silence():
    a = adhere(None, "S001", "leader", 7, BOOT, 10, ACKED, 100.0, T.silence, floor=7)
    assert a == Adherence("S001", 7, BOOT, 10, 100.0, ACKED)
    assert adhere(a, "S003", "leader", 8, OTHER, 1, LEASE, 101.0, T.silence, floor=8) is a  # sticky
    assert adhere(a, "S001", "leader", 6, BOOT, 11, ACKED, 101.0, T.silence, floor=7) is a  # below floor
    b = adhere(a, "S003", "leader", 8, OTHER, 1, LEASE, 100.0 + T.silence, T.silence, floor=8)
    assert (b.node, b.epoch) == ("S003", 8)
    assert adhere(b, "S001", "leader", 7, BOOT, 12, ACKED, 200.0, T.silence, floor=7) is b  # never back down
    resigned = adhere(a, "S001", "resign", 7, BOOT, 11, "", 100.1, T.silence, floor=7)
    c = adhere(resigned, "S003", "leader", 8, OTHER, 1, LEASE, 100.2, T.silence, floor=8)
    assert (c.node, c.epoch) == ("S003", 8)  # a resign lets go at once (planned switchover)


def test_an_early_takeover_needs_an_ack_serving_holder_silent_to_a_majority():
    mine = Adherence("S001", 7, BOOT, 10, 100.0, ACKED)
    quiet = AckReport("S003", 0.1, "S001", 7, 2.0)
    at = 100.0 + T.silence
    assert silent_holder("S001", 7, mine, [quiet], 3, T, at)
    assert not silent_holder("S001", 7, mine, [quiet], 3, T, at - 0.01)  # not silent for S here yet
    assert not silent_holder("S001", 7, mine, [AckReport("S003", 0.1, "S001", 7, 0.3)], 3, T, at)  # it hears
    assert not silent_holder(
        "S001", 7, mine, [AckReport("S003", 2.0, "S001", 7, 2.0)], 3, T, at
    )  # old report
    assert not silent_holder("S001", 7, mine, [quiet], 5, T, at)  # 2 of 5 is no majority
    assert not silent_holder("S001", 7, mine, [], 2, T, at)  # a pool of two: the TTL path
    lease = Adherence("S001", 7, BOOT, 10, 100.0, LEASE)
    assert not silent_holder("S001", 7, lease, [quiet], 3, T, at)  # a holder serving by the lease
    other = AckReport("S003", 0.1, "S004", 8, 0.0)
    assert silent_holder("S001", 7, mine, [other], 3, T, at)  # adhering to someone else: does not hear it


def test_evidence_of_death_counts_only_of_the_holder_adhered_to_and_heard_serving_by_acks():
    """Rule 7's guard (forged evidence reaches no further than a silence; SPIN's `-DFORGED_GONE`
    without it: two relays): the holder and epoch adhered to, its last beacon `serve: ack`."""
    acked = Adherence("S001", 7, BOOT, 10, 100.0, ACKED)
    assert said_acks("S001", 7, acked)
    assert not said_acks("S001", 7, Adherence("S001", 7, BOOT, 10, 100.0, LEASE))  # the lease alone
    assert not said_acks("S001", 6, acked)  # another epoch of it
    assert not said_acks("S002", 7, acked)  # another holder
    assert not said_acks("S001", 7, None)  # adhering to no one (a restart's S, or never heard)


def test_no_silence_holds_before_the_instant_the_book_names_so_the_loop_may_sleep_until_then():
    """`ServingBook.silence_from` (the silence loop sleeps until it, issue 41): at every instant
    before it `silent` names no holder, whatever beacons came; just after it, one may."""
    book = ServingBook("S002", OTHER, T, ttl=10)
    assert book.silence_from(50.0) == 50.0 + T.silence  # adhering to no one: a first leader is heard later
    quiet = AckReport("S003", 0.1, "S001", 7, 2.0)
    leader = Beacon(KMSN, "S001", "10.0.0.1", 9530, "leader", 7, 3, BOOT, 1, serve=ACKED)
    at = 100.0
    for seq in range(1, 12):  # heard every interval, then silent
        at = 100.0 + 0.2 * seq
        book.heard(replace(leader, seq=seq), None, 7, at)
        earliest = book.silence_from(at)
        assert earliest == at + T.silence
        for probe in (at, at + 0.5, earliest - 0.001):
            assert book.silent("S001", 7, 3, [quiet], probe) is None
    assert book.silent("S001", 7, 3, [quiet], book.silence_from(at) + 0.005)  # the loop's first look
    later = Beacon(KMSN, "S003", "10.0.0.3", 9530, "leader", 8, 1, "c" * 16, 1, serve=ACKED)
    book.heard(later, None, 8, at + T.silence + 0.1)  # S001 silent for S: S003 is adhered to, heard now
    assert book.silence_from(at + T.silence + 0.2) == at + T.silence + 0.1 + T.silence


def test_the_serving_fields_travel_signed_and_old_beacons_stay_byte_for_byte():
    plain = Beacon(KMSN, "S001", "10.0.0.1", 9530, "follower", 7, 3, BOOT, 5)
    assert set(json.loads(plain.encode(KEY))) == {"v", "kmsn", "node", "ip", "port", "role", "epoch",
                                                  "renew_seq", "boot", "seq", "sig"}  # fmt: skip
    full = Beacon(KMSN, "S002", "10.0.0.2", 9530, "follower", 7, 3, OTHER, 6, ack_node="S001", ack_epoch=7,
                  ack_boot=BOOT, ack_seq=99, quiet_ms=120)  # fmt: skip
    assert parse_beacon(full.encode(KEY), KEY, KMSN) == full
    for bad in ({"ack_seq": -1}, {"ack_seq": "9"}, {"serve": "always"}, {"ack_boot": "nothex"},
                {"quiet_ms": True}, {"fenced": 7}, {"fenced": -1}):  # fmt: skip
        doc = json.loads(full.encode(KEY))
        doc.update(bad)
        doc["sig"] = sign(doc, KEY)
        with pytest.raises(Untrusted):
            parse_beacon(json.dumps(doc).encode(), KEY, KMSN)


def test_a_resign_says_fenced_of_its_own_epoch_only_and_signed():
    resign = Beacon(KMSN, "S001", "10.0.0.1", 9530, "resign", 7, 3, BOOT, 5, fenced=7)
    assert parse_beacon(resign.encode(KEY), KEY, KMSN) == resign
    for bad in (replace(resign, fenced=6), replace(resign, role="leader"), replace(resign, role="follower")):
        with pytest.raises(Untrusted, match="fenced"):
            parse_beacon(bad.encode(KEY), KEY, KMSN)


def _resign(book: ServingBook, node: str, epoch: int, now: float) -> Beacon:
    return Beacon(KMSN, node, "10.0.0.1", 9530, "resign", epoch, 0, BOOT, 99, **book.resigning(epoch, now))


def test_the_taker_of_a_clean_release_serves_by_the_lease_at_once_and_of_any_other_by_acks():
    """Issue 22's switchover: a leader whose relay stopped before its release, and before which
    every gate was shut for good, says `fenced` in its resign; the taker of that released lease
    needs no acks to open its gate. Without the fence, or of another lease: acks first."""
    old, new = ServingBook("S001", BOOT, T, ttl=10), ServingBook("S002", OTHER, T, ttl=10)
    old.taken(7, "first", 3, None, 100.0)  # taken on the TTL or first: no earlier gate is open
    assert old.resigning(7, 105.0) == {}  # its relay not fenced: the resign says nothing
    old.fenced(6)  # another epoch's fence: nothing
    assert old.resigning(7, 105.0) == {}
    old.fenced(7)
    assert old.resigning(7, 105.0) == {"fenced": 7} and old.resigning(8, 105.0) == {}
    new.heard(_resign(old, "S001", 7, 105.0), None, 7, 200.0)
    assert new.clean_release == ("S001", 7, 200.0)
    new.taken(8, "handoff", 3, ("S001", 7), 200.0)
    assert new.bound(8, 3, 200.0) is None  # LEASE: the renew deadline alone, at once
    for cause, after in (("handoff", ("S001", 6)), ("handoff", ("S003", 7)), ("handoff", None),
                         ("silent", ("S001", 7))):  # fmt: skip
        new.taken(8, cause, 3, after, 200.0)
        assert new.bound(8, 3, 200.0) == 200.0, (cause, after)  # ACKED from the start: shut until acked
    new.taken(8, "handoff", 2, ("S003", 7), 200.0)
    assert new.bound(8, 2, 200.0) is None  # a pool of two: the lease alone, as before


def test_an_epoch_taken_on_silence_says_fenced_only_once_every_earlier_gate_is_shut_for_good():
    """A holder taken over on silence less than a TTL ago may still serve by its lease: a
    release within that TTL is not clean, and its taker serves by acks."""
    book = ServingBook("S002", BOOT, T, ttl=10)
    book.taken(8, "silent", 3, None, 50.0)
    book.fenced(8)
    assert book.resigning(8, 55.0) == {}
    lease_ok = 50.0 + 10 * (1 + DRIFT) / (1 - DRIFT)
    assert book.resigning(8, lease_ok - 0.01) == {} and book.resigning(8, lease_ok) == {"fenced": 8}
    other = ServingBook("S003", OTHER, T, ttl=10)
    other.heard(_resign(book, "S002", 8, 55.0), None, 8, 60.0)  # not fenced: nothing kept
    assert other.clean_release is None


def test_a_leader_that_finds_an_older_epochs_record_over_its_own_is_not_clean_nor_lapses_for_a_ttl():
    """SPIN's second trail of the lockless renewal (issue 37): S001's renewal renamed its epoch-7
    record over S002's claim of 8 and S001 renews on, its gate open by a member that still acks
    it. S002 rewrote its own record and handed off, its resign saying `fenced` (its lease_ok_at
    long past): the taker served by the lease beside S001. Finding the older epoch's record over
    its own, S002 knows an earlier gate may be open until that holder's deadline: its
    lease_ok_at starts again, for its release (rule 6) and its lapse (rule 4) alike."""
    book = ServingBook("S002", BOOT, T, ttl=10)
    book.taken(8, "silent", 3, ("S001", 7), 50.0)
    book.fenced(8)
    later = 50.0 + 10 * (1 + DRIFT) / (1 - DRIFT) + 5
    assert book.resigning(8, later) == {"fenced": 8} and book.lapsed(8, 3, later) is not None
    book.overwritten(8, later)
    again = later + 10 * (1 + DRIFT) / (1 - DRIFT)
    assert book.resigning(8, later + 1) == {} and book.resigning(8, again - 0.01) == {}
    assert book.lapsed(8, 3, again - 0.01) is None
    assert book.resigning(8, again) == {"fenced": 8} and book.lapsed(8, 3, again) is not None
    book.overwritten(7, again + 1)  # of another epoch than its right's: nothing
    assert book.resigning(8, again + 1) == {"fenced": 8}


def test_a_takeover_on_evidence_of_death_serves_by_acks_beside_an_earlier_holder_still_acked():
    """SPIN's trail of rule 7 (issue 37): S001 (epoch 7, `ack` mode) froze; S002 took epoch 8 on
    its silence; S001 thawed and S003, not yet having read epoch 8, acked it: S001's gate is open
    for W by S003's ack and its own vote. S002 died at once; S003 read epoch 8 and had evidence
    that S002's process was gone. Its epoch 9, taken on that evidence, served by the lease beside
    S001's. The holder's death shuts the holder's gate only: the taker serves by acks (rule 5),
    and its own vote waits S after it last heard the leader it still acked (rule 1)."""
    old = ServingBook("S001", OTHER, T, ttl=10)
    old.taken(7, "first", 3, None, 90.0)
    old.outgoing(7, 30, 3, 100.0)
    third = ServingBook("S003", BOOT, T, ttl=10)
    lead7 = Beacon(KMSN, "S001", "10.0.0.1", 9530, "leader", 7, 0, OTHER, 30, serve=ACKED)
    third.heard(lead7, None, 7, 100.0)
    said = third.outgoing(None, 5, 3, 100.0)
    assert said["ack_node"] == "S001"
    old.heard(Beacon(KMSN, "S003", "10.0.0.3", 9530, "follower", 7, 0, BOOT, 5, **said), 7, 7, 100.0)  # type: ignore[arg-type]
    assert old.bound(7, 3, 100.1) == pytest.approx(100.0 + T.window)  # open by S003's ack
    # S002 took 8 on S001's silence; S003 heard it lead (sticky to S001: not adopted), then it died
    third.heard(Beacon(KMSN, "S002", "10.0.0.2", 9530, "leader", 8, 0, OTHER, 1, serve=ACKED), None, 7, 100.1)
    assert third.adherence is not None and third.adherence.node == "S001"
    third.taken(9, "gone", 3, ("S002", 8), 100.2)
    assert third.bound(9, 3, 100.2) == 100.2  # shut: no majority yet, whatever the renew deadline says
    right = third.right
    assert right is not None and right.self_from == 100.0 + T.silence  # rule 1: S after it heard S001
    right.sent_beacon(1, 100.3)
    right.acked("S002", 9, BOOT, 1)  # even an ack besides its own vote opens nothing before then
    assert third.bound(9, 3, 100.4) == 100.4
    assert third.bound(9, 3, 100.0 + T.silence) == pytest.approx(100.3 + T.window)
    # a taker that adhered to the dead holder itself waits S after it too: evidence of death can be
    # forged by an on-path writer of TCP resets (docs/design.md §13), and its ack may still count
    own = ServingBook("S003", BOOT, T, ttl=10)
    own.heard(Beacon(KMSN, "S002", "10.0.0.2", 9530, "leader", 8, 0, OTHER, 1, serve=ACKED), None, 8, 100.1)
    own.taken(9, "gone", 3, ("S002", 8), 100.2)
    assert own.right is not None and own.right.mode == ACKED and own.right.self_from == 100.1 + T.silence
    short = ServingBook("S003", BOOT, T, ttl=10)  # a pool of two: the lease, not clean for a TTL
    short.taken(9, "gone", 2, ("S002", 8), 100.2)
    short.fenced(9)
    assert short.bound(9, 2, 100.2) is None and short.resigning(9, 101.0) == {}


def test_a_release_taken_short_of_members_is_not_clean_for_a_ttl_and_an_old_fenced_resign_is_no_evidence():
    """Found by an attacker's review: a release taken in `lease` mode only because its taker counted
    fewer than three members shut no earlier gate; its own release is clean only a TTL later. A
    `fenced` resign heard more than a TTL before the claim over its lease is not taken for it."""
    short = ServingBook("S005", BOOT, T, ttl=10)
    short.taken(3, "handoff", 1, None, 100.0)
    short.fenced(3)
    assert short.bound(3, 1, 100.0) is None and short.resigning(3, 101.0) == {}  # `lease`, not clean
    assert short.resigning(3, 100.0 + 10 * (1 + DRIFT) / (1 - DRIFT)) == {"fenced": 3}
    late = ServingBook("S001", OTHER, T, ttl=10)
    late.heard(Beacon(KMSN, "S005", "10.0.0.5", 9530, "resign", 3, 0, BOOT, 9, fenced=3), None, 3, 200.0)
    late.taken(4, "handoff", 3, ("S005", 3), 210.5)
    assert late.bound(4, 3, 210.5) == 210.5  # `ack` from the start: shut until acked
    late.taken(4, "handoff", 3, ("S005", 3), 209.5)
    assert late.bound(4, 3, 209.5) is None and late.right is not None and late.right.clean_start
    late.heard(Beacon(KMSN, "S005", "10.0.0.5", 9530, "resign", 3, 0, OTHER, 1, fenced=3), None, 3, 205.0)
    assert late.clean_release == ("S005", 3, 200.0)  # a later copy (a replay, another boot) dates nothing


def test_a_taker_that_acked_another_leader_counts_its_own_vote_only_s_after_it_last_heard_it():
    """Rule 1 for the taker itself: it acked S003 until it took the epoch from S001's release, and
    S003 may count that ack for W; its own vote joins its majority once S has passed."""
    book = ServingBook("S004", BOOT, T, ttl=10)
    book.heard(Beacon(KMSN, "S003", "10.0.0.3", 9530, "leader", 1, 5, OTHER, 40, serve=ACKED), None, 1, 99.9)
    book.taken(3, "handoff", 5, None, 100.0)
    right = book.right
    assert right is not None and right.self_from == 99.9 + T.silence
    for seq, node in ((1, "S005"), (2, "S001")):
        right.sent_beacon(seq, 100.0 + seq / 100)
        right.acked(node, 3, BOOT, seq)
    assert book.bound(3, 5, 100.1) == 100.1  # two others: no majority of 5 without its own vote
    assert book.bound(3, 5, 99.9 + T.silence) == 100.01 + T.window  # with it, once S has passed
    right.sent_beacon(3, 100.05)
    right.acked("S002", 3, BOOT, 3)
    assert book.bound(3, 5, 100.1) == 100.01 + T.window  # three others; their window outlasts S
    book.heard(Beacon(KMSN, "S003", "10.0.0.3", 9530, "resign", 1, 5, BOOT, 41), 3, 3, 100.2)
    assert right.self_from == 99.9 + T.silence  # a resign of another boot (the supervisor's) ends nothing
    book.heard(Beacon(KMSN, "S003", "10.0.0.3", 9530, "resign", 1, 5, OTHER, 41), 3, 3, 100.2)
    assert (
        right.self_from == float("-inf") and book.bound(3, 5, 100.2) == 100.02 + T.window
    )  # its own: at once
    fresh = ServingBook("S002", BOOT, T, ttl=10)  # it adhered to the releaser, who resigned: at once
    fresh.heard(Beacon(KMSN, "S001", "10.0.0.1", 9530, "leader", 2, 5, OTHER, 40, serve=ACKED), None, 2, 99.0)
    fresh.heard(Beacon(KMSN, "S001", "10.0.0.1", 9530, "resign", 2, 5, OTHER, 41), None, 2, 99.9)
    fresh.taken(3, "handoff", 5, None, 100.0)
    assert fresh.right is not None and fresh.right.self_from == float("-inf")
    unheard = ServingBook("S002", BOOT, T, ttl=10)  # its resign lost, its released lease read: the same
    leader = Beacon(KMSN, "S001", "10.0.0.1", 9530, "leader", 2, 5, OTHER, 40, serve=ACKED)
    unheard.heard(leader, None, 2, 99.9)
    unheard.taken(3, "handoff", 5, ("S001", 2), 100.0)
    assert unheard.right is not None and unheard.right.self_from == float("-inf")


def test_the_serving_rights_window_is_kept_on_the_gate_clock_a_suspend_shuts_it():
    """`BeaconService` keeps the book on its gate clock (`Clock.boottime`): acks heard
    before a sleep longer than W leave the gate shut on resume, though the monotonic
    clock stood still."""
    from elections.core.beacon_board import Standing
    from elections.ports.beacons.beacon_config import BeaconConfig
    from elections.ports.beacons.beacons import BeaconService
    from stkhost.clock import FakeClock

    clock = FakeClock()
    service = BeaconService(
        BeaconConfig(KMSN, "S001", "127.0.0.1", 9530, KEY, 0.2, 9532, ["127.0.0.2"]),
        lambda: Standing("S001", leader_epoch=7, renew_seq=1), lambda r: None, clock.monotonic,
        gate_clock=clock.boottime,
    )  # fmt: skip
    service.members = lambda: 3
    service.taken(7, "first")
    service._datagram("leader", 7, 1, service.standing())  # our leader beacon seq 1, sent now
    ack = Beacon(KMSN, "S002", "127.0.0.2", 9530, "follower", 7, 1, OTHER, 1, ack_node="S001", ack_epoch=7,
                 ack_boot=service.boot, ack_seq=1)  # fmt: skip
    service.received(ack.encode(KEY), "127.0.0.2")
    open_until = service.serving_bound(7)
    assert open_until == pytest.approx(clock.boottime() + service.book.timing.window)
    mono = clock.monotonic()
    clock.suspend(5.0)  # longer than W (1.5 s)
    assert clock.monotonic() == mono
    assert (service.serving_bound(7) or 0.0) <= clock.boottime()  # shut


def test_a_leader_that_stepped_down_acks_no_one_while_its_own_gate_may_be_open():
    """Issue 22 (found by the model once claims took time): the old leader read the new epoch,
    stepped down and acked the new leader at once — with one more member that was the new
    leader's majority, while the old relay still served by the window its own majority gave it."""
    book = ServingBook("S001", BOOT, T, ttl=10)
    book.taken(7, "first", 3, None, 100.0)
    assert book.outgoing(7, 1, 3, 100.0) == {"serve": LEASE}
    ack = Beacon(KMSN, "S002", "10.0.0.2", 9530, "follower", 7, 0, OTHER, 9, ack_node="S001", ack_epoch=7,
                 ack_boot=BOOT, ack_seq=1)  # fmt: skip
    assert book.heard(ack, 7, 7, 100.1) and book.bound(7, 3, 100.1) == pytest.approx(101.5)  # ACKED
    new = Beacon(KMSN, "S003", "10.0.0.3", 9530, "leader", 8, 0, "c" * 16, 3, serve=ACKED)
    book.heard(new, None, 8, 100.2)  # stepped down: adheres to S003 at once (nothing else to adhere to)
    assert book.adherence is not None and (book.adherence.node, book.adherence.epoch) == ("S003", 8)
    assert book.outgoing(None, 2, 3, 100.2) == {}  # but acks it only once its own window is over
    assert book.outgoing(None, 3, 3, 101.5 + 0.04) == {}
    assert book.outgoing(None, 4, 3, 101.5 + 0.06)["ack_node"] == "S003"


def test_a_restarted_member_acks_no_new_leader_and_waits_out_its_own_vote_for_s_after_its_start():
    """Rule 1 across a restart (SPIN's trail, issue 37): a member acked S001, restarted with its
    book lost, and acked S002 at once; S001 still counted the old ack, S002 the new one: two
    gates open. The book is begun at the process's start: for S it takes a newly heard leader for
    no one's (no ack in its beacons), then adheres as before; an epoch it takes meanwhile counts
    its own vote from start + S."""
    book = ServingBook("S003", BOOT, T, ttl=10, started=100.0)
    leader = Beacon(KMSN, "S002", "10.0.0.2", 9530, "leader", 2, 5, OTHER, 40, serve=ACKED)
    book.heard(leader, None, 2, 100.1)
    assert book.adherence is None and book.outgoing(None, 1, 3, 100.1) == {}
    book.heard(replace(leader, seq=41), None, 2, 100.0 + T.silence)
    assert book.adherence is not None and book.outgoing(None, 2, 3, 100.0 + T.silence)["ack_node"] == "S002"
    taker = ServingBook("S003", BOOT, T, ttl=10, started=100.0)
    taker.taken(3, "silent", 3, ("S001", 1), 100.5)
    assert taker.right is not None and taker.right.self_from == 100.0 + T.silence
    old = ServingBook("S003", BOOT, T, ttl=10)  # a book with no start (as before): adheres at once
    old.heard(leader, None, 2, 100.1)
    assert old.adherence is not None
