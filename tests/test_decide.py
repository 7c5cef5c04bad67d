"""The pure election core: table-driven, with a fake clock's numbers."""

from dataclasses import replace

import pytest

from elections.core.decide import OLDER_WRITER, Observation, Timing, Verdict, contend_delay, decide
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.lease_memory import (
    MAX_WRITERS,
    Memory,
    accepts,
    current,
    track,
    vouched,
    vouches_spent,
    writes_still,
)

T = Timing(ttl=10, renew=3, poll=2, deadline=7)


def rec(node="S001", epoch=7, seq=1, ttl=10, handoff=None):
    return LeaseRecord(
        kmsn="K",
        station=node,
        ip="10.0.0.1",
        port=9530,
        pid=1,
        epoch=epoch,
        lease_until="20260615203015",
        node=node,
        renew_seq=seq,
        ttl_s=ttl,
        handoff_to=handoff,
    )


def valid(r):
    return LeaseRead("valid", record=r, detail=r.describe(), revision=f"rev-{r.key}-{r.ttl_s}")


MISSING = LeaseRead("missing", detail="no lease file")
CORRUPT = LeaseRead("corrupt", detail="lease file is empty", revision="x")
FORGED = LeaseRead("forged", detail="lease has bad signature (claims S009 epoch 99)", revision="y")


def follow(reads, me="S002"):
    """Feed (time, read) pairs through track() and return memory and the last decision."""
    mem = Memory(node=me)
    d = None
    for now, read in reads:
        if read is not None:
            mem = track(mem, read, now, T.ttl)
        d = decide(mem, Observation(read, renewing=False), now, T)
    return mem, d


@pytest.mark.parametrize(
    "case, reads, verdict",
    [
        ("no file and nobody ever seen: contend at once", [(0, MISSING)], Verdict.CONTEND),
        ("a fresh lease is followed", [(0, valid(rec()))], Verdict.FOLLOW),
        ("a lease not renewed for ttl expires", [(0, valid(rec())), (10.0, valid(rec()))], Verdict.CONTEND),
        (
            "a renewal restarts the timer",
            [(0, valid(rec())), (9, valid(rec(seq=2))), (18, valid(rec(seq=2)))],
            Verdict.FOLLOW,
        ),
        ("a corrupt file is no evidence while the ttl runs", [(0, valid(rec())), (5, CORRUPT)], Verdict.WAIT),
        (
            "a corrupt file does not stop expiry",
            [(0, valid(rec())), (5, CORRUPT), (10.1, CORRUPT)],
            Verdict.CONTEND,
        ),
        ("a forged lease is no evidence", [(0, valid(rec())), (1, FORGED)], Verdict.WAIT),
        ("a vanished file after a valid one is no evidence", [(0, valid(rec())), (3, MISSING)], Verdict.WAIT),
        ("a first look at a corrupt file waits a whole ttl", [(0, CORRUPT), (9.9, CORRUPT)], Verdict.WAIT),
        ("...and then contends", [(0, CORRUPT), (10, CORRUPT)], Verdict.CONTEND),
        (
            "a released lease is contended at once",
            [(0, valid(rec())), (1, valid(rec(ttl=0, seq=2)))],
            Verdict.CONTEND,
        ),
        ("a handoff to another node waits", [(0, valid(rec(ttl=0, handoff="S003")))], Verdict.FOLLOW),
        ("a handoff to me is taken at once", [(0, valid(rec(ttl=0, handoff="S002")))], Verdict.CONTEND),
        (
            "an untaken handoff expires after ttl",
            [(0, valid(rec(ttl=0, handoff="S003"))), (10, valid(rec(ttl=0, handoff="S003")))],
            Verdict.CONTEND,
        ),
        ("an unreachable store never contends", [(0, valid(rec())), (50, None)], Verdict.WAIT),
        (
            "a stale epoch replay does not restart the timer",
            [(0, valid(rec(epoch=8))), (6, valid(rec(epoch=7, seq=99))), (10, valid(rec(epoch=7, seq=100)))],
            Verdict.CONTEND,
        ),
    ],
)
def test_follower_decisions(case, reads, verdict):
    _, d = follow(reads)
    assert d.verdict is verdict, f"{case}: {d}"


def test_it_explains_whom_it_follows_and_how_long_ago():
    _, d = follow([(0, valid(rec())), (1.2, valid(rec()))])
    assert str(d) == "follow: follower: S001 holds epoch 7, renewed 1.2 s ago"
    assert d.wake_in == pytest.approx(8.8)


def test_it_never_reads_lease_until():
    """A record whose legacy wall-clock expiry is years off changes nothing."""
    old = replace(rec(), lease_until="19700101000000")
    future = replace(rec(), lease_until="29991231235959")
    for r in (old, future):
        _, d = follow([(0, valid(r)), (9.9, valid(r))])
        assert d.verdict is Verdict.FOLLOW
        _, d = follow([(0, valid(r)), (10, valid(r))])
        assert d.verdict is Verdict.CONTEND


def leader(now_renewed=0.0, epoch=7):
    return Memory(
        node="S001",
        leader_epoch=epoch,
        renewed_at=now_renewed,
        max_epoch=epoch,
        seen_key=("S001", epoch, 1),
        seen_at=now_renewed,
        seen_ttl=10,
    )


@pytest.mark.parametrize(
    "case, read, now, renewing, verdict",
    [
        ("renews its own lease on the renew tick", valid(rec()), 3, True, Verdict.RENEW),
        ("only checks on the poll tick", valid(rec()), 2, False, Verdict.HOLD),
        ("steps down past its deadline whatever the file says", valid(rec()), 7.01, True, Verdict.STEP_DOWN),
        (
            "steps down when another node holds a higher epoch",
            valid(rec("S002", 8)),
            1,
            False,
            Verdict.STEP_DOWN,
        ),
        ("rewrites a corrupt file with its own record", CORRUPT, 1, False, Verdict.RENEW),
        ("rewrites a forged file with its own record", FORGED, 1, False, Verdict.RENEW),
        ("rewrites a deleted file with its own record", MISSING, 1, False, Verdict.RENEW),
        ("rewrites a stale replay of an older epoch", valid(rec("S009", 3)), 1, False, Verdict.RENEW),
        ("holds while the store is unreachable, until the deadline", None, 6.9, True, Verdict.HOLD),
        ("steps down when unreachable past the deadline", None, 7.1, True, Verdict.STEP_DOWN),
    ],
)
def test_leader_decisions(case, read, now, renewing, verdict):
    d = decide(leader(), Observation(read, renewing=renewing), now, T)
    assert d.verdict is verdict, f"{case}: {d}"


def test_a_leader_that_becomes_ineligible_hands_off_and_an_ineligible_follower_idles():
    d = decide(
        leader(), Observation(valid(rec()), renewing=True, eligible=False, ineligible_why="drained"), 1, T
    )
    assert d.verdict is Verdict.HAND_OFF and "drained" in d.reason
    d = decide(
        Memory(node="S002"),
        Observation(MISSING, renewing=False, eligible=False, ineligible_why="drained"),
        0,
        T,
    )
    assert d.verdict is Verdict.IDLE
    # Drained and the only one left: it never contends, not even for a lease handed to it.
    handed = valid(rec(ttl=0, handoff="S002"))
    mem = track(Memory(node="S002"), handed, 0, 10)
    d = decide(mem, Observation(handed, renewing=False, eligible=False, ineligible_why="drained"), 0, T)
    assert d.verdict is Verdict.IDLE


def test_an_ineligible_leader_that_reads_another_holder_steps_down_and_hands_nothing_off():
    """A leader woken from a freeze (or back on the LAN) whose relay stopped meanwhile is
    ineligible, and the lease it reads names a new holder: it has lost, there is nothing
    to hand off, and it must not sit out the next election as a releaser does (issue 22:
    two such woken leaders both sitting out left a failover to wait 3.7 s)."""
    obs = Observation(valid(rec("S003", epoch=8)), renewing=False, eligible=False,
                      ineligible_why="relay not running", successor="S002")  # fmt: skip
    d = decide(leader(), obs, 1, T)
    assert (d.verdict, d.handoff_to) == (Verdict.STEP_DOWN, None), d
    assert d.reason.startswith("lost: the lease names S003"), d


def test_a_paused_pool_fails_over_only_by_a_planned_handoff():
    mem = track(Memory(node="S002"), valid(rec()), 0, 10)
    d = decide(mem, Observation(valid(rec()), renewing=False, paused=True), 10, T)
    assert d.verdict is Verdict.IDLE and "paused" in d.reason
    handed = valid(rec(ttl=0, handoff="S002", seq=2))
    mem = track(mem, handed, 11, 10)
    d = decide(mem, Observation(handed, renewing=False, paused=True), 11, T)
    assert d.verdict is Verdict.CONTEND and d.handoff


def test_the_deadline_reason_says_by_how_much():
    d = decide(leader(), Observation(valid(rec()), renewing=True), 8.1, T)
    assert d.reason == "deadline: last renewal of epoch 7 8.1 s ago > 7 s"


def test_track_remembers_the_highest_epoch_and_ignores_lower_ones():
    mem = track(Memory(node="S002"), valid(rec(epoch=9)), 0, 10)
    mem = track(mem, valid(rec(epoch=4, seq=50)), 1, 10)
    assert mem.max_epoch == 9 and mem.seen_key == ("S001", 9, 1) and mem.seen_at == 0


def test_a_record_cannot_make_followers_wait_forever():
    mem = track(Memory(node="S002"), valid(rec(ttl=10**9)), 0, 10)
    assert mem.seen_ttl == 300


def test_a_planned_handoff_of_the_held_epoch_is_decided_in_the_core():
    d = decide(
        leader(), Observation(valid(rec()), planned_handoff=("S003", "promote of S003 requested")), 1, T
    )
    assert (d.verdict, d.handoff_to, d.cause) == (Verdict.HAND_OFF, "S003", "planned")
    # ...but never past the deadline: a leader that must stop does not hand anything over.
    d = decide(leader(), Observation(valid(rec()), planned_handoff=("S003", "promote")), 7.5, T)
    assert d.verdict is Verdict.STEP_DOWN


def test_an_ineligible_leader_hands_off_to_the_successor_the_observation_names():
    obs = Observation(valid(rec()), renewing=True, eligible=False, ineligible_why="drained", successor="S002")
    d = decide(leader(), obs, 1, T)
    assert (d.verdict, d.handoff_to, d.cause) == (Verdict.HAND_OFF, "S002", "ineligible")


def test_a_node_that_released_sits_out_unless_the_lease_is_handed_to_it():
    mem = track(Memory(node="S002"), valid(rec()), 0, 10)
    d = decide(mem, Observation(valid(rec()), sit_out_until=15), 10, T)
    assert d.verdict is Verdict.IDLE and "sitting out" in d.reason and "5.0 s" in d.reason
    d = decide(mem, Observation(valid(rec()), sit_out_until=15), 15, T)
    assert d.verdict is Verdict.CONTEND
    handed = valid(rec(ttl=0, handoff="S002", seq=2))
    mem = track(mem, handed, 11, 10)
    assert decide(mem, Observation(handed, sit_out_until=99), 11, T).verdict is Verdict.CONTEND


@pytest.mark.parametrize(
    "priority, handoff, promote_elsewhere, delay",
    [(100, False, False, 0.0), (50, False, False, 0.25), (0, False, False, 0.5), (100, False, True, 1.0),
     (10, True, True, 0.0), (250, False, False, 0.0)],
)  # fmt: skip
def test_lower_priority_waits_longer_and_everyone_defers_to_a_promoted_member(
    priority, handoff, promote_elsewhere, delay
):
    assert contend_delay(priority, handoff, promote_elsewhere) == pytest.approx(delay)


def test_the_highest_priority_contends_at_once_and_the_others_wait_for_the_gap():
    assert contend_delay(50, False, False, rival=50) == 0.0  # equal: they race, the store picks one
    assert contend_delay(90, False, False, rival=50) == 0.0
    assert contend_delay(50, False, False, rival=90) == pytest.approx(0.4 * 0.5)
    assert contend_delay(50, False, False) == pytest.approx(0.25)  # rival unknown: 100, as before
    assert contend_delay(50, False, True, rival=50) == pytest.approx(1.0)  # a promote elsewhere


def test_a_contend_decision_carries_its_delay_cause_and_gap_as_data():
    mem = track(Memory(node="S002"), valid(rec()), 0, 10)
    d = decide(mem, Observation(valid(rec()), priority=50), 10.5, T)
    assert (d.verdict, d.cause, d.gap, d.delay) == (Verdict.CONTEND, "expired", 10.5, 0.25)
    d = decide(Memory(node="S002"), Observation(MISSING), 0, T)
    assert (d.cause, d.gap) == ("first", None)
    released = valid(rec(ttl=0, seq=2))
    mem = track(mem, released, 11, 10)
    d = decide(mem, Observation(released), 11.25, T)
    assert (d.cause, d.gap) == ("released", 0.25)
    handed = valid(rec(ttl=0, handoff="S002", seq=3))
    mem = track(mem, handed, 12, 10)
    d = decide(mem, Observation(handed), 12, T)
    assert (d.cause, d.gap, d.delay) == ("handoff", 0.0, 0.0)


def test_old_signed_copies_of_a_lease_swapped_back_and_forth_do_not_keep_a_dead_leader_alive():
    from elections.core.lease_memory import replayed

    old, newer = valid(rec(seq=5)), valid(rec(seq=6))
    mem = track(Memory(node="S002"), old, 0, 10)
    mem = track(mem, newer, 1, 10)  # the last renewal this follower saw, at t=1
    for now in (2, 3, 4, 5, 6, 7, 8, 9, 10):
        read = old if now % 2 else newer
        assert replayed(mem, read) is (read is old)
        mem = track(mem, read, now, 10)
    assert mem.seen_at == 1 and mem.seen_key == ("S001", 7, 6)
    d = decide(mem, Observation(old), 11.1, T)
    assert d.verdict is Verdict.CONTEND and "replayed lease ignored" in d.reason


def test_a_leader_that_reads_an_older_copy_of_its_own_lease_rewrites_it():
    mem = replace(leader(), seen_key=("S001", 7, 9))
    d = decide(mem, Observation(valid(rec(seq=3))), 1, T)
    assert d.verdict is Verdict.RENEW and "replayed" in d.reason


def test_a_node_that_knew_the_pool_before_it_restarted_does_not_take_a_missing_lease_at_once():
    # Anyone who can write the share can delete the lease while an agent restarts;
    # an agent that already knew epochs waits a TTL, as for a damaged lease.
    fresh = Memory(node="S002")
    assert decide(track(fresh, MISSING, 0, 10), Observation(MISSING), 0, T).verdict is Verdict.CONTEND
    knew = track(Memory(node="S002", max_epoch=6), MISSING, 0, 10)
    d = decide(knew, Observation(MISSING), 9.9, T)
    assert d.verdict is Verdict.WAIT and "times out in" in d.reason
    assert decide(knew, Observation(MISSING), 10.0, T).verdict is Verdict.CONTEND


def follow_blind(reads, max_gap=T.blind_after):
    """`follow`, with the gap rule the elector applies (`Timing.blind_after`)."""
    mem, d = Memory(node="S002"), None
    for now, read in reads:
        mem = track(mem, read, now, T.ttl, max_gap)
        d = decide(mem, Observation(read), now, T)
    return mem, d


@pytest.mark.parametrize(
    "case, reads, verdict, seen_at",
    [
        ("blind 12 s, then a corrupt read: the timer starts there", [(0, valid(rec())), (12, CORRUPT)],
         Verdict.WAIT, 12),
        ("...a missing file too", [(0, valid(rec())), (12, MISSING)], Verdict.WAIT, 12),
        ("...a stale record too", [(0, valid(rec(seq=5))), (12, valid(rec(seq=4)))], Verdict.WAIT, 12),
        ("...and the TTL from there decides", [(0, valid(rec())), (12, CORRUPT), (14, CORRUPT), (16, CORRUPT),
         (18, CORRUPT), (20, CORRUPT), (22, CORRUPT)], Verdict.CONTEND, 12),
        ("once per valid read: blind again, not again", [(0, valid(rec())), (12, CORRUPT), (30, CORRUPT)],
         Verdict.CONTEND, 12),
        ("a valid read gives the restart back", [(0, valid(rec())), (12, CORRUPT), (12.5, valid(rec(seq=2))),
         (30, CORRUPT)], Verdict.WAIT, 30),
        ("a valid read after the gap is judged as always", [(0, valid(rec())), (12, valid(rec()))],
         Verdict.CONTEND, 0),
        ("looks no more than TTL - RENEW_DEADLINE apart count", [(0, valid(rec())), (3, CORRUPT),
         (6, CORRUPT), (9, CORRUPT), (10, CORRUPT)], Verdict.CONTEND, 0),
        ("a first look at a corrupt file, then blind: from the look after", [(0, CORRUPT), (12, CORRUPT)],
         Verdict.WAIT, 12),
    ],
)  # fmt: skip
def test_a_gap_in_a_followers_own_looks_is_no_silence_of_the_holder(case, reads, verdict, seen_at):
    mem, d = follow_blind(reads)
    assert d is not None and d.verdict is verdict, (case, d)
    assert mem.seen_at == seen_at, case
    if verdict is Verdict.WAIT:
        assert "times out in 10.0 s" in d.reason, (case, d)


def test_without_the_gap_rule_the_blind_time_counts_as_before():
    _, d = follow_blind([(0, valid(rec())), (12, CORRUPT)], max_gap=float("inf"))
    assert d is not None and d.verdict is Verdict.CONTEND and "corrupt" not in (d.deferred or ""), d


def test_a_renewal_named_by_the_holders_beacons_restarts_the_timer_only_when_the_read_is_no_evidence():
    """`vouched`: junk kept over a live leader's lease hides its renewals from the share's readers;
    its signed beacons still name them (issue 22's hostile share)."""
    mem = Memory(node="S002", seen_key=("S001", 7, 4), seen_at=100.0, seen_ttl=10.0, max_epoch=7)
    junk = LeaseRead("corrupt", detail="lease file is not JSON")
    assert vouched(mem, junk, (5, 103.0)) == replace(
        mem, seen_key=("S001", 7, 5), seen_at=103.0, vouch_from=100.0
    )
    assert vouched(mem, LeaseRead("missing", detail="no lease file"), (6, 104.0)).seen_at == 104.0
    old = LeaseRead("valid", record=rec(seq=3))  # an old copy swapped back: outdated, no evidence
    assert vouched(mem, old, (5, 103.0)).seen_key == ("S001", 7, 5)
    unchanged = [
        (LeaseRead("valid", record=rec(seq=4)), (5, 103.0)),  # a valid read is judged by `track` alone
        (junk, (4, 103.0)),  # no newer renewal than the one read
        (junk, (5, 99.0)),  # named before the read that saw the last one: not news
        (junk, None),  # no beacon (BEACON_INTERVAL = 0, or none lately)
    ]
    for read, renewal in unchanged:
        assert vouched(mem, read, renewal) is mem, (read.status, renewal)
    assert vouched(replace(mem, seen_released=True), junk, (5, 103.0)).seen_released  # a release is final
    assert vouched(replace(mem, seen_released=True), junk, (5, 103.0)).seen_at == 100.0


def test_vouched_restarts_move_the_timer_one_limit_in_all_between_valid_reads_then_the_ttl_runs():
    """Issue 40: a restarted follower's board took a dead holder's captured beacons, sent again, as
    news; each named a renewal newer than the one it remembered, and each restarted its timer when
    it was replayed (36.1 s against 9.5 s with TTL 3). Between two valid reads the restarts move the
    timer at most `limit` past where the first of them found it; then the TTL runs. A valid read
    gives the budget back. Never early: a refused restart leaves the timer where it stood."""
    ttl = 3.0
    mem = Memory(node="S002", seen_key=("S001", 7, 4), seen_at=100.0, seen_ttl=ttl, max_epoch=7)
    junk = LeaseRead("corrupt", detail="lease file is not JSON")
    replays = [(seq, 100.0 + 2.9 * (seq - 4)) for seq in range(5, 105)]  # 100 captured, one each 2.9 s
    restarts = 0
    for renewal in replays:
        moved = vouched(mem, junk, renewal, limit=ttl)
        if moved is not mem:
            restarts += 1
            assert moved.seen_at == renewal[1] and moved.vouch_from == 100.0, moved
        elif renewal[1] <= mem.seen_at + mem.seen_ttl:  # a look before the TTL ran out
            assert vouches_spent(mem, renewal, ttl), renewal
        mem = moved
    assert restarts == 1 and mem.seen_at == 102.9, (restarts, mem)
    assert mem.seen_at + mem.seen_ttl <= 100.0 + 2 * ttl, "taken one TTL past the limit at the latest"
    # A valid read (not outdated) gives the budget back; an outdated one does not.
    old = LeaseRead("valid", record=rec(seq=3))
    assert not accepts(mem, old) and track(mem, old, 104.0, ttl).vouch_from == 100.0
    fresh = track(mem, LeaseRead("valid", record=rec(seq=6)), 104.0, ttl)
    assert fresh.vouch_from is None and vouched(fresh, junk, (7, 106.9), limit=ttl).seen_at == 106.9
    # Unbounded (`limit` inf, before issue 40): every replay restarted it, 100 replays x 2.9 s.
    mem = Memory(node="S002", seen_key=("S001", 7, 4), seen_at=100.0, seen_ttl=ttl, max_epoch=7)
    for renewal in replays:
        mem = vouched(mem, junk, renewal)
    assert mem.seen_at == replays[-1][1] and mem.seen_at - 100.0 > 280.0


def test_a_quiet_follower_keeps_the_renewal_it_remembers_current_so_replays_of_older_ones_are_no_news():
    """Issue 40: a quiet follower reads no renewal (the beacons vouch) and remembered the renew_seq
    of the last lease it did read; after a restart (leadership.json's `seen`) every renewal named
    since was news to `vouched`. `current` moves it with the beacons, never the timer earlier; then
    a replay of any beacon it heard names nothing newer and restarts nothing."""
    mem = Memory(node="S002", seen_key=("S001", 7, 4), seen_at=100.0, seen_ttl=3.0, max_epoch=7)
    for seq in range(5, 40):
        mem = current(mem, (seq, 100.0 + seq))
    assert mem.seen_key == ("S001", 7, 39) and mem.seen_at == 139.0
    assert current(mem, (12, 150.0)) is mem, "an older renewal moves nothing"
    assert current(mem, (40, 120.0)).seen_at == 139.0, "never earlier than the timer stood"
    assert current(replace(mem, seen_released=True), (40, 141.0)).seen_key[2] == 39, "a release is final"
    assert current(replace(mem, leader_epoch=8), (40, 141.0)).seen_key[2] == 39, "a follower only"
    junk = LeaseRead("corrupt", detail="lease file is not JSON")
    restarted = Memory(node="S002", seen_key=mem.seen_key, max_epoch=7)  # as `Elector.know` leaves it
    first = track(restarted, junk, 500.0, 3.0)
    for seq in range(5, 40):  # every beacon it heard before, replayed
        assert vouched(first, junk, (seq, 500.0 + seq), limit=3.0) is first


def test_a_handoff_whose_target_is_known_gone_is_abandoned_at_once_and_taken_as_released():
    handed = valid(rec(ttl=0, handoff="S003"))
    mem = track(Memory(node="S002"), handed, 0.0, T.ttl)
    waits = decide(mem, Observation(handed), 0.5, T)
    assert waits.verdict is Verdict.FOLLOW  # its target may still take it
    gone = {"S003": "beacons not heard for 3.0 s > 2.0 s"}
    d = decide(mem, Observation(handed, unheard=gone), 0.5, T)
    assert (d.verdict, d.cause, d.handoff) == (Verdict.CONTEND, "handoff_lapsed", False), d
    assert d.reason == "handoff to S003 abandoned: beacons not heard for 3.0 s > 2.0 s"
    # Another member unheard changes nothing; the target itself takes it at once as before.
    assert decide(mem, Observation(handed, unheard={"S004": "x"}), 0.5, T).verdict is Verdict.FOLLOW
    mine = track(Memory(node="S003"), handed, 0.0, T.ttl)
    assert decide(mine, Observation(handed, unheard={"S002": "x"}), 0.5, T).handoff


def test_an_older_epochs_holder_that_still_writes_restarts_the_ttl_and_is_never_obeyed():
    # Issue 37 (SPIN's trail): S001's renewal without the lock renamed its epoch-7 record over
    # S002's claim of epoch 8, and S001 renews on, each of its reads finding its own write. S002
    # knows epoch 8; S001's writes are no evidence (never followed), but they show a live holder:
    # timing the lease out through them took epoch 9 in lease mode beside S001's open gate.
    mem = track(Memory(node="S002"), valid(rec(seq=5)), 0, 10)  # the lease S002's claim went over
    mem = replace(
        mem, max_epoch=8, seen_key=("S002", 8, 0), seen_at=0.5
    )  # its own claim, then it stepped down
    for now in range(1, 11):
        read = valid(rec(seq=5 + now))  # S001 renews epoch 7 every second
        assert writes_still(mem, read) and not accepts(mem, read)
        mem = track(mem, read, now, 10)
        d = decide(mem, Observation(read), now + 0.9, T)
        assert d.verdict is Verdict.WAIT and "stale lease ignored" in d.reason, d
    assert mem.seen_at == 10 and mem.seen_key == ("S002", 8, 0) and not mem.older_spent
    # The restarts are bounded (issue 37, the archive replayer): one TTL past where the timer stood
    # (0.5). Past it the TTL runs from the last restart, and the takeover serves by acks (rule 5):
    # S001's gate may be open by acks, and an epoch in `ACKED` mode is safe beside it.
    for now in range(11, 20):
        read = valid(rec(seq=5 + now))
        mem = track(mem, read, now, 10)
        assert decide(mem, Observation(read), now + 0.9, T).verdict is Verdict.WAIT
    assert mem.seen_at == 10 and mem.older_spent
    last = valid(rec(seq=25))
    d = decide(track(mem, last, 20, 10), Observation(last), 20, T)
    assert d.verdict is Verdict.CONTEND and d.cause == OLDER_WRITER, d


def test_replayed_copies_of_an_older_epoch_restart_nothing_and_each_new_record_restarts_once():
    mem = replace(track(Memory(node="S002"), valid(rec(seq=5)), 0, 10), max_epoch=8, seen_at=0.0)
    for now, seq in ((1, 5), (2, 4), (3, 1), (4, 5)):  # what it saw, and older: copies
        read = valid(rec(seq=seq))
        assert not writes_still(mem, read)
        mem = track(mem, read, now, 10)
    assert mem.seen_at == 0.0
    mem = track(mem, valid(rec(seq=6)), 5, 10)
    assert mem.seen_at == 5
    mem = track(mem, valid(rec(seq=6)), 6, 10)  # the same record again: no news
    assert mem.seen_at == 5
    # a holder this node never saw write: its first record is news once (a delay, never a takeover)
    other = valid(rec(node="S003", epoch=6, seq=40))
    assert writes_still(mem, other)
    mem = track(mem, other, 7, 10)
    assert mem.seen_at == 7 and not writes_still(mem, other)
    assert decide(mem, Observation(other), 16.9, T).verdict is Verdict.WAIT


def test_the_holders_remembered_are_bounded():
    mem = Memory(node="S002", max_epoch=10_000)
    for i in range(MAX_WRITERS * 3):
        mem = track(mem, valid(rec(node=f"N{i:03}", epoch=i + 1)), i, 10)
    assert len(mem.writers) == MAX_WRITERS
    assert min(e for _n, e, _q in mem.writers) == MAX_WRITERS * 2 + 1  # the newest epochs kept
