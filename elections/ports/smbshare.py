"""The share over SMB2/3, without a mount (docs/design.md §5.3): a `Share` on
`smb://[user@]host[:port]/share/path`, spoken with `smbprotocol`'s low-level
API so every request is one we chose.

What SMB servers really answer, and what is made of it:

- A reader opens with share access read+write+delete and closes in the same
  round trip (CREATE+READ+CLOSE, compounded): a rename over a file held open
  by someone else fails on Windows (Samba 4.17 refuses it with ACCESS_DENIED
  only for an open on the same client connection), so nobody holds the lease
  open longer than one request.
- `replace` writes a temp file created with FILE_CREATE (an unpredictable
  name, write-through), then renames it over the target. A rename refused
  with ACCESS_DENIED or SHARING_VIOLATION (someone has the target open) is
  retried until the deadline, never taken for done; the temp file is deleted
  on any failure.
- `create_exclusive` writes a temp file created with FILE_CREATE, then
  renames it to the target with `ReplaceIfExists = 0` (atomic between
  clients): the target is never seen empty or half written;
  STATUS_OBJECT_NAME_COLLISION is `FileExistsError`.
- Links are refused, not followed: every open asks for the entry itself
  (FILE_OPEN_REPARSE_POINT) and a reparse point is `Untrusted(NOT_A_FILE)`;
  FILE_NON_DIRECTORY_FILE turns a planted directory into `IsADirectoryError`.
  Samba 4.17 shows no link as a reparse point over SMB2: one planted on the
  server that points out of the share is hidden (a create or rename onto its
  name answers "not found": `Untrusted(NOT_A_FILE)`, never written through);
  one that stays inside the share is served as the file it points to.
- Every error is an `OSError`, a lost session is made again, and a hung
  server costs each caller at most `SHARE_TIMEOUT` (`smbsession.SmbSession`).

`requests` and `round_trips` count what was sent (the benchmark's SMB
operations per renewal).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

from smbprotocol.file_info import (
    FileInformationClass,
)
from smbprotocol.header import NtStatus
from smbprotocol.open import (
    CreateDisposition,
    Open,
    QueryDirectoryFlags,
)
from smbprotocol.tree import TreeConnect

from elections.core.untrusted import NOT_A_FILE, TOO_LARGE, UNREADABLE, Untrusted
from elections.ports.share import SHARE_OPS
from elections.ports.sharefiles import DEFAULT_TIMEOUT, NODE_FILE, pick_node_files
from elections.ports.smbnotify import FolderNotify
from elections.ports.smbsession import (
    ATTRS,
    DIRECTORY,
    ENTRY,
    FILE,
    FOLDER,
    GONE,
    LIST,
    READ,
    REPARSE,
    status_of,
)
from elections.ports.smburl import SmbUrl
from elections.ports.smbwrites import SmbWrites

MAX_LIST_BATCHES = 64  # QUERY_DIRECTORY round trips per listing (MAX_SCAN entries fit in far fewer)


class SmbShare(SmbWrites):
    """The `Share` operations on one folder of one SMB share: the reads here, the
    writes in `smbwrites.SmbWrites`."""

    _notify: FolderNotify | None = None  # made at the first wait for a change

    # -- the Share operations ------------------------------------------------
    def exists(self) -> bool:
        def run(tree: TreeConnect) -> bool:
            fopen, (create, created) = self._open(tree, "", LIST, CreateDisposition.FILE_OPEN, FOLDER)
            close, closed = fopen.close(send=False)
            answers = self._answers(self._send(tree, [create, close]), [created, closed])
            if status_of(answers[0]) in (*GONE, NtStatus.STATUS_NOT_A_DIRECTORY):
                return False
            self._raise_first(answers)
            return True

        return self._op(run, "", retry=True)

    def read(self, rel: str, max_bytes: int, offset: int = 0, chunk: bool = False) -> bytes | None:
        SHARE_OPS.count("read", rel)

        def run(tree: TreeConnect) -> bytes | None:
            conn = tree.session.connection
            want = max_bytes + 1
            first = min(want, conn.max_read_size)
            fopen, (create, created) = self._open(tree, rel, READ, CreateDisposition.FILE_OPEN, FILE)
            read, got = fopen.read(offset, first, send=False)
            msgs, unpack = [create, read], [created, got]
            whole = first >= want
            if whole:
                close, closed = fopen.close(send=False)
                msgs.append(close)
                unpack.append(closed)
            answers = self._answers(self._send(tree, msgs), unpack)
            status = status_of(answers[0])
            if status in (*GONE, NtStatus.STATUS_DELETE_PENDING):
                return None
            if status in (NtStatus.STATUS_FILE_IS_A_DIRECTORY, NtStatus.STATUS_STOPPED_ON_SYMLINK):
                raise Untrusted(NOT_A_FILE, f"{rel} is not a regular file")
            if status == NtStatus.STATUS_ACCESS_DENIED:
                raise Untrusted(UNREADABLE, f"{rel} cannot be read (access denied)")
            try:
                if isinstance(answers[0], BaseException):
                    raise answers[0]
                self._refuse_odd(fopen, rel)
                parts = [b"" if status_of(answers[1]) == NtStatus.STATUS_END_OF_FILE else answers[1]]
                if isinstance(parts[0], BaseException):
                    raise parts[0]
                got_bytes = len(parts[0])
                while not whole and got_bytes < want and len(parts[-1]) == min(first, conn.max_read_size):
                    more = fopen.read(
                        offset + got_bytes, min(want - got_bytes, conn.max_read_size), send=False
                    )
                    self.requests += 1
                    self.round_trips += 1
                    part = self._answers([conn.send(more[0], tree.session.session_id, tree.tree_connect_id)],
                                         [more[1]])[0]  # fmt: skip
                    if status_of(part) == NtStatus.STATUS_END_OF_FILE:
                        break
                    if isinstance(part, BaseException):
                        raise part
                    parts.append(part)
                    got_bytes += len(part)
            finally:
                if not whole:
                    self._close_quietly(tree, fopen)
            data = b"".join(parts)
            if len(data) > max_bytes:
                if chunk:
                    return data[:max_bytes]
                raise Untrusted(TOO_LARGE, f"{rel} is larger than {max_bytes} bytes")
            return data

        return self._op(run, rel, retry=True)

    def size(self, rel: str) -> int | None:
        SHARE_OPS.count("size", rel)
        fopen = self._opened(rel)
        return None if fopen is None else int(fopen.end_of_file or 0)

    def mtime(self, rel: str) -> float | None:
        SHARE_OPS.count("mtime", rel)
        fopen = self._opened(rel)
        written = None if fopen is None else fopen.last_write_time  # the server's FILETIME, aware UTC
        return written.timestamp() if written is not None else None

    def _opened(self, rel: str) -> Open | None:
        """`rel` opened and closed in one round trip: its attributes as the server's CREATE
        answer gave them, None if there is no such file."""

        def run(tree: TreeConnect) -> Open | None:
            fopen, (create, created) = self._open(tree, rel, ATTRS, CreateDisposition.FILE_OPEN, FILE)
            close, closed = fopen.close(send=False)
            answers = self._answers(self._send(tree, [create, close]), [created, closed])
            if status_of(answers[0]) in (
                NtStatus.STATUS_OBJECT_NAME_NOT_FOUND,
                NtStatus.STATUS_OBJECT_PATH_NOT_FOUND,
            ):
                return None
            self._raise_first(answers[:1])
            return fopen

        return self._op(run, rel, retry=True)

    def listing(
        self, folder: str, suffix: str, limit: int, names: re.Pattern[str] = NODE_FILE
    ) -> tuple[dict[str, int], list[Untrusted]]:
        SHARE_OPS.count("listing", folder)
        label = folder.rsplit("/", 1)[-1] or (self._base[-1] if self._base else self.url.share)

        def run(tree: TreeConnect) -> tuple[dict[str, int], list[Untrusted]]:
            fopen, (create, created) = self._open(tree, folder, LIST, CreateDisposition.FILE_OPEN, FOLDER)
            self._raise_first(self._answers(self._send(tree, [create]), [created]))
            try:
                if (fopen.file_attributes or 0) & REPARSE:
                    return {}, [Untrusted(NOT_A_FILE, f"{label}/ is a link")]
                entries = self._entries(tree, fopen)
                picked, refused = pick_node_files(label, entries, _regular, suffix, limit, names)
            finally:
                self._close_quietly(tree, fopen)
            return {name: int(entry["end_of_file"].get_value()) for name, entry in picked.items()}, refused

        return self._op(run, folder, retry=True)

    def _entries(self, tree: TreeConnect, fopen: Open) -> Iterator[tuple[str, Any]]:
        flags = QueryDirectoryFlags.SMB2_RESTART_SCANS
        for _ in range(MAX_LIST_BATCHES):
            query, got = fopen.query_directory(
                "*", FileInformationClass.FILE_DIRECTORY_INFORMATION, flags=flags, send=False
            )
            answer = self._answers(self._send(tree, [query], related=False), [got])[0]
            if status_of(answer) in (NtStatus.STATUS_NO_MORE_FILES, NtStatus.STATUS_NO_SUCH_FILE):
                return
            if isinstance(answer, BaseException):
                raise answer
            flags = 0
            for entry in answer:
                name = entry["file_name"].get_value().decode("utf-16-le", "surrogatepass")
                if name not in (".", ".."):
                    yield name, entry

    def planted(self, rel: str) -> bool:
        def run(tree: TreeConnect) -> bool:
            fopen, (create, created) = self._open(tree, rel, ATTRS, CreateDisposition.FILE_OPEN, ENTRY)
            close, closed = fopen.close(send=False)
            answer = self._answers(self._send(tree, [create, close]), [created, closed])[0]
            if isinstance(answer, BaseException):
                return False
            return bool((fopen.file_attributes or 0) & (REPARSE | DIRECTORY))

        return self._op(run, rel, retry=True)

    def wait_folder_change(
        self, rel: str, timeout: float, stop: threading.Event | None = None, names: set[str] | None = None
    ) -> bool:
        """SMB2 CHANGE_NOTIFY on the folder where the server offers it, else polling (`smbnotify`)."""
        with self._lock:
            if self._notify is None:
                self._notify = FolderNotify(self)
        return self._notify.wait(rel, names, timeout, stop)


def _regular(entry: Any) -> bool:
    attrs = entry["file_attributes"].get_value()
    return not attrs & (REPARSE | DIRECTORY)


_shares: dict[tuple[str, str, float], SmbShare] = {}
_shares_lock = threading.Lock()


def smb_share(url: SmbUrl, password: str, timeout: float = DEFAULT_TIMEOUT) -> SmbShare:
    """The one `SmbShare` of this process for a folder (one connection, one deadline)."""
    key = (url.where, password, timeout)
    with _shares_lock:
        share = _shares.get(key)
        if share is None:
            share = _shares[key] = SmbShare(url, password, timeout)
        return share
