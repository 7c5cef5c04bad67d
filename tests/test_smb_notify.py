"""The store's watch over smb:// (issue 22.3): SMB2 CHANGE_NOTIFY where the
server offers it, polling where it does not, against a real Samba on
loopback (tests/samba.py). A wait is bounded by its timeout whatever the
server does, and never holds up a write on the same connection."""

from __future__ import annotations

import threading
import time

import pytest
from samba import PASSWORD, Samba, available

from elections.core.lease import LeaseRecord
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789-smb-notify"


def rec(node: str = "S001", epoch: int = 1, seq: int = 0) -> LeaseRecord:
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=4242, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=10)  # fmt: skip


def stores(server, folder: str, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    """A leader and a follower, each on a connection of its own (two machines)."""
    from elections.ports.share.smbshare import SmbShare
    from stkconfig.smburl import parse_smb_url

    server.path(folder).mkdir(exist_ok=True)
    made = []
    for node in ("S001", "S002"):
        share = SmbShare(parse_smb_url(server.url(folder)), PASSWORD, timeout)
        made.append(FileLeaseStore(share, TOKEN, node, FakeClock(), timeout=timeout))
    return made


def waiting(store, timeout: float, stop=None):  # type: ignore[no-untyped-def]
    """`store.wait_change(timeout)` on a thread: (thread, [answer, seconds])."""
    out: list = []

    def run() -> None:
        began = time.monotonic()
        out.append(store.wait_change(timeout, stop))
        out.append(time.monotonic() - began)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def armed(share) -> bool:  # type: ignore[no-untyped-def]
    return share._notify is not None and share._notify.asked > 0


def wait_for(cond, seconds: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_follower_waiting_on_the_share_wakes_when_the_lease_is_written(samba_server):
    leader, follower = stores(samba_server, "notify-wakes")
    thread, out = waiting(follower, 20.0)
    wait_for(lambda: armed(follower.share), 10)
    assert leader.write(rec(), expect=leader.read().revision) is WriteOutcome.WRITTEN
    thread.join(15)
    assert out and out[0] is True, out
    assert out[1] < 15, out  # the server's answer, not the timeout
    assert follower.share._notify.notified == 1 and not follower.share._notify.refused
    assert follower.read().record.node == "S001"


def test_writes_of_other_files_do_not_end_a_wait_for_the_lease(samba_server):
    leader, follower = stores(samba_server, "notify-others")
    thread, out = waiting(follower, 1.5)
    wait_for(lambda: armed(follower.share), 10)
    leader.write_member({"node": "S001", "seq": 1, "epoch": 1})  # members/: another folder
    leader.share.replace("notes.txt", b"not the lease")  # the lease's folder, another name
    thread.join(15)
    assert out and out[0] is False, out
    assert out[1] >= 1.4, out
    assert follower.share._notify.asked >= 2  # it was told of notes.txt, and asked again


def test_a_wait_stops_when_told_to(samba_server):
    _, follower = stores(samba_server, "notify-stop")
    stop = threading.Event()
    thread, out = waiting(follower, 30.0, stop)
    wait_for(lambda: armed(follower.share), 10)
    stop.set()
    thread.join(10)
    assert out and out[0] is False and out[1] < 10, out


def test_a_pending_notify_never_holds_up_a_write_on_the_same_connection(samba_server):
    """One connection per process: the renewal shares it with a waiting watch."""
    leader, _ = stores(samba_server, "notify-shared")
    thread, out = waiting(leader, 20.0)  # the leader's own connection has a CHANGE_NOTIFY pending
    wait_for(lambda: armed(leader.share), 10)
    began = time.monotonic()
    for seq in range(5):
        assert leader.write(rec(seq=seq), expect=leader.read().revision) is WriteOutcome.WRITTEN
    assert time.monotonic() - began < 10  # within the share's deadline each: nothing waited on the watch
    thread.join(15)
    assert out and out[0] is True, out


def test_a_hung_server_costs_a_waiter_its_timeout_and_no_more(own_samba):
    _, follower = stores(own_samba, "notify-hung", timeout=1.0)
    assert follower.wait_change(0.3) is False  # armed once, nothing changed
    own_samba.pause()
    try:
        began = time.monotonic()
        assert follower.wait_change(1.0) is False
        assert time.monotonic() - began < 4.0
    finally:
        own_samba.resume()


@pytest.fixture
def samba_without_notify(tmp_path):
    why = available()
    if why:
        pytest.skip(why)
    server = Samba(tmp_path / "samba", change_notify=False)
    server.start()
    yield server
    server.stop()


def test_a_server_that_refuses_change_notify_is_polled(samba_without_notify):
    leader, follower = stores(samba_without_notify, "notify-refused")
    began = time.monotonic()
    assert follower.wait_change(1.0) is False
    assert time.monotonic() - began >= 0.9  # it waited out its timeout: a poll
    assert follower.share._notify.refused
    thread, out = waiting(follower, 1.0)
    assert leader.write(rec(), expect=leader.read().revision) is WriteOutcome.WRITTEN
    thread.join(10)
    assert out and out[0] is False and out[1] >= 0.9, out  # not told: the caller reads at its poll
    assert follower.share._notify.asked == 1 and follower.share._notify.polled >= 2
    assert follower.read().record.node == "S001"
