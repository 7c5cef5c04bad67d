"""Wake a waiter when named files of one local directory change (Linux inotify).

A reader that must notice a file's change at once — the standby relay waiting
for this agent's leadership — can block on the kernel instead of waking 20
times a second to `stat` it. `DirWatch(dir, names).wait(timeout)` returns
True as soon as one of `names` in `dir` is created, written, replaced (the
rename of `write_atomic`) or removed, and False at the timeout. The waiter
reads the files again either way: an event says "look", never what changed,
and a lost event (the queue overflowed) or a directory inotify cannot watch
costs only the timeout, which stays short enough to be the fallback poll.

The data directory is this agent's own (never the share: inotify sees only
this kernel's writes, which is why the share is always read, never watched).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import struct
import time
from collections.abc import Iterable, Sequence

log = logging.getLogger("stkrelay.dirwatch")

IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000  # the watch is gone (the directory was removed)
IN_ONLYDIR = 0x01000000
MASK = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ONLYDIR
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
READ_AT_MOST = 64 << 10


def _empty(fd: int) -> None:
    """Read a non-blocking pipe dry (a signal's wakeup bytes)."""
    with contextlib.suppress(OSError):
        while os.read(fd, 4096):
            pass


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


class DirWatch:
    """Changes to `names` in `directory`; `wait()` falls back to a plain sleep
    when inotify cannot be had (no libc symbol, watch limit, not a directory)."""

    def __init__(self, directory: str | os.PathLike[str], names: Iterable[str]) -> None:
        self.directory = os.fspath(directory)
        self.names = {os.fsencode(n) for n in names}
        self.fd: int | None = None
        self.ended = False  # the directory went away: no event will come again
        self._open()

    @property
    def watching(self) -> bool:
        return self.fd is not None and not self.ended

    def _open(self) -> None:
        libc = _libc()
        if libc is None or not hasattr(libc, "inotify_init1"):
            return
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.warning("inotify unavailable (%s): polling instead", os.strerror(ctypes.get_errno()))
            return
        if libc.inotify_add_watch(fd, os.fsencode(self.directory), MASK) < 0:
            why = os.strerror(ctypes.get_errno())
            log.warning("cannot watch %s (%s): polling instead", self.directory, why)
            os.close(fd)
            return
        self.fd = fd

    def wait(self, timeout: float, also: Sequence[int] = ()) -> bool:
        """Block until a watched name changes or one of the file descriptors
        `also` (a signal's wakeup pipe) is readable (True, the pipe drained),
        or `timeout` passes (False)."""
        fds = ([self.fd] if self.fd is not None else []) + list(also)
        if not fds:
            time.sleep(max(0.0, timeout))
            return False
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                ready, _, _ = select.select(fds, [], [], left)
            except InterruptedError:
                continue
            woken = False
            for fd in ready:
                if fd == self.fd:
                    woken = self.drain() or woken
                else:
                    _empty(fd)
                    woken = True
            if self.ended:  # the rest of this wait, and every later one, is a plain one
                self.close()
                fds = list(also)
            if woken:
                return True

    def drain(self) -> bool:
        """Read every queued event without blocking; True if one names a
        watched file (or events were lost, or the watch ended: `ended`, and
        the fd is left open for its owner to unregister and `close()`)."""
        if self.fd is None or self.ended:
            return False
        hit = False
        while True:
            try:
                buf = os.read(self.fd, READ_AT_MOST)
            except BlockingIOError:
                return hit
            except InterruptedError:
                continue
            if not buf:
                return hit
            at = 0
            while at + EVENT.size <= len(buf):
                _wd, mask, _cookie, length = EVENT.unpack_from(buf, at)
                name = buf[at + EVENT.size : at + EVENT.size + length].rstrip(b"\0")
                at += EVENT.size + length
                if mask & (IN_Q_OVERFLOW | IN_IGNORED) or name in self.names:
                    hit = True
                if mask & IN_IGNORED:  # the directory went away; the owner closes the fd
                    self.ended = True
                    return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> DirWatch:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
