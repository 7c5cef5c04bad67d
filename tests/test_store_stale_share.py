"""The file store over a share that serves old copies (NFS attribute caching;
tests/faultyfs.py's `stale` rule): its compare-and-set reads the lease as the
file server holds it, so a node whose view is stale neither takes a lease that
was renewed meanwhile nor an epoch another node just took. Found by the chaos
run (tests/test_chaos.py): two followers with stale views both took epoch 2."""

import os
import shutil

import pytest
from faultyfs import FaultyMount
from test_store import TOKEN, rec

from elections.ports.store.store import FileLeaseStore, WriteOutcome
from stkhost.clock import FakeClock


@pytest.fixture
def views(tmp_path):
    """Two clients of one file server: `fresh` sees it as it is, `stale` through copies up to 60 s old."""
    if not (os.path.exists("/dev/fuse") and shutil.which("fusermount3")):
        pytest.skip("needs /dev/fuse and fusermount3 (the bootstrap installs fuse3)")
    (tmp_path / "server").mkdir()
    mounts = []
    for name in ("fresh", "stale"):
        mount = FaultyMount(
            tmp_path / "server", tmp_path / name, tmp_path / f"{name}.ctl", tmp_path / f"{name}.log"
        )
        mount.start()
        mounts.append(mount)
    mounts[1].set_rules([{"stale": 60}])
    yield mounts
    for mount in mounts:
        mount.stop()


def _stores(views):  # type: ignore[no-untyped-def]
    clock = FakeClock()
    fresh = FileLeaseStore(views[0].mountpoint, TOKEN, "S001", clock)
    stale = FileLeaseStore(views[1].mountpoint, TOKEN, "S002", clock)
    return fresh, stale


def test_a_stale_view_does_not_take_a_lease_renewed_meanwhile(views):
    leader, follower = _stores(views)
    outcome, won = leader.acquire(
        lambda e: rec("S001", e), "", known_epoch=0, member={"node": "S001", "seq": 1}
    )
    assert outcome is WriteOutcome.WRITTEN and won.epoch == 1
    seen = follower.read()  # the follower's copy of the lease: epoch 1, seq 0
    assert (seen.record.node, seen.record.renew_seq) == ("S001", 0)
    assert leader.write(rec("S001", 1, seq=1), expect=leader.read().revision) is WriteOutcome.WRITTEN
    assert follower.read().record.renew_seq == 0  # its view is stale indeed: the renewal is not seen
    # It judges the lease expired on its old copy and contends with that copy's revision.
    outcome, won = follower.acquire(lambda e: rec("S002", e), seen.revision, known_epoch=1,
                                    member={"node": "S002", "seq": 1})  # fmt: skip
    assert outcome is WriteOutcome.CHANGED and won is None
    now = leader.read()
    assert (now.record.node, now.record.epoch, now.record.renew_seq) == ("S001", 1, 1)
    assert sorted(p.name for p in leader.share.root.iterdir() if not p.is_dir()) == ["relay_leader.json"]
    # What it failed to take, it now sees as it is (its own rename dropped its copy).
    assert follower.read().record.renew_seq == 1


def test_two_contenders_on_a_stale_and_a_fresh_view_never_take_one_epoch(views):
    first, second = _stores(views)
    assert first.write(rec("S009", 1, seq=5), expect=first.read().revision) is WriteOutcome.WRITTEN
    old = second.read()  # both saw S009's epoch 1; S009 dies
    outcome, won = first.acquire(lambda e: rec("S001", e), first.read().revision, known_epoch=1,
                                 member={"node": "S001", "seq": 1})  # fmt: skip
    assert outcome is WriteOutcome.WRITTEN and won.epoch == 2
    outcome, won = second.acquire(lambda e: rec("S002", e), old.revision, known_epoch=1,
                                  member={"node": "S002", "seq": 1})  # fmt: skip
    assert outcome is WriteOutcome.CHANGED and won is None
    # Once it contends on what it now sees, it takes the next epoch, not the same one.
    outcome, won = second.acquire(lambda e: rec("S002", e), second.read().revision, known_epoch=1,
                                  member={"node": "S002", "seq": 1})  # fmt: skip
    assert outcome is WriteOutcome.WRITTEN and won.epoch == 3


def test_a_missing_lease_is_still_a_compare_and_set_on_nothing(views):
    first, second = _stores(views)
    assert second.write(rec("S002", 1), expect=second.read().revision) is WriteOutcome.WRITTEN
    assert first.write(rec("S001", 1), expect="") is WriteOutcome.CHANGED  # "" = read as missing
    assert first.read().record.node == "S002"
