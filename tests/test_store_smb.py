"""SMB's own answers, from a real Samba server on loopback (docs/design.md §5.3,
§12): a rename over a file another client holds open, a file server that
stops answering (SIGSTOP), and one that dies and comes back."""

from __future__ import annotations

import os
import threading
import time

import pytest
from harness import wait_until
from samba import PASSWORD

from elections.core.lease import LeaseRecord
from elections.errors import StoreUnavailable
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789-smb"


def rec(node: str = "S001", epoch: int = 1, seq: int = 0) -> LeaseRecord:
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=4242, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=10)  # fmt: skip


def smb_store(server, folder: str, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    from elections.ports.share.smbshare import SmbShare
    from stkconfig.smburl import parse_smb_url

    server.path(folder).mkdir(exist_ok=True)
    share = SmbShare(parse_smb_url(server.url(folder)), PASSWORD, timeout)
    return FileLeaseStore(share, TOKEN, "S001", FakeClock(), timeout=timeout), share


class Holder:
    """A handle kept open on a file, by a reader that shares read and write but
    not delete (a careless tool on a PC of the site).

    Samba 4.17 refuses a rename over an open file (ACCESS_DENIED, as Windows
    does) only when that open lives in the same smbd process, i.e. on the same
    client connection; a Windows server refuses it across clients too. So the
    handle is opened on the store's own connection: the server's real answer,
    which the store must retry and never take for done."""

    def __init__(self, share, rel: str) -> None:  # type: ignore[no-untyped-def]
        from smbprotocol.open import (
            CreateDisposition,
            CreateOptions,
            FileAttributes,
            FilePipePrinterAccessMask,
            ImpersonationLevel,
            Open,
            ShareAccess,
        )

        self.share = share
        tree = share._connect()
        self.open = Open(tree, share._name(rel))
        self.open.create(
            ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_READ,
            FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE,
            CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE,
        )  # fmt: skip

    def release(self) -> None:
        self.open.close()  # from this thread, while the store's request may be waiting on its own


def test_a_rename_over_a_file_held_open_is_retried_until_it_is_released(samba_server):
    store, share = smb_store(samba_server, "held-briefly")
    assert store.write(rec(seq=1), expect=store.read().revision) is WriteOutcome.WRITTEN
    holder = share.deadline.run(lambda: Holder(share, "relay_leader.json"))
    release = threading.Timer(0.4, holder.release)
    release.start()
    try:
        began = time.monotonic()
        outcome = store.write(rec(seq=2), expect=store.read().revision)
        took = time.monotonic() - began
    finally:
        release.join()
    assert outcome is WriteOutcome.WRITTEN
    assert took >= 0.3, f"the write was reported done {took:.2f} s in, while the file was still held"
    assert store.read().record.renew_seq == 2


def test_a_rename_over_a_file_held_open_too_long_is_never_reported_as_written(samba_server):
    store, share = smb_store(samba_server, "held-long", timeout=1.0)
    assert store.write(rec(seq=1), expect=store.read().revision) is WriteOutcome.WRITTEN
    holder = share.deadline.run(lambda: Holder(share, "relay_leader.json"))
    try:
        with pytest.raises(StoreUnavailable):
            store.write(rec(seq=2), expect=store.read().revision)
    finally:
        holder.release()
    folder = samba_server.path("held-long")
    wait_until(lambda: sorted(os.listdir(folder)) == ["relay_leader.json"], 5, "no temp or lock file left")
    assert store.read().record.renew_seq == 1  # the old record, whole
    assert store.write(rec(seq=3), expect=store.read().revision) is WriteOutcome.WRITTEN


def test_a_stopped_file_server_is_unavailable_within_the_deadline_and_the_store_recovers(own_samba):
    store, _ = smb_store(own_samba, "stopped", timeout=2.0)
    assert store.write(rec(seq=1), expect=store.read().revision) is WriteOutcome.WRITTEN
    own_samba.pause()
    try:
        began = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.read()  # the first call waits out the deadline, no longer
        assert time.monotonic() - began < 2.0 + 1.5
        # Later calls fail at once, as on a hung mount (not a deadline each):
        # while the request hangs, once its connection was dropped (2 x the
        # timeout), and between attempts to connect again (one per backoff,
        # which is the only call that may wait, up to the deadline).
        until, waited = time.monotonic() + 3 * 2.0, []
        while time.monotonic() < until:
            began = time.monotonic()
            with pytest.raises(StoreUnavailable):
                store.read()
            took = time.monotonic() - began
            assert took < 2.0 + 1.5
            if took >= 1.0:
                waited.append(round(took, 2))
            time.sleep(0.2)
        assert len(waited) <= 1, f"calls waited for the hung server: {waited}"
    finally:
        own_samba.resume()
    back = wait_until(lambda: _read_or_none(store), 15, "the store to answer again after SIGCONT")
    assert back.status == "valid" and back.record.renew_seq == 1
    assert store.write(rec(seq=2), expect=back.revision) is WriteOutcome.WRITTEN


def test_a_lost_session_is_made_again_when_the_server_comes_back(own_samba):
    store, share = smb_store(own_samba, "restarted", timeout=1.0)
    assert store.write(rec(seq=1), expect=store.read().revision) is WriteOutcome.WRITTEN
    own_samba.kill()
    with pytest.raises(StoreUnavailable):
        store.read()
    own_samba.start()
    back = wait_until(lambda: _read_or_none(store), 15, "the store to reconnect")
    assert back.status == "valid" and back.record.renew_seq == 1
    assert share.connects == 2  # one session lost, one made again
    assert store.write(rec(seq=2), expect=back.revision) is WriteOutcome.WRITTEN


def _read_or_none(store: FileLeaseStore):  # type: ignore[no-untyped-def]
    try:
        return store.read()
    except StoreUnavailable:
        return None
