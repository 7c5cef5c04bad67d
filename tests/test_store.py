"""The file lease store on real files: compare-and-set, the O_EXCL lock, stale
locks, unreachable directories."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from harness import signed_lock

from elections.core.lease import LeaseRecord, sign
from elections.errors import StoreUnavailable
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789"


def rec(node="S001", epoch=1, seq=0):
    return LeaseRecord(
        kmsn="K",
        station=node,
        ip="127.0.0.1",
        port=9530,
        pid=os.getpid(),
        epoch=epoch,
        lease_until="20260615203015",
        node=node,
        renew_seq=seq,
        ttl_s=10,
    )


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    return FileLeaseStore(tmp_path, TOKEN, "S001", clock, lock_stale_s=2.0)


def test_it_writes_only_over_what_it_read(store):
    first = store.read()
    assert first.status == "missing"
    assert store.write(rec(), expect=first.revision) is WriteOutcome.WRITTEN
    # A second writer that read "missing" earlier loses: the file changed.
    assert store.write(rec("S002", 1), expect=first.revision) is WriteOutcome.CHANGED
    now = store.read()
    assert now.status == "valid" and now.record.node == "S001"
    assert not (store.share.root / "relay_leader.lock").exists()
    assert [p.name for p in store.share.root.iterdir()] == ["relay_leader.json"]  # no temp files left


def test_a_fence_that_says_no_writes_nothing(store):
    read = store.read()
    assert store.write(rec(), expect=read.revision, fence=lambda: False) is WriteOutcome.FENCED
    assert store.read().status == "missing"


def test_a_held_lock_makes_writers_wait_and_a_stale_one_is_broken_after_the_bound(tmp_path, store, clock):
    lock = tmp_path / "relay_leader.lock"
    lock.write_text(signed_lock("S009", 1, "dead", TOKEN))
    read = store.read()
    assert store.write(rec(), expect=read.revision) is WriteOutcome.BUSY
    clock.advance(1.9)
    assert store.write(rec(), expect=read.revision) is WriteOutcome.BUSY
    assert lock.exists()
    clock.advance(0.2)  # the same lock, unchanged for 2.1 s on our clock: broken
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN
    assert not lock.exists()


def test_a_lock_that_changes_is_not_stale(tmp_path, store, clock):
    lock = tmp_path / "relay_leader.lock"
    for i in range(5):
        lock.write_text(signed_lock("S009", 1, f"n{i}", TOKEN))
        assert store.write(rec(), expect="") is WriteOutcome.BUSY
        clock.advance(1.5)
    assert lock.exists()


def test_a_lock_of_this_node_whose_process_died_is_broken_at_once(tmp_path, store):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    (tmp_path / "relay_leader.lock").write_text(signed_lock("S001", int(dead), "x", TOKEN))
    assert store.write(rec(), expect="") is WriteOutcome.WRITTEN


def test_a_breaker_that_died_does_not_block_the_pool(tmp_path, store, clock):
    content = signed_lock("S009", 1, "dead", TOKEN)
    (tmp_path / "relay_leader.lock").write_text(content)
    from elections.core.lease import revision_of

    marker = tmp_path / f"relay_leader.lock.break-{revision_of(content.encode())[:16]}"
    marker.write_text("")
    waited = 0.0
    while store.write(rec(), expect="") is not WriteOutcome.WRITTEN:
        assert waited <= 2 * 2.0 + 1.1 + 1e-9, "a dead breaker's marker blocked the pool"
        clock.advance(1.1)
        waited += 1.1
    assert waited > 2.0  # the lock was still given its full bound
    assert not marker.exists() and store.read().status == "valid"


def test_a_removed_directory_is_unreachable_not_missing(tmp_path, clock):
    d = tmp_path / "share"
    d.mkdir()
    s = FileLeaseStore(d, TOKEN, "S001", clock)
    shutil.rmtree(d)
    with pytest.raises(StoreUnavailable, match="gone"):
        s.read()
    with pytest.raises(StoreUnavailable):
        s.write(rec(), expect="")
    with pytest.raises(StoreUnavailable):
        s.write_member({"node": "S001", "epoch": 1})


def test_an_unreadable_directory_is_unreachable(tmp_path):
    """Root ignores permissions, so the check runs without CAP_DAC_OVERRIDE."""
    d = tmp_path / "share"
    d.mkdir()
    (d / "relay_leader.json").write_bytes(rec().encode(TOKEN))
    d.chmod(0)
    code = (
        "import sys; sys.path.insert(0, '.');"
        "from elections.ports.store.store import FileLeaseStore; from stkhost.clock import SystemClock;"
        "from elections.errors import StoreUnavailable\n"
        f"s = FileLeaseStore({str(d)!r}, {TOKEN!r}, 'S001', SystemClock())\n"
        "try:\n    s.read()\nexcept StoreUnavailable as e:\n    print('unreachable:', e)\n"
    )
    prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.getuid() == 0 else []
    try:
        out = subprocess.run(
            [*prefix, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.dirname(__file__)),
            timeout=30,
        )
    finally:
        d.chmod(0o755)
    assert out.stdout.startswith("unreachable: cannot read"), out.stdout + out.stderr


def test_members_carry_epochs_and_forged_members_are_ignored(tmp_path, store):
    store.write_member({"node": "S001", "epoch": 5, "seq": 1})
    other = FileLeaseStore(tmp_path, "another-token", "S666", store.clock)
    other.write_member({"node": "S666", "epoch": 10**6, "seq": 1})
    (tmp_path / "members" / "junk.json").write_text("{not json")
    assert set(store.read_members()) == {"S001"}
    assert store.highest_epoch() == 5


def test_an_election_takes_one_more_than_any_epoch_the_pool_recorded(tmp_path, store):
    def make(epoch):
        return rec("S001", epoch)

    outcome, won = store.acquire(make, "", known_epoch=0, member={"node": "S001", "seq": 1})
    assert outcome is WriteOutcome.WRITTEN and won.epoch == 1
    # The lease is deleted while nobody leads: the claim in members/ still counts.
    (tmp_path / "relay_leader.json").unlink()
    other = FileLeaseStore(tmp_path, TOKEN, "S002", store.clock)
    outcome, won = other.acquire(
        lambda e: rec("S002", e), "", known_epoch=0, member={"node": "S002", "seq": 1}
    )
    assert outcome is WriteOutcome.WRITTEN and won.epoch == 2
    # A heartbeat that knows less never lowers a member's recorded epoch.
    store.write_member({"node": "S001", "epoch": 0, "seq": 2})
    assert store.read_members()["S001"]["epoch"] == 1
    assert store.highest_epoch() == 2


def test_an_election_over_a_changed_lease_loses_and_claims_nothing(tmp_path, store):
    store.acquire(lambda e: rec("S001", e), "", known_epoch=0, member={"node": "S001", "seq": 1})
    other = FileLeaseStore(tmp_path, TOKEN, "S002", store.clock)
    outcome, won = other.acquire(
        lambda e: rec("S002", e), "", known_epoch=0, member={"node": "S002", "seq": 1}
    )
    assert outcome is WriteOutcome.CHANGED and won is None
    assert "S002" not in other.read_members()


# -- what anyone who can write the share may leave there (docs/design.md §5.4) ------------------
def test_a_lock_that_is_not_validly_signed_is_broken_at_once(tmp_path, store):
    # A new epoch each time: the lock's path (a renewal of the store's own record takes no lock).
    for epoch, content in enumerate(('{"node": "S009", "pid": 1, "nonce": "forged"}', "x" * 10_000), 1):
        (tmp_path / "relay_leader.lock").write_text(content)
        assert store.write(rec(epoch=epoch), expect=store.read().revision) is WriteOutcome.WRITTEN
    assert store.refusals.counts["unsigned"] >= 1 and store.refusals.counts["too_large"] >= 1


@pytest.mark.parametrize("content", ["", '{"node": "S0', "[[[[", "junk\n"])
def test_a_lock_that_is_empty_cut_short_or_junk_is_broken_at_once(tmp_path, store, content):
    """A writer's lock is published whole (docs/design.md §5.1, turn 3), so one that is
    not a whole object was never a live writer's: junk rewritten every 0.4 s used
    to hold elections off for as long as the rewriting went on."""
    (tmp_path / "relay_leader.lock").write_text(content)
    assert store.write(rec(), expect="") is WriteOutcome.WRITTEN
    assert sum(store.refusals.counts.values()) >= 1


def test_a_published_lock_is_never_seen_empty_or_half_written(tmp_path):
    """The race the old create-then-fill lock had (one epoch taken twice under
    load): a reader looking as fast as it can, while writers publish and remove
    the lock, finds it absent or whole, never anything in between."""
    from elections.ports.share.share import LocalShare

    share = LocalShare(tmp_path)
    body = json.dumps({"node": "S001", "pid": 1, "nonce": "n" * 4000}).encode()
    seen: set[bytes] = set()
    stop = threading.Event()
    looks = [0]  # reads that found the lock there

    def look() -> None:
        path = tmp_path / "relay_leader.lock"
        while not stop.is_set():
            try:
                seen.add(path.read_bytes())
                looks[0] += 1
            except FileNotFoundError:
                pass

    reader = threading.Thread(target=look)
    reader.start()
    try:
        published = collided = 0
        for _ in range(300):
            try:
                share.create_exclusive("relay_leader.lock", body)
                published += 1
            except FileExistsError:
                collided += 1
            before = looks[0]  # the reader has looked at this publish at least once (deadline 5 s)
            deadline = time.monotonic() + 5
            while looks[0] == before and time.monotonic() < deadline:
                time.sleep(0.0005)
            with contextlib.suppress(FileNotFoundError):
                (tmp_path / "relay_leader.lock").unlink()
    finally:
        stop.set()
        reader.join()
    assert published == 300 and collided == 0
    assert seen <= {body} and seen, f"a reader saw {len(seen)} different contents"
    assert not list(tmp_path.glob(".*.tmp")), "a temp file outlived its publish"


def test_publishing_over_anything_already_there_fails_and_writes_through_nothing(tmp_path):
    from elections.ports.share.share import LocalShare

    share = LocalShare(tmp_path)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("precious")
    (tmp_path / "relay_leader.lock").symlink_to(outside)
    with pytest.raises(FileExistsError):
        share.create_exclusive("relay_leader.lock", b"mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        share.create_exclusive("dangling", b"mine")
    assert outside.read_text() == "precious" and not (tmp_path / "nowhere").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_old_locks_replayed_in_turn_age_like_one_and_are_broken(tmp_path, store, clock):
    old = [signed_lock("S009", 1, f"n{i}", TOKEN) for i in range(2)]
    lock = tmp_path / "relay_leader.lock"
    for content in old:  # the store sees both once, as a live writer's locks
        lock.write_text(content)
        assert store.write(rec(), expect="") is WriteOutcome.BUSY
    clock.advance(2.1)
    lock.write_text(old[0])  # swapped back and forth: each is 2.1 s old on our clock
    assert store.write(rec(), expect="") is WriteOutcome.WRITTEN


def test_a_lease_that_is_a_link_a_fifo_or_huge_is_no_evidence_and_no_write_goes_through_it(tmp_path, store):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("precious")
    lease = tmp_path / "relay_leader.json"
    lease.symlink_to(outside)
    read = store.read()
    assert read.status == "corrupt" and read.cause == "not_a_file"
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN
    assert outside.read_text() == "precious" and not lease.is_symlink() and store.read().status == "valid"
    lease.unlink()
    os.mkfifo(lease)  # opening a FIFO for reading would block: it is refused instead
    read = store.read()
    assert read.status == "corrupt" and read.cause == "not_a_file"
    lease.unlink()
    lease.write_bytes(b"[" * 100_000)
    assert store.read().cause == "too_large"
    lease.write_bytes(b"[" * 10_000)
    assert store.read().cause == "too_deep"


def test_member_files_must_be_signed_name_their_own_node_and_only_move_forward(tmp_path, store):
    from elections.core.lease import sign

    store.write_member({"node": "S002", "seq": 5, "epoch": 1})
    first = store.read_members()["S002"]
    path = tmp_path / "members" / "S002.json"
    old = path.read_bytes()
    store.write_member({"node": "S002", "seq": 9, "epoch": 1})
    assert store.read_members()["S002"]["seq"] == 9
    path.write_bytes(old)  # a replayed older heartbeat
    assert store.read_members()["S002"]["seq"] == 9 and store.refusals.counts["replayed"] == 1
    doc = {"node": "S001", "seq": 99, "epoch": 1}
    (tmp_path / "members" / "S003.json").write_text(json.dumps({**doc, "sig": sign(doc, TOKEN)}))
    (tmp_path / "members" / "S004.json").write_text('{"node": "S004", "seq": 1}')
    (tmp_path / "members" / "S005.json").write_text("[" * 50_000)
    members = store.read_members()
    assert set(members) == {"S002"} and first["node"] == "S002"
    assert {"wrong_node", "unsigned", "too_large"} <= set(store.refusals.counts)


def test_a_heartbeat_seq_keeps_growing_across_a_restart_with_a_lower_counter(tmp_path, clock):
    a = FileLeaseStore(tmp_path, TOKEN, "S002", clock)
    a.write_member({"node": "S002", "seq": 1_000_000, "epoch": 1})
    restarted = FileLeaseStore(tmp_path, TOKEN, "S002", clock)  # e.g. after a reboot
    restarted.write_member({"node": "S002", "seq": 5, "epoch": 1})
    assert FileLeaseStore(tmp_path, TOKEN, "S001", clock).read_members()["S002"]["seq"] == 1_000_001


def test_a_member_removed_between_the_listing_and_its_read_is_gone_not_refused(tmp_path, store):
    """A forget on another agent unlinks a member file after this store listed the
    folder: the member is gone, and nothing is refused (an empty read once looked forged)."""
    store.write_member({"node": "S002", "seq": 5, "epoch": 1})
    assert "S002" in store.read_members()
    listing = store.share.listing

    def listing_then_forget(*args, **kwargs):
        names, refused = listing(*args, **kwargs)
        (tmp_path / "members" / "S002.json").unlink()  # the other agent's forget lands here
        return names, refused

    store.share.listing = listing_then_forget
    assert "S002" not in store.read_members()
    assert not store.refusals.counts, store.refusals.counts


def test_the_files_on_the_share_are_byte_for_byte_the_contract(tmp_path, clock):
    """docs/design.md §5.1, §6: the lease is `LeaseRecord.encode` (canonical signature, one
    line), a member's file is its JSON with `sig` last and a newline, written under
    these names and nowhere else; the lock is gone after the election."""
    store = FileLeaseStore(tmp_path, TOKEN, "S001", clock)
    outcome, won = store.acquire(
        lambda e: rec("S001", e), store.read().revision, 0, {"node": "S001", "seq": 4}
    )
    assert outcome is WriteOutcome.WRITTEN
    claim = {"node": "S001", "seq": 4, "epoch": 1}
    assert (tmp_path / "relay_leader.json").read_bytes() == won.encode(TOKEN)
    member = (tmp_path / "members" / "S001.json").read_bytes()
    assert member == json.dumps({**claim, "sig": sign(claim, TOKEN)}).encode() + b"\n"
    store.write_member({"node": "S001", "seq": 9, "ip": "127.0.0.1"})
    beat = {"node": "S001", "seq": 9, "ip": "127.0.0.1", "epoch": 1}  # the epoch kept, after the others
    assert (tmp_path / "members" / "S001.json").read_bytes() == json.dumps(
        {**beat, "sig": sign(beat, TOKEN)}
    ).encode() + b"\n"
    names = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert names == ["members", "members/S001.json", "relay_leader.json"]


def test_a_lock_seen_once_long_ago_does_not_make_a_live_claimers_fresh_lock_stale(tmp_path, clock):
    """Issue 22: a follower that lost one race at the pool's start kept "some lock at every look
    since" from then, so at its next look — 30 s later, at a failover — it broke the claimer's
    fresh lock at once, while the claimer had the lease moved aside; its own claim, on a read of
    that gap ("no lease file"), then found no lease and took a second epoch 0.1 s after the first."""
    a, b = FileLeaseStore(tmp_path, TOKEN, "S001", clock), FileLeaseStore(tmp_path, TOKEN, "S002", clock)
    lock = tmp_path / "relay_leader.lock"
    lock.write_text(signed_lock("S009", 1, "start", TOKEN))  # a race at the start: S002 loses it
    assert b.write(rec("S002"), expect=b.read().revision) is WriteOutcome.BUSY
    lock.unlink()
    assert a.write(rec(), expect=a.read().revision) is WriteOutcome.WRITTEN
    clock.advance(30.0)
    seen = []

    def make(epoch: int) -> LeaseRecord:  # runs under S001's lock, the lease moved aside
        read = b.read()
        seen.append(read.status)
        seen.append(b.acquire(lambda e: rec("S002", e), read.revision, 1, {"node": "S002"})[0])
        return rec("S001", epoch)

    outcome, record = a.acquire(make, a.read().revision, 1, {"node": "S001"})
    assert seen == ["missing", WriteOutcome.BUSY], seen
    assert outcome is WriteOutcome.WRITTEN and record is not None and record.epoch == 2
    assert a.read().record == record and not lock.exists()
