"""The relay's keys and proofs (docs/design.md §8, protocol 1.1): HMAC helpers, pure.

No sockets, asyncio, clock or Django; stdlib only. Every digest is hex
HMAC-SHA256 over UTF-8 text, and every comparison is constant-time and
case-insensitive on the hex.

- `auth_digest` / `verify_auth`: the client's ``auth`` in ``register``, keyed
  with the key it authenticates with, over ``nonce|role|kmsn|station``.
- `station_credential`: the key of one station, derived from the pool key as
  ``HMAC(POOL_KEY, "station|" + kmsn + "|" + station)``. A client holding it
  may register as that station only (`relayctl credential STATION` prints it).
- `cloud_key`: the key the cloud relay checks a tunnel's lease with (docs/design.md
  §14), ``HMAC(POOL_KEY, "cloud|" + kmsn)`` (`relayctl cloud-key` prints it).
  Derived one way, with its own prefix: its holder can make no pool record and
  no station credential.
- `server_proof` / `verify_proof`: the server's ``sauth`` in ``registered``,
  answering a client's ``cnonce``: ``HMAC(key, cnonce|session|epoch)``, where
  ``key`` is the key the client authenticated with. Only a server that knows
  that key can make it, and it binds the session id and the epoch the server
  announced, so neither can be swapped by someone in the middle.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from typing import TypeGuard

HEX = frozenset("0123456789abcdef")


def _digest(key: str, message: str) -> str:
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def _same(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass").lower())


def new_nonce(randbytes: Callable[[int], bytes] = os.urandom) -> str:
    """32 lowercase hex characters from 16 bytes of `randbytes`."""
    return randbytes(16).hex()


def new_session_id(randbytes: Callable[[int], bytes] = os.urandom) -> str:
    return randbytes(8).hex()


def is_nonce(value: object) -> TypeGuard[str]:
    """32 hex characters (either case): the shape of ``nonce`` and ``cnonce``."""
    return isinstance(value, str) and len(value) == 32 and set(value.lower()) <= HEX


def auth_digest(token: str, nonce: str, role: str, kmsn: str, station: str) -> str:
    """Hex HMAC-SHA256 keyed with `token` over ``nonce|role|kmsn|station`` (UTF-8)."""
    return _digest(token, f"{nonce}|{role}|{kmsn}|{station}")


def verify_auth(token: str, nonce: str, role: str, kmsn: str, station: str, auth: str) -> bool:
    """Constant-time check of `auth` (hex, either case) against `auth_digest`."""
    return _same(auth_digest(token, nonce, role, kmsn, station), auth)


def station_credential(pool_key: str, kmsn: str, station: str) -> str:
    """The credential of `station` of `kmsn`: hex HMAC-SHA256(pool key, ``station|kmsn|station``)."""
    if not pool_key:
        raise ValueError("the pool key must not be empty")
    return _digest(pool_key, f"station|{kmsn}|{station}")


def cloud_key(pool_key: str, kmsn: str) -> str:
    """The cloud's lease key of `kmsn`: hex HMAC-SHA256(pool key, ``cloud|kmsn``)."""
    if not pool_key:
        raise ValueError("the pool key must not be empty")
    return _digest(pool_key, f"cloud|{kmsn}")


def server_proof(key: str, cnonce: str, session: str, epoch: int) -> str:
    """The ``sauth`` of a ``registered`` frame: hex HMAC-SHA256(key, ``cnonce|session|epoch``)."""
    return _digest(key, f"{cnonce}|{session}|{epoch}")


def verify_proof(key: str, cnonce: str, session: str, epoch: int, sauth: object) -> bool:
    """Constant-time check of the server's `sauth` (a hex string) against `server_proof`."""
    return isinstance(sauth, str) and _same(server_proof(key, cnonce, session, epoch), sauth)
