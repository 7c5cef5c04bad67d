"""Files on this host: replacing a file atomically, publishing one that must not exist yet.

`write_atomic` is the one way any file of the agent is written: the bytes go
to a temp file created exclusively (`O_EXCL|O_NOFOLLOW`, an unpredictable
name, so a planted link or file is never written through), then replace the
target with `os.replace`, which readers in other processes (and on the share,
other machines) see whole or not at all.

`publish_exclusive` is its twin for a file that must not exist yet (the
share's lock): the same whole temp file, then `link()` — or, where the file
system has no hard links, `renameat2(RENAME_NOREPLACE)` — to the target,
which fails if anything is there. The target never exists half written, so a
reader that finds a lock that is not whole knows it is junk (docs/design.md §5.1).
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path

from stkhost.retry import Backoff, retry

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# Windows: a reader that holds the target open makes os.replace fail for a moment.
REPLACE_BACKOFF = Backoff(tries=5, first=0.02)


TEMP_FOLDER = ".tmp"  # `write_atomic(..., aside=True)`: the temp files' folder, in the target's


def _is_folder(path: Path) -> bool:
    """A folder itself, not a link to one (a rename from it would leave the file system)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _temp_beside(
    path: Path, data: bytes, durable: bool, tag: str, mode: int | None = None, aside: bool = False
) -> Path:
    """A temp file beside `path` holding `data`, created exclusively under an
    unpredictable name (a planted link or file is never written through); `mode`, when
    given, is set whatever the umask (the share's files: other members must read them).
    `aside`: in the folder `TEMP_FOLDER` of `path`'s (made, 0700, if missing), or beside
    `path` where that is no folder of its own (something else by that name, a link)."""
    name = f".{path.name}.{tag + '.' if tag else ''}{secrets.token_hex(6)}.tmp"
    tmp = path.with_name(name)
    if aside:
        folder = path.parent / TEMP_FOLDER
        try:
            os.mkdir(folder, 0o700)
        except OSError:
            pass  # there already, or not to be made: looked at below
        if _is_folder(folder):
            tmp = folder / name
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, 0o644)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
    except BaseException:
        unlink_quietly(tmp)
        raise
    return tmp


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    durable: bool = False,
    tag: str = "",
    sleep: Callable[[float], None] = time.sleep,
    mode: int | None = None,
    aside: bool = False,
) -> None:
    """Replace `path` with `data`, all or nothing. `durable` fsyncs before the
    rename (the share's files); `tag` names the writer in the temp name; `mode` is
    set whatever the umask (else the umask's 0644). `aside` writes the temp file in
    `TEMP_FOLDER` of the target's folder (a local one: the rename must stay on one file
    system), so a watcher of that folder (`stkhost.dirwatch`) is woken once, by the
    rename, not three times (the temp file's creation, its close and the rename).
    Raises OSError; the temp file never outlives a failure."""
    path = Path(path)
    tmp = _temp_beside(path, data, durable, tag, mode, aside)
    try:
        retry(lambda: os.replace(tmp, path), on=PermissionError, backoff=REPLACE_BACKOFF, sleep=sleep)
    except BaseException:
        unlink_quietly(tmp)
        raise


def publish_exclusive(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Make `path` hold `data` only if nothing is at `path` (not even a link),
    and only ever whole: raises FileExistsError if something is there, OSError
    otherwise (a file system with neither hard links nor RENAME_NOREPLACE is
    refused rather than given a lock that is briefly empty)."""
    path = Path(path)
    tmp = _temp_beside(path, data, durable=False, tag="new", mode=mode)
    try:
        try:
            os.link(tmp, path, follow_symlinks=False)  # never follows a link at `path`: EEXIST
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            _rename_noreplace(tmp, path)
    finally:
        unlink_quietly(tmp)  # after link: the temp name; after a rename: already gone


_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}
_RENAME_NOREPLACE = 1


def _rename_noreplace(src: Path, dst: Path) -> None:
    """renameat2(src, dst, RENAME_NOREPLACE) through libc (Linux >= 3.15)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "neither link() nor renameat2() on this file system", str(dst))
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), _RENAME_NOREPLACE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(dst))


def unlink_quietly(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
