"""A FUSE passthrough with fault knobs driven at run time: the share as it misbehaves.

    python tests/faultyfs.py BACKING MOUNTPOINT CONTROL_DIR

mirrors BACKING at MOUNTPOINT. Faults are read from CONTROL_DIR on every
operation (a stat per operation; the rules file is parsed again only when it
changes), so a test turns them on and off while agents run:

- ``CONTROL_DIR/hang`` exists: every operation blocks until it is removed (an
  SMB server that stops answering, then answers again: the blocked operations
  then complete). A blocked operation whose caller has been sent SIGKILL fails
  at once with EINTR, as a wait of the kernel's SMB and NFS clients is
  killable (TASK_KILLABLE): FUSE itself waits uninterruptibly for an answer
  the daemon has taken, so without this a process that ever touched the hung
  view could not be killed at all.
- ``CONTROL_DIR/eio`` exists: every operation fails with EIO.
- ``CONTROL_DIR/rules.json``: a JSON list of rules, each applied to the
  operations it matches (all that match apply, in order)::

      {"ops": ["read", "rename"],   # operation names (see OPS); absent or "*": all
       "path": "/socket/relay_*",   # fnmatch on the path inside the share; absent: all
       "delay": 0.5, "jitter": 0.2, # seconds before the operation runs
       "errno": "EIO", "prob": 0.3, # fail with this errno (EIO, EACCES, ENOSPC, ...) with this probability
       "hang": true,                # block while this rule is in the file ("hang until released")
       "stale": 5,                  # reads and attributes served from a copy up to 5 s old
       "write_delay_per_kib": 0.01} # slow writes: seconds per KiB written

  A failed operation is never carried out. ``stale`` serves what an NFS client
  with attribute caching (``actimeo``) sees: the file's content and attributes
  as they were when last fetched, refreshed at most every ``stale`` seconds.
  As on NFS, this view's own changes are seen at once (a create, write,
  rename, truncate or unlink through it drops its copy of that path), and an
  absent file is never cached: only other writers' changes arrive late.

`FaultyMount` (below) mounts one, sets its rules, and unmounts it; the tests
import it (harness code runs on the test's side, the filesystem in its own
process).
"""

from __future__ import annotations

import atexit
import errno
import fnmatch
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPS = ("access", "getattr", "chmod", "chown", "readdir", "readlink", "mknod", "mkdir", "rmdir", "unlink",
       "symlink", "rename", "link", "utimens", "statfs", "open", "create", "read", "write", "truncate",
       "flush", "release", "fsync")  # fmt: skip
STAT_KEYS = (
    "st_atime_ns",
    "st_ctime_ns",
    "st_gid",
    "st_mode",
    "st_mtime_ns",
    "st_nlink",
    "st_size",
    "st_uid",
)
STALE_FH = 1 << 40  # file handles at or above this serve a stale copy from memory


@dataclass
class Snapshot:
    """A file as it was when fetched: its attributes and content (None: it did not exist)."""

    taken: float
    attrs: dict[str, int] | None
    data: bytes


class Rules:
    """The rules file, parsed again only when its mtime or size changes."""

    def __init__(self, control: str) -> None:
        self.path = os.path.join(control, "rules.json")
        self._key: tuple[int, int] | None = None
        self.rules: list[dict[str, Any]] = []

    def current(self) -> list[dict[str, Any]]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._key, self.rules = None, []
            return self.rules
        key = (st.st_mtime_ns, st.st_size)
        if key != self._key:
            try:
                rules = json.loads(Path(self.path).read_text())
                self.rules = [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []
            except (OSError, ValueError):
                self.rules = []  # half-written: keep none until it is whole
                return self.rules
            self._key = key
        return self.rules


def matches(rule: dict[str, Any], op: str, path: str) -> bool:
    ops = rule.get("ops", "*")
    if ops != "*" and op not in ops:
        return False
    pattern = rule.get("path")
    return pattern is None or fnmatch.fnmatchcase(path, pattern)


class Faulty:
    """The operations, each passed through `_gate` (flag files and rules) first."""

    use_ns = True

    def __init__(self, root: str, control: str) -> None:
        self.root = os.path.realpath(root)
        self.control = control
        self.rules = Rules(control)
        self.rng = random.Random()
        self.snapshots: dict[str, Snapshot] = {}
        self.stale_open: dict[int, bytes] = {}
        self._next_fh = STALE_FH
        self._lock = threading.Lock()

    # -- faults ---------------------------------------------------------------------
    def _gate(self, op: str, path: str, size: int = 0) -> float | None:
        """Apply the faults to one operation; the `stale` age that applies, if any."""
        caller = _caller()
        while os.path.exists(os.path.join(self.control, "hang")):
            _give_up_if_killed(caller)
            time.sleep(0.05)
        if os.path.exists(os.path.join(self.control, "eio")):
            raise OSError(errno.EIO, "faultyfs: eio flag")
        stale = None
        for rule in list(self.rules.current()):
            if not matches(rule, op, path):
                continue
            while rule.get("hang") and rule in self.rules.current():
                _give_up_if_killed(caller)
                time.sleep(0.05)
            delay = float(rule.get("delay", 0)) + self.rng.uniform(0, float(rule.get("jitter", 0)))
            delay += float(rule.get("write_delay_per_kib", 0)) * size / 1024 if op == "write" else 0
            if delay > 0:
                time.sleep(delay)
            code = rule.get("errno")
            if code and self.rng.random() < float(rule.get("prob", 1)):
                number = getattr(errno, str(code), errno.EIO)
                raise OSError(number, f"faultyfs: {code} on {op} {path}")
            if rule.get("stale") is not None:
                stale = float(rule["stale"])
        return stale

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _snapshot(self, path: str, max_age: float) -> Snapshot:
        """The copy of `path` served while stale reads are on (fetched again when older than `max_age`)."""
        now = time.monotonic()
        with self._lock:
            snap = self.snapshots.get(path)
            if snap is not None and now - snap.taken <= max_age:
                return snap
            full = self._full(path)
            try:
                st = os.lstat(full)
                attrs = _attrs(st)
                data = b""
                if os.path.isfile(full) and not os.path.islink(full):
                    with open(full, "rb") as fh:
                        data = fh.read(16 << 20)
                    attrs["st_size"] = len(data)
            except OSError:
                return Snapshot(now, None, b"")  # absence is not cached
            snap = self.snapshots[path] = Snapshot(now, attrs, data)
            return snap

    def _changed(self, *paths: str) -> None:
        """This view changed `paths`: it sees its own changes at once."""
        with self._lock:
            for path in paths:
                self.snapshots.pop(path, None)

    # -- the dispatch -----------------------------------------------------------------
    def __call__(self, op: str, path: str, *args):  # type: ignore[no-untyped-def]
        try:
            return getattr(self, "op_" + op)(path, *args)
        except OSError as exc:
            from mfusepy import FuseOSError

            raise FuseOSError(exc.errno or errno.EIO) from None

    def op_access(self, path, amode):  # type: ignore[no-untyped-def]
        self._gate("access", path)
        if not os.access(self._full(path), amode):
            raise OSError(errno.EACCES, "access")
        return 0

    def op_getattr(self, path, fh=None):  # type: ignore[no-untyped-def]
        stale = self._gate("getattr", path)
        if fh is not None and fh >= STALE_FH and fh in self.stale_open:
            return {**(self._snapshot(path, float("inf")).attrs or {}), "st_size": len(self.stale_open[fh])}
        if stale is not None:
            snap = self._snapshot(path, stale)
            if snap.attrs is None:
                raise OSError(errno.ENOENT, "stale: absent")
            return dict(snap.attrs)
        return _attrs(os.lstat(self._full(path)))

    def op_chmod(self, path, mode):  # type: ignore[no-untyped-def]
        self._gate("chmod", path)
        return os.chmod(self._full(path), mode)

    def op_chown(self, path, uid, gid):  # type: ignore[no-untyped-def]
        self._gate("chown", path)
        return os.chown(self._full(path), uid, gid)

    def op_readdir(self, path, fh):  # type: ignore[no-untyped-def]
        self._gate("readdir", path)
        return [".", "..", *os.listdir(self._full(path))]

    def op_readlink(self, path):  # type: ignore[no-untyped-def]
        self._gate("readlink", path)
        return os.readlink(self._full(path))

    def op_mknod(self, path, mode, dev):  # type: ignore[no-untyped-def]
        self._gate("mknod", path)
        return os.mknod(self._full(path), mode, dev)

    def op_mkdir(self, path, mode):  # type: ignore[no-untyped-def]
        self._gate("mkdir", path)
        return os.mkdir(self._full(path), mode)

    def op_rmdir(self, path):  # type: ignore[no-untyped-def]
        self._gate("rmdir", path)
        return os.rmdir(self._full(path))

    def op_unlink(self, path):  # type: ignore[no-untyped-def]
        self._gate("unlink", path)
        self._changed(path)
        return os.unlink(self._full(path))

    def op_symlink(self, target, source):  # type: ignore[no-untyped-def]
        self._gate("symlink", target)
        return os.symlink(source, self._full(target))

    def op_rename(self, old, new):  # type: ignore[no-untyped-def]
        self._gate("rename", new)
        self._changed(old, new)
        return os.replace(self._full(old), self._full(new))

    def op_link(self, target, source):  # type: ignore[no-untyped-def]
        self._gate("link", target)
        return os.link(self._full(source), self._full(target))

    def op_utimens(self, path, times=None):  # type: ignore[no-untyped-def]
        self._gate("utimens", path)
        return os.utime(self._full(path), None)

    def op_statfs(self, path):  # type: ignore[no-untyped-def]
        self._gate("statfs", path)
        stv = os.statvfs(self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                "f_frsize", "f_namemax")  # fmt: skip
        return {k: getattr(stv, k) for k in keys}

    def op_open(self, path, flags):  # type: ignore[no-untyped-def]
        stale = self._gate("open", path)
        if stale is not None and flags & os.O_ACCMODE == os.O_RDONLY:
            snap = self._snapshot(path, stale)
            if snap.attrs is None:
                raise OSError(errno.ENOENT, "stale: absent")
            with self._lock:
                fh = self._next_fh
                self._next_fh += 1
                self.stale_open[fh] = snap.data
            return fh
        if flags & os.O_ACCMODE != os.O_RDONLY:
            self._changed(path)
        return os.open(self._full(path), flags)

    def op_create(self, path, mode, fi=None):  # type: ignore[no-untyped-def]
        self._gate("create", path)
        self._changed(path)
        return os.open(self._full(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)

    def op_read(self, path, length, offset, fh):  # type: ignore[no-untyped-def]
        self._gate("read", path)
        if fh >= STALE_FH:
            return self.stale_open.get(fh, b"")[offset : offset + length]
        return os.pread(fh, length, offset)

    def op_write(self, path, data, offset, fh):  # type: ignore[no-untyped-def]
        self._gate("write", path, len(data))
        self._changed(path)
        return os.pwrite(fh, data, offset)

    def op_truncate(self, path, length, fh=None):  # type: ignore[no-untyped-def]
        self._gate("truncate", path)
        self._changed(path)
        return os.truncate(self._full(path), length)

    def op_flush(self, path, fh):  # type: ignore[no-untyped-def]
        self._gate("flush", path)
        return 0

    def op_release(self, path, fh):  # type: ignore[no-untyped-def]
        if fh >= STALE_FH:
            self.stale_open.pop(fh, None)
            return 0
        return os.close(fh)  # never refused: the descriptor must not leak

    def op_fsync(self, path, datasync, fh):  # type: ignore[no-untyped-def]
        self._gate("fsync", path)
        return 0 if fh >= STALE_FH else os.fsync(fh)


def _caller() -> int:
    """The thread (id) the current FUSE operation runs for; 0 outside a FUSE call."""
    try:
        from mfusepy import fuse_get_context

        return fuse_get_context()[2]
    except (ImportError, OSError, ValueError, AttributeError):
        return 0


SIGKILL_BIT = 1 << (9 - 1)  # SIGKILL in /proc/<tid>/status's pending masks


def _give_up_if_killed(tid: int) -> None:
    """EINTR when the caller is gone or has SIGKILL pending (killable, like cifs/NFS)."""
    if tid <= 0:
        return
    try:
        with open(f"/proc/{tid}/status") as fh:
            status = fh.read()
    except OSError:
        raise OSError(errno.EINTR, "faultyfs: the caller is gone") from None
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in ("SigPnd", "ShdPnd") and int(value.strip(), 16) & SIGKILL_BIT:
            raise OSError(errno.EINTR, "faultyfs: the caller was killed")


def _attrs(st: os.stat_result) -> dict[str, int]:
    out = {k: getattr(st, k) for k in STAT_KEYS}
    out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
    return out


def operations(root: str, control: str):  # type: ignore[no-untyped-def]
    """The mfusepy `Operations` of a faulty passthrough (mfusepy imported only here)."""
    from mfusepy import Operations

    faulty = Faulty(root, control)

    class FaultyOps(Operations):
        use_ns = True

    for op in OPS:
        setattr(FaultyOps, op, lambda self, path, *args, _op=op: faulty(_op, path, *args))
    return FaultyOps()


def mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as fh:
        return any(line.split()[1] == str(path) for line in fh)


_mounted_here: set[FaultyMount] = set()  # unmounted at exit if a test could not


@atexit.register
def _unmount_at_exit() -> None:
    for mount in list(_mounted_here):
        mount.stop()


class FaultyMount:
    """One faulty FUSE view of `backing` at `mountpoint`, driven through `control`."""

    def __init__(self, backing: Path, mountpoint: Path, control: Path, log: Path) -> None:
        self.backing, self.mountpoint, self.control, self.log_path = backing, mountpoint, control, log
        control.mkdir(parents=True, exist_ok=True)
        mountpoint.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, str(self.backing), str(self.mountpoint), str(self.control)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _mounted_here.add(self)
        deadline = time.monotonic() + timeout
        while not mounted(self.mountpoint):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"faultyfs did not mount {self.mountpoint}: see {self.log_path}")
            time.sleep(0.05)

    def set_rules(self, rules: list[dict[str, Any]]) -> None:
        """Replace the rules (atomically: the filesystem never reads half a file)."""
        tmp = self.control / ".rules.json.tmp"
        tmp.write_text(json.dumps(rules))
        os.replace(tmp, self.control / "rules.json")

    def clear(self) -> None:
        for name in ("hang", "eio", "rules.json"):
            (self.control / name).unlink(missing_ok=True)

    def flag(self, name: str, on: bool = True) -> None:
        """The `hang` or `eio` switch."""
        if on:
            (self.control / name).touch()
        else:
            (self.control / name).unlink(missing_ok=True)

    def stop(self) -> None:
        _mounted_here.discard(self)
        self.clear()
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True, timeout=10)
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def main() -> None:
    from mfusepy import FUSE

    backing, mountpoint, control = sys.argv[1:4]
    try:
        FUSE(operations(backing, control), mountpoint, foreground=True, nothreads=False, attr_timeout=0,
             entry_timeout=0, negative_timeout=0)  # fmt: skip
    except RuntimeError:
        if mounted(Path(mountpoint)):
            raise  # else: unmounted under us (fusermount3 -u -z), the normal end


if __name__ == "__main__":
    main()
