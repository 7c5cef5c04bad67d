"""An attacker's review of `lease_memory.writes_still` (docs/election.md "Renewing without the
lock"): what someone who can write the share, with an archive of every signed record ever written
and no key, makes of "an older epoch's holder that still writes restarts the TTL". Pure core, the
numbers a fake clock's."""

import json
from dataclasses import replace

import pytest
from memstore import MemoryLeaseStore

from elections.core.decide import EXPIRED, OLDER_WRITER, Observation, Timing, Verdict, decide
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.lease_memory import MAX_WRITERS, Memory, recalled, track, writes_still
from elections.core.serving import ServingTiming, starts_acked
from elections.core.serving_book import ServingBook
from elections.ports.local.localstate import LEADERSHIP_NAME, Leadership, LocalState
from elections.runtime.elector import Elector
from elections.runtime.lease_writes import Identity
from stkhost.clock import FakeClock

T = Timing(ttl=10, renew=3, poll=2, deadline=7)
EVERY = 9.9  # the replayer puts a record back just before each TTL runs out


def rec(node: str = "S001", epoch: int = 8, seq: int = 1) -> LeaseRecord:
    return LeaseRecord(
        kmsn="K", station=node, ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
        lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=10,
    )  # fmt: skip


def valid(r: LeaseRecord) -> LeaseRead:
    return LeaseRead("valid", record=r, detail=r.describe(), revision=f"rev-{r.key}")


def replayed(mem: Memory, archive: list[LeaseRecord], start: float) -> tuple[Memory, int, float | None]:
    """Each record of `archive` put over the lease in turn, one every `EVERY` s from `start`, each
    read at once, and the member deciding just before the next: the memory after, how many were
    news to `writes_still` (each restarted the timer, within its bound), and when the member first
    would take over (None: never)."""
    restarts, now, takeover = 0, start, None
    for r in archive:
        read = valid(r)
        restarts += writes_still(mem, read)
        mem = track(mem, read, now, T.ttl)
        before_next = now + EVERY - 0.01
        if takeover is None and decide(mem, Observation(read), before_next, T).verdict is Verdict.CONTEND:
            takeover = before_next
        now += EVERY
    return mem, restarts, takeover


def full_of_holders(max_epoch: int) -> Memory:
    """A member that remembers `MAX_WRITERS` holders, of epochs 100..131 (what they wrote: a
    replayer may feed it these too), and last saw the lease of `max_epoch`, whose holder died."""
    mem = Memory(node="S002", max_epoch=max_epoch)
    for i in range(MAX_WRITERS):
        mem = track(mem, valid(rec(node=f"N{i:03}", epoch=100 + i, seq=5)), 0, T.ttl)
    assert len(mem.writers) == MAX_WRITERS
    return replace(mem, seen_key=("S009", max_epoch, 3), seen_at=0.0, seen_ttl=T.ttl)


def test_one_archived_record_of_a_holder_forgotten_as_it_is_noted_does_not_restart_the_timer_forever():
    # A pool whose history holds more than 32 holders: the record of the 33rd, of an epoch below
    # every holder remembered, was dropped by `noted` the moment it was noted, so the very same
    # copy was "a holder never seen" at every read: one record put back before each TTL ran out
    # kept the pool with a dead leader from the lease path for as long as the replayer wished.
    mem = full_of_holders(200)
    mem, restarts, takeover = replayed(mem, [rec(node="X", epoch=5, seq=1)] * 100, 1.0)
    assert restarts <= 1
    assert takeover is not None and takeover <= 3 * T.ttl


def test_holders_that_evict_each_other_in_turn_restart_the_timer_once_each_at_the_most():
    # 33 holders' records, one each, put back in turn: the 33rd noted evicted the oldest kept,
    # which was then news again at its next turn, and dropped again at once: a loop.
    mem = replace(Memory(node="S002", max_epoch=200), seen_key=("S009", 200, 3), seen_at=0.0, seen_ttl=T.ttl)
    others = [rec(node=f"X{i:02}", epoch=10 + i, seq=1) for i in range(MAX_WRITERS + 1)]
    mem, restarts, takeover = replayed(mem, others * 20, 1.0)
    assert restarts <= len(others)
    assert takeover is not None and takeover <= (len(others) + 2) * T.ttl


def test_a_member_that_never_saw_the_older_epochs_takes_over_a_dead_leader_within_a_bound():
    # The pool's leader of epoch 9 died. S003 joined the pool late (or lost its data directory):
    # it knows epoch 9 from the pool's history and saw no record of S001, who held epoch 8 for a
    # day renewing every LEASE_RENEW (28 800 records). The replayer puts them back in order, one
    # before each TTL runs out: each is newer than anything of S001 this member saw (`writes_still`),
    # but the restarts move the timer at most one TTL past where it stood (`older_restart`).
    mem = Memory(node="S003", max_epoch=9)
    archive = [rec(node="S001", epoch=8, seq=q) for q in range(3000)]  # the first 3 000 show it
    mem, restarts, takeover = replayed(mem, archive, 0.0)
    bound = 3 * T.ttl  # generous: the bound is one TTL of restarts, then the TTL
    assert takeover is not None and takeover <= bound, (
        f"{restarts} restarts: no takeover in {len(archive) * EVERY:.0f} s of a dead leader"
    )
    assert mem.older_spent


@pytest.mark.parametrize("length", [1, 2, 3, 10, 100, 3000])
@pytest.mark.parametrize("holders", [1, 5, MAX_WRITERS + 3])
def test_the_delay_a_replayed_archive_causes_is_two_ttls_whatever_its_length(length, holders):
    # A member that saw the lease of epoch 200 change last at t = 0 (its holder then died), and
    # every record of `holders` older holders, of any epochs, in order, put back one before each
    # TTL runs out: the timer moves at most one TTL past where it stood, so the takeover comes at
    # most two TTLs (and a look) after the lease last changed, whatever the archive holds.
    mem = replace(Memory(node="S002", max_epoch=200), seen_key=("S009", 200, 3), seen_at=0.0, seen_ttl=T.ttl)
    archive = [rec(node=f"X{h:02}", epoch=10 + h, seq=q) for h in range(holders) for q in range(length)]
    archive += [rec(node="S009", epoch=199, seq=q) for q in range(length)]  # a holder this member saw later
    mem, _news, takeover = replayed(mem, archive + [archive[-1]] * 3, 0.0)  # then the last, again
    assert mem.seen_at is not None and mem.seen_at <= T.ttl  # restarted at 0 and 9.9, no later
    assert takeover is not None and takeover <= 2 * T.ttl + EVERY


def test_past_the_bound_the_takeover_serves_by_acks_and_names_why():
    # The same member past the bound: its takeover's cause says an older epoch's holder may still
    # write, and an epoch taken for it serves by acks (rule 5) in a pool of three: that holder's
    # gate may be open by acks, so the lease path's premise (nobody wrote for a TTL) does not hold.
    mem = replace(Memory(node="S002", max_epoch=9), seen_key=("S009", 9, 3), seen_at=0.0, seen_ttl=T.ttl)
    for now in (5.0, 9.0, 12.0):
        mem = track(mem, valid(rec(node="S001", epoch=8, seq=int(now))), now, T.ttl)
    assert mem.older_spent and mem.seen_at == 9.0
    decision = decide(mem, Observation(valid(rec(node="S001", epoch=8, seq=12))), 19.5, T)
    assert decision.verdict is Verdict.CONTEND and decision.cause == OLDER_WRITER
    assert starts_acked(decision.cause, 3)
    before = decide(mem, Observation(valid(rec(node="S001", epoch=8, seq=12))), 18.5, T)
    assert before.verdict is not Verdict.CONTEND  # the TTL of its last restart still runs


def test_a_change_of_the_lease_starts_the_bound_afresh():
    # A genuine older holder beside a live leader of epoch 9 that rewrites its record over it: every
    # renewal this member reads is a change of the lease, after which the older holder's records
    # restart the timer again (up to one TTL) and a takeover, if any, is on the lease path again.
    mem = replace(Memory(node="S002", max_epoch=9), seen_key=("S009", 9, 3), seen_at=0.0, seen_ttl=T.ttl)
    mem = track(mem, valid(rec(node="S001", epoch=8, seq=1)), 12.0, T.ttl)
    assert mem.older_spent and mem.seen_at == 0.0  # 12 s after the timer stood: past one TTL
    mem = track(mem, valid(rec(node="S009", epoch=9, seq=4)), 13.0, T.ttl)
    assert not mem.older_spent and mem.older_from is None and mem.seen_at == 13.0
    mem = track(mem, valid(rec(node="S001", epoch=8, seq=2)), 20.0, T.ttl)
    assert mem.seen_at == 20.0 and mem.older_from == 13.0
    decision = decide(mem, Observation(valid(rec(node="S001", epoch=8, seq=2))), 30.5, T)
    assert decision.verdict is Verdict.CONTEND and decision.cause == EXPIRED


def test_a_restarted_member_recalls_the_records_it_saw_and_only_their_tail_is_news(tmp_path):
    # S001 held epoch 8, renewing; S003 read it up to seq 2 000, then S002 took epoch 9 and died.
    # S003 restarts: leadership.json kept the newest record of each holder it saw, so the archive's
    # records of S001 up to seq 2 000 are no news; only the ones it never read (its tail) are.
    mem = Memory(node="S003")
    for q in range(0, 2001, 7):
        mem = track(mem, valid(rec(node="S001", epoch=8, seq=q)), q / 3, T.ttl)
    mem = track(mem, valid(rec(node="S001", epoch=8, seq=2000)), 700.0, T.ttl)
    mem = track(mem, valid(rec(node="S002", epoch=9, seq=0)), 701.0, T.ttl)
    local = LocalState(tmp_path)
    local.write_leadership(
        Leadership(node="S003", max_epoch=mem.max_epoch, seen=mem.seen_key, writers=mem.writers)
    )
    before = local.leadership()
    assert ("S001", 8, 2000) in before.writers
    again = recalled(
        replace(Memory(node="S003"), seen_key=before.seen, max_epoch=before.max_epoch), before.writers
    )
    archive = [rec(node="S001", epoch=8, seq=q) for q in range(2005)]  # S001 wrote 4 more it never read
    _mem, restarts, takeover = replayed(again, archive, 0.0)
    assert restarts <= 4
    assert takeover is not None


@pytest.mark.parametrize(
    "hostile",
    [None, "x", 7, {"a": 1}, [["S001", 8]], [[1, 2, 3]], [["S001", "8", None]], [["S001", 8, 1]] * 5000],
)
def test_a_damaged_writers_field_in_leadership_json_reads_as_what_is_whole_of_it(tmp_path, hostile):
    (tmp_path / LEADERSHIP_NAME).write_text(json.dumps({"node": "S003", "writers": hostile}))
    writers = LocalState(tmp_path).leadership().writers
    assert len(writers) <= MAX_WRITERS
    assert all(isinstance(n, str) and isinstance(e, int) and isinstance(q, int) for n, e, q in writers)


def test_the_elector_knows_the_records_its_agent_saw_before_it_restarted():
    me = Identity(node="S003", kmsn="9999-9999-99-99", station="S003", ip="10.0.0.3", port=9530, pid=4242)
    el = Elector(MemoryLeaseStore(), FakeClock(), me, T)
    el.know(9, ("S002", 9, 0), (("S001", 8, 2000), ("S004", 7, 12)))  # what _seed_memory reads back
    assert {w[0] for w in el.memory.writers} == {"S001", "S002", "S004"}
    assert not writes_still(el.memory, valid(rec(node="S001", epoch=8, seq=2000)))
    assert writes_still(el.memory, valid(rec(node="S001", epoch=8, seq=2001)))
    el.know(9)  # knowing an epoch again forgets nothing
    assert ("S001", 8, 2000) in el.memory.writers


@pytest.mark.xfail(
    strict=True,
    reason='open, and no rule of the taker alone closes it (docs/election.md "Renewing without the '
    "lock\", the bound): each older epoch's record a leader never saw restarts its lease_ok_at "
    "(ServingBook.overwritten); a sole survivor serving by acks neither lapses nor requalifies while "
    "the archive lasts. Bounded, it requalifies by the lease beside a genuine older holder whose "
    "lockless renames land over each of its rewrites, its gate open by a third member's acks: what "
    "it sees is the same",
)
def test_a_sole_surviving_leader_serving_by_acks_is_a_relay_again_within_a_bound_whatever_was_archived():
    # S002 joined the pool at epoch 8 (a new PC) and took epoch 9 by S001's handoff: serving by acks
    # from the start, in a pool of three. Then the other two died: no acks. A TTL on, its right
    # lapses and it requalifies, serving by the lease (rule 4). S004 held epoch 7 for a day before
    # S002 joined; the replayer puts its records over the lease in order, one before each TTL runs
    # out. S002 reads each (and rewrites its own record): each is newer than anything of S004 it
    # saw, so each restarts its lease_ok_at, as `Elector._decide` does.
    book = ServingBook("S002", "a" * 16, ServingTiming.of(0.2), ttl=T.ttl)
    book.taken(9, "handoff", 3, ("S001", 8), 0.0)
    mem = Memory(node="S002", max_epoch=9, leader_epoch=9, writers=(("S002", 9, 0), ("S001", 8, 900)))
    relay_again = None
    now = 1.0
    for q in range(300):
        read = valid(rec(node="S004", epoch=7, seq=q))
        if writes_still(mem, read):
            book.overwritten(9, now)
        mem = track(mem, read, now, T.ttl)
        before_next = now + EVERY - 0.01
        if relay_again is None and book.lapsed(9, 3, before_next) is not None:
            relay_again = before_next  # it takes a new epoch, serving by the lease
        now += EVERY
    assert relay_again is not None and relay_again <= 3 * T.ttl
