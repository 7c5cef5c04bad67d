"""The relay's keys and proofs (docs/design.md §8, protocol 1.1): HMAC helpers, pure.

No sockets, asyncio, clock or Django; stdlib only. Every digest is hex HMAC-SHA256 over
UTF-8 text (`stkhost.pool_keys.hex_hmac`), and every comparison is constant-time and
case-insensitive on the hex.

- `auth_digest` / `verify_auth`: the client's ``auth`` in ``register``, keyed
  with the key it authenticates with, over ``nonce|role|kmsn|station``.
- the keys the pool key derives, a station's credential and the cloud's lease
  key, are `stkhost.pool_keys` (the configuration checks `CLOUD_TOKEN` against
  the second).
- `server_proof` / `verify_proof`: the server's ``sauth`` in ``registered``,
  answering a client's ``cnonce``: ``HMAC(key, cnonce|session|epoch)``, where
  ``key`` is the key the client authenticated with. Only a server that knows
  that key can make it, and it binds the session id and the epoch the server
  announced, so neither can be swapped by someone in the middle.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from typing import TypeGuard

from stkhost.pool_keys import hex_hmac

HEX = frozenset("0123456789abcdef")


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
    return hex_hmac(token, f"{nonce}|{role}|{kmsn}|{station}")


def verify_auth(token: str, nonce: str, role: str, kmsn: str, station: str, auth: str) -> bool:
    """Constant-time check of `auth` (hex, either case) against `auth_digest`."""
    return _same(auth_digest(token, nonce, role, kmsn, station), auth)


def server_proof(key: str, cnonce: str, session: str, epoch: int) -> str:
    """The ``sauth`` of a ``registered`` frame: hex HMAC-SHA256(key, ``cnonce|session|epoch``)."""
    return hex_hmac(key, f"{cnonce}|{session}|{epoch}")


def verify_proof(key: str, cnonce: str, session: str, epoch: int, sauth: object) -> bool:
    """Constant-time check of the server's `sauth` (a hex string) against `server_proof`."""
    return isinstance(sauth, str) and _same(server_proof(key, cnonce, session, epoch), sauth)
