"""Where the pool's share is and how it is logged into, and this agent's own folder: the `places`
section (`LEASE_DIR` E012, `SMB_PASSWORD`/`SMB_PASSWORD_FILE` E022, the libraries a store needs
E170/E171, `DATA_DIR` E013, and under systemd E241).

Nothing here touches the network: an smb:// share is checked by `relayctl doctor` and by the
agent itself. The folders are looked at on disk only when `raw.check_dirs`; DATA_DIR is then
made if missing (this user's only).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.libraries import check_libraries
from stkconfig.parsed import SmbLogin, WatchedPool
from stkconfig.raw import Raw
from stkconfig.smburl import SmbUrlError, is_smb, parse_smb_url, smb_password
from stkconfig.unit_state import NOT_THE_UNITS_ID, not_the_units


@dataclass(frozen=True)
class Places:
    lease_dir: str = ""
    smb: SmbLogin = field(default_factory=SmbLogin)  # an smb:// LEASE_DIR's SMB_PASSWORD(_FILE)
    data_dir: str = ""  # default: ~/.stkrelay/<node>


class PlacesNeed(Protocol):
    """What the places read of the sections before them."""

    node: str
    lease_store: str
    watched: list[WatchedPool]


def parse(raw: Raw, known: PlacesNeed, bad: Bad) -> Places:
    lease_dir = raw.text("LEASE_DIR")
    smb = SmbLogin(raw.text("SMB_PASSWORD"), raw.text("SMB_PASSWORD_FILE"))
    data_dir = raw.text("DATA_DIR") or str(Path.home() / ".stkrelay" / (known.node or "agent"))
    on_share = known.lease_store == "file"
    if is_smb(lease_dir):
        _check_smb(lease_dir, smb, bad)
    uses_smb = (on_share and is_smb(lease_dir)) or any(is_smb(w.lease_dir) for w in known.watched)
    check_libraries(uses_smb, known.lease_store == "etcd", bad)
    if raw.check_dirs and on_share and not is_smb(lease_dir):  # etcd: nothing on a share
        hint = "mount the site's share and point LEASE_DIR at its socket folder (W:\\socket)"
        _check_dir(lease_dir, "LEASE_DIR", "stkrelay.E012", bad, hint)
    if raw.check_dirs:
        try:
            Path(data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # this user's only
        except OSError:
            pass  # reported just below
        _check_dir(data_dir, "DATA_DIR", "stkrelay.E013", bad, "point DATA_DIR at a writable local folder")
    _unit_state(data_dir, raw.env.get("STATE_DIRECTORY"), bad)
    return Places(lease_dir, smb, data_dir)


def _unit_state(data_dir: str, state_directory: str | None, bad: Bad) -> None:
    """Under systemd, DATA_DIR is the unit's state directory (one data folder: stkrelay.agent_data)."""
    why = not_the_units(data_dir, state_directory)
    if why and state_directory:
        state = state_directory.split(":")[0]
        hint = f"set DATA_DIR = {state} in the ini (relayctl and stkuser read it there too)"
        bad(NOT_THE_UNITS_ID, "DATA_DIR", why, hint)


def _check_smb(lease_dir: str, login: SmbLogin, bad: Bad) -> None:
    """An smb:// LEASE_DIR (E012) and its password (E022), without touching the network."""
    try:
        url = parse_smb_url(lease_dir)
    except SmbUrlError as exc:
        bad("stkrelay.E012", "LEASE_DIR", str(exc), "use smb://[user@]host[:port]/share/folder")
        return
    try:
        password = smb_password(login)
    except SmbUrlError as exc:
        bad("stkrelay.E022", "SMB_PASSWORD_FILE", str(exc), "name a file this agent can read")
        return
    if url.user and not password:
        bad("stkrelay.E022", "SMB_PASSWORD", f"is not set for {url.user}@{url.host}",
            "set SMB_PASSWORD, or SMB_PASSWORD_FILE naming a file that holds it")  # fmt: skip


def _check_dir(path: str, key: str, pid: str, bad: Bad, hint: str) -> None:
    if not path:
        bad(pid, key, "is not set", hint)
        return
    if not os.path.isdir(path):
        bad(pid, key, f"{path} is not a directory", hint)
        return
    try:
        fd, probe = tempfile.mkstemp(prefix=".stk-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
        os.listdir(path)
    except OSError as exc:
        bad(pid, key, f"{path} is not readable and writable ({exc.strerror})", hint)
