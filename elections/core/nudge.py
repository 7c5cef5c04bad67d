"""The command nudge (issue 22): a signed datagram that makes an agent read the
pool's event files at once instead of at its next look. Pure.

An operator command (`elections.steering.submit`) is written to the share
first, as an event line of the writing agent's own `events/<node>.jsonl`; the
share record stays the authority and the audit. Then a nudge naming that line
goes to the leader's `BEACON_PORT` (and the pool's beacon targets), so the
leader folds the command within one network round trip instead of within a
`LEASE_WATCH`. One UTF-8 JSON object, at most `MAX_BYTES`, signed like a
beacon (HMAC-SHA256 with `POOL_KEY` over the canonical JSON without `sig`);
its wire form begins with `{"nudge":1,` (how a receiver tells it from a
beacon before parsing anything):

    {"nudge": 1, "kmsn": ..., "node": "S002", "seq": 88, "kind": "promote_requested", "sig": ...}

`node` and `seq` name the event line (its writer and its seq). A nudge is only
a hint: what it can cost is one read of the event files. `NudgeBoard.receive`
judges one datagram before any read is made:

1. **Admission** before parsing: `PER_SOURCE` a second from one address (a
   burst of as many), `TOTAL` from everyone (`too_many`). A flood costs a
   dictionary look-up per datagram, never a parse, an HMAC or a read.
2. **Verification**: size, nesting, fields, KMSN (`wrong_kmsn`), signature
   (`forged`, `unsigned`).
3. **Replay**: a nudge naming a line this agent already has (`seq` ≤ the
   highest it folded from that node) or one it already acted on is
   `replayed`. So a recorded nudge sent again costs nothing, and a forged
   one — only a holder of the pool key can sign — costs at most one read.
   Unless it comes from its writer's own address (this agent's, or the one
   the writer's beacons come from): then it is an **echo** of routine work,
   counted in `echoes` and never a refusal (issue 42: a command's audit row,
   read from the share before its nudge came, raised a security alarm on
   every drain). A copy sent from anywhere else is still `replayed`.

Whatever is refused is counted in `refusals` (shown with the beacons'
refusals on the panel and `/metrics`) and changes nothing.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elections.core.beacon_board import _Bucket, _take, flooded  # the beacons' token buckets
from elections.core.evidence import Refusals
from elections.core.lease import sign, signature_ok
from elections.core.untrusted import (
    FORGED,
    MAX_COUNTER,
    NOT_OBJECT,
    REPLAYED,
    UNSIGNED,
    WRONG_KMSN,
    Limits,
    Untrusted,
    load_object,
)

NUDGE_VERSION = 1
PREFIX = b'{"nudge":'  # the first bytes of every nudge on the wire (never of a beacon: `{"v":`)
MAX_BYTES = 600
NUDGE = Limits(MAX_BYTES, max_depth=2)
MAX_NAME = 64  # node ids and event kinds are short words
PER_SOURCE = 10.0  # nudges a second admitted from one address (an operator gives one per command)
TOTAL = 50.0  # nudges a second admitted from everyone together
KEEP_SOURCES = 256
KEEP_ACTED = 256  # (node, seq) pairs already acted on, for replays of a nudge not yet folded
_FIELDS: dict[str, type] = {"nudge": int, "kmsn": str, "node": str, "seq": int, "kind": str}


@dataclass(frozen=True)
class Nudge:
    kmsn: str
    node: str  # the event line's writer
    seq: int  # the event line's seq
    kind: str  # what it is, for the log (e.g. promote_requested)

    def encode(self, key: str) -> bytes:
        doc: dict[str, Any] = {"nudge": NUDGE_VERSION, "kmsn": self.kmsn, "node": self.node, "seq": self.seq,
                               "kind": self.kind}  # fmt: skip
        doc["sig"] = sign(doc, key)
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        if len(raw) > MAX_BYTES:
            raise ValueError(f"nudge of {len(raw)} bytes > {MAX_BYTES}")
        return raw

    def describe(self) -> str:
        return f"{self.kind} of {self.node} (event seq {self.seq})"


def is_nudge(raw: bytes) -> bool:
    """Whether a datagram is to be judged as a nudge (else as a beacon)."""
    return raw.startswith(PREFIX)


def parse_nudge(raw: bytes, key: str, kmsn: str) -> Nudge:
    """A verified nudge of pool `kmsn`, or `Untrusted` naming why not."""
    doc = load_object(raw, NUDGE, "nudge")
    for name, kind in _FIELDS.items():
        value = doc.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise Untrusted(NOT_OBJECT, f"nudge field '{name}' is missing or has a bad type")
    if doc["nudge"] != NUDGE_VERSION or not 0 < doc["seq"] <= MAX_COUNTER:
        raise Untrusted(NOT_OBJECT, "nudge has a bad version or seq")
    if not 0 < len(doc["node"]) <= MAX_NAME or not 0 < len(doc["kind"]) <= MAX_NAME:
        raise Untrusted(NOT_OBJECT, "nudge has a bad node or kind")
    what = f"nudge of {doc['node'][:64]!r} seq {doc['seq']}"
    if doc["kmsn"] != kmsn:
        raise Untrusted(WRONG_KMSN, f"{what} is for KMSN {doc['kmsn'][:64]!r}")
    if not signature_ok(doc, key):
        raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, f"bad signature on {what}")
    return Nudge(doc["kmsn"], doc["node"], doc["seq"], doc["kind"])


@dataclass
class NudgeBoard:
    kmsn: str
    key: str
    node: str = ""  # this member, and its address: a nudge of its own name from there is a command
    ip: str = ""  # given on this host (acted on), or once seen its echo (no refusal); elsewhere, a replay
    refusals: Refusals = field(default_factory=Refusals)
    accepted: int = 0
    dropped: int = 0
    echoes: int = 0
    _acted: OrderedDict[tuple[str, int], None] = field(default_factory=OrderedDict)
    _sources: OrderedDict[str, _Bucket] = field(default_factory=OrderedDict)
    _total: _Bucket | None = None
    _flooding: set[str] = field(default_factory=set)  # sources whose drops are noted (`flooded`)

    def receive(
        self, raw: bytes, source: str, now: float, folded: Callable[[str], int],
        address_of: Callable[[str], str | None] = lambda node: None,
    ) -> Nudge | None:  # fmt: skip
        """One datagram from `source`; the nudge to act on (one read of the event
        files), or None. `folded(node)`: the highest event seq of `node` this
        agent already has; `address_of(node)`: where `node`'s beacons come from."""
        if not self._admit(source, now):
            self.dropped += 1
            flooded(self.refusals, self._flooding, f"nudge from {source}", "nudges", PER_SOURCE, now)
            return None
        try:
            nudge = parse_nudge(raw, self.key, self.kmsn)
        except Untrusted as exc:
            self.refusals.note(f"nudge from {source}", exc.cause, exc.detail, now=now)
            return None
        pair = (nudge.node, nudge.seq)
        seen = nudge.seq <= folded(nudge.node) or pair in self._acted
        # Our own name from our own address: a command given on this very host (relayctl, the
        # panel), which the leader must fold at once like anyone's; seen already, it is its
        # echo back by broadcast, not a replay.
        if nudge.node == self.node and source == self.ip and seen:
            self.echoes += 1
            return None
        # Another member's nudge from that member's own address, seen already: routine (the line
        # was read from the share before its nudge came, or a copy came by broadcast and unicast).
        if seen and nudge.node != self.node and source == address_of(nudge.node):
            self.echoes += 1
            return None
        if seen:
            self.refusals.note(f"nudge from {source}", REPLAYED, f"{nudge.describe()}: already seen", now=now)
            return None
        self._acted[pair] = None
        while len(self._acted) > KEEP_ACTED:
            self._acted.popitem(last=False)
        self.accepted += 1
        return nudge

    def to_doc(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "dropped": self.dropped, "echoes": self.echoes}

    def _admit(self, source: str, now: float) -> bool:
        bucket = self._sources.pop(source, None) or _Bucket(PER_SOURCE, now)
        self._sources[source] = bucket
        while len(self._sources) > KEEP_SOURCES:
            self._sources.popitem(last=False)
        if not _take(bucket, now, PER_SOURCE):
            return False
        self._total = self._total or _Bucket(TOTAL, now)
        if not _take(self._total, now, TOTAL):
            return False
        self._flooding.discard(source)  # admitted: its next drop starts a new run, noted again
        return True
