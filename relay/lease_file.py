"""A relay client's lease source on the pool's own store: `relay.client.discovery.LeaseFile`
wired to `elections.ports` (the client library opens no store itself, so that it imports no
port of the election: the entry points and the tests wire it here).
"""

from __future__ import annotations

from collections.abc import Mapping

from elections.ports.store.stores import PoolPlace, open_store
from relay.client.discovery import LEASE_READ_TIMEOUT, LeaseFile
from stkhost.clock import SystemClock


def lease_file(
    lease_dir: str, token: str, kmsn: str | None = None, options: Mapping[str, str] | None = None,
    timeout: float = LEASE_READ_TIMEOUT,
) -> LeaseFile:  # fmt: skip
    """The signed lease in `lease_dir`, read as the client `relay-client`. `options`: the pool's
    settings beyond the path (an smb:// lease dir's SMB_PASSWORD(_FILE))."""
    place = PoolPlace(kmsn or "", lease_dir, token, options=dict(options or {}))
    return LeaseFile(open_store(place, "relay-client", SystemClock()), lease_dir, kmsn, timeout)
