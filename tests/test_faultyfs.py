"""The faulty share (tests/faultyfs.py) does what its knobs say, switched at run
time on a live mount: delay per operation and path, an errno with a
probability, hang until released, stale reads (an old copy, as NFS attribute
caching serves), slow writes; the old `hang`/`eio` flag files still work, and
exclusive create stays atomic through it."""

import errno
import os
import shutil
import threading
import time

import pytest
from faultyfs import FaultyMount
from harness import wait_until


@pytest.fixture
def share(tmp_path):
    if not (os.path.exists("/dev/fuse") and shutil.which("fusermount3")):
        pytest.skip("needs /dev/fuse and fusermount3 (the bootstrap installs fuse3)")
    (tmp_path / "backing").mkdir()
    mount = FaultyMount(tmp_path / "backing", tmp_path / "view", tmp_path / "control", tmp_path / "fs.log")
    mount.start()
    yield mount
    mount.stop()


def _timed(fn):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    fn()
    return time.monotonic() - started


def test_delay_applies_to_the_operations_and_paths_named_only(share):
    view = share.mountpoint
    (view / "slow.json").write_text("a")
    (view / "fast.json").write_text("b")
    share.set_rules([{"ops": ["read"], "path": "/slow*", "delay": 0.4}])
    assert _timed(lambda: (view / "slow.json").read_text()) >= 0.4
    assert _timed(lambda: (view / "fast.json").read_text()) < 0.3
    share.set_rules([])
    assert _timed(lambda: (view / "slow.json").read_text()) < 0.3


def test_an_errno_with_a_probability_fails_that_share_of_operations_and_never_runs_them(share):
    view = share.mountpoint
    share.set_rules([{"ops": ["create"], "errno": "ENOSPC", "prob": 1}])
    with pytest.raises(OSError) as raised:
        (view / "new").write_text("x")
    assert raised.value.errno == errno.ENOSPC and not (share.backing / "new").exists()
    share.set_rules([{"ops": ["open"], "errno": "EACCES", "prob": 0.5}])
    (share.backing / "f").write_text("x")
    outcomes = []
    for _ in range(200):
        try:
            (view / "f").read_text()
            outcomes.append(True)
        except PermissionError:
            outcomes.append(False)
    assert 40 < outcomes.count(False) < 160  # about half, never all or none
    share.set_rules([{"errno": "EIO"}])
    with pytest.raises(OSError) as raised:
        os.listdir(view)
    assert raised.value.errno == errno.EIO


def test_a_hang_rule_blocks_until_released_and_then_the_operation_runs(share):
    view = share.mountpoint
    share.set_rules([{"ops": ["rename"], "hang": True}])
    (view / "tmp").write_text("new")
    done = threading.Event()
    threading.Thread(
        target=lambda: (os.replace(view / "tmp", view / "lease"), done.set()), daemon=True
    ).start()
    assert not done.wait(0.5) and not (share.backing / "lease").exists()
    share.set_rules([])
    assert done.wait(5) and (share.backing / "lease").read_text() == "new"


def test_stale_reads_serve_the_old_copy_until_it_is_older_than_the_bound(share):
    view = share.mountpoint
    (view / "lease.json").write_text("epoch 1")
    share.set_rules([{"path": "/lease.json", "stale": 1.0}])
    assert (view / "lease.json").read_text() == "epoch 1"  # fetched now: this copy is served
    (share.backing / "lease.json.tmp").write_text("epoch 2, longer")
    os.replace(share.backing / "lease.json.tmp", share.backing / "lease.json")
    assert (view / "lease.json").read_text() == "epoch 1"
    assert os.stat(view / "lease.json").st_size == len("epoch 1")  # attributes as old as the content
    wait_until(lambda: (view / "lease.json").read_text() == "epoch 2, longer", 5, "a fresh copy after 1 s")
    (view / "lease.json").write_text("mine")  # this view's own change: seen at once
    assert (view / "lease.json").read_text() == "mine"
    assert not (view / "new.json").exists()  # absence is not cached
    (share.backing / "new.json").write_text("other")
    assert (view / "new.json").read_text() == "other"
    share.set_rules([])
    (share.backing / "lease.json").write_text("epoch 3")
    assert (view / "lease.json").read_text() == "epoch 3"


def test_slow_writes_take_time_per_kib(share):
    share.set_rules([{"ops": ["write"], "write_delay_per_kib": 0.1}])
    assert _timed(lambda: (share.mountpoint / "big").write_bytes(b"x" * 8192)) >= 0.7
    assert _timed(lambda: (share.mountpoint / "small").write_bytes(b"x" * 100)) < 0.3


def test_the_flag_files_and_exclusive_create_still_work(share):
    view = share.mountpoint
    fd = os.open(view / "lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.close(fd)
    with pytest.raises(FileExistsError):
        os.open(view / "lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    share.flag("eio")
    with pytest.raises(OSError):
        os.listdir(view)
    share.flag("eio", False)
    share.flag("hang")
    listed = []
    threading.Thread(target=lambda: listed.append(os.listdir(view)), daemon=True).start()
    time.sleep(0.3)
    assert listed == []
    share.flag("hang", False)
    wait_until(lambda: listed, 5, "the hung listing to finish")
    assert "lock" in listed[0]


def test_a_process_blocked_on_the_hung_share_dies_on_sigkill_as_on_a_kernel_smb_mount(share):
    # FUSE waits uninterruptibly for an answer its daemon has taken; cifs and NFS wait killably.
    # The hung view answers EINTR to a caller with SIGKILL pending, so a stop can kill it.
    import signal
    import subprocess
    import sys

    (share.backing / "f").write_text("x")
    share.flag("hang")
    reader = subprocess.Popen([sys.executable, "-c", f"open({str(share.mountpoint / 'f')!r}).read()"])

    def blocked_in_fuse() -> bool:
        try:
            return "wait_answer" in open(f"/proc/{reader.pid}/wchan").read()  # fuse's request_wait_answer
        except OSError:
            return False

    wait_until(blocked_in_fuse, 5, "the reader to be blocked in the hung share")
    reader.kill()
    assert reader.wait(3) == -signal.SIGKILL
    share.flag("hang", False)
