"""DirWatch: a waiter wakes on a change of a watched name, not on others."""

from __future__ import annotations

import os
import threading
import time

from stkhost.dirwatch import DirWatch
from stkhost.files import write_atomic


def later(delay: float, action) -> threading.Thread:  # type: ignore[no-untyped-def]
    t = threading.Timer(delay, action)
    t.start()
    return t


def test_a_replace_of_a_watched_file_wakes_the_waiter_at_once(tmp_path):
    with DirWatch(tmp_path, ["leadership.json"]) as changes:
        assert changes.watching
        later(0.2, lambda: write_atomic(tmp_path / "leadership.json", b"{}"))
        started = time.monotonic()
        assert changes.wait(10) is True
        assert time.monotonic() - started < 5  # woken by the rename, not by the timeout


def test_other_files_do_not_wake_it_and_removal_does(tmp_path):
    (tmp_path / "relay.wanted").write_text("{}")
    with DirWatch(tmp_path, ["relay.wanted"]) as changes:
        write_atomic(tmp_path / "pool.json", b"{}")  # another name: its temp file and rename
        (tmp_path / "db.sqlite3").write_bytes(b"x")
        assert changes.wait(0.3) is False
        (tmp_path / "relay.wanted").unlink()
        assert changes.wait(10) is True
        assert changes.wait(0.1) is False  # the queue was drained


def test_a_removed_directory_ends_the_watch_and_it_falls_back_to_sleeping(tmp_path):
    watched = tmp_path / "data"
    watched.mkdir()
    changes = DirWatch(watched, ["leadership.json"])
    watched.rmdir()
    assert changes.wait(10) is True  # IN_IGNORED: look now, then poll
    assert not changes.watching
    started = time.monotonic()
    assert changes.wait(0.2) is False
    assert time.monotonic() - started >= 0.19


def test_a_directory_that_cannot_be_watched_means_polling(tmp_path):
    changes = DirWatch(tmp_path / "missing", ["leadership.json"])
    assert not changes.watching
    assert changes.wait(0.05) is False


def _events(fd: int) -> list[tuple[int, bytes]]:
    """(mask, name) of every event queued on an inotify fd, read without blocking."""
    from stkhost.dirwatch import EVENT

    out = []
    try:
        buf = os.read(fd, 1 << 16)
    except BlockingIOError:
        return out
    at = 0
    while at + EVENT.size <= len(buf):
        _wd, mask, _cookie, length = EVENT.unpack_from(buf, at)
        out.append((mask, buf[at + EVENT.size : at + EVENT.size + length].rstrip(b"\0")))
        at += EVENT.size + length
    return out


def test_a_write_aside_is_one_event_in_the_watched_folder_a_write_beside_three(tmp_path):
    """Issue 41: the supervisor and the relay wake for every event of DATA_DIR, each name
    looked at afterwards; a write whose temp file is in `.tmp/` is only its rename there."""
    with DirWatch(tmp_path, ["leadership.json"]) as changes:
        assert changes.fd is not None
        write_atomic(tmp_path / "leadership.json", b"{}", aside=True)
        first = _events(changes.fd)
        write_atomic(tmp_path / "leadership.json", b"{}", aside=True)  # the folder made once, kept
        aside = _events(changes.fd)
        write_atomic(tmp_path / "pool.json", b"{}")
        beside = _events(changes.fd)
    assert [name for _mask, name in first] == [b".tmp", b"leadership.json"]
    assert [name for _mask, name in aside] == [b"leadership.json"]
    assert len(beside) == 4 and beside[-1][1] == b"pool.json"  # created, closed, moved from, moved to
    assert os.listdir(tmp_path / ".tmp") == []  # no temp file left behind
    assert (tmp_path / "leadership.json").read_bytes() == b"{}"


def test_a_write_aside_where_the_temp_folder_is_no_folder_writes_beside(tmp_path):
    (tmp_path / ".tmp").write_text("junk")  # something else holds the name: the write still happens
    write_atomic(tmp_path / "leadership.json", b"{}", aside=True)
    assert (tmp_path / "leadership.json").read_bytes() == b"{}"
    assert sorted(os.listdir(tmp_path)) == [".tmp", "leadership.json"]
