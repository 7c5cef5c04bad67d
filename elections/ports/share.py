"""The `Share` seam: the few file operations a pool's records need, on a
folder of someone else's file server (DESIGN.md §5.1, §5.3, §5.4).

`FileLeaseStore`, `ShareLock` and the event log do all their I/O through a
`Share`, so every way of reaching the share — a local or mounted directory
(`LocalShare`), SMB2/3 without a mount (`smbshare.SmbShare`) — gets the same
files and the same rules (signed, bounded, quarantined, replays refused)
from one implementation of them.

Paths are relative to the share's folder, with `/` between parts
(`members/S001.json`); `""` is the folder itself. The contract of every
implementation:

- `read` opens regular files only (never a link, a FIFO, a directory; a
  reader leaves the file open for no longer than the read, with share access
  read+write+delete on SMB) and reads at most `max_bytes + 1` bytes: whole
  files raise `Untrusted(TOO_LARGE)` past `max_bytes`, `chunk` reads return
  at most `max_bytes` from `offset`; None when there is no file.
- `replace` writes a temp file created exclusively (an unpredictable name)
  and renames it over the target: readers see the old file or the new one,
  whole; a rename refused because someone holds the target open is retried
  for a moment, never reported as done. Raises OSError.
- `create_exclusive` is atomic between machines (O_EXCL, SMB FILE_CREATE);
  a collision raises `FileExistsError`.
- `listing` is bounded (`MAX_SCAN` entries looked at, `limit` kept) and
  raises `FileNotFoundError` for a missing folder.
- Errors are `OSError`s (`FileNotFoundError`, `FileExistsError`,
  `IsADirectoryError`, `PermissionError`, or a bare `OSError` for a failing
  or lost server), `Untrusted` for what is not a regular file.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Protocol

from elections.core.untrusted import Untrusted
from elections.ports import sharefiles
from elections.ports.host import unlink_quietly, write_atomic
from elections.ports.sharefiles import DEFAULT_TIMEOUT, ShareDeadline, deadline_for


class Share(Protocol):
    where: str  # shown in logs and messages (never a password)

    @property
    def deadline(self) -> ShareDeadline: ...

    def exists(self) -> bool: ...

    def read(self, rel: str, max_bytes: int, offset: int = 0, chunk: bool = False) -> bytes | None: ...

    def size(self, rel: str) -> int | None: ...

    def append_line(self, rel: str, line: bytes) -> None: ...

    def listing(self, folder: str, suffix: str, limit: int) -> tuple[dict[str, int], list[Untrusted]]: ...

    def replace(self, rel: str, data: bytes, tag: str = "") -> None: ...

    def create_exclusive(self, rel: str, data: bytes) -> None: ...

    def unlink(self, rel: str) -> None: ...

    def quarantine(self, rel: str) -> bool: ...

    def ensure_dir(self, rel: str) -> Untrusted | None: ...

    def planted(self, rel: str) -> bool: ...


def parent_of(rel: str) -> str:
    return posixpath.dirname(rel)


class LocalShare:
    """A directory of this machine (a mounted share, `W:\\socket`)."""

    def __init__(self, root: str | os.PathLike[str], timeout: float = DEFAULT_TIMEOUT) -> None:
        self.root = Path(root)
        self.where = str(self.root)
        self.timeout = timeout

    @property
    def deadline(self) -> ShareDeadline:
        return deadline_for(self.root, self.timeout)

    def path(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def exists(self) -> bool:
        return self.root.is_dir()

    def read(self, rel: str, max_bytes: int, offset: int = 0, chunk: bool = False) -> bytes | None:
        return sharefiles.read_regular(self.path(rel), max_bytes, offset=offset, chunk=chunk)

    def size(self, rel: str) -> int | None:
        try:
            return self.path(rel).stat().st_size
        except FileNotFoundError:
            return None

    def append_line(self, rel: str, line: bytes) -> None:
        sharefiles.append_line(self.path(rel), line)

    def listing(self, folder: str, suffix: str, limit: int) -> tuple[dict[str, int], list[Untrusted]]:
        return sharefiles.list_regular(self.path(folder), suffix, limit)

    def replace(self, rel: str, data: bytes, tag: str = "") -> None:
        write_atomic(self.path(rel), data, durable=True, tag=tag)

    def create_exclusive(self, rel: str, data: bytes) -> None:
        path = self.path(rel)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | sharefiles.NOFOLLOW, 0o644)
        try:
            if data:
                os.write(fd, data)
        except BaseException:  # the share is full, or failing: leave no empty file behind
            os.close(fd)
            unlink_quietly(path)
            raise
        os.close(fd)

    def unlink(self, rel: str) -> None:
        os.unlink(self.path(rel))

    def quarantine(self, rel: str) -> bool:
        return sharefiles.quarantine(self.path(rel))

    def ensure_dir(self, rel: str) -> Untrusted | None:
        return sharefiles.ensure_dir(self.path(rel))

    def planted(self, rel: str) -> bool:
        path = self.path(rel)
        return path.is_symlink() or (path.exists() and not path.is_file())


def share_of(where: str | os.PathLike[str] | Share, timeout: float = DEFAULT_TIMEOUT) -> Share:
    """A `Share` as given, or the local directory at a path."""
    if isinstance(where, (str, os.PathLike)):
        return LocalShare(where, timeout)
    return where
