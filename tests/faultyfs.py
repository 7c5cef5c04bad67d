"""A FUSE passthrough with a fault switch: the share that hangs.

    python tests/faultyfs.py BACKING MOUNTPOINT CONTROL_DIR

mirrors BACKING at MOUNTPOINT. While the file CONTROL_DIR/hang exists, every
operation blocks (as an SMB server that stops answering does) until the file
is removed; CONTROL_DIR/eio makes every operation fail with EIO instead. The
test harness starts it as a subprocess, waits for the mount, and unmounts it
with `fusermount3 -u -z` when done.
"""

from __future__ import annotations

import errno
import os
import sys
import time

from mfusepy import FUSE, FuseOSError, Operations


class Faulty(Operations):
    use_ns = True

    def __init__(self, root: str, control: str) -> None:
        self.root = os.path.realpath(root)
        self.control = control

    def _gate(self) -> None:
        while os.path.exists(os.path.join(self.control, "hang")):
            time.sleep(0.05)
        if os.path.exists(os.path.join(self.control, "eio")):
            raise FuseOSError(errno.EIO)

    def _full(self, path: str) -> str:
        self._gate()
        return os.path.join(self.root, path.lstrip("/"))

    def _call(self, fn, *args):  # type: ignore[no-untyped-def]
        try:
            return fn(*args)
        except OSError as exc:
            raise FuseOSError(exc.errno or errno.EIO) from None

    # -- metadata -----------------------------------------------------------------
    def access(self, path, amode):  # type: ignore[no-untyped-def]
        if not os.access(self._full(path), amode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path, fh=None):  # type: ignore[no-untyped-def]
        st = self._call(os.lstat, self._full(path))
        keys = (
            "st_atime_ns",
            "st_ctime_ns",
            "st_gid",
            "st_mode",
            "st_mtime_ns",
            "st_nlink",
            "st_size",
            "st_uid",
        )
        out = {k: getattr(st, k) for k in keys}
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def chmod(self, path, mode):  # type: ignore[no-untyped-def]
        return self._call(os.chmod, self._full(path), mode)

    def chown(self, path, uid, gid):  # type: ignore[no-untyped-def]
        return self._call(os.chown, self._full(path), uid, gid)

    def readdir(self, path, fh):  # type: ignore[no-untyped-def]
        return [".", "..", *self._call(os.listdir, self._full(path))]

    def readlink(self, path):  # type: ignore[no-untyped-def]
        return self._call(os.readlink, self._full(path))

    def mknod(self, path, mode, dev):  # type: ignore[no-untyped-def]
        return self._call(os.mknod, self._full(path), mode, dev)

    def mkdir(self, path, mode):  # type: ignore[no-untyped-def]
        return self._call(os.mkdir, self._full(path), mode)

    def rmdir(self, path):  # type: ignore[no-untyped-def]
        return self._call(os.rmdir, self._full(path))

    def unlink(self, path):  # type: ignore[no-untyped-def]
        return self._call(os.unlink, self._full(path))

    def symlink(self, target, source):  # type: ignore[no-untyped-def]
        return self._call(os.symlink, source, self._full(target))

    def rename(self, old, new):  # type: ignore[no-untyped-def]
        return self._call(os.replace, self._full(old), self._full(new))

    def link(self, target, source):  # type: ignore[no-untyped-def]
        return self._call(os.link, self._full(source), self._full(target))

    def utimens(self, path, times=None):  # type: ignore[no-untyped-def]
        return self._call(os.utime, self._full(path), None)

    def statfs(self, path):  # type: ignore[no-untyped-def]
        stv = self._call(os.statvfs, self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                "f_frsize", "f_namemax")  # fmt: skip
        return {k: getattr(stv, k) for k in keys}

    # -- files ----------------------------------------------------------------------
    def open(self, path, flags):  # type: ignore[no-untyped-def]
        return self._call(os.open, self._full(path), flags)

    def create(self, path, mode, fi=None):  # type: ignore[no-untyped-def]
        return self._call(os.open, self._full(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)

    def read(self, path, length, offset, fh):  # type: ignore[no-untyped-def]
        self._gate()
        return self._call(os.pread, fh, length, offset)

    def write(self, path, data, offset, fh):  # type: ignore[no-untyped-def]
        self._gate()
        return self._call(os.pwrite, fh, data, offset)

    def truncate(self, path, length, fh=None):  # type: ignore[no-untyped-def]
        return self._call(os.truncate, self._full(path), length)

    def flush(self, path, fh):  # type: ignore[no-untyped-def]
        self._gate()
        return 0

    def release(self, path, fh):  # type: ignore[no-untyped-def]
        return self._call(os.close, fh)

    def fsync(self, path, datasync, fh):  # type: ignore[no-untyped-def]
        self._gate()
        return self._call(os.fsync, fh)


def main() -> None:
    backing, mountpoint, control = sys.argv[1:4]
    FUSE(Faulty(backing, control), mountpoint, foreground=True, nothreads=False, attr_timeout=0,
         entry_timeout=0, negative_timeout=0)  # fmt: skip


if __name__ == "__main__":
    main()
