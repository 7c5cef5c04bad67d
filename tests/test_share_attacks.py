"""What a writer of the share without the key tried, and must not achieve
(found by an attacker's review of the hardened share; docs/design.md §5.4): stop
the pool for good with a planted directory, link or flood of files, starve
the event tail, write outside the share, crash the cycle on a full share, or
break the panel with a file name that is not UTF-8."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from harness import signed_lock

from elections.core.evidence import Refusals
from elections.core.lease import LeaseRecord, sign
from elections.errors import StoreUnavailable
from elections.ports.events.eventlog import EventTail
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789abcdef"


def rec(node="S001", epoch=1, seq=0):  # type: ignore[no-untyped-def]
    return LeaseRecord(kmsn="K", station=node, ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=10)  # fmt: skip


@pytest.fixture
def clock():  # type: ignore[no-untyped-def]
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):  # type: ignore[no-untyped-def]
    return FileLeaseStore(tmp_path, TOKEN, "S001", clock)


def test_a_directory_planted_as_the_lock_is_moved_aside_and_elections_go_on(tmp_path, store):
    (tmp_path / "relay_leader.lock").mkdir()
    (tmp_path / "relay_leader.lock" / "x").write_text("")
    assert store.write(rec(), expect=store.read().revision) is WriteOutcome.WRITTEN
    assert store.read().status == "valid" and not (tmp_path / "relay_leader.lock").exists()


def test_a_directory_planted_as_the_lease_is_no_evidence_and_the_leader_still_writes(tmp_path, store):
    (tmp_path / "relay_leader.json").mkdir()
    read = store.read()
    assert read.status == "corrupt" and read.cause == "not_a_file"
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN
    assert store.read().status == "valid"


def test_directories_planted_as_members_files_do_not_stop_an_election(tmp_path, store):
    (tmp_path / "members").mkdir()
    for node in ("S001", "S002"):
        (tmp_path / "members" / f"{node}.json").mkdir()
    outcome, record = store.acquire(
        lambda epoch: rec(epoch=epoch), store.read().revision, 0, {"node": "S001"}
    )
    assert outcome is WriteOutcome.WRITTEN and record is not None and record.epoch == 1
    assert set(store.read_members()) == {"S001"}


def test_a_link_in_place_of_members_or_events_is_moved_aside_and_nothing_is_written_through_it(
    tmp_path, clock
):
    from elections.ports.events.eventlog import JsonlEventSink

    share, outside = tmp_path / "share", tmp_path / "elsewhere"
    share.mkdir()
    outside.mkdir()
    (share / "members").symlink_to(outside)
    (share / "events").symlink_to(outside)
    FileLeaseStore(share, TOKEN, "S001", clock).write_member({"node": "S001", "seq": 1, "epoch": 1})
    JsonlEventSink(share / "events" / "S001.jsonl", "S001", clock, key=TOKEN).record("elected", 1, "x")
    assert os.listdir(outside) == []
    assert (share / "members" / "S001.json").is_file() and (share / "events" / "S001.jsonl").is_file()


def test_a_flood_of_entries_in_members_is_read_in_bounded_time_with_bounded_refusals(tmp_path, store):
    import time

    folder = tmp_path / "members"
    folder.mkdir()
    store.write_member({"node": "S001", "seq": 1, "epoch": 1})
    for i in range(20_000):
        os.symlink("/nonexistent", folder / f"N{i:05d}.json")
    started = time.monotonic()
    members = store.read_members()
    assert time.monotonic() - started < 2.0
    assert len(store.refusals.recent) <= 32 and store.refusals.total() <= 16
    assert set(members) <= {"S001"}


def test_files_without_line_ends_cannot_starve_the_real_event_files(tmp_path):
    key = "pool-key-0123456789abcdef"
    for i in range(4):
        (tmp_path / f"0{i}.jsonl").write_bytes(b"x" * ((256 << 10) - 1))
    doc = {"node": "S001", "seq": 1, "kind": "drain_requested", "epoch": 1, "target": "S002"}
    (tmp_path / "S001.jsonl").write_text(json.dumps({**doc, "sig": sign(doc, key)}) + "\n")
    tail = EventTail(tmp_path, key=key)
    seen = []
    for _ in range(10):
        seen += [e["node"] for e in tail.new_events()]
        if seen:
            break
    assert seen == ["S001"]


def test_more_old_locks_than_the_store_remembers_rotated_in_still_age_out(tmp_path, store, clock):
    lock = tmp_path / "relay_leader.lock"
    written = False
    for i in range(400):
        lock.write_text(signed_lock("S009", 1, f"old{i}", TOKEN))
        if store.write(rec(), expect=store.read().revision) is WriteOutcome.WRITTEN:
            written = True
            break
        clock.advance(0.1)
    assert written and i * 0.1 <= 5 * 2.0 + 0.2, i


def test_a_full_share_is_unreachable_not_a_crash_and_leaves_no_empty_lock(tmp_path, clock):
    if os.geteuid() != 0:
        pytest.fail("needs root to mount a small tmpfs (the suite runs as root)")
    share = tmp_path / "small"
    share.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(share)], check=True)
    try:
        fd = os.open(share / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        s = FileLeaseStore(share, TOKEN, "S001", clock)
        with pytest.raises(StoreUnavailable):
            s.write(rec(), expect=s.read().revision)
        with pytest.raises(StoreUnavailable):
            s.write_member({"node": "S001", "seq": 1, "epoch": 1})
        assert not (share / "relay_leader.lock").exists()
    finally:
        subprocess.run(["umount", "-l", str(share)], check=False)


def test_a_file_name_that_is_not_utf8_is_shown_escaped(tmp_path, store):
    (tmp_path / "members").mkdir()
    os.mkdir(os.path.join(os.fsencode(tmp_path / "members"), b"\xff\xfe.json"))
    store.read_members()
    shown = json.dumps(store.refusals.to_doc(), ensure_ascii=False).encode("utf-8")  # must not raise
    assert b"\\udc" in shown or b"\\xff" in shown
    refusals = Refusals()
    refusals.note("events/\udcff.jsonl", "not_a_file", "x\ud800")
    assert refusals.to_doc()["recent"][0]["source"] == "events/\\udcff.jsonl"


UNREADABLE_PLANTS = """
import json, os, sys
sys.path.insert(0, ".")
from elections.core.lease import LeaseRecord
from stkhost.clock import SystemClock
from elections.ports.store.store import FileLeaseStore, WriteOutcome

share, token = sys.argv[1], sys.argv[2]
def rec(epoch):
    return LeaseRecord(kmsn="K", station="S001", ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
                       lease_until="20260615203015", node="S001", renew_seq=0, ttl_s=10)
store = FileLeaseStore(share, token, "S001", SystemClock())
try:
    open(os.path.join(share, "relay_leader.json")).close()
    sys.exit("the planted files are readable: the check would prove nothing")
except PermissionError:
    pass
read = store.read()
members = store.read_members()
outcome, record = store.acquire(lambda epoch: rec(epoch), read.revision, 0, {"node": "S001"})
print(json.dumps({"status": read.status, "cause": read.cause, "members": sorted(members),
                  "outcome": outcome.name, "epoch": record.epoch if record else None,
                  "after": store.read().status}))
"""


def test_unreadable_files_planted_as_the_lock_the_lease_and_a_member_do_not_stop_an_election(tmp_path):
    """Turn 2's finding: an unreadable file where the lock, the lease or a member
    file belongs could stop the pool for good. Root ignores permissions, so the
    store runs without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH."""
    share = tmp_path / "share"
    (share / "members").mkdir(parents=True)
    planted = [share / "relay_leader.lock", share / "relay_leader.json", share / "members" / "S002.json"]
    for path in planted:
        path.write_text(json.dumps({"node": "S002"}))
        path.chmod(0)
    prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.getuid() == 0 else []
    out = subprocess.run(
        [*prefix, sys.executable, "-c", UNREADABLE_PLANTS, str(share), TOKEN],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(__file__)),
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "corrupt" and got["cause"] in ("unreadable", "not_a_file"), got  # no evidence
    assert got["members"] == [], got  # the unreadable member is refused, not a crash
    assert (got["outcome"], got["epoch"], got["after"]) == ("WRITTEN", 1, "valid"), got
