"""The lease MAC the cloud can check (docs/design.md §14). Pure.

The cloud holds no pool key, so it cannot check a lease's ``sig``. It is given,
per site, ``K_cloud`` = HMAC(``POOL_KEY``, "cloud|" + KMSN)
(`stkhost.pool_keys.cloud_key`, printed by ``relayctl cloud-key``), and the leader
adds to the lease it presents in the tunnel's ``register`` one more field:

    cloud_sig = hex HMAC-SHA256(K_cloud, "lease|" + nonce + "|" + canonical JSON
                                         of the presented lease without cloud_sig)

- It is made for one handshake: ``nonce`` is the cloud's fresh nonce of that
  connection, so a ``cloud_sig`` seen on the wire (the tunnel is plain TCP)
  backs no other connection.
- It covers the whole record the leader read from the store, ``sig`` included,
  so it binds the exact signed record.
- It is **outside** the ``sig`` coverage and never written to the share (nor to
  etcd): ``sig`` is over the stored record without ``sig`` (§5.1), made when
  the lease was written; ``cloud_sig`` is made later, at each handshake, over a
  nonce the store never saw. The presented lease minus ``cloud_sig``
  (`stored_record`) is byte for byte the stored record, so a pool-key holder
  verifies it with `elections.core.lease.parse_lease` as usual, and old
  readers of the share never meet the field.

A holder of ``K_cloud`` can make ``cloud_sig``s but no pool record (those are
signed with ``POOL_KEY``, which a one-way HMAC does not give away) and no
station credential (another prefix). A holder of ``CLOUD_TOKEN`` alone can make
neither: its forged lease is refused, and counted, at the cloud.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from elections.core.lease import canonical_json

CLOUD_SIG = "cloud_sig"


def lease_mac(key: str, nonce: str, lease: dict[str, Any]) -> str:
    """Hex HMAC-SHA256 keyed with `key` (K_cloud) over ``lease|nonce|`` and `lease` without ``cloud_sig``.

    Raises ValueError or TypeError for a lease that has no canonical JSON (a lone
    surrogate, a value JSON cannot hold); `mac_ok` turns that into False.
    """
    body = canonical_json(stored_record(lease))
    return hmac.new(key.encode(), b"lease|" + nonce.encode() + b"|" + body, hashlib.sha256).hexdigest()


def presented(lease: dict[str, Any], key: str, nonce: str) -> dict[str, Any]:
    """`lease` as a tunnel presents it to the cloud whose nonce is `nonce`: with its ``cloud_sig``."""
    doc = stored_record(lease)
    doc[CLOUD_SIG] = lease_mac(key, nonce, doc)
    return doc


def stored_record(lease: dict[str, Any]) -> dict[str, Any]:
    """The record as the store holds it (what ``sig`` covers, with ``sig``): without ``cloud_sig``."""
    return {k: v for k, v in lease.items() if k != CLOUD_SIG}


def mac_verdict(lease: dict[str, Any], key: str | None, nonce: str) -> str | None:
    """Why `lease`'s ``cloud_sig`` does not back it for this `nonce`, or None if it does.

    ``unverifiable`` (no key for the site), ``unsigned`` (no ``cloud_sig``) or
    ``forged`` (one that does not verify): each a refusal. Never raises.
    """
    if not key:
        return "unverifiable"
    given = lease.get(CLOUD_SIG)
    if not isinstance(given, str):
        return "unsigned"
    try:
        expected = lease_mac(key, nonce, lease)
    except (TypeError, ValueError, RecursionError):
        return "forged"
    return (
        None if hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace").lower()) else "forged"
    )
