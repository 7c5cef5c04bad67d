"""The kernel pipe a fencing proxy's pairs move bytes through with `os.splice` (Linux, issue 36):
socket → pipe → socket, the bytes never copied into Python.

One pipe for the whole proxy (two descriptors, not two more per pair), and every use leaves it
empty: a pair fills it from one socket and drains it into the other in the same callback, and
what the destination does not take at once is read out (`take`) and held by the pair like the
rest of a short `send()`. So no pair's bytes can ever meet another's, and what the proxy holds
is bounded as before (one chunk per direction). `fill` refuses to run on a pipe that is not
empty (a bug, never seen): the pipe is thrown away and a new one made first.

`SplicePipe.open()` is None where there is no splice (Windows, macOS: `os.splice` is missing)
or no pipe can be made; a splice the kernel refuses for the kind of descriptor (`Unsupported`:
EINVAL, ENOSYS, EOPNOTSUPP; a system that emulates Linux without it) leaves the proxy to turn
it off and copy instead, as it did before splice (`FencingProxy.no_splice`). WSL 2 runs a real
Linux kernel: it splices.
"""

from __future__ import annotations

import errno
import os

from stkhost.processes import nonblocking_pipe

FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
PIPE_SIZE = 1 << 20  # room for many small segments (a pipe holds 16 by default, one per page slot)
UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})


class Unsupported(OSError):
    """The kernel cannot splice these descriptors: copy instead (the pipe holds what it held)."""


class SplicePipe:
    """A non-blocking pipe, empty between uses; `pending` bytes are in it mid-use."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self.pending = 0
        self.closed = False

    @classmethod
    def open(cls) -> SplicePipe | None:
        """A new pipe, or None where this system has no splice (or no descriptor is left)."""
        if not hasattr(os, "splice") or not hasattr(os, "pipe2"):
            return None
        try:
            return cls(*nonblocking_pipe(PIPE_SIZE))
        except OSError:
            return None

    def fill(self, src: int, limit: int) -> int:
        """Move up to `limit` bytes from socket `src` into the pipe: how many (0: `src` said EOF).
        Raises BlockingIOError when `src` has nothing, `Unsupported`, or the socket's OSError."""
        if self.pending:
            self._renew()
        try:
            moved = os.splice(src, self.write_fd, limit, flags=FLAGS)
        except OSError as exc:
            raise _classified(exc) from None
        self.pending = moved
        return moved

    def drain(self, dst: int) -> int:
        """One splice of what the pipe holds into socket `dst`: how many bytes it took (0 when none
        now; the rest stays for `take`). Raises `Unsupported` or the socket's OSError (the bytes
        stay in the pipe). One call, so its caller's gate check is before each splice."""
        try:
            moved = os.splice(self.read_fd, dst, self.pending, flags=FLAGS)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            raise _classified(exc) from None
        self.pending -= moved
        return moved

    def take(self) -> bytes:
        """Read out what the pipe holds (a destination that took less than all): empty again.
        Raises OSError if it cannot (never seen): the pipe is replaced, those bytes are lost."""
        parts = []
        while self.pending:
            try:
                part = os.read(self.read_fd, self.pending)
            except OSError:
                part = b""
            if not part:  # never leave bytes to the next pair's splice
                self._renew()
                raise OSError(errno.EIO, "bytes left in the splice pipe could not be read")
            parts.append(part)
            self.pending -= len(part)
        return b"".join(parts)

    def clear(self) -> None:
        """Drop what the pipe holds (its pair is closing)."""
        try:
            self.take()
        except OSError:  # renewed: empty all the same
            pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.read_fd)
            os.close(self.write_fd)

    def _renew(self) -> None:
        """A new pipe in place of one that is not empty: its bytes are nobody's now."""
        read_fd, write_fd = nonblocking_pipe(PIPE_SIZE)
        os.close(self.read_fd)
        os.close(self.write_fd)
        self.read_fd, self.write_fd, self.pending = read_fd, write_fd, 0


def _classified(exc: OSError) -> OSError:
    if exc.errno in UNSUPPORTED:
        return Unsupported(exc.errno, exc.strerror)
    return exc
