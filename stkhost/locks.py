"""`exclusive(path, wait)`: one holder at a time among this host's processes
and threads, through an advisory lock (`flock`) on a local file.

The lock is taken within `wait` seconds or not at all: the context yields
True when held, False when another holder kept it past `wait` (the caller
decides what to do without it; nobody waits without bound). Each entry opens
the file anew, so two holders in one process exclude each other as two
processes do. The file is opened `O_NOFOLLOW` and never written: a link
planted in its place is refused (OSError), never followed. The lock dies with
its holder's process (a kill -9 frees it).

On Windows: `LockFileEx` with `LOCKFILE_EXCLUSIVE_LOCK |
LOCKFILE_FAIL_IMMEDIATELY` on the same file, polled the same way.

`held_for_child(folder)` and `wait_unheld(folder)`: a lock a child holds for as long as it
runs (the supervisor locks a folder, hands the descriptor to the child and closes its own),
and a wait in another process until it ends, however it ends (issue 41: a first start's
`migrate` child; `flock` on the folder itself, no file added). On Windows: an inheritable
handle of a named mutex the child is given, and `WaitForSingleObject` on it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POLL_S = 0.005  # between two tries while another holder has it


@contextmanager
def exclusive(path: str | os.PathLike[str], wait: float) -> Iterator[bool]:
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(Path(path), flags, 0o600)
    try:
        held = _take(fd, time.monotonic() + wait)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _take(fd: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def held_for_child(folder: str | os.PathLike[str]) -> int:
    """A descriptor of `folder`, locked exclusively, for a child to inherit (`pass_fds`): once
    the caller closes its own copy, the lock lasts as long as the child (kernel-released)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        raise
    return fd


def wait_unheld(folder: str | os.PathLike[str]) -> None:
    """Return once nobody holds `folder`'s lock (`held_for_child`): at once if nobody does."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # blocks while a holder runs
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
