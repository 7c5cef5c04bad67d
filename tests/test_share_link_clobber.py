"""A symlink planted where the agent creates or replaces a file of the share
(docs/design.md §5.4, issue 28 item 5.7): the lock (an exclusive create), the
breaker's marker, the lease's compare-and-set copy, a member file, a
heartbeat's and the lease's own names. Whatever the link points at outside
the share is never written, created or truncated; the link is refused
(`not_a_file`, counted) or replaced by a rename, and the pool goes on."""

from __future__ import annotations

import json
import os

import pytest

from elections.core.lease import LeaseRecord, revision_of
from elections.ports.share.share import LocalShare
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789abcdef"
SECRET = b"the host's own file\n"


def rec(node="S001", epoch=1, seq=0):  # type: ignore[no-untyped-def]
    return LeaseRecord(kmsn="K", station=node, ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=10)  # fmt: skip


@pytest.fixture
def places(tmp_path):  # type: ignore[no-untyped-def]
    share, outside = tmp_path / "share", tmp_path / "host"
    share.mkdir()
    outside.mkdir()
    (outside / "passwd").write_bytes(SECRET)
    return share, outside


def untouched(outside) -> bool:  # type: ignore[no-untyped-def]
    return sorted(os.listdir(outside)) == ["passwd"] and (outside / "passwd").read_bytes() == SECRET


@pytest.mark.parametrize("target", ["passwd", "missing"])
def test_an_exclusive_create_at_a_link_fails_and_creates_nothing_behind_it(places, target):
    share, outside = places
    (share / "relay_leader.lock").symlink_to(outside / target)
    with pytest.raises(FileExistsError):
        LocalShare(share).create_exclusive("relay_leader.lock", b"mine")
    assert untouched(outside)


def test_a_link_planted_as_the_lock_is_refused_broken_and_never_written_through(places):
    share, outside = places
    (share / "relay_leader.lock").symlink_to(outside / "passwd")
    store = FileLeaseStore(share, TOKEN, "S001", FakeClock())
    outcome, won = store.acquire(lambda e: rec(epoch=e), store.read().revision, 0, {"node": "S001"})
    assert outcome is WriteOutcome.WRITTEN and won is not None and won.epoch == 1
    assert untouched(outside) and not (share / "relay_leader.lock").exists()
    assert store.refusals.counts.get("not_a_file", 0) >= 1


def test_a_link_at_the_breakers_marker_delays_the_break_by_the_bound_and_is_never_written(places):
    share, outside = places
    forged = b'{"node": "S666", "pid": 1, "sig": "00"}'
    (share / "relay_leader.lock").write_bytes(forged)  # not validly signed: broken at once...
    marker = share / f"relay_leader.lock.break-{revision_of(forged)[:16]}"
    marker.symlink_to(outside / "passwd")  # ...unless a breaker seems to be at it already
    clock = FakeClock()
    store = FileLeaseStore(share, TOKEN, "S001", clock)
    first = store.write(rec(), expect=store.read().revision)
    assert first is WriteOutcome.BUSY and untouched(outside)
    clock.advance(60)  # a breaker that never finishes ages out like a stale lock
    assert store.write(rec(), expect=store.read().revision) is WriteOutcome.WRITTEN
    assert untouched(outside) and not marker.exists() and store.refusals.counts.get("forged", 0) >= 1


def test_a_link_at_the_compare_and_set_copy_is_renamed_over_not_written_through(places):
    share, outside = places
    store = FileLeaseStore(share, TOKEN, "S001", FakeClock())
    assert store.write(rec(), expect=store.read().revision) is WriteOutcome.WRITTEN
    (share / ".relay_leader.json.S002.cas").symlink_to(outside / "passwd")  # S002's predictable name
    other = FileLeaseStore(share, TOKEN, "S002", FakeClock())
    outcome, won = other.acquire(lambda e: rec("S002", e), other.read().revision, 0, {"node": "S002"})
    assert outcome is WriteOutcome.WRITTEN and won is not None and won.epoch == 2
    assert untouched(outside) and not (share / ".relay_leader.json.S002.cas").is_symlink()


def test_links_planted_as_the_lease_and_the_own_member_file_are_refused_and_replaced(places):
    share, outside = places
    (share / "members").mkdir()
    (share / "relay_leader.json").symlink_to(outside / "passwd")
    (share / "members" / "S001.json").symlink_to(outside / "passwd")
    store = FileLeaseStore(share, TOKEN, "S001", FakeClock())
    read = store.read()
    assert read.status == "corrupt" and read.cause == "not_a_file"
    store.write_member({"node": "S001", "seq": 1, "epoch": 0})
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN
    assert untouched(outside)
    for path in (share / "relay_leader.json", share / "members" / "S001.json"):
        assert path.is_file() and not path.is_symlink()
    assert json.loads((share / "members" / "S001.json").read_bytes())["node"] == "S001"
    assert store.read().status == "valid" and store.refusals.counts.get("not_a_file", 0) >= 2
