"""The beacon datagram (docs/design.md §13): its codec and its checks. Pure.

A beacon is one UTF-8 JSON object of at most 1,200 bytes, signed like every
pool record (HMAC-SHA256 with `POOL_KEY` over the canonical JSON without
`sig`):

    {"v": 1, "kmsn": ..., "node": "S001", "ip": "192.168.1.10", "port": 9530,
     "role": "leader" | "follower" | "resign", "epoch": 7, "renew_seq": 4182,
     "boot": "<16 hex, new at every start of the sender>", "seq": 991, "sig": ...}

Optional (issue 19, compatible with every receiver: unknown fields are signed
with the rest and ignored): ``"store"``, the sender's lease store as it names
it (``file:/mnt/w/socket``, ``smb://host/share/socket``, ``etcd:...``; at most
`MAX_STORE` characters), so that two members of one KMSN on two different
stores can be named (`core.share_split`). A sender without one omits the
field, and its datagram is byte for byte what it was before.

Optional too (issue 22, a quiet pool; a receiver that predates them ignores
them, they are signed all the same): `mseq`, the seq of the sender's own
member record (`members/<node>.json`) as it last wrote it to the share, and
`mdig`, `member_digest()` of that record (16 hex, without `seq`, `sig`, `hears`). A receiver that holds a
record of the sender with that digest need not read the file again to know
it, and a new `mseq` tells it the sender's heartbeat was written: its
freshness, without a read. A beacon without them says nothing of the record.

For the serving right (docs/design.md §15, `core.serving`), optional fields a
receiver that predates them ignores (they are signed all the same):
`serve` ("lease" | "ack": what a leader serves by), and the leader the
sender adheres to: `ack_node`, `ack_epoch`, `ack_boot`, `ack_seq` (the newest
of its leader beacons heard) and `quiet_ms` (how long the sender has not heard
it). A beacon without them acknowledges no one. And in a `resign` beacon,
`fenced` (the epoch resigned): its relay stopped before the release was written,
(issue 38) `pair: 1` from a leader of two whose majority counts the share's witness: only a
follower that heard it say so may claim the witness (`core.witness.silent_pair`);
and every gate of an earlier epoch was shut for good by then (`ServingRight.clean`):
a taker of that released lease may serve by the lease at once (`starts_acked`).

`parse_beacon(raw, key, kmsn)` returns a `Beacon` or raises `Untrusted` with a
stable cause (the guarded reader's causes plus `wrong_kmsn`); it never raises
anything else. Replays are not judged here: a receiver keeps, per
`(node, boot)`, the last `seq` it accepted (`core.beacon_board`).

A beacon is a hint and never authority: a lease is only ever taken on the
store, and a beacon only ever makes its receiver look at the store sooner.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, fields
from typing import Any

from elections.core.lease import canonical_json, sign, signature_ok
from elections.core.untrusted import (
    FORGED,
    MAX_COUNTER,
    NOT_OBJECT,
    UNSIGNED,
    WRONG_KMSN,
    Limits,
    Untrusted,
    load_object,
)

BEACON_VERSION = 1
MAX_BYTES = 1200
BEACON = Limits(MAX_BYTES, max_depth=2)  # a flat object; anything nested is refused before parsing
LEADER, FOLLOWER, RESIGN = "leader", "follower", "resign"
ROLES = (LEADER, FOLLOWER, RESIGN)
RESIGN_COPIES = 3  # a leader that releases or hands off says so this many times
_BOOT = re.compile(r"[0-9a-f]{16}")
MAX_STORE = 256  # characters of the optional "store" a beacon names
_MAX_INT = MAX_COUNTER  # what a database column holds, with room for the next epoch
_FIELDS: dict[str, type] = {
    "v": int,
    "kmsn": str,
    "node": str,
    "ip": str,
    "port": int,
    "role": str,
    "epoch": int,
    "renew_seq": int,
    "boot": str,
    "seq": int,
}
# The serving right's fields (docs/design.md §15): optional, all checked when present.
_OPTIONAL: dict[str, tuple[type, object]] = {
    "store": (str, ""),  # issue 19: the sender's lease store (core.share_split)
    "mseq": (int, 0),  # issue 22: the sender's member record as last written
    "mdig": (str, ""),
    "serve": (str, ""),
    "ack_node": (str, ""),
    "ack_epoch": (int, 0),
    "ack_boot": (str, ""),
    "ack_seq": (int, 0),
    "quiet_ms": (int, 0),
    "fenced": (int, 0),
    "pair": (
        int,
        0,
    ),  # issue 38: 1 from a leader of two that counts the share's witness (`ServingBook.paired`)
}
_SERVE = ("", "lease", "ack")


@dataclass(frozen=True)
class Beacon:
    kmsn: str
    node: str
    ip: str
    port: int
    role: str
    epoch: int
    renew_seq: int
    boot: str
    seq: int
    v: int = BEACON_VERSION
    store: str = ""  # optional: the sender's lease store (module docstring); "" = not said
    mseq: int = 0  # the sender's member record as last written (0: not said)
    mdig: str = ""
    serve: str = ""
    ack_node: str = ""
    ack_epoch: int = 0
    ack_boot: str = ""
    ack_seq: int = 0
    quiet_ms: int = 0
    fenced: int = 0  # a resign's own epoch: fenced before its release, every earlier gate shut
    pair: int = 0  # 1: a leader of two whose majority of three counts the share's witness (issue 38)

    def to_doc(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies field by field, and this runs
        # five times a second on every member. All fields are scalars.
        doc = {name: getattr(self, name) for name in _ORDER[: len(_FIELDS)]}
        for name, (_, default) in _OPTIONAL.items():  # sent only when they say something
            value = getattr(self, name)
            if value != default:
                doc[name] = value
        return doc

    def encode(self, key: str) -> bytes:
        doc = self.to_doc()
        doc["sig"] = sign(doc, key)
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        if len(raw) > MAX_BYTES:  # only a node id or KMSN far beyond any real one gets here
            raise ValueError(f"beacon of {len(raw)} bytes > {MAX_BYTES}")
        return raw

    def describe(self) -> str:
        return f"{self.role} {self.node} epoch {self.epoch} seq {self.renew_seq} boot {self.boot}"


_ORDER = tuple(f.name for f in fields(Beacon))
assert set(_ORDER[: len(_FIELDS)]) == set(_FIELDS) and set(_ORDER[len(_FIELDS) :]) == set(_OPTIONAL)


def parse_beacon(raw: bytes, key: str, kmsn: str) -> Beacon:
    """A verified beacon of pool `kmsn`, or `Untrusted` naming why not."""
    doc = load_object(raw, BEACON, "beacon")
    for name, kind in _FIELDS.items():
        value = doc.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise Untrusted(NOT_OBJECT, f"beacon field '{name}' is missing or has a bad type")
    if any(not 0 <= doc[name] <= _MAX_INT for name in ("epoch", "renew_seq", "seq")):
        raise Untrusted(NOT_OBJECT, "beacon has a number out of range")
    if doc["role"] not in ROLES or not _BOOT.fullmatch(doc["boot"]) or not 0 < doc["port"] < 65536:
        raise Untrusted(NOT_OBJECT, "beacon has a bad role, boot or port")
    what = f"{doc['role']} beacon of {doc['node'][:64]!r} epoch {doc['epoch']}"
    if doc["kmsn"] != kmsn:  # another site on the same LAN (its own key): not ours to verify
        raise Untrusted(WRONG_KMSN, f"{what} is for KMSN {doc['kmsn'][:64]!r}")
    if not signature_ok(doc, key):
        if "sig" not in doc:
            raise Untrusted(UNSIGNED, f"unsigned {what}")
        raise Untrusted(FORGED, f"bad signature on {what}")
    store = doc.get("store")  # optional; of a sender that says something else, nothing is kept
    store = store if isinstance(store, str) and 0 < len(store) <= MAX_STORE and store.isprintable() else ""
    mseq, mdig = doc.get("mseq", 0), doc.get("mdig", "")
    if not isinstance(mseq, int) or isinstance(mseq, bool) or not 0 <= mseq <= _MAX_INT:
        raise Untrusted(NOT_OBJECT, "beacon has a bad mseq")
    if not isinstance(mdig, str) or (mseq and not _BOOT.fullmatch(mdig)):
        raise Untrusted(NOT_OBJECT, "beacon has a bad mdig")
    extra = {name: doc.get(name, default) for name, (_, default) in _OPTIONAL.items()}
    extra.update(store=store, mseq=mseq, mdig=mdig if mseq else "")
    for name, (kind, _) in _OPTIONAL.items():
        if not isinstance(extra[name], kind) or isinstance(extra[name], bool):
            raise Untrusted(NOT_OBJECT, f"beacon field '{name}' has a bad type")
    if any(not 0 <= extra[name] <= _MAX_INT for name in ("ack_epoch", "ack_seq", "quiet_ms", "fenced")):
        raise Untrusted(NOT_OBJECT, "beacon has a number out of range")
    if extra["serve"] not in _SERVE or (extra["ack_boot"] and not _BOOT.fullmatch(str(extra["ack_boot"]))):
        raise Untrusted(NOT_OBJECT, "beacon has a bad serve mode or ack boot")
    if extra["pair"] not in (0, 1) or (extra["pair"] and doc["role"] != "leader"):
        raise Untrusted(NOT_OBJECT, "beacon says pair other than 0 or 1, or not as a leader")
    if extra["fenced"] and (doc["role"] != RESIGN or extra["fenced"] != doc["epoch"]):
        raise Untrusted(NOT_OBJECT, "beacon says fenced of another epoch than a resign's own")
    return Beacon(**{name: doc[name] for name in _FIELDS}, **extra)


NOT_DIGESTED = ("seq", "sig", "hears")  # what changes at every heartbeat, or says nothing the pool decides by


def member_digest(doc: dict[str, Any]) -> str:
    """16 hex of the SHA-256 of a member record without its `seq`, `sig` and `hears`
    (canonical JSON): what changes when the record says something new. (`hears`, whom
    the member's beacons reach, moves with every late beacon on a loaded LAN; `relayctl
    doctor` reads it from the files themselves.)"""
    body = {k: v for k, v in doc.items() if k not in NOT_DIGESTED}
    return hashlib.sha256(canonical_json(body)).hexdigest()[:16]
