"""A relay client's lease source on the pool's own store: `relay.client.discovery.LeaseFile`
wired to `elections.ports` (the client library opens no store itself, so that it imports no
port of the election: the entry points and the tests wire it here).
"""

from __future__ import annotations

from elections.ports.store.stores import PoolPlace, open_store
from relay.client.discovery import LEASE_READ_TIMEOUT, LeaseFile
from stkconfig.parsed import SmbLogin
from stkhost.clock import SystemClock


def lease_file(
    lease_dir: str, token: str, kmsn: str | None = None, smb: SmbLogin | None = None,
    timeout: float = LEASE_READ_TIMEOUT,
) -> LeaseFile:  # fmt: skip
    """The signed lease in `lease_dir`, read as the client `relay-client`. `smb`: an smb:// lease
    dir's login (SMB_PASSWORD(_FILE))."""
    place = PoolPlace(kmsn or "", lease_dir, token, smb=smb or SmbLogin())
    return LeaseFile(open_store(place, "relay-client", SystemClock()), lease_dir, kmsn, timeout)
