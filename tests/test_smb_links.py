"""Links planted on the file server, seen through smb:// (docs/design.md §5.3–5.4;
issue 28 item 5.2), with a real Samba 4.17 (its defaults: `follow symlinks =
yes`, `wide links = no`). Samba shows no link as a reparse point over SMB2:

- one that points out of the share is hidden: creating or renaming onto its
  name answers "not found". The agent never writes through it (the file it
  points at is untouched), counts it (`not_a_file`) and says which name it is,
  instead of reporting the share unreachable;
- one that stays inside the share is served as the file it points at: what it
  serves is checked like any file (signed, its own node, newer), so a valid
  record served under another name is still no evidence.

No SMB client can create either (SMB2 without POSIX extensions has no
symlinks on Samba); whoever plants one has the server itself."""

from __future__ import annotations

import json
import os

import pytest
from samba import PASSWORD

from elections.core.lease import LeaseRecord
from elections.core.untrusted import Untrusted
from elections.errors import StoreUnavailable
from elections.ports.events.eventlog import EventTail, JsonlEventSink
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789-smb-links"
SECRET = b"the file server's own file\n"


def rec(node="S001", epoch=1, seq=0):  # type: ignore[no-untyped-def]
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=4242, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=10)  # fmt: skip


@pytest.fixture
def place(samba_server, tmp_path, request):  # type: ignore[no-untyped-def]
    from elections.ports.share.smbshare import SmbShare
    from stkconfig.smburl import parse_smb_url

    folder = f"links-{request.node.name[-40:]}"
    backing = samba_server.path(folder)
    for sub in ("members", "events"):
        (backing / sub).mkdir(parents=True)
    outside = tmp_path / "server-own"
    outside.write_bytes(SECRET)
    share = SmbShare(parse_smb_url(samba_server.url(folder)), PASSWORD, 2.0)
    return share, backing, outside


def store_on(share, node="S001"):  # type: ignore[no-untyped-def]
    return FileLeaseStore(share, TOKEN, node, FakeClock(), timeout=2.0)


def test_links_out_of_the_share_at_the_lock_member_and_event_files_are_never_written_through(place):
    share, backing, outside = place
    for rel in ("relay_leader.lock", "members/S001.json", "events/S001.jsonl"):
        os.symlink(outside, backing / rel)
    store = store_on(share)
    with pytest.raises(StoreUnavailable, match=r"relay_leader\.lock is taken by something the server hides"):
        store.acquire(lambda e: rec(epoch=e), store.read().revision, 0, {"node": "S001"})
    with pytest.raises(StoreUnavailable, match=r"members/S001\.json is taken"):
        store.write_member({"node": "S001", "seq": 1, "epoch": 1})
    with pytest.raises(Untrusted) as refused:
        JsonlEventSink("events/S001.jsonl", "S001", FakeClock(), key=TOKEN, share=share).record(
            "elected", 1, "x"
        )
    assert refused.value.cause == "not_a_file"
    assert outside.read_bytes() == SECRET and store.refusals.counts.get("not_a_file", 0) >= 2
    assert all((backing / rel).is_symlink() for rel in ("relay_leader.lock", "members/S001.json"))


def test_a_link_out_of_the_share_at_the_lease_is_counted_and_leaves_no_lock_behind(place):
    share, backing, outside = place
    os.symlink(outside, backing / "relay_leader.json")
    store = store_on(share)
    assert store.read().status == "missing"  # hidden: as if deleted
    with pytest.raises(StoreUnavailable, match=r"relay_leader\.json is taken"):
        store.acquire(lambda e: rec(epoch=e), store.read().revision, 0, {"node": "S001"})
    assert outside.read_bytes() == SECRET and store.refusals.counts.get("not_a_file", 0) >= 1
    assert not (backing / "relay_leader.lock").exists()  # the lock was given back
    os.unlink(backing / "relay_leader.json")  # whoever can reach the server removes it: the pool goes on
    outcome, won = store.acquire(lambda e: rec(epoch=e), store.read().revision, 0, {"node": "S001"})
    assert (
        outcome is WriteOutcome.WRITTEN and won is not None and won.epoch == 2
    )  # 1 was claimed: never again


def test_links_inside_the_share_serve_their_targets_and_those_are_still_no_evidence(place):
    share, backing, _ = place
    store = store_on(share)
    store.write_member({"node": "S001", "seq": 1, "epoch": 3})
    JsonlEventSink("events/S001.jsonl", "S001", FakeClock(), key=TOKEN, share=share).record(
        "elected", 3, "won"
    )
    os.symlink("S001.json", backing / "members" / "S003.json")  # S001's signed heartbeat as S003's
    os.symlink("S001.jsonl", backing / "events" / "S004.jsonl")  # S001's signed events as S004's
    reader = store_on(share, "S002")
    assert set(reader.read_members()) == {"S001"} and reader.refusals.counts.get("wrong_node", 0) >= 1
    tail = EventTail("events", key=TOKEN, share=share)
    assert [(e["node"], e["seq"]) for e in tail.new_events()] == [("S001", 1)]
    assert tail.refusals.counts.get("wrong_node", 0) >= 1
    assert json.loads((backing / "members" / "S001.json").read_bytes())["node"] == "S001"


def test_a_link_out_of_the_share_at_the_breakers_marker_is_counted_not_a_crash(place):
    from elections.core.lease import revision_of

    share, backing, outside = place
    forged = b'{"node": "S666", "pid": 1, "sig": "00"}'  # not validly signed: broken at once...
    (backing / "relay_leader.lock").write_bytes(forged)
    os.symlink(outside, backing / f"relay_leader.lock.break-{revision_of(forged)[:16]}")  # ...but for this
    store = store_on(share)
    assert store.write(rec(), expect=store.read().revision) is WriteOutcome.BUSY
    assert outside.read_bytes() == SECRET and store.refusals.counts.get("not_a_file", 0) >= 1


def test_a_link_out_of_the_share_at_the_compare_and_set_copy_is_counted_and_elections_go_on(place):
    share, backing, outside = place
    holder = store_on(share)
    assert holder.write(rec(), expect=holder.read().revision) is WriteOutcome.WRITTEN
    os.symlink(outside, backing / ".relay_leader.json.S002.cas")  # S002's predictable name
    other = store_on(share, "S002")
    outcome, won = other.acquire(lambda e: rec("S002", e), other.read().revision, 0, {"node": "S002"})
    assert outcome is WriteOutcome.WRITTEN and won is not None and won.epoch == 2
    assert outside.read_bytes() == SECRET and other.refusals.counts.get("not_a_file", 0) >= 1
