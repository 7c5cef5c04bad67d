"""`pool.json` and `watched/<KMSN>.json`: an agent's view of a pool and its members.

`LocalState.pool()` and `LocalState.watched_pool()` read them; the fields of a
member's heartbeat that the view carries (`entry`, `entry_sessions`, `web_tls`)
are read here too, by the same guarded readers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from elections.core.skew import ClockReading, reading_of
from elections.core.untrusted import as_float, as_int, as_object, as_text
from elections.ports.local.shallow import shallow_doc
from stkhost.fingerprints import FINGERPRINT

RELEASED = "released"  # `PoolView.lease_state` of a valid lease its holder released
ENTRY_TEXT = re.compile(r"\[?[0-9A-Fa-f.:]+\]?:[0-9]{1,5}")  # an entry member's addr:port as shown


@dataclass(frozen=True)
class MemberView:
    """One member as this agent judged it (eligibility on its own clock)."""

    eligible: bool = False
    reasons: tuple[str, ...] = ()
    age: float | None = None
    priority: int = 50
    ip: str | None = None
    drain: bool = False
    health: Any = None
    version: Any = None
    epoch: int | None = None
    # The SHA-256 of the certificate its panel serves (64 hex), "" for plain HTTP, None if unsaid.
    web_tls: str | None = None
    clock: ClockReading | None = None  # its wall clock against the store's, as it measured it (core.skew)
    entry: str | None = None  # its ENTRY_LISTEN if it is an entry member (relay.server.entry), else None
    entry_sessions: int | None = None  # its remote clients at its last heartbeat, None if unsaid

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> MemberView:
        reasons = doc.get("reasons")
        priority = as_int(doc.get("priority"), None)
        return cls(
            eligible=doc.get("eligible") is True,
            reasons=tuple(str(r) for r in reasons) if isinstance(reasons, list) else (),
            age=as_float(doc.get("age")),
            priority=50 if priority is None else priority,
            ip=doc.get("ip") if isinstance(doc.get("ip"), str) else None,
            drain=bool(doc.get("drain")),
            health=doc.get("health"),
            version=doc.get("version"),
            epoch=as_int(doc.get("epoch"), None),
            web_tls=web_tls_of(doc),
            clock=reading_of(doc),
            entry=entry_of(doc),
            entry_sessions=entry_sessions_of(doc),
        )

    def to_doc(self) -> dict[str, Any]:
        doc = shallow_doc(self)
        doc["reasons"] = list(self.reasons)
        doc["clock"] = None if self.clock is None else asdict(self.clock)
        return doc


def entry_shown(listen: tuple[str, int]) -> str:
    """``addr:port`` (``[v6]:port``): how an entry member's `ENTRY_LISTEN` is written and shown."""
    host, port = listen
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def entry_of(doc: dict[str, Any]) -> str | None:
    """A heartbeat's (or a view's) `entry`: an ``addr:port`` of at most 64 characters, else None."""
    value = doc.get("entry")
    if isinstance(value, str) and 3 <= len(value) <= 64 and ENTRY_TEXT.fullmatch(value):
        return value
    return None


def entry_sessions_of(doc: dict[str, Any]) -> int | None:
    value = doc.get("entry_sessions")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31 else None


def web_tls_of(doc: dict[str, Any]) -> str | None:
    """A heartbeat's (or a view's) `web_tls`: 64 lowercase hex, "" (plain HTTP), else None."""
    value = doc.get("web_tls")
    if value == "" or (isinstance(value, str) and FINGERPRINT.fullmatch(value)):
        return value
    return None


@dataclass(frozen=True)
class PoolView:
    """`pool.json`: this agent's view of its pool, written by its worker."""

    kmsn: str = ""
    node: str = ""
    updated: float | None = None  # monotonic, when the worker wrote it
    lease: dict[str, Any] | None = None  # the valid lease's fields, None if none
    lease_status: str = "unknown"
    lease_detail: str = ""
    store_reachable: bool = False
    members: dict[str, MemberView] = field(default_factory=dict)
    decision: str = ""
    paused: bool | None = None
    lease_seen_at: float | None = None  # monotonic, when the lease's renew_seq last changed
    command_clock: int = 0  # the highest command clock folded (core.commands)
    refusals: dict[str, Any] = field(default_factory=dict)  # core.evidence.Refusals.to_doc()
    # ports.beacons.beacons.BeaconService.snapshot() ({} while beacons are off): per member
    # loss, jitter and last-seen age on this agent's clock, the liveness watch
    beacons: dict[str, Any] = field(default_factory=dict)
    share_ops: int = 0  # operations this agent's worker made on the share since it started (ShareOps)
    share_ops_by: dict[str, int] = field(default_factory=dict)  # the same by kind (ShareOps.by_kind)

    @property
    def detection(self) -> str:
        """How this agent detects a leader's death: `beacons` or `lease only`."""
        return "beacons" if self.beacons else "lease only"

    watched: bool = False  # a pool this agent only watches (docs/design.md §11), never contends in
    store: dict[str, Any] = field(default_factory=dict)  # ports.store.stores.store_details(): kind, where...
    # Members of this KMSN on another store (core.share_split.Split.to_doc()): an alarm, never an action.
    share_split: list[dict[str, Any]] = field(default_factory=list)
    ownership: dict[str, Any] = field(default_factory=dict)  # runtime.ownership: the address map, repairs

    @property
    def exists(self) -> bool:
        return self.updated is not None

    @property
    def epoch(self) -> int | None:
        return as_int((self.lease or {}).get("epoch"), None)

    @property
    def leader(self) -> str | None:
        """The lease's holder, unless released (liveness is the reader's to judge)."""
        lease = self.lease or {}
        node = lease.get("node")
        return node if isinstance(node, str) and not lease.get("released") else None

    @property
    def lease_state(self) -> str:
        """The lease as every view says it: `released` for a valid record its holder
        released (handed off or not: it is no leader's any more), else `lease_status`
        (issue 42: `relayctl list` said "lease valid" of a lease handed to a dead member)."""
        if self.lease_status == "valid" and (self.lease or {}).get("released"):
            return RELEASED
        return self.lease_status

    @property
    def handoff_to(self) -> str | None:
        """The member a released lease names to take it at once, if any."""
        to = (self.lease or {}).get("handoff_to")
        return to if isinstance(to, str) and self.lease_state == RELEASED else None

    def eligible(self) -> set[str]:
        return {n for n, m in self.members.items() if m.eligible}

    def to_doc(self) -> dict[str, Any]:
        doc = shallow_doc(self)
        doc["members"] = {n: m.to_doc() for n, m in self.members.items()}
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> PoolView:
        members = as_object(doc.get("members"))
        lease = doc.get("lease")
        return cls(
            kmsn=as_text(doc.get("kmsn")),
            node=as_text(doc.get("node")),
            updated=as_float(doc.get("updated")),
            lease=lease if isinstance(lease, dict) else None,
            lease_status=as_text(doc.get("lease_status"), "unknown" if doc else "missing"),
            lease_detail=as_text(doc.get("lease_detail")),
            store_reachable=doc.get("store_reachable") is True,
            members={str(n): MemberView.from_doc(m) for n, m in members.items() if isinstance(m, dict)},
            decision=as_text(doc.get("decision")),
            paused=doc.get("paused") if isinstance(doc.get("paused"), bool) else None,
            lease_seen_at=as_float(doc.get("lease_seen_at")),
            command_clock=as_int(doc.get("command_clock")),
            refusals=as_object(doc.get("refusals")),
            beacons=as_object(doc.get("beacons")),
            share_ops=as_int(doc.get("share_ops")),
            share_ops_by=ops_by_kind(doc.get("share_ops_by")),
            watched=doc.get("watched") is True,
            store=as_object(doc.get("store")),
            share_split=[d for d in doc.get("share_split") or [] if isinstance(d, dict)][:64]
            if isinstance(doc.get("share_split"), list)
            else [],
            ownership=as_object(doc.get("ownership")),
        )


def ops_by_kind(raw: Any) -> dict[str, int]:
    """`share_ops_by` as read back from pool.json: text keys, int counts, bounded."""
    if not isinstance(raw, dict):
        return {}
    return {as_text(k)[:80]: as_int(v) for k, v in list(raw.items())[:64]}
