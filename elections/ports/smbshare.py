"""The share over SMB2/3, without a mount (DESIGN.md §5.3): a `Share` on
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
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

from smbprotocol.exceptions import SMBResponseException
from smbprotocol.file_info import (
    FileAttributes,
    FileInformationClass,
    FileRenameInformation,
)
from smbprotocol.header import NtStatus
from smbprotocol.open import (
    CreateDisposition,
    CreateOptions,
    DirectoryAccessMask,
    FilePipePrinterAccessMask,
    Open,
    QueryDirectoryFlags,
    SMB2SetInfoRequest,
)
from smbprotocol.tree import TreeConnect

from elections.core.untrusted import NOT_A_FILE, TOO_LARGE, UNREADABLE, Untrusted
from elections.ports.share import SHARE_OPS, parent_of
from elections.ports.sharefiles import DEFAULT_TIMEOUT, NODE_FILE, pick_node_files
from elections.ports.smbnotify import FolderNotify
from elections.ports.smbsession import REPARSE, SmbSession, status_of
from elections.ports.smburl import SmbUrl

ENTRY = CreateOptions.FILE_OPEN_REPARSE_POINT  # the entry itself: a link is never followed
FILE = ENTRY | CreateOptions.FILE_NON_DIRECTORY_FILE
FOLDER = ENTRY | CreateOptions.FILE_DIRECTORY_FILE
READ = FilePipePrinterAccessMask.FILE_READ_DATA | FilePipePrinterAccessMask.FILE_READ_ATTRIBUTES
ATTRS = FilePipePrinterAccessMask.FILE_READ_ATTRIBUTES
WRITE = (
    FilePipePrinterAccessMask.FILE_WRITE_DATA
    | FilePipePrinterAccessMask.FILE_READ_ATTRIBUTES
    | FilePipePrinterAccessMask.DELETE
)
LIST = DirectoryAccessMask.FILE_LIST_DIRECTORY | DirectoryAccessMask.FILE_READ_ATTRIBUTES
DIRECTORY = FileAttributes.FILE_ATTRIBUTE_DIRECTORY
GONE = (NtStatus.STATUS_OBJECT_NAME_NOT_FOUND, NtStatus.STATUS_OBJECT_PATH_NOT_FOUND)
RENAME_BUSY = (NtStatus.STATUS_ACCESS_DENIED, NtStatus.STATUS_SHARING_VIOLATION)
RENAME_PAUSE = 0.02  # first pause between refused renames (doubles, up to 0.2 s)
MAX_LIST_BATCHES = 64  # QUERY_DIRECTORY round trips per listing (MAX_SCAN entries fit in far fewer)


class SmbShare(SmbSession):
    """The `Share` operations on one folder of one SMB share."""

    _notify: FolderNotify | None = None  # made at the first watch

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
        SHARE_OPS.count()

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
        SHARE_OPS.count()

        def run(tree: TreeConnect) -> int | None:
            fopen, (create, created) = self._open(tree, rel, ATTRS, CreateDisposition.FILE_OPEN, FILE)
            close, closed = fopen.close(send=False)
            answers = self._answers(self._send(tree, [create, close]), [created, closed])
            if status_of(answers[0]) in (
                NtStatus.STATUS_OBJECT_NAME_NOT_FOUND,
                NtStatus.STATUS_OBJECT_PATH_NOT_FOUND,
            ):
                return None
            self._raise_first(answers[:1])
            return int(fopen.end_of_file or 0)

        return self._op(run, rel, retry=True)

    def mtime(self, rel: str) -> float | None:
        SHARE_OPS.count()

        def run(tree: TreeConnect) -> float | None:
            fopen, (create, created) = self._open(tree, rel, ATTRS, CreateDisposition.FILE_OPEN, FILE)
            close, closed = fopen.close(send=False)
            answers = self._answers(self._send(tree, [create, close]), [created, closed])
            if status_of(answers[0]) in (
                NtStatus.STATUS_OBJECT_NAME_NOT_FOUND,
                NtStatus.STATUS_OBJECT_PATH_NOT_FOUND,
            ):
                return None
            self._raise_first(answers[:1])
            written = fopen.last_write_time  # the server's FILETIME, as an aware UTC datetime
            return written.timestamp() if written is not None else None

        return self._op(run, rel, retry=True)

    def append_line(self, rel: str, line: bytes) -> None:
        SHARE_OPS.count()

        def run(tree: TreeConnect) -> None:
            access = (
                READ | FilePipePrinterAccessMask.FILE_WRITE_DATA | FilePipePrinterAccessMask.FILE_APPEND_DATA
            )
            fopen, (create, created) = self._open(tree, rel, access, CreateDisposition.FILE_OPEN_IF, FILE)
            answer = self._answers(self._send(tree, [create]), [created])[0]
            if status_of(answer) == NtStatus.STATUS_OBJECT_NAME_NOT_FOUND:
                raise _hidden(rel)
            self._raise_first([answer])
            try:
                self._refuse_odd(fopen, rel)
                size = int(fopen.end_of_file or 0)
                data = line
                if size:
                    # A previous writer died mid-line: end that fragment (readers skip it).
                    read, got = fopen.read(size - 1, 1, send=False)
                    last = self._answers(self._send(tree, [read], related=False), [got])[0]
                    if isinstance(last, BaseException):
                        raise last
                    if last != b"\n":
                        data = b"\n" + line
                write, wrote = fopen.write(data, size, send=False)
                self._raise_first(self._answers(self._send(tree, [write], related=False), [wrote]))
            finally:
                self._close_quietly(tree, fopen)

        self._op(run, rel)

    def listing(
        self, folder: str, suffix: str, limit: int, names: re.Pattern[str] = NODE_FILE
    ) -> tuple[dict[str, int], list[Untrusted]]:
        SHARE_OPS.count()
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

    def replace(self, rel: str, data: bytes, tag: str = "") -> None:
        SHARE_OPS.count(2)
        folder, name = parent_of(rel), rel.rsplit("/", 1)[-1]
        tmp = f"{folder + '/' if folder else ''}.{name}.{tag + '.' if tag else ''}{secrets.token_hex(6)}.tmp"
        # Retried renames must give up while the caller still waits for the answer
        # (the share's deadline would otherwise cut the connection mid-write).
        give_up = time.monotonic() + self.timeout / 2

        def run(tree: TreeConnect) -> None:
            options = FILE | CreateOptions.FILE_WRITE_THROUGH
            fopen, (create, created) = self._open(tree, tmp, WRITE, CreateDisposition.FILE_CREATE, options)
            write, wrote = fopen.write(data, 0, send=False)
            answers = self._answers(self._send(tree, [create, write]), [created, wrote])
            if isinstance(answers[0], BaseException):
                raise answers[0]
            done = False
            try:
                if isinstance(answers[1], BaseException):
                    raise answers[1]
                status = self._rename(tree, fopen, rel, replace=True, then_close=True)  # one round trip
                pause = RENAME_PAUSE
                while status is not None:
                    if status == NtStatus.STATUS_OBJECT_NAME_NOT_FOUND:
                        raise _hidden(rel)  # the temp file is there: the target's name is the odd one
                    if status not in RENAME_BUSY or time.monotonic() + pause > give_up:
                        raise self._os_error(status, rel)
                    time.sleep(pause)  # someone holds the target open: it is not replaced yet
                    pause = min(pause * 2, 0.2)
                    fopen, (create, created) = self._open(tree, tmp, WRITE, CreateDisposition.FILE_OPEN, FILE)
                    self._raise_first(self._answers(self._send(tree, [create]), [created]))
                    status = self._rename(tree, fopen, rel, replace=True, then_close=True)
                done = True
            finally:
                self._close_quietly(tree, fopen)
                if not done:  # the temp file never outlives a failure
                    self.unlink_quietly(tmp)

        self._op(run, rel)

    def _rename(
        self, tree: TreeConnect, fopen: Open, rel: str, replace: bool, then_close: bool = False
    ) -> int | None:
        """The NT status of renaming the open file to `rel` (None: renamed);
        with `then_close`, the handle is closed in the same round trip, renamed
        or not (an unrelated compound: the close does not depend on the rename)."""
        info = FileRenameInformation()
        info["replace_if_exists"] = replace
        info["file_name"] = self._name(rel)
        conn = tree.session.connection
        msgs, unpack = [self._set_info_request(fopen, info)], [conn.receive]
        if then_close:
            close, closed = fopen.close(send=False)
            msgs.append(close)
            unpack.append(closed)
        answer = self._answers(self._send(tree, msgs, related=False), unpack)[0]
        if isinstance(answer, SMBResponseException):
            return answer.status
        if isinstance(answer, BaseException):
            raise answer
        return None

    @staticmethod
    def _set_info_request(fopen: Open, info: Any) -> SMB2SetInfoRequest:
        req = SMB2SetInfoRequest()
        req["info_type"] = info.INFO_TYPE
        req["file_info_class"] = info.INFO_CLASS
        req["file_id"] = fopen.file_id
        req["buffer"] = info
        return req

    def create_exclusive(self, rel: str, data: bytes) -> None:
        SHARE_OPS.count(2)
        folder, name = parent_of(rel), rel.rsplit("/", 1)[-1]
        tmp = f"{folder + '/' if folder else ''}.{name}.new.{secrets.token_hex(6)}.tmp"

        def run(tree: TreeConnect) -> None:
            fopen, (create, created) = self._open(tree, tmp, WRITE, CreateDisposition.FILE_CREATE, FILE)
            msgs, unpack = [create], [created]
            if data:
                write, wrote = fopen.write(data, 0, send=False)
                msgs.append(write)
                unpack.append(wrote)
            answers = self._answers(self._send(tree, msgs), unpack)
            if isinstance(answers[0], BaseException):
                raise answers[0]
            published = False
            try:
                self._raise_first(answers[1:])
                # Whole before visible: a rename that never replaces (ReplaceIfExists = 0).
                status = self._rename(tree, fopen, rel, replace=False, then_close=True)
                if status == NtStatus.STATUS_OBJECT_NAME_NOT_FOUND:
                    raise _hidden(rel)  # the temp file is there: the target's name is the odd one
                if status is not None:
                    raise self._os_error(status, rel)  # OBJECT_NAME_COLLISION: FileExistsError
                published = True
            finally:
                self._close_quietly(tree, fopen)
                if not published:  # the temp file never outlives a failure
                    self.unlink_quietly(tmp)

        self._op(run, rel)

    def unlink_quietly(self, rel: str) -> None:
        try:
            self.unlink(rel)
        except OSError:
            pass

    def unlink(self, rel: str) -> None:
        SHARE_OPS.count()

        def run(tree: TreeConnect) -> None:
            access = FilePipePrinterAccessMask.DELETE | ATTRS
            options = FILE | CreateOptions.FILE_DELETE_ON_CLOSE
            fopen, (create, created) = self._open(tree, rel, access, CreateDisposition.FILE_OPEN, options)
            close, closed = fopen.close(send=False)
            self._raise_first(self._answers(self._send(tree, [create, close]), [created, closed])[:1])

        self._op(run, rel)

    def rename(self, rel: str, to: str) -> None:
        SHARE_OPS.count()
        self._rename_entry(rel, to, replace=False)

    def move(self, rel: str, new_rel: str) -> None:
        SHARE_OPS.count()
        self._rename_entry(rel, new_rel, replace=True)

    def _rename_entry(self, rel: str, to: str, replace: bool) -> None:
        """A server-side rename of one regular file (never a link or folder)."""

        def run(tree: TreeConnect) -> None:
            access = FilePipePrinterAccessMask.DELETE | ATTRS
            fopen, (create, created) = self._open(tree, rel, access, CreateDisposition.FILE_OPEN, FILE)
            self._raise_first(self._answers(self._send(tree, [create]), [created]))
            try:
                self._refuse_odd(fopen, rel)
                status = self._rename(tree, fopen, to, replace=replace)
                if status == NtStatus.STATUS_OBJECT_NAME_NOT_FOUND:
                    raise _hidden(to)  # the file is open: the name it goes to is the odd one
                if status is not None:
                    raise self._os_error(status, rel)
            finally:
                self._close_quietly(tree, fopen)

        self._op(run, rel)

    def quarantine(self, rel: str) -> bool:
        folder, name = parent_of(rel), rel.rsplit("/", 1)[-1]
        aside = f"{folder + '/' if folder else ''}.{name}.quarantine-{secrets.token_hex(4)}"

        def run(tree: TreeConnect) -> bool:
            access = FilePipePrinterAccessMask.DELETE | ATTRS
            fopen, (create, created) = self._open(tree, rel, access, CreateDisposition.FILE_OPEN, ENTRY)
            answer = self._answers(self._send(tree, [create]), [created])[0]
            if status_of(answer) in (
                NtStatus.STATUS_OBJECT_NAME_NOT_FOUND,
                NtStatus.STATUS_OBJECT_PATH_NOT_FOUND,
            ):
                return False
            if isinstance(answer, BaseException):
                raise answer
            try:
                status = self._rename(tree, fopen, aside, replace=False)
                if status is not None:
                    raise self._os_error(status, rel)
            finally:
                self._close_quietly(tree, fopen)
            return True

        return self._op(run, rel)

    def ensure_dir(self, rel: str) -> Untrusted | None:
        def make(tree: TreeConnect) -> Any:
            fopen, (create, created) = self._open(tree, rel, LIST, CreateDisposition.FILE_OPEN_IF, FOLDER)
            close, closed = fopen.close(send=False)
            answers = self._answers(self._send(tree, [create, close]), [created, closed])
            return fopen, answers[0]

        def run(tree: TreeConnect) -> Untrusted | None:
            fopen, answer = make(tree)
            odd = status_of(answer) == NtStatus.STATUS_NOT_A_DIRECTORY or (
                not isinstance(answer, BaseException) and (fopen.file_attributes or 0) & REPARSE
            )
            if not odd:
                self._raise_first([answer])
                return None
            label = rel.rsplit("/", 1)[-1] or self.where
            self.quarantine(rel)
            fopen, answer = make(tree)
            self._raise_first([answer])
            return Untrusted(NOT_A_FILE, f"{label}/ is not a directory (moved aside)")

        return self._op(run, rel)

    def planted(self, rel: str) -> bool:
        def run(tree: TreeConnect) -> bool:
            fopen, (create, created) = self._open(tree, rel, ATTRS, CreateDisposition.FILE_OPEN, ENTRY)
            close, closed = fopen.close(send=False)
            answer = self._answers(self._send(tree, [create, close]), [created, closed])[0]
            if isinstance(answer, BaseException):
                return False
            return bool((fopen.file_attributes or 0) & (REPARSE | DIRECTORY))

        return self._op(run, rel, retry=True)

    def watch_folder(
        self, rel: str, timeout: float, stop: threading.Event | None = None, names: set[str] | None = None
    ) -> bool:
        """SMB2 CHANGE_NOTIFY on the folder where the server offers it, else polling (`smbnotify`)."""
        with self._lock:
            if self._notify is None:
                self._notify = FolderNotify(self)
        return self._notify.wait(rel, names, timeout, stop)


def _hidden(rel: str) -> Untrusted:
    """What a server answers when asked to create, or rename onto, a name in a
    folder that exists, and says the name is not there: something is, that it
    will not show (Samba: a link planted on the server pointing out of the
    share, with `wide links = no`). Nothing is written through it; no client can
    move it aside."""
    return Untrusted(NOT_A_FILE, f"{rel} is taken by something the server hides (a link it will not follow?)")


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
