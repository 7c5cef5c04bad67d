"""The keys a site's pool key derives one way (docs/design.md §8, §14): hex HMAC-SHA256 over
UTF-8 text (`hex_hmac`, the relay's proofs' digest too: `relay.wire.auth`).

- `station_credential`: the key of one station, ``HMAC(POOL_KEY, "station|" + kmsn + "|" +
  station)``. A client holding it may register as that station only (`relayctl credential
  STATION` prints it).
- `cloud_key`: the key the cloud relay checks a tunnel's lease with, ``HMAC(POOL_KEY, "cloud|"
  + kmsn)`` (`relayctl cloud-key` prints it). Its own prefix: its holder can make no pool
  record and no station credential; `CLOUD_TOKEN` must not be it (`stkconfig.cloud`, E055).

Pure: no sockets, clock or Django; stdlib only.
"""

from __future__ import annotations

import hashlib
import hmac


def hex_hmac(key: str, message: str) -> str:
    """Hex HMAC-SHA256 keyed with `key` over `message` (both UTF-8)."""
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def station_credential(pool_key: str, kmsn: str, station: str) -> str:
    """The credential of `station` of `kmsn`: hex HMAC-SHA256(pool key, ``station|kmsn|station``)."""
    if not pool_key:
        raise ValueError("the pool key must not be empty")
    return hex_hmac(pool_key, f"station|{kmsn}|{station}")


def cloud_key(pool_key: str, kmsn: str) -> str:
    """The cloud's lease key of `kmsn`: hex HMAC-SHA256(pool key, ``cloud|kmsn``)."""
    if not pool_key:
        raise ValueError("the pool key must not be empty")
    return hex_hmac(pool_key, f"cloud|{kmsn}")
