"""What etcd adds to the store contract (docs/design.md §5.2), on a real 3-member
cluster: the holder's etcd lease, revoked behind its back, is learnt from the
watch and ends its hold; the epoch counter moves with the lease in one
transaction and a forged counter counts for nothing; calls fail over to a live
member and give up at their deadline; the event log is the file's, one key
per signed line, refused like the file's lines."""

from __future__ import annotations

import json
import time

import pytest
from etcd import unique_prefix
from harness import wait_until

from elections.core.lease import LeaseRecord, sign
from elections.errors import StoreUnavailable
from elections.ports.etcd.client import b64
from elections.ports.etcd.events import EtcdEventSink, EtcdEventTail
from elections.ports.etcd.pool import EtcdPool
from elections.ports.etcd.store import EtcdLeaseStore
from elections.ports.store.store import WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-etcd-0123456789"


def rec(node="S001", epoch=1, seq=0, ttl=10.0):
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=4242, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=ttl)  # fmt: skip


@pytest.fixture
def pool(etcd_cluster):
    return EtcdPool([m.url for m in etcd_cluster.members], unique_prefix(), timeout=2.0, fallback=2.0)


def take(store, node="S001", known=0):
    return store.acquire(lambda e: rec(node, e), store.read().revision, known, {"node": node, "seq": 1})


def test_a_holder_whose_etcd_lease_is_revoked_learns_it_from_the_watch_and_writes_nothing(pool):
    clock = FakeClock()
    holder, follower = EtcdLeaseStore(pool, TOKEN, "S001", clock), EtcdLeaseStore(pool, TOKEN, "S002", clock)
    outcome, won = take(holder)
    assert outcome is WriteOutcome.WRITTEN and holder.held_lease
    wait_until(lambda: pool.watch.connected, 10, "the pool's watch")
    # An operator (or etcd itself, after the TTL) takes the lease away: its key goes with it.
    pool.client.call("kv/lease/revoke", {"ID": holder.held_lease})
    wait_until(lambda: holder.held_lease in holder.backend._lost, 5, "the watch to report the revoked lease")
    read = holder.read()
    assert read.status == "missing" and "revoked" in read.detail
    assert holder.write(rec("S001", won.epoch, seq=1), expect=read.revision) is WriteOutcome.LOST
    assert follower.read().status == "missing"  # nothing was written back under another lease
    outcome, again = take(follower, "S002")
    assert outcome is WriteOutcome.WRITTEN and again.epoch == won.epoch + 1


def test_the_leader_key_is_bound_to_an_etcd_lease_of_the_record_ttl(pool):
    store = EtcdLeaseStore(pool, TOKEN, "S001", FakeClock())
    take(store)
    kv = pool.get("pool/leader", 1 << 16)
    left, granted = pool.client.time_to_live(kv.lease)
    assert kv.lease == store.held_lease and granted == 10 and 0 < left <= 10
    # Renewal refreshes it and keeps the key on it; a release leaves the record, on no lease.
    assert store.write(rec(seq=1), expect=store.read().revision) is WriteOutcome.WRITTEN
    assert pool.get("pool/leader", 1 << 16).lease == kv.lease
    released = rec(seq=2, ttl=0)
    assert store.write(released, expect=store.read().revision) is WriteOutcome.WRITTEN
    after = pool.get("pool/leader", 1 << 16)
    assert after.lease == 0 and pool.client.time_to_live(kv.lease)[0] == -1  # revoked, record kept


def test_the_epoch_counter_moves_with_the_lease_and_a_forged_counter_counts_for_nothing(pool):
    store = EtcdLeaseStore(pool, TOKEN, "S001", FakeClock())
    assert take(store)[1].epoch == 1
    counter = json.loads(pool.get("pool/epoch", 1 << 16).value)
    assert counter["epoch"] == 1 and counter["sig"] == sign({"epoch": 1, "node": "S001"}, TOKEN)
    # Someone with write access plants a huge unsigned counter and deletes the lease.
    pool.client.call(
        "kv/put", {"key": b64(pool.key("pool/epoch")), "value": b64(json.dumps({"epoch": 10**9}))}
    )
    pool.client.call("kv/deleterange", {"key": b64(pool.key("pool/leader"))})
    pool.touched("lease")
    other = EtcdLeaseStore(pool, TOKEN, "S002", FakeClock())
    assert take(other, "S002")[1].epoch == 2  # one more than S001's claim; the planted counter is refused
    assert other.refusals.counts["unsigned"] >= 1
    assert json.loads(pool.get("pool/epoch", 1 << 16).value)["epoch"] == 2  # and overwritten, signed


def test_calls_fail_over_to_a_live_member_and_give_up_at_their_deadline(etcd_faults):
    cluster = etcd_faults()
    # The client's first member is a raft follower: pausing it measures the client's failover.
    # Pausing the raft leader would measure etcd's election too (1-2 s with a 1 s election
    # timeout), which a 2 s deadline may or may not cover: test_etcd_faults kills the raft leader.
    (raft_leader,) = wait_until(
        lambda: (i,) if (i := cluster.leader_index()) is not None else None, 15, "an etcd leader"
    )
    order = [i for i in range(3) if i != raft_leader] + [raft_leader]
    pool = EtcdPool([cluster.members[i].url for i in order], unique_prefix(), timeout=2.0)
    store = EtcdLeaseStore(pool, TOKEN, "S001", FakeClock(), watch=False)
    assert take(store)[0] is WriteOutcome.WRITTEN
    first = pool.client._preferred
    cluster.pause(order[first])  # the member this client uses stops answering (SIGSTOP)
    started = time.monotonic()
    assert store.read().status == "valid"  # answered by another member within the deadline
    assert time.monotonic() - started < 2.0 and pool.client._preferred != first
    assert store.write(rec(seq=1), expect=store.read().revision) is WriteOutcome.WRITTEN
    cluster.pause(order[(first + 1) % 3])
    cluster.pause(order[(first + 2) % 3])
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        store.read()
    took = time.monotonic() - started
    assert 1.5 <= took <= 3.0, f"gave up after {took:.2f} s (deadline 2 s)"
    for i in range(3):
        cluster.resume(i)
    wait_until(lambda: store.read().status == "valid", 15, "reads once the members answer again")


# -- the event log ---------------------------------------------------------------------------
def test_events_arrive_once_in_order_and_forged_replayed_misnamed_or_huge_lines_are_refused(pool):
    clock = FakeClock()
    sink, other = EtcdEventSink(pool, "S001", clock, TOKEN), EtcdEventSink(pool, "S002", clock, TOKEN)
    tail = EtcdEventTail(pool, TOKEN, clock=clock)
    sink.record("elected", 1, "first")
    other.record("renewed_lost", 1, "lost")
    sink.record("stepped_down", 1, "bye")
    got = tail.new_events()
    assert [(e["node"], e["seq"], e["kind"]) for e in got] == [
        ("S001", 1, "elected"), ("S002", 1, "renewed_lost"), ("S001", 2, "stepped_down"),
    ]  # fmt: skip
    assert tail.new_events() == []

    def plant(rel, doc_or_raw):
        raw = doc_or_raw if isinstance(doc_or_raw, bytes) else json.dumps(doc_or_raw).encode()
        pool.client.call("kv/put", {"key": b64(pool.key(rel)), "value": b64(raw)})
        pool.touched("events")

    first = pool.get("events/S001/000000000001", 1 << 16).value
    pool.client.call("kv/deleterange", {"key": b64(pool.key("events/S001/000000000001"))})
    plant("events/S001/000000000001", first)  # an old line written again: a replay
    body = {"node": "S001", "seq": 1, "kind": "elected", "epoch": 9, "at": "", "reason": "moved"}
    plant("events/S001/000000000009", {**body, "sig": sign(body, TOKEN)})  # an old line under a new key
    forged = dict(body, seq=10)
    plant("events/S001/000000000010", {**forged, "sig": sign(forged, "another-key")})
    misnamed = dict(body, node="S002", seq=11)
    plant("events/S001/000000000011", {**misnamed, "sig": sign(misnamed, TOKEN)})
    plant("events/S001/000000000012", b"x" * (70 << 10))
    sink.record("handoff", 1, "still here")  # the writer goes on after all that
    got = tail.new_events()
    assert [(e["node"], e["seq"]) for e in got] == [("S001", 3)]
    assert {"replayed", "forged", "wrong_node", "too_large"} <= set(tail.refusals.counts), (
        tail.refusals.counts
    )
    # A restarted writer resumes past every key of its node (valid or not); a taken seq is
    # refused, never overwritten.
    restarted = EtcdEventSink(pool, "S001", clock, TOKEN)
    restarted.record("elected", 2, "again")
    assert [e["seq"] for e in tail.new_events()] == [13]
    with pytest.raises(OSError):
        restarted.record("elected", 2, "same seq", seq=13)


def test_a_tail_reads_a_long_log_in_bounded_calls_and_says_there_is_more(pool):
    clock = FakeClock()
    sink = EtcdEventSink(pool, "S001", clock, TOKEN)
    for i in range(150):
        sink.record("renew_failed", 1, f"n{i}")
    tail = EtcdEventTail(pool, TOKEN, clock=clock)
    sizes = []
    while True:
        sizes.append(len(tail.new_events()))
        if not tail.backlog:
            break
    assert sizes == [64, 64, 22] and tail.last_seq["S001"] == 150


def test_the_keys_and_values_on_etcd_are_byte_for_byte_the_contract(pool):
    """docs/design.md §5.2: `pool/leader` (on the holder's etcd lease) holds `LeaseRecord.encode`,
    `pool/epoch` and `pool/members/<node>` a signed JSON object each, without a newline."""
    store = EtcdLeaseStore(pool, TOKEN, "S001", FakeClock())
    outcome, won = take(store)
    assert outcome is WriteOutcome.WRITTEN
    kvs, _ = pool.bounded_range("", 100, 1 << 16, 1 << 20)
    held = {kv.key: kv for kv in kvs}
    assert sorted(held) == ["pool/epoch", "pool/leader", "pool/members/S001"]
    assert held["pool/leader"].value == won.encode(TOKEN) and held["pool/leader"].lease == store.held_lease
    counter, claim = {"epoch": 1, "node": "S001"}, {"node": "S001", "seq": 1, "epoch": 1}
    assert held["pool/epoch"].value == json.dumps({**counter, "sig": sign(counter, TOKEN)}).encode()
    assert held["pool/members/S001"].value == json.dumps({**claim, "sig": sign(claim, TOKEN)}).encode()
    assert held["pool/epoch"].lease == held["pool/members/S001"].lease == 0
