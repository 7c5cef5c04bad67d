"""The `Share` seam: the few file operations a pool's records need, on a
folder of someone else's file server (docs/design.md §5.1, §5.3, §5.4).

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
- `create_exclusive` is atomic between machines and publishes the file
  whole: the data goes to an exclusive temp file first, which is then linked
  (or renamed without replace: SMB `ReplaceIfExists = 0`) to `rel`; nobody
  ever sees `rel` empty or half written. A collision raises `FileExistsError`.
- `move` renames a file on the server (replacing `new_rel` if it exists):
  every client sees it at once, whatever it had cached; `FileNotFoundError`
  if there is no `rel`.
- `listing` is bounded (`MAX_SCAN` entries looked at, `limit` kept) and
  raises `FileNotFoundError` for a missing folder; it keeps names whose stem
  is a node id, or matches `names`.
- `rename` gives a regular file another name in its folder (the event log
  seals its active file so); a name already taken raises OSError on SMB.
- Errors are `OSError`s (`FileNotFoundError`, `FileExistsError`,
  `IsADirectoryError`, `PermissionError`, or a bare `OSError` for a failing
  or lost server), `Untrusted` for what is not a regular file.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
from pathlib import Path
from typing import Protocol

from elections.core.untrusted import Untrusted
from elections.ports.share import sharefiles
from elections.ports.share.sharefiles import DEFAULT_TIMEOUT, NODE_FILE, ShareDeadline, deadline_for
from elections.ports.store.backend import poll_wait
from stkhost.files import publish_exclusive, write_atomic


class ShareOps:
    """How many operations this process made on shares (every `Share`): each read
    or size of a file, listing of a folder, append, write (temp file + rename:
    two), exclusive create or removal counts one — roughly one SMB request and
    answer each. Reported as `share_ops` in `pool.json`, and by kind (`by_kind`:
    "<operation> <area>", the area being the path's first part: `members/`,
    `events/`, `relay_leader.json`...) as `share_ops_by`; read by
    `bench/share_load.py`. Kinds are named by this code, never by the share; at
    most `KINDS_KEPT` are told apart, the rest count as "other"."""

    KINDS_KEPT = 48

    def __init__(self) -> None:
        self.total = 0
        self.by_kind: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, op: str, rel: str = "", n: int = 1) -> None:
        kind = f"{op} {share_area(rel)}"
        with self._lock:
            self.total += n
            if kind not in self.by_kind and len(self.by_kind) >= self.KINDS_KEPT:
                kind = "other"
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n

    def kinds(self) -> dict[str, int]:
        with self._lock:
            return dict(self.by_kind)


def share_area(rel: str) -> str:
    """The part of the share a path is in: its folder (`members/`) or, at the top, its name."""
    top, sep, _ = rel.replace("\\", "/").partition("/")
    return top + "/" if sep else top or "/"


SHARE_OPS = ShareOps()


class Share(Protocol):
    where: str  # shown in logs and messages (never a password)

    @property
    def deadline(self) -> ShareDeadline: ...

    def exists(self) -> bool: ...

    def read(self, rel: str, max_bytes: int, offset: int = 0, chunk: bool = False) -> bytes | None: ...

    def size(self, rel: str) -> int | None: ...

    def mtime(self, rel: str) -> float | None:
        """The file's last write time on the server's clock (POSIX seconds), None if absent."""
        ...

    def append_line(self, rel: str, line: bytes) -> None: ...

    def listing(
        self, folder: str, suffix: str, limit: int, names: re.Pattern[str] = NODE_FILE
    ) -> tuple[dict[str, int], list[Untrusted]]: ...

    def rename(self, rel: str, to: str) -> None: ...

    def replace(self, rel: str, data: bytes, tag: str = "") -> None: ...

    def create_exclusive(self, rel: str, data: bytes) -> None: ...

    def unlink(self, rel: str) -> None: ...

    def move(self, rel: str, new_rel: str) -> None: ...

    def quarantine(self, rel: str) -> bool: ...

    def ensure_dir(self, rel: str) -> Untrusted | None: ...

    def planted(self, rel: str) -> bool: ...

    def wait_folder_change(
        self, rel: str, timeout: float, stop: threading.Event | None = None, names: set[str] | None = None
    ) -> bool:
        """Wait until a file of `names` in the folder (any, if None) may have changed (True)
        or `timeout` passes (False): polling, unless the server tells of changes (SMB2
        CHANGE_NOTIFY)."""
        ...


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
        SHARE_OPS.count("read", rel)
        return sharefiles.read_regular(self.path(rel), max_bytes, offset=offset, chunk=chunk)

    def size(self, rel: str) -> int | None:
        SHARE_OPS.count("size", rel)
        try:
            return self.path(rel).stat().st_size
        except FileNotFoundError:
            return None

    def mtime(self, rel: str) -> float | None:
        SHARE_OPS.count("mtime", rel)
        try:
            return os.lstat(self.path(rel)).st_mtime
        except FileNotFoundError:
            return None

    def append_line(self, rel: str, line: bytes) -> None:
        SHARE_OPS.count("append_line", rel)
        sharefiles.append_line(self.path(rel), line)

    def listing(
        self, folder: str, suffix: str, limit: int, names: re.Pattern[str] = NODE_FILE
    ) -> tuple[dict[str, int], list[Untrusted]]:
        SHARE_OPS.count("listing", folder)
        return sharefiles.list_regular(self.path(folder), suffix, limit, names)

    def rename(self, rel: str, to: str) -> None:
        SHARE_OPS.count("rename", rel)
        sharefiles.rename_file(self.path(rel), self.path(to))

    def replace(self, rel: str, data: bytes, tag: str = "") -> None:
        SHARE_OPS.count("replace", rel, 2)
        write_atomic(self.path(rel), data, durable=True, tag=tag, mode=sharefiles.FILE_MODE)

    def create_exclusive(self, rel: str, data: bytes) -> None:
        SHARE_OPS.count("create_exclusive", rel, 2)
        publish_exclusive(self.path(rel), data, mode=sharefiles.FILE_MODE)

    def unlink(self, rel: str) -> None:
        SHARE_OPS.count("unlink", rel)
        os.unlink(self.path(rel))

    def move(self, rel: str, new_rel: str) -> None:
        SHARE_OPS.count("move", rel)
        os.replace(self.path(rel), self.path(new_rel))

    def quarantine(self, rel: str) -> bool:
        return sharefiles.quarantine(self.path(rel))

    def ensure_dir(self, rel: str) -> Untrusted | None:
        return sharefiles.ensure_dir(self.path(rel))

    def planted(self, rel: str) -> bool:
        path = self.path(rel)
        return path.is_symlink() or (path.exists() and not path.is_file())

    def wait_folder_change(
        self, rel: str, timeout: float, stop: threading.Event | None = None, names: set[str] | None = None
    ) -> bool:
        return poll_wait(timeout, stop)  # a mounted share's changes are not told to this client


def share_of(where: str | os.PathLike[str] | Share, timeout: float = DEFAULT_TIMEOUT) -> Share:
    """A `Share` as given, or the local directory at a path."""
    if isinstance(where, (str, os.PathLike)):
        return LocalShare(where, timeout)
    return where
