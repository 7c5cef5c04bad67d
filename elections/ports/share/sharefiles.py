"""The share's files, read and written as files from someone else's disk
(docs/design.md §5.3–5.4).

- Only regular files are opened: no link is followed (`O_NOFOLLOW`), a FIFO or
  device never blocks the open (`O_NONBLOCK`) and is refused after `fstat`.
- Every read is bounded: at most `max_bytes + 1` bytes are read, whatever the
  file claims; directories are listed up to a cap.
- Appends go through the same checks (`append_line`), so a planted link in
  `events/` never makes an agent write elsewhere on its host.
- `ShareDeadline.run(fn)` runs one share operation on a thread of its own and
  gives up after `SHARE_TIMEOUT`: a share that hangs (an SMB server that stops
  answering, a FUSE mount that blocks) is "unreachable", never a thread that
  holds the renew deadline hostage. While an earlier operation is still hung,
  later ones fail at once instead of piling up threads.

- Whatever sits where a file or folder of the pool belongs and is not one (a
  directory named like the lock, a link in place of `members/`, a file the
  agent may not read) is moved aside (`quarantine`: renamed to
  `.<name>.quarantine-<random>`), so that one planted entry cannot stop the
  pool for good.

Refusals are `Untrusted` (`not_a_file`, `unreadable`, `too_large`,
`too_many`): the caller treats them as no evidence. `StoreUnavailable` means
the share cannot be reached.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar, cast

from elections.core.untrusted import NOT_A_FILE, TOO_LARGE, TOO_MANY, UNREADABLE, Untrusted
from elections.errors import StoreUnavailable

T = TypeVar("T")
E = TypeVar("E")
_NOFOLLOW = NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DEFAULT_TIMEOUT = 2.0
# The share's files and folders are made readable by every member whatever the agent's umask
# (077, for its own DATA_DIR): on a share of several machines, other members' agents may be
# other users (NFS, a volume); over SMB the server's own rights apply.
FILE_MODE, DIR_MODE = 0o644, 0o755
MAX_SCAN = 4096  # directory entries looked at per listing, of any kind: a flood cannot stall a cycle
MAX_REFUSED = 8  # refusals reported per listing
NODE_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a node id as a file name stem
_ASIDE = (errno.EACCES, errno.EPERM)


def _refuse_link(path: Path) -> None:
    """Where O_NOFOLLOW does not exist (Windows): refuse a link before opening."""
    if not _NOFOLLOW and path.is_symlink():
        raise Untrusted(NOT_A_FILE, f"{path.name} is a link")


def _open_regular(path: Path, flags: int) -> int:
    _refuse_link(path)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise Untrusted(NOT_A_FILE, f"{path.name} is a link") from None
        if exc.errno in (errno.EISDIR, errno.ENOTDIR):
            raise Untrusted(NOT_A_FILE, f"{path.name} is not a regular file") from None
        if exc.errno in _ASIDE and _listable(path.parent):  # one file we may not read in a share we can
            raise Untrusted(UNREADABLE, f"{path.name} cannot be read ({exc.strerror})") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Untrusted(NOT_A_FILE, f"{path.name} is not a regular file ({stat.filemode(mode)[0]})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _listable(folder: Path) -> bool:
    try:
        with os.scandir(folder):
            return True
    except OSError:
        return False


def read_regular(path: Path, max_bytes: int, offset: int = 0, chunk: bool = False) -> bytes | None:
    """The whole file (`TooLarge` past `max_bytes`), or with `chunk` at most
    `max_bytes` from `offset`; None when there is no file. Open, read, close at
    once (Windows: a held file blocks os.replace)."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        parts, left = [], max_bytes + 1
        while left > 0:
            part = os.read(fd, min(left, 1 << 16))
            if not part:
                break
            parts.append(part)
            left -= len(part)
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > max_bytes:
        if chunk:
            return data[:max_bytes]
        raise Untrusted(TOO_LARGE, f"{path.name} is larger than {max_bytes} bytes")
    return data


def append_line(path: Path, line: bytes) -> None:
    """Append one line to a regular file (created if missing), never through a link."""
    fd = _open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        st = os.fstat(fd)
        size = st.st_size
        if not size and stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)  # made just now under the agent's umask (077)
        if size:
            # A previous writer died mid-line: end that fragment so this line
            # stays a line of its own (readers skip the fragment).
            last = os.pread(fd, 1, size - 1)
            if last != b"\n":
                line = b"\n" + line
        os.write(fd, line)
    finally:
        os.close(fd)


def safe_name(name: str) -> str:
    """A file name as it may be shown (names on the share need not be UTF-8)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")[:120]


def pick_node_files(
    label: str, entries: Iterable[tuple[str, E]], is_regular: Callable[[E], bool], suffix: str, limit: int,
    names: re.Pattern[str] = NODE_FILE,
) -> tuple[dict[str, E], list[Untrusted]]:  # fmt: skip
    """Of a folder's listing (`label` names the folder), the regular files named
    `<node id><suffix>` (or whose stem matches `names`; at most `limit`, by
    name), and what was refused (links, FIFOs, odd names, too many entries). At
    most `MAX_SCAN` entries are looked at. The rule of every share's listing,
    local or remote."""
    refused: list[Untrusted] = []

    def refuse(exc: Untrusted) -> None:
        if len(refused) < MAX_REFUSED:
            refused.append(exc)

    regular: dict[str, E] = {}
    for n, (name, entry) in enumerate(entries):
        if n >= MAX_SCAN:
            refuse(Untrusted(TOO_MANY, f"{label}/ holds more than {MAX_SCAN} entries"))
            break
        if name.startswith(".") or not name.endswith(suffix):
            continue
        if not names.fullmatch(name[: -len(suffix)]):
            refuse(Untrusted(NOT_A_FILE, f"{label}/{safe_name(name)} is not named after a node"))
        elif not is_regular(entry):
            refuse(Untrusted(NOT_A_FILE, f"{label}/{name} is not a regular file"))
        else:
            regular[name] = entry
    if len(regular) > limit:
        refuse(Untrusted(TOO_MANY, f"{label}/ holds more than {limit} files"))
    return {name: regular[name] for name in sorted(regular)[:limit]}, refused


def list_regular(
    folder: Path, suffix: str, limit: int, names: re.Pattern[str] = NODE_FILE
) -> tuple[dict[str, int], list[Untrusted]]:
    """{name: size} of the regular files in `folder` named `<node id><suffix>`
    (`pick_node_files`), and what was refused."""
    if folder.is_symlink():
        return {}, [Untrusted(NOT_A_FILE, f"{folder.name}/ is a link")]
    with os.scandir(folder) as it:
        # d_type: no extra round trip to the server per entry
        picked, refused = pick_node_files(
            folder.name,
            ((e.name, e) for e in it),
            lambda e: e.is_file(follow_symlinks=False),
            suffix,
            limit,
            names,
        )
    found: dict[str, int] = {}
    for name, entry in picked.items():
        try:
            found[name] = entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return found, refused


def rename_file(path: Path, to: Path) -> None:
    """Give the regular file at `path` the name `to` in the same folder.
    Raises OSError (FileNotFoundError when there is no file), `Untrusted` for
    what is not a regular file."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Untrusted(NOT_A_FILE, f"{path.name} is not a regular file")
    os.replace(path, to)


def quarantine(path: Path) -> bool:
    """Move whatever is at `path` aside (renamed, never followed, never deleted
    recursively). True if something was moved."""
    aside = path.with_name(f".{path.name}.quarantine-{secrets.token_hex(4)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    return True


def ensure_dir(folder: Path) -> Untrusted | None:
    """Make `folder` a real directory of the share (never a link to one
    elsewhere): anything else in its place is moved aside first. Returns what
    was refused, if anything. Never creates parents (a vanished share stays
    vanished)."""
    refused = None
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode):
            refused = Untrusted(NOT_A_FILE, f"{folder.name}/ is not a directory (moved aside)")
            quarantine(folder)
    except FileNotFoundError:
        pass
    try:
        folder.mkdir()
    except FileExistsError:
        return refused
    try:  # whatever the agent's umask (077): other members list it; never through a link
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW)
        try:
            os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)
    except OSError:
        pass  # swapped for a link or gone since: the next look refuses or remakes it
    return refused


class ShareDeadline:
    """One share operation at a time on a thread of its own, each within `timeout`."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, name: str = "share") -> None:
        self.timeout = timeout
        self.name = name
        self._lock = threading.Lock()
        self._busy_since: float | None = None
        self._queue: list[tuple[Callable[[], object], Future[object]]] = []
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        # Called (from a caller's thread, with how long the operation has been
        # hung) whenever a caller gives up on a hung operation: a remote share
        # may drop its connection there, so that a call no answer will ever end
        # (a dead TCP peer) fails, and the next one connects again.
        self.on_hang: list[Callable[[float], None]] = []

    def _hung(self, since: float | None) -> None:
        hung_for = time.monotonic() - since if since is not None else self.timeout
        for hook in list(self.on_hang):
            try:
                hook(hung_for)
            except Exception:  # a hook must never turn a timeout into a crash
                pass

    def _refusal(self, since: float) -> StoreUnavailable:
        """A caller's answer while the operation running since `since` is hung (the hooks told)."""
        self._hung(since)
        hung_for = time.monotonic() - since
        return StoreUnavailable(f"share not answering: an operation has been hung for {hung_for:.1f} s")

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=f"{self.name}-io", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                fn, future = self._queue.pop(0)
                self._busy_since = time.monotonic()
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as exc:
                        future.set_exception(exc)
            finally:
                with self._lock:
                    self._busy_since = None

    def run(self, fn: Callable[[], T]) -> T:
        """`fn()` on the share thread; `StoreUnavailable` if it does not finish
        within the timeout, or at once while an earlier operation is hung."""
        if threading.current_thread() is self._thread:
            return fn()  # a share operation made of share operations: already on the thread
        future: Future[object] = Future()
        with self._wake:
            since = self._busy_since
            if since is not None and time.monotonic() - since > self.timeout:
                raise self._refusal(since)
            self._queue.append((fn, future))
            self._ensure_thread()
            self._wake.notify()
        end = time.monotonic() + self.timeout
        if since is not None:
            # Behind an operation that is running already: once that one counts as hung, this
            # call fails like any other caller then would, not after a whole timeout of its own.
            try:
                return cast(T, future.result(max(0.0, since + self.timeout - time.monotonic())))  # fn's own T
            except TimeoutError:
                with self._lock:
                    still = self._busy_since == since
                if still and future.cancel():
                    raise self._refusal(since) from None
        try:
            return cast(T, future.result(max(0.0, end - time.monotonic())))
        except TimeoutError:
            future.cancel()
            self._hung(self._busy_since)
            raise StoreUnavailable(f"share did not answer within {self.timeout:g} s") from None


_deadlines: dict[tuple[str, float], ShareDeadline] = {}
_deadlines_lock = threading.Lock()


def deadline_for(share: str | os.PathLike[str], timeout: float = DEFAULT_TIMEOUT) -> ShareDeadline:
    """The one `ShareDeadline` of this process for a share (all its users queue on it)."""
    where = os.fspath(share)
    remote = "://" in where  # smb://host/share/path: one gate per URL
    key = (where if remote else os.path.abspath(where), timeout)  # no I/O: the share may be hung
    with _deadlines_lock:
        gate = _deadlines.get(key)
        if gate is None:
            name = where.rstrip("/").rsplit("/", 1)[-1] if remote else Path(where).name
            gate = _deadlines[key] = ShareDeadline(timeout, name=name or "share")
        return gate
