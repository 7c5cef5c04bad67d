"""The lease record and its codec: canonical JSON, HMAC signature, parsing.

Pure: no file access, no clock reads. `parse_lease(raw, token)` never raises; it
says what a reader may make of the bytes it found (docs/design.md §5.1):

- ``valid``   a well-formed record whose signature verifies: evidence.
- ``missing`` no file at all.
- ``corrupt`` empty, truncated, not JSON, or missing fields: no evidence.
- ``forged``  well-formed but unsigned or wrongly signed: no evidence, and a
  security event worth logging loudly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from elections.core.untrusted import (
    BAD_FIELD,
    FORGED,
    LEASE,
    MAX_COUNTER,
    NOT_JSON,
    NOT_OBJECT,
    UNSIGNED,
    Untrusted,
    is_counter,
    load_object,
)

LEASE_VERSION = 1

# The seed's fields first (old readers know only these), then our additions.
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "kmsn": str,
    "station": str,
    "ip": str,
    "port": int,
    "pid": int,
    "epoch": int,
    "lease_until": str,
    "v": int,
    "node": str,
    "renew_seq": int,
    "ttl_s": (int, float),
    "handoff_to": (str, type(None)),
}

Status = Literal["valid", "missing", "corrupt", "forged"]


def canonical_json(doc: dict[str, Any]) -> bytes:
    """Keys sorted, separators `,` and `:`, UTF-8, no extra whitespace."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(doc: dict[str, Any], token: str) -> str:
    """Hex HMAC-SHA256 keyed with `token` over `doc` without its `sig`."""
    body = {k: v for k, v in doc.items() if k != "sig"}
    return hmac.new(token.encode(), canonical_json(body), hashlib.sha256).hexdigest()


def signature_ok(doc: dict[str, Any], token: str) -> bool:
    """Whether `doc` carries a good `sig`. Never raises: a document whose text cannot be encoded
    (a lone surrogate past the reader, whatever let it through) is forged, not an exception."""
    sig = doc.get("sig")
    if not isinstance(sig, str) or not sig.isascii():
        return False
    try:
        return hmac.compare_digest(sig, sign(doc, token))
    except (UnicodeEncodeError, TypeError, ValueError):
        return False


def legacy_lease_until(wall: datetime, ttl_s: float) -> str:
    """`lease_until` for the seed's readers: local time, YYYYMMDDHHMMSS."""
    return (wall.astimezone() + timedelta(seconds=ttl_s)).strftime("%Y%m%d%H%M%S")


@dataclass(frozen=True)
class LeaseRecord:
    kmsn: str
    station: str
    ip: str
    port: int
    pid: int
    epoch: int
    lease_until: str
    node: str
    renew_seq: int
    ttl_s: float
    handoff_to: str | None = None
    v: int = LEASE_VERSION
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def released(self) -> bool:
        """A leader that stopped cleanly writes `ttl_s: 0`."""
        return self.ttl_s == 0

    @property
    def key(self) -> tuple[str, int, int]:
        """What a follower watches change: holder, epoch, renewal counter."""
        return (self.node, self.epoch, self.renew_seq)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        doc.update(self.extra)
        return doc

    def encode(self, token: str) -> bytes:
        doc = self.to_doc()
        doc["sig"] = sign(doc, token)
        return json.dumps(doc, separators=(", ", ": "), ensure_ascii=False).encode() + b"\n"

    def renewed(self, lease_until: str) -> LeaseRecord:
        return replace(self, renew_seq=self.renew_seq + 1, lease_until=lease_until)

    def describe(self) -> str:
        return f"{self.node} epoch {self.epoch} seq {self.renew_seq} at {self.ip}:{self.port}"


@dataclass(frozen=True)
class LeaseRead:
    """What one read of the lease found. `revision` is opaque: hand it back to
    `LeaseStore.write(..., expect=revision)` to write only if nothing changed."""

    status: Status
    record: LeaseRecord | None = None
    detail: str = ""
    revision: str = ""
    forged_doc: dict[str, Any] | None = None
    cause: str = ""  # why it is no evidence (core.untrusted.CAUSES), for corrupt and forged reads


def revision_of(raw: bytes | None) -> str:
    return "" if raw is None else hashlib.sha256(raw).hexdigest()


def parse_lease(raw: bytes | None, token: str) -> LeaseRead:
    rev = revision_of(raw)
    if raw is None:
        return LeaseRead("missing", detail="no lease file", revision=rev)
    if not raw.strip():
        return LeaseRead("corrupt", detail="lease file is empty", revision=rev, cause=NOT_JSON)
    try:
        doc = load_object(raw, LEASE, "lease file")
    except Untrusted as exc:
        return LeaseRead("corrupt", detail=exc.detail, revision=rev, cause=exc.cause)
    for name, kind in _FIELDS.items():
        if name not in doc:
            return LeaseRead("corrupt", detail=f"lease has no '{name}'", revision=rev, cause=NOT_OBJECT)
        value = doc[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            return LeaseRead(
                "corrupt", detail=f"lease field '{name}' has a bad type", revision=rev, cause=NOT_OBJECT
            )
    if doc["epoch"] < 0 or doc["renew_seq"] < 0 or doc["ttl_s"] < 0:
        return LeaseRead("corrupt", detail="lease has a negative number", revision=rev, cause=NOT_OBJECT)
    if not (is_counter(doc["epoch"]) and is_counter(doc["renew_seq"])):  # the next epoch must fit a database
        return LeaseRead(
            "corrupt", detail=f"lease has a number above {MAX_COUNTER}", revision=rev, cause=BAD_FIELD
        )
    if not signature_ok(doc, token):
        why, cause = ("no signature", UNSIGNED) if "sig" not in doc else ("bad signature", FORGED)
        return LeaseRead(
            "forged",
            detail=f"lease has {why} (claims {doc['node']} epoch {doc['epoch']})",
            revision=rev,
            forged_doc=doc,
            cause=cause,
        )
    known = {k: doc[k] for k in _FIELDS}
    extra = {k: v for k, v in doc.items() if k not in _FIELDS and k != "sig"}
    record = LeaseRecord(**known, extra=extra)
    return LeaseRead("valid", record=record, detail=record.describe(), revision=rev)
