"""The writes of `SmbShare` (docs/design.md §5.3): replace (temp file, then rename
over), create_exclusive (temp file, then rename without replace), append,
unlink, rename and move, quarantine, ensure_dir. What each asks the server and
why is in `smbshare`'s docstring; every error is an `OSError`, what the share
holds that is not a regular file is `Untrusted`.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from smbprotocol.exceptions import SMBResponseException
from smbprotocol.file_info import FileRenameInformation
from smbprotocol.header import NtStatus
from smbprotocol.open import (
    CreateDisposition,
    CreateOptions,
    FilePipePrinterAccessMask,
    Open,
    SMB2SetInfoRequest,
)
from smbprotocol.tree import TreeConnect

from elections.core.untrusted import NOT_A_FILE, Untrusted
from elections.ports.share import SHARE_OPS, parent_of
from elections.ports.smbsession import (
    ATTRS,
    ENTRY,
    FILE,
    FOLDER,
    LIST,
    READ,
    RENAME_BUSY,
    RENAME_PAUSE,
    REPARSE,
    WRITE,
    SmbSession,
    status_of,
)


class SmbWrites(SmbSession):
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


def _hidden(rel: str) -> Untrusted:
    """What a server answers when asked to create, or rename onto, a name in a
    folder that exists, and says the name is not there: something is, that it
    will not show (Samba: a link planted on the server pointing out of the
    share, with `wide links = no`). Nothing is written through it; no client can
    move it aside."""
    return Untrusted(NOT_A_FILE, f"{rel} is taken by something the server hides (a link it will not follow?)")
