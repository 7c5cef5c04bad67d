"""A plain renewal takes no lock (docs/election.md "Renewing without the lock"):
3 share operations instead of 7, on real files, and every other write — an
election, a release, a handoff, a write over anything this store did not write
itself — still goes through the lock and its compare-and-set. The races with a
claimer under §5.1's protocol are played out step by step on real files."""

from __future__ import annotations

import os

import pytest
from harness import signed_lock

from elections.core.lease import LeaseRecord, parse_lease, revision_of
from elections.ports.share.share import SHARE_OPS, LocalShare
from elections.ports.share.share_backend import FRESH_READ_S
from elections.ports.store.backend import WriteOutcome
from elections.ports.store.store import FileLeaseStore
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789"


def rec(node: str = "S001", epoch: int = 1, seq: int = 0, ttl: float = 10, handoff: str | None = None):
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=os.getpid(), epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=ttl,
                       handoff_to=handoff)  # fmt: skip


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def leader(tmp_path, clock):
    """S001 holding epoch 1: elected under the lock, as every epoch is."""
    store = FileLeaseStore(tmp_path, TOKEN, "S001", clock)
    outcome, record = store.acquire(
        lambda e: rec(epoch=e), store.read().revision, 0, {"node": "S001", "seq": 1}
    )
    assert outcome is WriteOutcome.WRITTEN and record is not None and record.epoch == 1
    return store


def held_by_another(tmp_path):
    """A live, validly signed lock of another node: someone is in an election right now."""
    (tmp_path / "relay_leader.lock").write_text(signed_lock("S002", 1, "n1", TOKEN))


def ops(fn):  # type: ignore[no-untyped-def]
    before = SHARE_OPS.total
    result = fn()
    return result, SHARE_OPS.total - before


def test_a_renewal_of_its_own_last_record_costs_three_operations_and_no_lock(tmp_path, leader):
    for seq in range(1, 4):
        read, cost = ops(leader.read)
        outcome, cost_w = ops(lambda seq=seq, read=read: leader.write(rec(seq=seq), expect=read.revision))
        assert outcome is WriteOutcome.WRITTEN and (cost, cost_w) == (1, 2)  # read; temp file + rename
    assert leader.renewals_in_place == 3
    assert parse_lease((tmp_path / "relay_leader.json").read_bytes(), TOKEN).record.renew_seq == 3
    assert not (tmp_path / "relay_leader.lock").exists()


def test_a_release_a_handoff_and_a_new_epoch_still_take_the_lock(tmp_path, leader):
    held_by_another(tmp_path)
    read = leader.read()
    assert leader.write(rec(seq=1), expect=read.revision) is WriteOutcome.WRITTEN  # renewal: no lock
    read = leader.read()
    assert leader.write(rec(seq=2, ttl=0), expect=read.revision) is WriteOutcome.BUSY  # release
    assert leader.write(rec(seq=2, ttl=0, handoff="S003"), expect=read.revision) is WriteOutcome.BUSY
    assert leader.write(rec(epoch=2), expect=read.revision) is WriteOutcome.BUSY  # another epoch
    assert leader.renewals_in_place == 1


def test_a_write_over_what_it_did_not_write_takes_the_lock(tmp_path, clock, leader):
    other = FileLeaseStore(tmp_path, TOKEN, "S002", clock)
    read = other.read()
    outcome, won = other.acquire(lambda e: rec("S002", e), read.revision, 0, {"node": "S002", "seq": 1})
    assert outcome is WriteOutcome.WRITTEN and won is not None and won.epoch == 2
    # S001's stale expectation (its own last record): its look finds S002's, and the lock says CHANGED.
    mine = rec(seq=1)
    stale = leader._lease_mine[0]  # type: ignore[index]
    assert leader.write(mine, expect=stale) is WriteOutcome.CHANGED
    assert parse_lease((tmp_path / "relay_leader.json").read_bytes(), TOKEN).record.node == "S002"
    # A damaged file is rewritten under the lock too (§5.1), never in place.
    (tmp_path / "relay_leader.json").write_text("{junk")
    read = leader.read()
    _, cost = ops(lambda: leader.write(rec(seq=2), expect=read.revision))
    assert cost == 7 and leader.renewals_in_place == 0


def test_an_old_read_is_read_again_before_the_rename(tmp_path, clock, leader):
    read = leader.read()
    clock.advance(FRESH_READ_S + 0.01)
    outcome, cost = ops(lambda: leader.write(rec(seq=1), expect=read.revision))
    assert outcome is WriteOutcome.WRITTEN and cost == 3  # one more read, still no lock


def test_the_fence_is_asked_at_the_last_moment(tmp_path, leader):
    read = leader.read()
    assert leader.write(rec(seq=1), expect=read.revision, fence=lambda: False) is WriteOutcome.FENCED
    assert parse_lease((tmp_path / "relay_leader.json").read_bytes(), TOKEN).record.renew_seq == 0


# -- the races with a claimer under §5.1 (this version's acquire or an older agent's: the same) ---------
def test_renewed_before_the_claimers_move_aside_the_claim_finds_it_changed(tmp_path, clock, leader):
    claimer = FileLeaseStore(tmp_path, TOKEN, "S002", clock)
    expect = claimer.read().revision  # the claimer looked before our renewal
    read = leader.read()
    assert leader.write(rec(seq=1), expect=read.revision) is WriteOutcome.WRITTEN
    outcome, won = claimer.acquire(lambda e: rec("S002", e), expect, 0, {"node": "S002", "seq": 1})
    assert outcome is WriteOutcome.CHANGED and won is None
    assert parse_lease((tmp_path / "relay_leader.json").read_bytes(), TOKEN).record.renew_seq == 1


class Pausing(LocalShare):
    """The claimer's share: right after its compare-and-set moves the lease aside, `then()` runs
    (the leader's renewal lands there), before the claimer reads the copy and writes."""

    def __init__(self, root, then) -> None:  # type: ignore[no-untyped-def]
        super().__init__(root)
        self.then = then

    def move(self, rel: str, new_rel: str) -> None:
        super().move(rel, new_rel)
        if rel == "relay_leader.json" and self.then is not None:
            then, self.then = self.then, None
            then()


def claim(claimer, expect, seq=1):  # type: ignore[no-untyped-def]
    return claimer.acquire(lambda e: rec("S002", e), expect, 0, {"node": "S002", "seq": seq})


def lease_on(tmp_path):  # type: ignore[no-untyped-def]
    return parse_lease((tmp_path / "relay_leader.json").read_bytes(), TOKEN).record


def test_renewed_while_a_winning_claim_has_the_lease_aside_the_claim_wins_and_the_next_look_says_so(
    tmp_path, clock, leader
):
    read = leader.read()
    renewed = []
    share = Pausing(tmp_path, lambda: renewed.append(leader.write(rec(seq=1), read.revision)))
    claimer = FileLeaseStore(share, TOKEN, "S002", clock)
    outcome, won = claim(claimer, read.revision)  # the claimer expected our last record: it may win
    assert renewed == [WriteOutcome.WRITTEN] and outcome is WriteOutcome.WRITTEN and won.epoch == 2
    assert (lease_on(tmp_path).node, lease_on(tmp_path).epoch) == ("S002", 2)  # our renewal is gone
    # Exactly as if the claim had come right after a renewal under the lock: our next look says lost
    # (the elector steps down on it), and a renewal still expecting our own record is CHANGED.
    assert leader.read().record.node == "S002"
    ours = revision_of(rec(seq=1).encode(TOKEN))
    assert leader.write(rec(seq=2), expect=ours) is WriteOutcome.CHANGED


def test_renewed_while_a_losing_claim_has_the_lease_aside_the_put_back_undoes_it_and_the_lock_mends_it(
    tmp_path, clock, leader
):
    stale = leader.read().revision
    assert leader.write(rec(seq=1), expect=stale) is WriteOutcome.WRITTEN
    read = leader.read()
    renewed = []
    share = Pausing(tmp_path, lambda: renewed.append(leader.write(rec(seq=2), read.revision)))
    claimer = FileLeaseStore(share, TOKEN, "S002", clock)
    outcome, won = claim(claimer, stale)  # the claimer's look is older than our last renewal
    assert renewed == [WriteOutcome.WRITTEN] and outcome is WriteOutcome.CHANGED and won is None
    assert lease_on(tmp_path).renew_seq == 1  # put back: our renewal of seq 2 undone (a reader sees seq fall)
    # Not our last record any more: the next renewal compares under the lock, and writes.
    read = leader.read()
    assert leader.write(rec(seq=3), expect=read.revision) is WriteOutcome.WRITTEN
    assert lease_on(tmp_path).renew_seq == 3 and leader.renewals_in_place == 2


def test_a_renewal_never_makes_the_lease_vanish_for_a_newcomer(tmp_path, clock, leader):
    # An agent that never saw a lease contends at once on "no file": our renewal must never
    # leave it missing (a rename over it, not a move aside).
    seen = []
    real_replace = os.replace

    def watching(src, dst):  # type: ignore[no-untyped-def]
        seen.append((tmp_path / "relay_leader.json").exists())
        return real_replace(src, dst)

    read = leader.read()
    os.replace = watching  # type: ignore[assignment]
    try:
        assert leader.write(rec(seq=1), expect=read.revision) is WriteOutcome.WRITTEN
    finally:
        os.replace = real_replace  # type: ignore[assignment]
    assert seen and all(seen)
