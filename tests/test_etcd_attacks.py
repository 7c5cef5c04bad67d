"""A writer of the etcd prefix without the pool key (docs/design.md §5.2, §5.4;
issue 28 item 5.1), on a real 3-member cluster through its HTTP gateway: a
forged or unsigned leader record, a huge value, forged member records claiming
epochs, a flood of member keys, and keys deleted behind the pool's back. None
is evidence: the holder keeps its epoch and overwrites the forgery at its next
renewal, an epoch is never taken twice, listings stay bounded, and every
refusal is counted with its cause."""

from __future__ import annotations

import json
import time

import pytest
from etcd import unique_prefix

from elections.core.lease import LeaseRecord, sign
from elections.ports.etcd.client import b64, put
from elections.ports.etcd.pool import EPOCH_KEY, LEASE_KEY, MEMBERS, EtcdPool
from elections.ports.etcd.store import EtcdLeaseStore
from elections.ports.store.store import MAX_MEMBERS, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-etcd-0123456789"
OTHER_KEY = "not-the-pool-key-0123456789"


def rec(node="S001", epoch=1, seq=0, ttl=10.0):  # type: ignore[no-untyped-def]
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=4242, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=ttl)  # fmt: skip


UNSIGNED_LEASE = {k: v for k, v in json.loads(rec("S666", 99).encode(OTHER_KEY)).items() if k != "sig"}


@pytest.fixture
def pool(etcd_cluster):  # type: ignore[no-untyped-def]
    return EtcdPool([m.url for m in etcd_cluster.members], unique_prefix(), timeout=2.0, fallback=2.0)


def forge(pool, rel: str, value: bytes) -> None:  # type: ignore[no-untyped-def]
    """A blind put, as `etcdctl put` would do it: no lease, no compare, no key."""
    pool.client.call("kv/put", {"key": b64(pool.key(rel)), "value": b64(value)})
    pool.touched("lease")
    pool.touched("members")


def take(store, node="S001", known=0):  # type: ignore[no-untyped-def]
    return store.acquire(lambda e: rec(node, e), store.read().revision, known, {"node": node, "seq": 1})


@pytest.mark.parametrize(
    "what, value, cause",
    [
        ("unsigned", json.dumps(UNSIGNED_LEASE).encode(), "unsigned"),
        ("signed with another key", rec("S666", 99).encode(OTHER_KEY), "forged"),
        ("a huge value", b'{"pad": "' + b"x" * (1 << 20) + b'"}', "too_large"),
        ("not JSON", b"\x00\xff" * 100, "not_utf8"),
    ],
)
def test_a_forged_leader_record_is_no_evidence_and_the_holder_overwrites_it_in_its_epoch(
    pool, what, value, cause
):
    holder, follower = (
        EtcdLeaseStore(pool, TOKEN, "S001", FakeClock()),
        EtcdLeaseStore(pool, TOKEN, "S002", FakeClock()),
    )
    outcome, won = take(holder)
    assert outcome is WriteOutcome.WRITTEN and won is not None
    forge(pool, LEASE_KEY, value)
    seen = follower.read()
    assert seen.status != "valid" and seen.record is None, (what, seen)
    assert follower.refusals.counts.get(cause, 0) >= 1, follower.refusals.counts
    # The holder's next renewal overwrites the forgery without a new epoch.
    read = holder.read()
    assert holder.write(rec("S001", won.epoch, seq=1), expect=read.revision) is WriteOutcome.WRITTEN
    back = follower.read()
    assert back.status == "valid" and (back.record.node, back.record.epoch) == ("S001", won.epoch)
    assert pool.get(LEASE_KEY, 1 << 16).lease == holder.held_lease  # on the holder's etcd lease again


def test_forged_member_claims_and_counters_raise_no_epoch_and_deleted_keys_reuse_none(pool):
    store = EtcdLeaseStore(pool, TOKEN, "S001", FakeClock())
    assert take(store)[1].epoch == 1
    forge(
        pool,
        MEMBERS + "S666",
        json.dumps({"node": "S666", "seq": 9, "epoch": 10**9, "sig": "00" * 32}).encode(),
    )
    forged = {"node": "S777", "seq": 9, "epoch": 10**9}
    forge(pool, MEMBERS + "S777", json.dumps(dict(forged, sig=sign(forged, OTHER_KEY))).encode())
    good = {"node": "S001", "seq": 50, "epoch": 10**9}  # a real signature, under another node's key
    forge(pool, MEMBERS + "S002", json.dumps(dict(good, sig=sign(good, TOKEN))).encode())
    other = EtcdLeaseStore(pool, TOKEN, "S003", FakeClock())
    assert other.highest_epoch() == 1
    assert set(other.read_members()) == {"S001"}
    counts = other.refusals.counts
    assert counts.get("forged", 0) >= 2 and counts.get("wrong_node", 0) >= 1, counts
    # The writer deletes the lease, the counter and every member key: the epoch the
    # caller remembers still counts (a restart remembers it too), so 1 is never taken again.
    for rel in (LEASE_KEY, EPOCH_KEY):
        pool.client.call("kv/deleterange", {"key": b64(pool.key(rel))})
    start = pool.key(MEMBERS)
    pool.client.call("kv/deleterange", {"key": b64(start), "range_end": b64(start[:-1] + "0")})
    pool.touched("lease")
    pool.touched("members")
    outcome, again = take(other, "S003", known=1)
    assert outcome is WriteOutcome.WRITTEN and again.epoch == 2


def test_a_flood_of_member_keys_is_read_in_bounded_time_with_bounded_refusals(pool):
    store = EtcdLeaseStore(pool, TOKEN, "S001", FakeClock())
    take(store)
    junk = json.dumps({"node": "x", "seq": 1, "epoch": 10**9, "sig": "00" * 32, "pad": "y" * 2000}).encode()
    for batch in range(30):  # 3,000 keys of 2 KB, in transactions of 100 puts
        pool.client.txn([], [put(pool.key(f"{MEMBERS}A{batch:02d}{i:03d}"), junk) for i in range(100)])
    pool.touched("members")
    reader = EtcdLeaseStore(pool, TOKEN, "S002", FakeClock())
    started = time.monotonic()
    members = reader.read_members()
    took = time.monotonic() - started
    assert took < 3.0, f"read members in {took:.2f} s"
    assert len(members) <= MAX_MEMBERS and reader.refusals.counts.get("too_many", 0) == 1
    assert len(reader.refusals.recent) <= MAX_MEMBERS + 1
    started = time.monotonic()
    assert reader.highest_epoch() == 1  # the flood's claims count for nothing
    assert time.monotonic() - started < 3.0
    read = store.read()
    assert store.write(rec("S001", 1, seq=1), expect=read.revision) is WriteOutcome.WRITTEN  # renewals go on
