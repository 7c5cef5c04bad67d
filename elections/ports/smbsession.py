"""One SMB2/3 connection to a share, made again when lost, for `SmbShare`
(docs/design.md §5.3, §12): what smbprotocol raises becomes an `OSError`, and a
server that stops answering costs each caller at most `SHARE_TIMEOUT`.

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
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBAuthenticationError, SMBException, SMBResponseException
from smbprotocol.file_info import (
    FileAttributes,
)
from smbprotocol.header import NtStatus
from smbprotocol.open import (
    CreateOptions,
    DirectoryAccessMask,
    FilePipePrinterAccessMask,
    ImpersonationLevel,
    Open,
    ShareAccess,
)
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect

from elections.core.untrusted import NOT_A_FILE, Untrusted
from elections.ports.sharefiles import DEFAULT_TIMEOUT, ShareDeadline, deadline_for
from elections.ports.smburl import SmbUrl

T = TypeVar("T")
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
RWD = ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE | ShareAccess.FILE_SHARE_DELETE
REPARSE = FileAttributes.FILE_ATTRIBUTE_REPARSE_POINT
ABORT_AFTER = 2.0  # a request hung for this many timeouts has its connection closed

_ERRNO = {
    NtStatus.STATUS_OBJECT_NAME_NOT_FOUND: errno.ENOENT,
    NtStatus.STATUS_OBJECT_PATH_NOT_FOUND: errno.ENOENT,
    NtStatus.STATUS_NO_SUCH_FILE: errno.ENOENT,
    NtStatus.STATUS_DELETE_PENDING: errno.ENOENT,  # being deleted: gone for every new open
    NtStatus.STATUS_OBJECT_NAME_COLLISION: errno.EEXIST,
    NtStatus.STATUS_FILE_IS_A_DIRECTORY: errno.EISDIR,
    NtStatus.STATUS_NOT_A_DIRECTORY: errno.ENOTDIR,
    NtStatus.STATUS_ACCESS_DENIED: errno.EACCES,
    NtStatus.STATUS_SHARING_VIOLATION: errno.EACCES,
    NtStatus.STATUS_DISK_FULL: errno.ENOSPC,
}
_SESSION_LOST = (
    0xC000035C,  # STATUS_NETWORK_SESSION_EXPIRED (not in smbprotocol 1.17)
    NtStatus.STATUS_USER_SESSION_DELETED,
    NtStatus.STATUS_NETWORK_NAME_DELETED,
    NtStatus.STATUS_FILE_CLOSED,
)


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, SMBResponseException) else None


class SmbSession:
    """One folder of one SMB share, over one connection (made again when lost)."""

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
        code = _ERRNO.get(status, errno.EIO)
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
                if exc.status in _SESSION_LOST:
                    self._drop()
                    if attempt == 0 and retry:
                        self.reconnects += 1
                        continue
                raise self._os_error(exc.status, rel) from None
            except (SMBException, OSError, ValueError, KeyError) as exc:
                answered = isinstance(exc, OSError) and not isinstance(exc, (ConnectionError, TimeoutError))
                if answered and isinstance(exc, OSError) and exc.errno in _ERRNO.values():
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
