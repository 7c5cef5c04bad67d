"""The share's witness, pure (`elections.core.witness`, issue 38): the record's codec and its
refusals, the verdicts W1-W6 on one read, and one holder's vote (W3, W5), on an injected clock."""

from __future__ import annotations

import json

import pytest

from elections.core.lease import canonical_json, sign
from elections.core.serving import DRIFT, GATE_LAG, ServingTiming
from elections.core.witness import (
    WitnessRead,
    WitnessRecord,
    WitnessTiming,
    WitnessVote,
    may_claim_witness,
    may_enter,
    may_name,
    must_step_down,
    parse_witness,
    refresh_ok,
)

KEY, KMSN = "pool-key", "9999-9999-99-99"
T = WitnessTiming.of(0.2)


def rec(node="S001", epoch=7, relies=False) -> WitnessRecord:
    return WitnessRecord(KMSN, node, epoch, relies)


def read(node="S001", epoch=7, relies=False) -> WitnessRead:
    return parse_witness(rec(node, epoch, relies).encode(KEY), KEY, KMSN)


def signed(doc) -> bytes:
    return canonical_json(dict(doc, sig=sign(doc, KEY)))


def test_timing_derives_v_and_d_from_the_beacon_interval_with_drift_and_the_relays_lag():
    assert T.window == pytest.approx(0.6)
    assert T.wait / (1 + DRIFT) >= T.window / (1 - DRIFT) + GATE_LAG
    assert T.wait == pytest.approx(0.6627, abs=1e-3)
    assert T.silence == ServingTiming.of(0.2).silence
    assert T.enter_left == pytest.approx(0.8)


def test_a_record_round_trips_through_its_codec():
    got = read("S002", 9, True)
    assert got.valid and got.record == rec("S002", 9, True)


BASE = {"v": 1, "kmsn": KMSN, "node": "S001", "epoch": 7, "relies": False}


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        (b"", "not_json"),
        (b'{"v": 1', "not_json"),
        (b"[" * 100_000, "too_large"),
        (b"x" * 5000, "too_large"),
        (json.dumps(BASE).encode(), "unsigned"),
        (canonical_json(dict(BASE, sig="00" * 32)), "forged"),
        (signed(dict(BASE, kmsn="1111-1111-11-11")), "wrong_kmsn"),
        (signed(dict(BASE, epoch="7")), "bad_field"),
        (signed(dict(BASE, relies=1)), "bad_field"),
        (signed(dict(BASE, v=2)), "bad_field"),
        (signed(dict(BASE, node="")), "bad_field"),
        (b'{"v":1,"node":"\\ud800","sig":"x"}', None),
    ],
)
def test_anything_but_a_valid_record_of_this_pool_is_no_evidence_never_an_exception(raw, cause):
    got = parse_witness(raw, KEY, KMSN)
    assert got.status == "refused" and not got.valid and got.record is None
    if cause is not None:
        assert got.cause == cause, got


def test_a_record_below_an_epoch_this_reader_read_is_a_replay():
    assert parse_witness(rec(epoch=6).encode(KEY), KEY, KMSN, floor=7).cause == "replayed"
    assert parse_witness(rec(epoch=7).encode(KEY), KEY, KMSN, floor=7).valid


def test_no_file_is_missing_not_refused():
    assert parse_witness(None, KEY, KMSN).status == "missing"


JUNK = parse_witness(b"junk", KEY, KMSN)
MISSING = parse_witness(None, KEY, KMSN)


@pytest.mark.parametrize(
    ("got", "epoch", "ok"),
    [
        (read(epoch=6), 7, True),
        (JUNK, 7, True),
        (MISSING, 7, True),
        (read(epoch=7), 7, False),
        (read(epoch=8), 7, False),
    ],
)
def test_w1_a_new_epoch_names_itself_over_anything_but_a_record_of_its_epoch_or_higher(got, epoch, ok):
    assert may_name(got, epoch) is ok


@pytest.mark.parametrize(
    ("got", "ok"),
    [
        (read("S001", 7), True),
        (read("S001", 7, True), True),
        (read("S002", 7), False),
        (read("S001", 8), False),
        (read("S001", 6), False),
        (JUNK, False),
        (MISSING, False),
    ],
)
def test_w2_a_leader_enters_only_over_its_own_record_of_its_own_epoch(got, ok):
    assert may_enter(got, "S001", 7) is ok


@pytest.mark.parametrize(
    ("got", "ok"),
    [
        (read("S001", 7, True), True),
        (read("S001", 7, False), False),
        (read("S002", 8, True), False),
        (read("S001", 6, True), False),
        (JUNK, False),
        (MISSING, False),
    ],
)
def test_w6_a_refresh_is_good_only_if_the_record_names_exactly_this_node_epoch_relied_on(got, ok):
    assert refresh_ok(got, "S001", 7) is ok


@pytest.mark.parametrize(
    ("got", "ok"),
    [
        (read("S001", 7), True),
        (read("S001", 7, True), True),
        (read("S001", 6), True),
        (read("S001", 8), False),
        (JUNK, False),
        (MISSING, False),
    ],
)
def test_w4_a_follower_claims_only_over_a_valid_record_no_newer_than_the_holders_epoch(got, ok):
    assert may_claim_witness(got, 7) is ok


def test_w6_a_record_of_a_higher_epoch_makes_the_leader_step_down():
    assert must_step_down(read("S002", 8, True), 7)
    assert not must_step_down(read("S001", 7, True), 7) and not must_step_down(JUNK, 7)


def test_w5_a_claim_over_a_record_nobody_relied_on_counts_at_once():
    vote = WitnessVote.claimed("S002", 8, T, sent_at=10.0, returned_at=10.1, replaced=rec(relies=False))
    assert vote.until(10.1) == pytest.approx(10.6)


def test_w5_a_claim_over_a_relied_on_record_counts_only_d_after_it_returned():
    vote = WitnessVote.claimed("S002", 8, T, sent_at=10.0, returned_at=10.1, replaced=rec(relies=True))
    assert vote.until(10.1) is None  # within D: the old holder's last refresh may still count
    assert vote.until(10.1 + T.wait - 0.01) is None
    at = 10.1 + T.wait
    assert vote.until(at) is None  # D outlasts V: the claim's own refresh is too old by then
    assert vote.refresh(at - 0.1, read("S002", 8, True), leading=8)
    assert vote.until(at) == pytest.approx(at - 0.1 + T.window)


def test_w5_a_claim_that_waits_says_when_it_starts_to_count_so_the_gate_opens_then():
    waits = WitnessVote.claimed("S002", 8, T, sent_at=10.0, returned_at=10.1, replaced=rec(relies=True))
    at = 10.1 + T.wait
    assert waits.opens_at(10.2) == pytest.approx(at)  # D still to wait: the keeper looks again then
    assert waits.refresh(at - 0.15, read("S002", 8, True), leading=8)  # a refresh that returned in D
    assert waits.until(at - 0.001) is None and waits.opens_at(at - 0.001) == pytest.approx(at)
    assert waits.opens_at(at) is None  # counting from here: not one refresh later
    assert waits.until(at) == pytest.approx(at - 0.15 + T.window)
    at_once = WitnessVote.claimed("S002", 8, T, sent_at=10.0, returned_at=10.1, replaced=rec(relies=False))
    assert at_once.opens_at(10.1) is None  # no D: it counts from the claim's return
    assert WitnessVote("S001", 7, T, ready=True).opens_at(0.0) is None  # named, never claimed


def test_w3_a_refresh_counts_from_its_send_time_and_only_while_leading_that_epoch():
    vote = WitnessVote("S001", 7, T)
    assert vote.until(0.0) is None  # not entered: no vote
    vote.entered(sent_at=1.0)
    assert vote.until(1.2) == pytest.approx(1.6)
    assert vote.refresh(1.4, read("S001", 7, True), leading=7)  # sent 1.4, returned late: from 1.4
    assert vote.until(1.9) == pytest.approx(2.0)
    assert not vote.refresh(1.8, read("S002", 8, True), leading=7)  # the claim: no refresh
    assert not vote.refresh(1.9, read("S001", 7, True), leading=None)  # stepped down meanwhile
    assert not vote.refresh(1.3, read("S001", 7, True), leading=7)  # older than the newest
    assert vote.until(2.0) is None
    assert vote.open_until() == pytest.approx(2.0)


def test_w2_the_leader_enters_when_its_acks_window_runs_low_and_refreshes_faster_then():
    vote = WitnessVote("S001", 7, T)
    assert not vote.should_enter(ack_until=5.0, now=4.0)
    assert vote.should_enter(ack_until=5.0, now=4.3)
    assert not vote.needs_refresh(last_sent=4.0, ack_until=5.0, now=4.3, renew_every=3.0)
    vote.entered(4.3)
    assert vote.needs_refresh(last_sent=4.3, ack_until=5.0, now=4.5, renew_every=3.0)
    assert not vote.needs_refresh(last_sent=4.3, ack_until=6.0, now=4.5, renew_every=3.0)
    assert vote.needs_refresh(last_sent=None, ack_until=6.0, now=4.5, renew_every=3.0)


# -- the serving book of a pool of two with the witness (core.serving_book) --------------------------
def book_of_two(now: float = 100.0):  # type: ignore[no-untyped-def]
    from elections.core.serving import ServingTiming
    from elections.core.serving_book import ServingBook

    book = ServingBook("S001", "boot1", ServingTiming.of(0.2), ttl=10.0)
    book.taken(7, "first", 2, None, now)
    return book


def acked_at(book, sent: float, members: int = 2) -> None:  # type: ignore[no-untyped-def]
    """The follower acks our beacon sent at `sent`; the book settles as at its next beacon."""
    book.outgoing(7, seq=int(sent * 100), members=members, now=sent)
    assert book.right.acked("S002", 7, "boot1", int(sent * 100))
    book.outgoing(7, seq=int(sent * 100) + 1, members=members, now=sent + 0.05)


def test_a_pool_of_two_serves_by_acks_only_once_the_witness_names_its_epoch():
    book = book_of_two()
    acked_at(book, 100.1)
    assert book.bound(7, 2, 100.2) is None  # LEASE: no witness record yet, the TTL path
    book.witness_named(7)
    assert book.paired(2) and book.bound(7, 2, 100.3) == pytest.approx(100.1 + 1.5)  # ACKED by the ack
    assert book.mode(7) == "ack" and book.right.partner == "S002"
    book.told(7)  # the gate was published: its beacons say `serve: ack`, and `pair`
    assert book.outgoing(7, seq=99999, members=2, now=100.4)["pair"] == 1
    # A third member joins: this epoch stays a pair (its votes are S001, S002 and the witness);
    # the newcomer's acks do not count in it (a majority {S001, S003} and the follower's claim
    # {S002, witness} would not intersect). The next epoch counts three.
    assert book.paired(3)
    book.outgoing(7, seq=99998, members=3, now=103.0)
    assert book.right.acked("S003", 7, "boot1", 99998)
    assert book.bound(7, 3, 103.1) <= 103.1  # S002's ack is old, S003's does not count: shut


def test_a_pool_of_three_is_never_paired():
    book = book_of_two()
    book.witness_named(7)
    acked_at(book, 100.1, members=3)
    assert not book.paired(3) and book.right.partner is None
    book.told(7)
    said = book.outgoing(7, seq=99999, members=3, now=100.4)
    assert said["serve"] == "ack" and "pair" not in said


def test_the_gate_of_two_is_the_later_of_the_acks_window_and_the_witness_window():
    book = book_of_two()
    book.witness_named(7)
    acked_at(book, 100.1)
    book.witness.entered(sent_at=101.3)
    assert book.bound(7, 2, 101.4) == pytest.approx(101.9)  # acks until 101.6, the witness until 101.9
    assert book.bound(7, 2, 101.95) <= 101.95  # both over: a deadline past, the gate shut


def test_a_stepped_down_leader_acks_nobody_within_its_witness_window():
    book = book_of_two()
    book.witness_named(7)
    acked_at(book, 100.1)
    book.witness.entered(sent_at=101.5)
    assert book.gate_open(2, 101.9)  # the acks' window ended at 101.6; the witness's runs to 102.1
    assert not book.gate_open(2, 102.1 + 0.06)


def test_a_leader_of_two_whose_follower_is_gone_for_a_ttl_requalifies_instead_of_refreshing_forever():
    book = book_of_two()
    book.witness_named(7)
    acked_at(book, 100.1)
    book.witness.entered(sent_at=101.0)
    t = 101.2
    while t < 114.0:  # refreshed every interval, the follower silent
        assert book.witness.refresh(t, read("S001", 7, True), leading=7)
        if t < 100.1 + 1.5 + 10.0:
            assert book.lapsed(7, 2, t + 0.1) is None, t
        t += 0.2
    assert book.lapsed(7, 2, t) is not None  # a TTL past the acks: rule 4, a new epoch in LEASE mode


def test_a_claims_vote_rides_on_the_epoch_its_lease_compare_and_set_takes():
    from elections.core.serving import Adherence, ServingTiming
    from elections.core.serving_book import ServingBook

    book = ServingBook("S002", "boot2", ServingTiming.of(0.2), ttl=10.0)
    book.adherence = Adherence("S001", 7, "boot1", 5, heard_at=98.0, mode="ack")
    assert book.silent("S001", 7, 2, [], 100.0) is None  # it never said `pair`: not the witness's to decide
    book.adherence = Adherence("S001", 7, "boot1", 5, heard_at=98.0, mode="ack", paired=True)
    assert book.silent("S001", 7, 2, [], 100.0) is not None  # W4a: S after it last heard S001
    assert book.silent("S001", 7, 2, [], 99.0) is None
    vote = WitnessVote.claimed("S002", 8, T, sent_at=100.0, returned_at=100.05, replaced=rec(relies=False))
    book.witness_claim(vote, "S001")
    book.taken(8, "silent", 2, None, 100.06)
    assert book.witness is vote and book.paired(2) and book.right.partner == "S001"
    assert book.bound(8, 2, 100.1) == pytest.approx(100.6)  # {itself, the witness}: a majority of three
    other = ServingBook("S002", "boot2", ServingTiming.of(0.2), ttl=10.0)
    other.witness_claim(vote)
    other.taken(9, "silent", 2, None, 100.06)  # another epoch than claimed: no vote
    assert other.witness is None


def test_w2b_a_leader_relies_on_the_witness_no_more_once_its_window_is_over_and_its_acks_fresh():
    vote = WitnessVote("S001", 7, T, ready=True)
    vote.entered(sent_at=10.0)
    assert not vote.should_unrely(ack_until=12.0, now=10.5)  # its window runs to 10.6: not yet
    assert not vote.unrely(10.5)
    assert not vote.should_unrely(ack_until=11.3, now=10.7)  # the acks not fresh enough (hysteresis)
    assert vote.should_unrely(ack_until=12.0, now=10.7)
    assert vote.unrely(10.7) and not vote.relies and vote.until(10.7) is None
    assert not vote.refresh(10.8, read("S001", 7, True), leading=7)  # no more counted
    assert vote.should_enter(ack_until=11.0, now=10.5)  # W2 again when the acks run low
    claimed = WitnessVote.claimed("S002", 8, T, sent_at=20.0, returned_at=20.1, replaced=rec(relies=True))
    assert not claimed.unrely(20.7)  # within D: its vote never counted yet, nor may it say so


def test_a_follower_of_two_says_fast_takeover_once_its_leader_says_it_serves_by_acks():
    from elections.core.serving import Adherence, ServingTiming
    from elections.core.serving_book import ServingBook

    book = ServingBook("S002", "boot2", ServingTiming.of(0.2), ttl=10.0)
    assert book.to_doc(2, 100.0)["fast"] is False
    book.adherence = Adherence("S001", 7, "boot1", 5, heard_at=99.9, mode="lease")
    assert book.to_doc(2, 100.0)["fast"] is False  # its leader has no witness record yet: the TTL path
    book.adherence = Adherence("S001", 7, "boot1", 6, heard_at=99.95, mode="ack", paired=True)
    assert book.to_doc(2, 100.0)["fast"] is True


def test_a_holder_that_said_pair_is_taken_over_early_only_through_the_witness_whatever_the_count():
    """Its votes are itself, its partner and the witness for its whole epoch: a follower that now
    counts three (a newcomer heard) must still claim the witness (a majority {itself, newcomer}
    would not intersect the holder's {holder, witness})."""
    from elections.core.serving import AckReport, Adherence, ServingTiming
    from elections.core.serving_book import ServingBook

    book = ServingBook("S002", "boot2", ServingTiming.of(0.2), ttl=10.0)
    book.adherence = Adherence("S001", 7, "boot1", 5, heard_at=98.0, mode="ack", paired=True)
    agrees = [AckReport("S003", 0.1, "S001", 7, 2.0)]
    assert book.silent("S001", 7, 3, agrees, 100.0) is not None and book.claims_from("S001", 7)
    assert "witness" in book.silent("S001", 7, 3, agrees, 100.0)
    book.adherence = Adherence("S001", 7, "boot1", 5, heard_at=98.0, mode="ack", paired=False)
    assert not book.claims_from("S001", 7)
    assert "witness" not in (book.silent("S001", 7, 3, agrees, 100.0) or "")  # rules 1-6 as before


class _LooksCounted:
    """The book as the keeper's thread sees it: how often it was asked, nothing to keep."""

    def __init__(self) -> None:
        self.looks = 0

    def witness_look(self, epoch: int) -> None:
        self.looks += 1


def test_a_followers_keeper_sleeps_until_kicked_and_a_leaders_looks_every_half_interval():
    """Issue 41: the keeper's thread woke ten times a second on every member to find it led
    nothing; a follower's now waits for its leadership's publication (or a LEASE_RENEW)."""
    import threading
    import time

    from harness import wait_until

    from elections.runtime.witness_keeper import WitnessKeeper

    leading: list[int | None] = [None]
    asked = threading.Semaphore(0)

    def leads() -> int | None:
        asked.release()
        return leading[0]

    book = _LooksCounted()
    keeper = WitnessKeeper(None, "K", "S001", book, T, leads, lambda: None, lambda _r: None,  # type: ignore[arg-type]
                           renew_every=60.0, gate_clock=time.monotonic)  # fmt: skip
    keeper.start()
    try:
        assert asked.acquire(timeout=10)  # it looked once, found no epoch, and waits
        assert not asked.acquire(timeout=5 * T.interval)  # ... without looking again
        leading[0] = 7
        keeper.kick()  # the agent published that it leads
        wait_until(lambda: book.looks >= 3, 10, "the leader's keeper to look, again and again")
    finally:
        keeper.stop()
