"""The SMB2 terms `SmbShare` speaks (docs/design.md §5.3): the create options and access
masks of its opens (the entry itself, never a link followed), the statuses it takes for gone,
busy or a lost session, and the errno each status becomes.
"""

from __future__ import annotations

import errno

from smbprotocol.exceptions import SMBResponseException
from smbprotocol.file_info import (
    FileAttributes,
)
from smbprotocol.header import NtStatus
from smbprotocol.open import (
    CreateOptions,
    DirectoryAccessMask,
    FilePipePrinterAccessMask,
    ShareAccess,
)

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

ERRNO = {
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
SESSION_LOST = (
    0xC000035C,  # STATUS_NETWORK_SESSION_EXPIRED (not in smbprotocol 1.17)
    NtStatus.STATUS_USER_SESSION_DELETED,
    NtStatus.STATUS_NETWORK_NAME_DELETED,
    NtStatus.STATUS_FILE_CLOSED,
)


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, SMBResponseException) else None
