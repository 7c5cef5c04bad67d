"""The elector in process: `Elector.cycle()` over the memory store, on fake
clocks. Nothing sleeps: every wait the elector asks for moves its clock.

Each cycle's store calls are counted (as client-go's tests count API calls):
an extra read on the hot path is a failure here, not a slower share.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from memstore import TOKEN, MemoryLeaseStore

from elections.core.commands import PoolCommands
from elections.core.decide import Decision, Timing, Verdict
from elections.errors import StoreUnavailable
from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import MemberView, PoolView
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from elections.runtime.elector import Elector
from elections.runtime.lease_writes import Identity, make_record, release_lease
from elections.runtime.policy import PoolFacts, PoolPolicy
from stkhost.clock import FakeClock

T = Timing(ttl=10, renew=3, poll=2, deadline=7)


class Recorder:
    """The elector's event sink: every transition, in order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record(self, kind: str, epoch: int, reason: str, **extra: Any) -> None:
        self.rows.append({"kind": kind, "epoch": epoch, "reason": reason, **extra})

    def transitions(self) -> list[tuple[str, int]]:
        return [(r["kind"], r["epoch"]) for r in self.rows]

    def elected(self) -> dict[str, Any]:
        (row,) = [r for r in self.rows if r["kind"] == "elected"]
        return row


class Facts:
    """A policy that states the pool's facts outright."""

    def __init__(self, **facts: Any) -> None:
        self.now = PoolFacts(**facts)

    def facts(self, held_epoch: int | None, lease_epoch: int | None) -> PoolFacts:
        return self.now


@dataclass
class Member:
    node: str
    elector: Elector
    clock: FakeClock
    events: Recorder = field(default_factory=Recorder)
    sleeps: list[float] = field(default_factory=list)
    duties: list[tuple[str, int]] = field(default_factory=list)

    def cycle(self, renewing: bool = False) -> Decision:
        return self.elector.cycle(renewing=renewing)

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader


def member(store, clock: FakeClock, node: str, policy=None) -> Member:
    """One node's elector over `store`; its sleeps only move `clock`."""
    events, sleeps, duties = Recorder(), [], []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    me = Identity(
        node=node, kmsn="9999-9999-99-99", station=node, ip=f"10.0.0.{node[-1]}", port=9530, pid=4242
    )
    elector = Elector(
        store, clock, me, T, events=events, policy=policy, rng=random.Random(7), sleep=sleep,
        on_elected=lambda epoch: duties.append(("elected", epoch)),
        on_demoted=lambda epoch: duties.append(("demoted", epoch)),
    )  # fmt: skip
    return Member(node, elector, clock, events, sleeps, duties)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store():
    return MemoryLeaseStore()


def record(node="S003", epoch=2, seq=0, ttl=10.0, handoff_to=None, clock=None):
    me = Identity(node=node, kmsn="9999-9999-99-99", station=node, ip="10.0.0.9", port=9530, pid=1)
    return make_record(me, clock or FakeClock(), epoch, seq, ttl, handoff_to)


def lease_of(store):
    r = store.lease
    return None if r is None else (r.node, r.epoch, r.renew_seq, r.ttl_s, r.handoff_to)


def elected_pool(store, clock, *nodes, policies=None):
    """S001 leads epoch 1; every other member has looked once and follows."""
    policies = policies or {}
    members = [member(store, clock, n, policies.get(n)) for n in ("S001", *nodes)]
    assert members[0].cycle().reason.startswith("elected: took epoch 1")
    for m in members[1:]:
        assert m.cycle().verdict is Verdict.FOLLOW
    store.calls.clear()
    return members


# -- the store keeps the file store's contract ------------------------------------------


@pytest.fixture(params=["file", "memory"])
def backend(request, tmp_path):
    """Both stores, with a way to make each unreachable: the memory store must
    answer as the file store does, or the tests below prove nothing."""
    if request.param == "file":
        import shutil

        store = FileLeaseStore(tmp_path / "share", TOKEN, "S001", FakeClock())
        store.share.root.mkdir()
        return store, lambda: shutil.rmtree(store.share.root)
    mem = MemoryLeaseStore()
    return mem, lambda: setattr(mem, "down", True)


def test_it_writes_only_over_the_revision_it_read(backend):
    store, _ = backend
    first = store.read()
    assert first.status == "missing"
    assert store.write(record(epoch=1), expect=first.revision) is WriteOutcome.WRITTEN
    assert store.write(record("S002", epoch=1), expect=first.revision) is WriteOutcome.CHANGED
    now = store.read()
    assert (now.status, now.record.node, now.record.epoch) == ("valid", "S003", 1)
    assert store.write(record(epoch=1, seq=1), expect=now.revision) is WriteOutcome.WRITTEN
    assert store.read().record.renew_seq == 1


def test_it_asks_the_fence_only_after_the_compare_and_then_writes_nothing(backend):
    store, _ = backend
    asked = []

    def fence():
        asked.append(True)
        return False

    assert store.write(record(), expect="not-what-is-there", fence=fence) is WriteOutcome.CHANGED
    assert asked == []
    assert store.write(record(), expect=store.read().revision, fence=fence) is WriteOutcome.FENCED
    assert asked == [True]
    assert store.read().status == "missing"


@pytest.mark.parametrize(
    "case, lease_epoch, member_epoch, known, expected",
    [
        ("the lease's epoch is the highest", 5, 3, 0, 6),
        ("a member's claim is the highest", 2, 9, 0, 10),
        ("the caller knows the highest", 2, 3, 12, 13),
        ("an empty pool starts at one", None, None, 0, 1),
    ],
)
def test_an_election_takes_one_more_than_the_highest_epoch_known(
    backend, case, lease_epoch, member_epoch, known, expected
):
    store, _ = backend
    if lease_epoch is not None:
        store.write(record("S002", epoch=lease_epoch), expect=store.read().revision)
    if member_epoch is not None:
        store.write_member({"node": "S004", "seq": 1, "epoch": member_epoch})
    outcome, rec = store.acquire(
        lambda epoch: record("S001", epoch=epoch), store.read().revision, known, {"node": "S001", "seq": 1}
    )
    assert (outcome, rec.epoch, store.read().record.epoch) == (WriteOutcome.WRITTEN, expected, expected)
    assert store.read_members()["S001"]["epoch"] == expected  # the claim is on record
    assert store.highest_epoch() == expected


def test_an_election_over_a_changed_lease_claims_nothing(backend):
    store, _ = backend
    stale = store.read().revision
    store.write(record("S002", epoch=4), expect=stale)
    outcome, rec = store.acquire(lambda e: record("S001", epoch=e), stale, 0, {"node": "S001", "seq": 1})
    assert (outcome, rec) == (WriteOutcome.CHANGED, None)
    assert "S001" not in store.read_members()
    assert store.read().record.node == "S002"


def test_a_member_heartbeat_never_lowers_its_recorded_epoch(backend):
    store, _ = backend
    store.write_member({"node": "S002", "seq": 1, "epoch": 8})
    store.write_member({"node": "S002", "seq": 2, "epoch": 3})
    doc = store.read_members()["S002"]
    assert (doc["seq"], doc["epoch"]) == (2, 8)


def test_an_unreachable_store_raises_store_unavailable(backend):
    store, make_unreachable = backend
    read = store.read()
    make_unreachable()
    with pytest.raises(StoreUnavailable):
        store.read()
    with pytest.raises(StoreUnavailable):
        store.write(record(), expect=read.revision)
    with pytest.raises(StoreUnavailable):
        store.acquire(lambda e: record(epoch=e), read.revision, 0, {"node": "S001", "seq": 1})


def test_the_memory_store_records_the_claim_before_the_lease(store):
    store.acquire(lambda e: record("S001", epoch=e), store.read().revision, 0, {"node": "S001", "seq": 1})
    assert store.log == [("member", "S001", 1), ("lease", "S001", 1)]


# -- elections -------------------------------------------------------------------------


def test_it_takes_epoch_1_on_an_empty_store_at_once(store, clock):
    a = member(store, clock, "S001")
    d = a.cycle()
    assert str(d) == "hold: elected: took epoch 1 (no lease file and no leader ever seen)"
    assert store.calls == Counter(read=1, acquire=1)
    assert lease_of(store) == ("S001", 1, 0, 10.0, None)
    assert store.member("S001")["epoch"] == 1
    assert a.events.transitions() == [("elected", 1)]
    assert (a.events.elected()["cause"], a.events.elected()["gap_s"]) == ("first", None)
    assert a.duties == [("elected", 1)]
    assert (a.sleeps, a.elector.leader_valid_until) == ([], 1000.0 + T.deadline)


@pytest.mark.parametrize(
    "case, wall_skew",
    [
        ("a leader whose wall clock runs an hour ahead", timedelta(hours=1)),
        ("a leader whose wall clock runs a day behind", timedelta(days=-1)),
        ("a leader whose wall clock agrees", timedelta(0)),
    ],
)
def test_it_times_a_dead_leader_out_exactly_after_ttl_on_its_own_clock(store, case, wall_skew):
    follower_clock = FakeClock(monotonic=7000.0)
    leader_clock = FakeClock(monotonic=50.0, wall=follower_clock.wall() + wall_skew)
    a, b = member(store, leader_clock, "S001"), member(store, follower_clock, "S002")
    a.cycle()  # elected, then dies: lease_until says whatever its wall clock says
    assert str(b.cycle()).startswith("follow: follower: S001 holds epoch 1")
    follower_clock.advance(T.ttl - 0.25)
    store.calls.clear()
    assert b.cycle().verdict is Verdict.FOLLOW
    assert (store.calls, b.events.rows) == (Counter(read=1), [])
    follower_clock.advance(0.25)
    d = b.cycle()
    assert str(d).startswith("hold: elected: took epoch 2 (lease of S001 epoch 1 expired")
    assert b.events.transitions() == [("elected", 2)]
    assert (b.events.elected()["cause"], b.events.elected()["gap_s"]) == ("expired", T.ttl)


def test_a_follower_times_from_its_own_first_look_not_from_the_leaders_write(store, clock):
    a = member(store, clock, "S001")
    a.cycle()
    clock.advance(6)
    b = member(store, clock, "S002")
    assert b.cycle().verdict is Verdict.FOLLOW  # first look, 6 s after the write
    clock.advance(T.ttl - 0.25)
    assert b.cycle().verdict is Verdict.FOLLOW  # 15.75 s after the write, 9.75 s after the look
    clock.advance(0.25)
    assert b.cycle().reason.startswith("elected: took epoch 2")


def test_a_renewal_keeps_the_epoch_and_bumps_renew_seq(store, clock):
    a, b = elected_pool(store, clock, "S002")
    for seq in (1, 2, 3, 4):
        clock.advance(T.renew)
        assert str(a.cycle(renewing=True)) == f"hold: leader: renewed epoch 1 (seq {seq})"
        assert lease_of(store) == ("S001", 1, seq, 10.0, None)
        assert a.elector.leader_valid_until == clock.monotonic() + T.deadline
        assert b.cycle().verdict is Verdict.FOLLOW  # 12 s after its first look: renewals restart its timer
    assert a.events.transitions() == [("elected", 1)]
    assert b.events.rows == []
    assert store.member("S001")["epoch"] == 1


# -- what each cycle costs ----------------------------------------------------------------


def _follower_polls(a, b, store, clock):
    clock.advance(T.poll)
    return b.cycle


def _leader_renews(a, b, store, clock):
    clock.advance(T.renew)
    return lambda: a.cycle(renewing=True)


def _leader_holds(a, b, store, clock):
    clock.advance(1)
    return a.cycle


def _follower_finds_the_store_down(a, b, store, clock):
    store.down = True
    return b.cycle


def _leader_finds_the_store_down(a, b, store, clock):
    store.down = True
    clock.advance(T.renew)
    return lambda: a.cycle(renewing=True)


def _follower_takes_an_expired_lease(a, b, store, clock):
    clock.advance(T.ttl)
    return b.cycle


def _leader_finds_its_lease_deleted(a, b, store, clock):
    store.delete()
    return a.cycle


def _leader_hands_off(a, b, store, clock):
    a.elector.policy = Facts(eligible=False, ineligible_why="drained", successor="S002")
    return a.cycle


def _member_beats(a, b, store, clock):
    return b.elector.heartbeat


@pytest.mark.parametrize(
    "case, arrange, calls, verdict",
    [
        ("a follower's poll makes exactly one read", _follower_polls, Counter(read=1), Verdict.FOLLOW),
        ("a leader's renewal makes one read and one write", _leader_renews,
         Counter(read=1, write=1), Verdict.HOLD),
        ("a leader's hold cycle reads once and writes nothing", _leader_holds, Counter(read=1), Verdict.HOLD),
        ("a follower with the store down tries one read and nothing else",
         _follower_finds_the_store_down, Counter(read=1), Verdict.WAIT),
        ("a leader with the store down tries one read and writes nothing",
         _leader_finds_the_store_down, Counter(read=1), Verdict.HOLD),
        ("an election reads once and acquires once", _follower_takes_an_expired_lease,
         Counter(read=1, acquire=1), Verdict.HOLD),
        ("a leader rewrites its deleted lease with one write", _leader_finds_its_lease_deleted,
         Counter(read=1, write=1), Verdict.HOLD),
        ("a handoff reads, reads again to release compare-and-set, and writes once", _leader_hands_off,
         Counter(read=2, write=1), Verdict.STEP_DOWN),
        ("a heartbeat writes the member's doc and nothing else", _member_beats,
         Counter(write_member=1), None),
    ],
)  # fmt: skip
def test_each_cycle_makes_exactly_its_store_calls(store, clock, case, arrange, calls, verdict):
    a, b = elected_pool(store, clock, "S002")
    act = arrange(a, b, store, clock)
    store.calls.clear()
    d = act()
    assert store.calls == calls
    assert (d.verdict if d is not None else None) is verdict


# -- losing the store, losing races ---------------------------------------------------------


def test_an_unreachable_store_makes_the_leader_step_down_only_after_the_renew_deadline(store, clock):
    (a,) = elected_pool(store, clock)
    store.down = True
    for step, left in ((3, 4.0), (3, 1.0), (1, 0.0)):
        clock.advance(step)
        d = a.cycle(renewing=True)
        assert str(d) == f"hold: leader of epoch 1: lease store unreachable, stepping down in {left:.1f} s"
        assert a.is_leader
    assert a.events.transitions() == [("elected", 1)]
    clock.advance(0.25)
    assert str(a.cycle(renewing=True)) == "step_down: deadline: last renewal of epoch 1 7.2 s ago > 7 s"
    assert not a.is_leader
    assert a.events.transitions() == [("elected", 1), ("stepped_down", 1)]
    assert a.duties == [("elected", 1), ("demoted", 1)]
    assert store.calls == Counter(read=4)


def test_a_renewal_that_would_land_after_the_deadline_is_fenced(store, clock):
    (a,) = elected_pool(store, clock)
    clock.advance(6.5)
    store.meanwhile(lambda: clock.advance(1))  # the share stalls between the read and the write
    assert str(a.cycle(renewing=True)) == "step_down: deadline passed before the write of epoch 1"
    assert lease_of(store) == ("S001", 1, 0, 10.0, None)  # nothing written
    assert a.events.transitions() == [("elected", 1), ("stepped_down", 1)]


def test_a_contender_that_loses_the_race_backs_off_and_follows_the_winner(store, clock):
    _, b = elected_pool(store, clock, "S002")
    clock.advance(T.ttl)
    store.lose_race_once(rival=record("S003", epoch=2, clock=clock))
    d = b.cycle()
    assert str(d).startswith("follow: follower: S003 holds epoch 2")
    assert store.calls == Counter(read=2, acquire=1)
    assert len(b.sleeps) == 1 and 0.2 <= b.sleeps[0] <= 1.0
    assert (b.events.rows, b.is_leader, b.elector.memory.max_epoch) == ([], False, 2)


def test_a_contender_that_loses_the_race_follows_the_winner_at_its_first_beacon_not_after_the_backoff(
    store, clock
):
    """The pause after a lost claim ends when a leader beacon of a newer epoch comes (the winner
    beacons once its lease is written): the next read follows it (issue 36's cut cable)."""
    _, b = elected_pool(store, clock, "S002")
    asked = []

    def winner_heard(epoch: int, seconds: float) -> bool:
        asked.append((epoch, seconds))
        clock.advance(0.03)  # S003's first beacon of epoch 2, 30 ms after the lost claim
        return True

    b.elector.winner_heard = winner_heard
    clock.advance(T.ttl)
    store.lose_race_once(rival=record("S003", epoch=2, clock=clock))
    assert str(b.cycle()).startswith("follow: follower: S003 holds epoch 2")
    assert b.sleeps == [] and len(asked) == 1
    assert asked[0][0] == 1 and 0.2 <= asked[0][1] <= 1.0  # above epoch 1, for at most the backoff
    assert store.calls == Counter(read=2, acquire=1)


def test_a_contender_that_finds_the_lock_busy_backs_off_and_tries_again(store, clock):
    _, b = elected_pool(store, clock, "S002")
    clock.advance(T.ttl)
    store.lose_race_once(busy=True)
    assert b.cycle().reason.startswith("elected: took epoch 2")
    assert store.calls == Counter(read=2, acquire=2)
    assert b.events.elected()["gap_s"] == pytest.approx(T.ttl + b.sleeps[0], abs=1e-3)


def test_a_renewal_that_finds_the_lock_busy_tries_again_and_renews(store, clock):
    (a,) = elected_pool(store, clock)
    clock.advance(T.renew)
    store.lose_race_once(busy=True)
    assert str(a.cycle(renewing=True)) == "hold: leader: renewed epoch 1 (seq 1)"
    assert store.calls == Counter(read=2, write=2)
    assert len(a.sleeps) == 1 and 0.02 <= a.sleeps[0] <= 0.1


def test_a_renewal_that_finds_a_higher_epoch_steps_down_at_once(store, clock):
    (a,) = elected_pool(store, clock)
    clock.advance(T.renew)
    store.lose_race_once(rival=record("S002", epoch=2, clock=clock))
    assert str(a.cycle(renewing=True)).startswith("step_down: lost: the lease names S002 epoch 2")
    assert store.calls == Counter(read=2, write=1)
    assert a.events.transitions() == [("elected", 1), ("stepped_down", 1)]
    assert lease_of(store)[:2] == ("S002", 2)


@pytest.mark.parametrize(
    "case, damage, calls",
    [
        ("a deleted lease", lambda s: s.delete(), Counter(read=1, write=1)),
        ("a damaged lease", lambda s: s.put_raw(b'{"kmsn": "9999'), Counter(read=1, describe=1, write=1)),
        ("a forged lease", lambda s: s.put_raw(record("S009", epoch=99).encode("not-the-key")),
         Counter(read=1, describe=1, write=1)),
    ],
)  # fmt: skip
def test_a_leader_rewrites_its_own_record_over_no_evidence_without_a_new_epoch(
    store, clock, case, damage, calls
):
    a, b = elected_pool(store, clock, "S002")
    for _ in range(2):
        clock.advance(T.renew)
        a.cycle(renewing=True)
    damage(store)
    clock.advance(1)
    store.calls.clear()
    assert str(a.cycle()) == "hold: leader: renewed epoch 1 (seq 3)"  # its renew_seq goes on growing
    assert store.calls == calls
    assert lease_of(store) == ("S001", 1, 3, 10.0, None)
    assert b.cycle().verdict is Verdict.FOLLOW
    assert a.events.transitions() == [("elected", 1)]


# -- releases, handoffs, promotes ----------------------------------------------------------


def test_a_lease_released_to_a_node_is_taken_at_once_by_it_and_the_others_wait(store, clock):
    low = Facts(priority=10)  # would wait 0.45 s before an ordinary contention
    a, b, c = elected_pool(store, clock, "S002", "S003", policies={"S002": low, "S003": low})
    assert a.elector.release(handoff_to="S003", reason="test") is True
    assert lease_of(store) == ("S001", 1, 1, 0, "S003")
    assert a.events.transitions() == [("elected", 1), ("released", 1)]
    store.calls.clear()
    assert str(b.cycle()) == "follow: handoff from S001 to S003; waiting 10.0 s"
    assert store.calls == Counter(read=1)
    assert str(c.cycle()) == "hold: elected: took epoch 2 (S001 handed epoch 1 to me)"
    assert c.sleeps == []
    assert (c.events.elected()["cause"], c.events.elected()["gap_s"]) == ("handoff", 0.0)
    assert str(b.cycle()).startswith("follow: follower: S003 holds epoch 2")
    assert b.events.rows == []


def test_a_handoff_not_taken_within_ttl_lapses_and_the_others_contend(store, clock):
    a, b = elected_pool(store, clock, "S002")
    a.elector.release(handoff_to="S003")  # S003 is gone
    assert b.cycle().verdict is Verdict.FOLLOW
    clock.advance(T.ttl - 0.25)
    assert b.cycle().verdict is Verdict.FOLLOW
    clock.advance(0.25)
    assert b.cycle().reason.startswith("elected: took epoch 2 (handoff to S003 not taken within 10 s)")
    assert (b.events.elected()["cause"], b.events.elected()["gap_s"]) == ("handoff_lapsed", T.ttl)


def test_a_paused_pool_lets_a_lease_expire_but_a_handoff_is_still_taken(store, clock):
    a, b = elected_pool(store, clock, "S002", policies={"S002": Facts(paused=True)})
    clock.advance(T.ttl)
    assert str(b.cycle()).startswith(
        "idle: pool paused, automatic failover off (lease of S001 epoch 1 expired"
    )
    assert store.calls == Counter(read=1)
    a.elector.release(handoff_to="S002")
    assert b.cycle().reason == "elected: took epoch 2 (S001 handed epoch 1 to me)"


def _pool_policy(node, events, members, priority=50):
    commands = PoolCommands()
    commands.apply(events)
    view = PoolView(kmsn="9999-9999-99-99", node=node, members=members)
    return PoolPolicy(
        node, priority, commands, lambda: view, lambda: None, LocalState("/nonexistent"), lambda: 0.0,
        relay_attests=False,
    )  # fmt: skip


MEMBERS = {
    "S001": MemberView(eligible=True, priority=50),
    "S002": MemberView(eligible=True, priority=50),
    "S003": MemberView(eligible=True, priority=90),
}


def test_a_leader_that_becomes_ineligible_hands_off_to_the_successor(store, clock):
    drain = {"kind": "drain_requested", "node": "S002", "seq": 1, "clock": 1, "target": "S001", "epoch": 1}
    a, b, c = elected_pool(
        store, clock, "S002", "S003",
        policies={n: _pool_policy(n, [], MEMBERS) for n in ("S001", "S002", "S003")},
    )  # fmt: skip
    for m in (a, b, c):
        m.elector.policy.commands.apply([drain])
    clock.advance(1)
    assert str(a.cycle()) == "step_down: no longer eligible: drained: handed off to S003"
    assert store.calls == Counter(read=2, write=1)
    assert lease_of(store) == ("S001", 1, 1, 0, "S003")  # S003: the highest priority
    assert a.events.transitions() == [("elected", 1), ("handoff", 1)]
    assert a.duties == [("elected", 1), ("demoted", 1)]
    assert b.cycle().verdict is Verdict.FOLLOW
    assert c.cycle().reason == "elected: took epoch 2 (S001 handed epoch 1 to me)"
    assert c.events.elected()["cause"] == "handoff"
    clock.advance(T.ttl)
    assert str(a.cycle()).startswith("follow: follower: S003 holds epoch 2")


def stopping_sole_leader(store, clock, tmp_path) -> Member:
    """S001, alone in its view, leads epoch 1; then its agent is told to stop (SIGTERM)."""
    local = LocalState(tmp_path)
    policy = _pool_policy("S001", [], {"S001": MemberView(eligible=True, priority=50)})
    policy.local = local
    a = member(store, clock, "S001", policy)
    a.cycle()
    local.mark_stopping()
    return a


def test_a_stopping_leader_with_no_successor_releases_and_the_history_says_released(store, clock, tmp_path):
    """SIGTERM a moment after an election, before any other member is in the view: the
    worker's cycle hands the lease to no one. That is a release, and the history row says so,
    as the supervisor's own release would (the CI run that found it: a `handoff` row, no
    `released` one, for an agent stopped 50 ms after it was elected)."""
    a = stopping_sole_leader(store, clock, tmp_path)
    clock.advance(1)
    stopped = "step_down: no longer eligible: this agent is stopping: handed off to anyone"
    assert str(a.cycle(renewing=True)) == stopped
    assert a.events.transitions() == [("elected", 1), ("released", 1)]
    assert lease_of(store) == ("S001", 1, 1, 0, None)


def test_a_stopping_leader_whose_lease_the_supervisor_released_steps_down_without_a_second_release_row(
    store, clock, tmp_path
):
    """The supervisor releases the lease on SIGTERM (and writes that `released` row); the worker,
    mid-cycle, then finds the lease released and hands nothing over: a step-down, one
    `released` row in all (a CI run had two, one each)."""
    a = stopping_sole_leader(store, clock, tmp_path)
    assert release_lease(store, a.elector.me, 1, a.elector._record)  # the supervisor's
    clock.advance(1)
    assert not a.elector.release(reason="this agent is stopping")
    assert a.events.transitions() == [("elected", 1), ("stepped_down", 1)]
    assert "not written" in a.events.rows[-1]["reason"]
    assert not a.elector.is_leader


def test_a_planned_promote_hands_the_held_epoch_to_the_named_member(store, clock):
    promote = {"kind": "promote_requested", "node": "S003", "seq": 4, "clock": 1, "target": "S002",
               "epoch": 1, "expected_epoch": 1}  # fmt: skip
    policies = {n: _pool_policy(n, [promote], MEMBERS) for n in ("S001", "S002", "S003")}
    a = member(store, clock, "S001", policies["S001"])
    b = member(store, clock, "S002", policies["S002"])
    c = member(store, clock, "S003", policies["S003"])
    a.cycle()
    assert a.events.transitions() == [("elected", 1)]
    assert c.elector.policy.facts(None, 1).promote_elsewhere  # S003 would defer to S002
    clock.advance(1)
    assert str(a.cycle(renewing=True)) == "step_down: handed epoch 1 to S002: promote of S002 requested"
    assert a.events.transitions() == [("elected", 1), ("handoff", 1)]
    assert lease_of(store) == ("S001", 1, 1, 0, "S002")
    assert str(c.cycle()) == "follow: handoff from S001 to S002; waiting 10.0 s"
    assert b.cycle().reason == "elected: took epoch 2 (S001 handed epoch 1 to me)"
    clock.advance(T.renew)  # the promote was for epoch 1: the new leader keeps epoch 2
    assert str(b.cycle(renewing=True)) == "hold: leader: renewed epoch 2 (seq 1)"


def test_a_handoff_tells_the_pool_before_it_writes_its_history(store, clock):
    """The demotion hook (the leadership state, the `resign` beacon that sends the target
    to the store) runs as soon as the release is on the store, before the step-down's
    history line: that line and its database row are nothing the target waits for."""
    a, b = elected_pool(store, clock, "S002")
    seen: list[tuple[list[tuple[str, int]], tuple | None]] = []
    a.elector.on_demoted = lambda epoch: seen.append((a.events.transitions(), lease_of(store)))
    assert a.elector.release(handoff_to="S002", reason="promote of S002 requested", kind="handoff")
    assert seen == [([("elected", 1)], ("S001", 1, 1, 0, "S002"))]  # released, not yet in the history
    assert a.events.transitions() == [("elected", 1), ("handoff", 1)]
    assert b.cycle().reason == "elected: took epoch 2 (S001 handed epoch 1 to me)"


def test_a_node_that_released_sits_out_one_ttl_and_then_may_lead_again(store, clock):
    (a,) = elected_pool(store, clock)
    a.elector.release(reason="SIGUSR1", abstain=True)
    store.calls.clear()
    assert str(a.cycle()) == "idle: sitting out after a release for 10.0 s (released by S001 (epoch 1))"
    assert store.calls == Counter(read=1)
    clock.advance(T.ttl - 0.25)
    assert a.cycle().verdict is Verdict.IDLE
    clock.advance(0.25)
    assert a.cycle().reason == "elected: took epoch 2 (released by S001 (epoch 1))"
    assert a.events.transitions() == [("elected", 1), ("released", 1), ("elected", 2)]


def test_a_released_lease_is_taken_at_once_by_a_follower_while_the_releaser_sits_out(store, clock):
    a, b = elected_pool(store, clock, "S002")
    a.elector.release(reason="SIGUSR1", abstain=True)
    assert a.cycle().verdict is Verdict.IDLE
    assert b.cycle().reason == "elected: took epoch 2 (released by S001 (epoch 1))"
    assert (b.events.elected()["cause"], b.events.elected()["gap_s"]) == ("released", 0.0)


# -- epochs ------------------------------------------------------------------------------------


def test_epochs_are_never_reused_across_many_elections_even_when_the_lease_is_deleted(store, clock):
    """Twelve changes of leader by release, death, deletion of the lease with
    every node restarting (no memory of epochs) and damage: each election takes
    exactly the next epoch, read back from the members' claims when need be."""
    history = Recorder()
    nodes = ("S001", "S002", "S003")

    def boot(node):
        m = member(store, clock, node)
        m.elector.events = history
        return m

    alive = {n: boot(n) for n in nodes}
    epochs_seen = []

    def run_until_elected():
        before = len([r for r in history.rows if r["kind"] == "elected"])
        for _ in range(20):
            for m in list(alive.values()):
                m.cycle(renewing=m.is_leader)
                m.elector.heartbeat()
            now = [r for r in history.rows if r["kind"] == "elected"]
            if len(now) > before:
                assert len(now) == before + 1
                epochs_seen.append(now[-1]["epoch"])
                return
            clock.advance(T.poll)
        raise AssertionError("no election")

    run_until_elected()
    for round_ in range(12):
        (leader,) = [n for n, m in alive.items() if m.is_leader]
        how = ("release", "die", "delete", "damage")[round_ % 4]
        if how == "release":
            alive[leader].elector.release()
        elif how == "die":
            alive[leader] = boot(leader)  # restarted: remembers nothing
        elif how == "delete":
            store.delete()
            alive = {n: boot(n) for n in nodes}  # every node restarted: only the members' claims remain
        else:
            store.put_raw(b"\x00garbage")
            alive[leader] = boot(leader)
        clock.advance(0.5)
        run_until_elected()
    assert epochs_seen == list(range(1, 14))
    assert store.lease.epoch == 13
    assert max(store.member(n)["epoch"] for n in nodes) == 13


def test_a_follower_never_takes_an_epoch_it_has_seen_even_when_the_share_is_wiped(store, clock):
    a, b = elected_pool(store, clock, "S002")
    clock.advance(T.renew)
    a.cycle(renewing=True)
    assert b.cycle().verdict is Verdict.FOLLOW
    store.wipe()  # lease and members' claims gone: only b's memory knows epoch 1
    looks = []
    while not b.is_leader and len(looks) <= T.ttl / T.poll:  # b looks every poll: no blind gap
        clock.advance(T.poll)
        looks.append(b.cycle())
    assert looks[-1].reason.startswith("elected: took epoch 2"), looks


# -- what an election records -------------------------------------------------------------------


def _first(store, clock):
    return member(store, clock, "S002")


def _expired(store, clock):
    _, b = elected_pool(store, clock, "S002")
    clock.advance(12)
    return b


def _expired_low_priority(store, clock):
    _, b = elected_pool(store, clock, "S002", policies={"S002": Facts(priority=50)})
    clock.advance(12)
    return b


def _expired_deferring_to_a_promote(store, clock):
    facts = Facts(priority=50, promote_elsewhere=True)
    _, b = elected_pool(store, clock, "S002", policies={"S002": facts})
    clock.advance(12)
    return b


def _released(store, clock):
    a, b = elected_pool(store, clock, "S002")
    clock.advance(2)
    a.elector.release()
    return b


def _handed_to_me(store, clock):
    a, b = elected_pool(store, clock, "S002", policies={"S002": Facts(priority=1)})
    clock.advance(2)
    a.elector.release(handoff_to="S002")
    return b


def _handoff_lapsed(store, clock):
    a, b = elected_pool(store, clock, "S002")
    a.elector.release(handoff_to="S009")
    b.cycle()
    clock.advance(11)
    return b


@pytest.mark.parametrize(
    "case, arrange, cause, gap_s",
    [
        ("a first election has no gap", _first, "first", None),
        ("an expired lease counts the time since it was last seen renewed", _expired, "expired", 12.0),
        ("a lower priority's wait before contending is part of the gap", _expired_low_priority,
         "expired", 12.25),
        ("a member deferring to a promoted one counts its wait too", _expired_deferring_to_a_promote,
         "expired", 13.25),
        ("a release is taken at once", _released, "released", 0.0),
        ("a handoff to this node is taken at once whatever its priority", _handed_to_me, "handoff", 0.0),
        ("a lapsed handoff counts the whole wait", _handoff_lapsed, "handoff_lapsed", 11.0),
    ],
)  # fmt: skip
def test_the_elected_event_carries_its_cause_and_gap(store, clock, case, arrange, cause, gap_s):
    m = arrange(store, clock)
    assert m.cycle().reason.startswith("elected: took epoch")
    row = m.events.elected()
    assert (row["cause"], row["gap_s"]) == (cause, gap_s)
    assert row["epoch"] == store.lease.epoch


def test_the_duties_start_before_the_elected_row_is_written(store, clock):
    """A planned switchover's target (issue 22): its leadership state, first leader beacon
    and relay plan go first, the history's row (a database insert and a share line, ~10 ms)
    after, and the row still says the epoch and its cause."""
    m = _handed_to_me(store, clock)
    seen: list[tuple[str, int]] = []
    m.elector.on_elected = lambda epoch: seen.append(("duty", len(m.events.rows)))
    before = len(m.events.rows)
    assert m.cycle().reason.startswith("elected: took epoch")
    assert seen == [("duty", before)]  # no row of this election yet when the duty started
    row = m.events.elected()
    assert (row["epoch"], row["cause"]) == (store.lease.epoch, "handoff")


def test_an_audit_row_of_a_watched_pool_at_a_higher_epoch_does_not_depose_this_pools_leader(store, clock):
    """Found by tests/test_browser_xss.py: an operator's command to a watched
    pool is audited with that pool's epoch (its members sign any epoch they
    like) and the audit row is published in this pool's events; taken as this
    pool's epoch, every agent refused the live lease as older and re-elected."""
    from elections.runtime.agent import highest_epoch

    follower, leader = member(store, clock, "S001"), member(store, clock, "S002")
    leader.cycle()
    follower.cycle()
    assert leader.is_leader and store.lease.epoch == 1
    events = [{"node": "S002", "kind": "audit", "epoch": 10**15, "audit": {"kmsn": "4444-4444-44-44"}},
              {"node": "S002", "kind": "drain_requested", "epoch": 1, "target": "S003"},
              {"node": "S002", "kind": "pause_requested", "epoch": "x"}]  # fmt: skip
    assert highest_epoch(events) == 1
    for m in (leader, follower):
        m.elector.know(highest_epoch(events))
    for _ in range(5):
        clock.advance(T.renew)
        leader.cycle(renewing=True)
        follower.cycle()
    assert leader.is_leader and not follower.is_leader and store.lease.epoch == 1
    assert "SECURITY" not in follower.elector.last.reason


def test_a_suspend_shuts_the_gate_though_the_monotonic_clock_stood_still(store, clock):
    """CLOCK_MONOTONIC stops while a Linux PC sleeps; CLOCK_BOOTTIME (the gate's clock,
    `Clock.boottime`) runs on. A leader that resumes after a sleep longer than what its
    renew deadline had left finds its gate shut, and writes no renewal."""
    from elections.ports.local.localstate import Leadership

    (a,) = elected_pool(store, clock)
    clock.advance(2.0)
    el = a.elector
    state = Leadership(node="S001", pid=1, leader=True, epoch=1, valid_until=el.leader_valid_until,
                       valid_until_boot=el.leader_valid_until_boot)  # fmt: skip
    assert state.leads_now(clock.monotonic(), boot=clock.boottime())
    mono = clock.monotonic()
    clock.suspend(30.0)  # the lid closed for 30 s, 5 s were left
    assert clock.monotonic() == mono
    assert mono < state.valid_until  # the monotonic deadline alone would serve on
    assert not state.leads_now(clock.monotonic(), boot=clock.boottime())  # the gate is shut
    assert el.leader_valid_until_boot is not None and el.leader_valid_until_boot < clock.boottime()
    assert el.leader_valid_until is not None and el.leader_valid_until < clock.monotonic()
    assert str(a.cycle(renewing=True)) == "step_down: deadline passed before the write of epoch 1"
    assert lease_of(store) == ("S001", 1, 0, 10.0, None)  # nothing written after the deadline
    assert not a.is_leader


def test_a_short_suspend_leaves_the_gate_open_and_the_renewal_counts_from_it(store, clock):
    (a,) = elected_pool(store, clock)
    clock.suspend(2.0)
    el = a.elector
    assert el.leader_valid_until_boot == pytest.approx(clock.boottime() + T.deadline - 2.0)
    assert str(a.cycle(renewing=True)) == "hold: leader: renewed epoch 1 (seq 1)"
    assert el.leader_valid_until_boot == pytest.approx(clock.boottime() + T.deadline)


def test_a_release_that_was_not_written_sits_nothing_out(store, clock):
    """A leader cut off from the share (its relay stopped meanwhile) hands off in vain: nothing
    was released, so it does not sit out the next election (issue 22: two members sitting
    out after releases never written left a silent leader's takeover waiting 3.5 s)."""
    a, b = elected_pool(store, clock, "S002")
    store.down = True
    assert a.elector.release(reason="no longer eligible: relay not running", abstain=True) is False
    assert not a.is_leader
    store.down = False
    b.elector.evidence = lambda holder, epoch: f"{holder}'s agent is gone"
    assert b.cycle().reason.startswith("elected: took epoch 2")
    assert a.cycle().verdict is Verdict.FOLLOW
    assert b.elector.release(reason="shutdown") is True  # within a TTL of a's vain release
    d = a.cycle()
    assert d.reason.startswith("elected: took epoch 3"), d
    assert a.elector.release(reason="drained", abstain=True) is True  # written: it sits out
    assert "sitting out after a release" in str(a.cycle())
