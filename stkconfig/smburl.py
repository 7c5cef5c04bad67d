"""`smb://[user@]host[:port]/share/path` lease dirs (docs/design.md §5.3): the URL
and its password, read without touching the network (the config check and
the store factory both use it; `smbshare` does the talking).

The password is never part of the URL: it comes from `SMB_PASSWORD` or from
the file named by `SMB_PASSWORD_FILE` (first line), and it is never shown —
`SmbUrl.where` is what logs and messages print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stkconfig.parsed import SmbLogin

SCHEME = "smb://"
DEFAULT_PORT = 445
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\]")
_PART = re.compile(r"[^\x00-\x1f\\:*?\"<>|]{1,255}")  # what Windows allows in a name
_USER = re.compile(r"[^\x00-\x1f@/:\\]{1,104}")


class SmbUrlError(ValueError):
    """An `smb://` lease dir that cannot be used, said in one line."""


@dataclass(frozen=True)
class SmbUrl:
    host: str
    port: int
    share: str
    path: tuple[str, ...]  # the folders under the share, outermost first
    user: str = ""
    domain: str = ""

    @property
    def where(self) -> str:
        """The URL as given, without any secret (there is none in it)."""
        user = f"{self.domain + ';' if self.domain else ''}{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port != DEFAULT_PORT else ""
        return f"{SCHEME}{user}{self.host}{port}/{'/'.join((self.share, *self.path))}"

    @property
    def unc(self) -> str:
        """`\\\\host\\share`, the tree this lives in."""
        return f"\\\\{self.host.strip('[]')}\\{self.share}"


def is_smb(lease_dir: str) -> bool:
    return lease_dir[: len(SCHEME)].lower() == SCHEME


def parse_smb_url(text: str) -> SmbUrl:
    """Raises `SmbUrlError` with one line saying what is wrong."""
    if not is_smb(text):
        raise SmbUrlError(f"{text!r} does not start with smb://")
    rest = text[len(SCHEME) :]
    authority, _, tail = rest.partition("/")
    user = domain = ""
    if "@" in authority:
        user, _, authority = authority.rpartition("@")
        if ":" in user:
            raise SmbUrlError("put no password in the URL: use SMB_PASSWORD or SMB_PASSWORD_FILE")
        if ";" in user:
            domain, _, user = user.partition(";")
        if not _USER.fullmatch(user) or (domain and not _USER.fullmatch(domain)):
            raise SmbUrlError(f"{user!r} is not a user name")
    host, port = authority, DEFAULT_PORT
    if re.fullmatch(r".*:\d+", authority) and not authority.endswith("]"):
        host, _, digits = authority.rpartition(":")
        port = int(digits)
        if not 0 < port < 65536:
            raise SmbUrlError(f"port {port} is out of range")
    if not _HOST.fullmatch(host):
        raise SmbUrlError(f"{host!r} is not a host name or address")
    parts = [p for p in tail.split("/") if p]
    if not parts:
        raise SmbUrlError("no share named: use smb://host/share/folder")
    for part in parts:
        if part in (".", "..") or not _PART.fullmatch(part):
            raise SmbUrlError(f"{part!r} is not a folder name")
    return SmbUrl(host=host, port=port, share=parts[0], path=tuple(parts[1:]), user=user, domain=domain)


def smb_password(login: SmbLogin) -> str:
    """The password from `SMB_PASSWORD`, else the first line of `SMB_PASSWORD_FILE`
    (raises `SmbUrlError` if that file cannot be read). Empty: none given."""
    if login.password:
        return login.password
    name = login.password_file
    if not name:
        return ""
    try:
        with open(Path(name), encoding="utf-8") as fh:
            return fh.readline(4096).rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise SmbUrlError(f"cannot read {name} ({getattr(exc, 'strerror', None) or exc})") from None
