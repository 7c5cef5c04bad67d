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
  server costs each caller at most `SHARE_TIMEOUT`.

The connection:

- Every error is an `OSError` (`FileNotFoundError`, `FileExistsError`,
  `PermissionError`...), whatever smbprotocol raised (`SMBResponseException`,
  which is not one, for EIO; `SMBOSError`, which is one but not the subclass).
- A lost connection or session (smbd restarted, a network cut) is dropped
  and made again at the next operation. smbprotocol has no request timeout:
  the share's `ShareDeadline` bounds every caller's wait. A request that
  hangs (a SIGSTOPped smbd) is left hung for a while, so that every other
  caller fails at once, as on a hung local mount; one hung for
  `ABORT_AFTER` x the timeout has its connection closed from outside
  (`ShareDeadline.on_hang`: a dead TCP peer never answers). A connection
  that could not be made is not tried again for a while: while the server
  does not answer, operations fail at once instead of each waiting out a
  connect (the pause doubles after each failure, up to 4 x the timeout, and
  is reset by a connection made).

`requests` and `round_trips` count what was sent (the benchmark's SMB
operations per renewal).
"""

from __future__ import annotations

import errno
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBAuthenticationError, SMBException, SMBResponseException
from smbprotocol.file_info import (
    FileAttributes,
    FileInformationClass,
    FileRenameInformation,
)
from smbprotocol.header import NtStatus
from smbprotocol.open import (
    CreateDisposition,
    CreateOptions,
    FilePipePrinterAccessMask,
    ImpersonationLevel,
    Open,
    QueryDirectoryFlags,
    SMB2SetInfoRequest,
)
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect

from elections.core.untrusted import NOT_A_FILE, TOO_LARGE, UNREADABLE, Untrusted
from elections.ports.share.share import SHARE_OPS, parent_of
from elections.ports.share.sharefiles import (
    DEFAULT_TIMEOUT,
    NODE_FILE,
    ShareDeadline,
    deadline_for,
    pick_node_files,
)
from elections.ports.share.smbnotify import FolderNotify
from elections.ports.share.smbterms import (
    ABORT_AFTER,
    ATTRS,
    DIRECTORY,
    ENTRY,
    ERRNO,
    FILE,
    FOLDER,
    GONE,
    LIST,
    READ,
    RENAME_BUSY,
    RENAME_PAUSE,
    REPARSE,
    RWD,
    SESSION_LOST,
    WRITE,
    status_of,
)
from stkconfig.smburl import SmbUrl

T = TypeVar("T")
MAX_LIST_BATCHES = 64  # QUERY_DIRECTORY round trips per listing (MAX_SCAN entries fit in far fewer)


class SmbShare:
    """The `Share` operations on one folder of one SMB share, over one connection (made again
    when lost): the connection, the writes, the reads."""

    _notify: FolderNotify | None = None  # made at the first wait for a change

    def __init__(self, url: SmbUrl, password: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url
        self.where = url.where
        self.timeout = timeout
        self._password = password  # never logged, never shown
        self._base = tuple(url.path)
        self._lock = threading.RLock()
        self._conn: Connection | None = None
        self._tree: TreeConnect | None = None
        self.requests = 0  # SMB requests sent
        self.round_trips = 0  # ...in this many exchanges (compounds count once)
        self.reconnects = 0  # operations tried again on a new connection
        self.connects = 0  # connections made
        self._retry_at = 0.0  # no new connection before this (monotonic): the server did not answer
        self._backoff = timeout  # ...for this long after the next failure (doubles, up to 4 x timeout)
        self._aborted: Connection | None = None
        gate = deadline_for(self.where, timeout)
        if self._on_hang not in gate.on_hang:
            gate.on_hang.append(self._on_hang)
        self._gate = gate

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where!r})"  # no password

    @property
    def deadline(self) -> ShareDeadline:
        return self._gate

    # -- the connection ------------------------------------------------------
    def _connect(self) -> TreeConnect:
        with self._lock:
            if self._tree is not None:
                return self._tree
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise OSError(errno.EHOSTUNREACH, f"{self.where} did not answer; next try in {wait:.1f} s")
            conn = Connection(uuid.uuid4(), self.url.host.strip("[]"), self.url.port, require_signing=True)
            self._conn = conn
            try:
                conn.connect(timeout=max(1, int(self.timeout + 0.999)))
                user = f"{self.url.domain}\\{self.url.user}" if self.url.domain else self.url.user
                session = Session(conn, user or None, self._password or None, require_encryption=False)
                session.connect()
                tree = TreeConnect(session, self.url.unc)
                tree.connect()
            except SMBAuthenticationError as exc:
                self._drop()
                self._back_off()
                raise OSError(errno.EACCES, f"SMB login refused for {self.url.user or 'guest'}") from exc
            except BaseException as exc:
                self._drop()
                self._back_off()
                if isinstance(exc, SMBResponseException):
                    raise self._os_error(exc.status, self.url.unc) from exc
                if isinstance(exc, (SMBException, OSError, ValueError)):
                    raise OSError(errno.EHOSTUNREACH, f"cannot reach {self.where}: {exc}") from exc
                raise
            self._tree = tree
            self.connects += 1
            self._backoff = self.timeout
            return tree

    def _back_off(self) -> None:
        """No new connection for a while: callers fail at once meanwhile."""
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, 4 * self.timeout)

    def _on_hang(self, hung_for: float) -> None:
        conn = self._conn
        if hung_for >= ABORT_AFTER * self.timeout and conn is not None and conn is not self._aborted:
            self._aborted = conn  # once per connection: every caller that gives up calls this
            self._back_off()
            self.abort()

    def abort(self) -> None:
        """Close the connection from outside (a hung server): its waiting
        requests fail at once, and the next operation connects again."""
        conn = self._conn
        if conn is not None:
            try:
                conn.transport.close()
            except Exception:  # already closed, or closing
                pass

    def _drop(self) -> None:
        with self._lock:
            conn, self._conn, self._tree = self._conn, None, None
        if conn is not None:
            try:
                conn.disconnect(close=False)
            except Exception:  # it is gone either way
                pass

    def _os_error(self, status: int, rel: str) -> OSError:
        code = ERRNO.get(status, errno.EIO)
        name = next((k for k, v in vars(NtStatus).items() if v == status), f"0x{status:08x}")
        return OSError(code, f"{name} on {self.where}", rel)  # OSError picks the subclass by errno

    def _op(self, fn: Callable[[TreeConnect], T], rel: str, retry: bool = False) -> T:
        """One operation on the share: SMB answers become OSErrors; a lost
        connection or session is dropped (and, for a `retry`able operation,
        the operation is tried once more on a new one)."""
        for attempt in range(2 if retry else 1):
            tree = self._connect()
            try:
                return fn(tree)
            except Untrusted:
                raise  # what the share holds is no evidence: an answer, not a lost connection
            except SMBResponseException as exc:
                if exc.status in SESSION_LOST:
                    self._drop()
                    if attempt == 0 and retry:
                        self.reconnects += 1
                        continue
                raise self._os_error(exc.status, rel) from None
            except (SMBException, OSError, ValueError, KeyError) as exc:
                answered = isinstance(exc, OSError) and not isinstance(exc, (ConnectionError, TimeoutError))
                if answered and isinstance(exc, OSError) and exc.errno in ERRNO.values():
                    raise  # an answer about the file, already an OSError
                self._drop()
                if attempt == 0 and retry:
                    self.reconnects += 1
                    continue
                raise OSError(errno.ECONNRESET, f"SMB connection to {self.where} lost: {exc}") from None
        raise AssertionError("unreachable")

    def _name(self, rel: str) -> str:
        """The path inside the share, as SMB spells it."""
        parts = (*self._base, *(p for p in rel.split("/") if p))
        return "\\".join(parts)

    def _send(self, tree: TreeConnect, messages: list[Any], related: bool = True) -> list[Any]:
        self.requests += len(messages)
        self.round_trips += 1
        conn = tree.session.connection
        answers: list[Any] = conn.send_compound(messages, tree.session.session_id, tree.tree_connect_id,
                                                related=related)  # fmt: skip
        return answers

    def _answers(self, requests: list[Any], unpack: list[Any]) -> list[Any]:
        """Each answer, or the exception it raised (every one is received)."""
        out: list[Any] = []
        for request, fn in zip(requests, unpack, strict=True):
            try:
                out.append(fn(request))
            except (SMBResponseException, SMBException) as exc:
                out.append(exc)
        return out

    def _open(
        self, tree: TreeConnect, rel: str, access: int, disposition: int, options: int
    ) -> tuple[Open, Any]:
        fopen = Open(tree, self._name(rel))
        msg = fopen.create(
            ImpersonationLevel.Impersonation, access, FileAttributes.FILE_ATTRIBUTE_NORMAL, RWD, disposition,
            options, send=False,
        )  # fmt: skip
        return fopen, msg

    @staticmethod
    def _raise_first(answers: list[Any]) -> None:
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer

    def _refuse_odd(self, fopen: Open, rel: str) -> None:
        attrs = fopen.file_attributes or 0
        if attrs & REPARSE:
            raise Untrusted(NOT_A_FILE, f"{rel} is a link")

    def _close_quietly(self, tree: TreeConnect, fopen: Open) -> None:
        if fopen.connected:
            try:
                msg, unpack = fopen.close(send=False)
                self._answers(self._send(tree, [msg], related=False), [unpack])
            except (SMBException, OSError):
                pass

    # -- the writes ----------------------------------------------------------
    def append_line(self, rel: str, line: bytes) -> None:
        SHARE_OPS.count("append_line", rel)

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

    def replace(self, rel: str, data: bytes, tag: str = "") -> None:
        SHARE_OPS.count("replace", rel, 2)
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
            status: int = answer.status
            return status
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
        SHARE_OPS.count("create_exclusive", rel, 2)
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
        SHARE_OPS.count("unlink", rel)

        def run(tree: TreeConnect) -> None:
            access = FilePipePrinterAccessMask.DELETE | ATTRS
            options = FILE | CreateOptions.FILE_DELETE_ON_CLOSE
            fopen, (create, created) = self._open(tree, rel, access, CreateDisposition.FILE_OPEN, options)
            close, closed = fopen.close(send=False)
            self._raise_first(self._answers(self._send(tree, [create, close]), [created, closed])[:1])

        self._op(run, rel)

    def rename(self, rel: str, to: str) -> None:
        SHARE_OPS.count("rename", rel)
        self._rename_entry(rel, to, replace=False)

    def move(self, rel: str, new_rel: str) -> None:
        SHARE_OPS.count("move", rel)
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

    # -- the reads -------------------------------------------------------------
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


def _hidden(rel: str) -> Untrusted:
    """What a server answers when asked to create, or rename onto, a name in a
    folder that exists, and says the name is not there: something is, that it
    will not show (Samba: a link planted on the server pointing out of the
    share, with `wide links = no`). Nothing is written through it; no client can
    move it aside."""
    return Untrusted(NOT_A_FILE, f"{rel} is taken by something the server hides (a link it will not follow?)")
