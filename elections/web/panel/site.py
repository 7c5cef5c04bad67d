"""A pool as the panel shows it: `SiteState`, its `MemberRow`s, and its alarms.

`panel.state` gathers them once per request; the API, /metrics, the fleet view
and the pages read them. Every age here was measured on this machine's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from elections.core.ownership import CONFLICT, DRIFT, MISSING, ORPHAN, UNKNOWN, Entry
from elections.core.skew import ClockReading
from elections.ports.local.relay_files import EntryStatus
from elections.web.panel.relay_state import RelayState
from stkhost.fingerprints import show

# Early takeovers (elections on liveness evidence) in 24 h from which the pool shows an alarm: one is a
# crash handled fast; several mean agents keep dying, or someone forges their deaths (docs/design.md §13).
EARLY_TAKEOVERS_ALARM = 3
# An address not where the lease says (ADR 0011 phase 4): one alarm per verdict, worst first.
ADDRESS_ALARMS = tuple(f"address_{v}" for v in (CONFLICT, DRIFT, ORPHAN, MISSING, UNKNOWN))


def stale_after() -> float:
    """A pool view older than this means this agent's worker is not looking."""
    stk = settings.STK
    return 3 * max(stk.lease_poll, stk.lease_renew) + 2


@dataclass
class MemberRow:
    node: str
    leader: bool
    eligible: bool
    reasons: list[str]
    age: float | None
    priority: Any
    ip: str | None
    drain: bool
    health: Any
    version: Any
    epoch: Any
    beacon_loss: float | None = None  # share of its beacons lost (0..1), as this agent counts them
    beacon_age: float | None = None  # seconds since this agent last heard one (its own clock)
    web_tls: str | None = None  # its panel's certificate SHA-256 (64 hex), "" plain HTTP, None unsaid
    gone: bool = False  # its heartbeat is older than HEARTBEAT_TTL (on this agent's clock): no agent there
    clock: ClockReading | None = None  # its wall clock against the store's (core.skew): shown only
    clock_vs_agent: tuple[float, float] | None = None  # its clock minus this agent's, and the error
    entry: str | None = None  # its ENTRY_LISTEN if it is an entry member (relay.server.entry)
    entry_sessions: int | None = None  # its remote clients at its last heartbeat

    @property
    def clock_shown(self) -> str:
        """e.g. "+0.12 s (±0.01) vs the file server; +0.10 s vs this agent"."""
        if self.clock is None:
            return ""
        c = self.clock
        against = _("the file server") if c.against == "file server" else _("etcd")
        text = _("%(offset)s s (±%(error)s) vs %(against)s") % {
            "offset": f"{c.offset_s:+.2f}", "error": f"{c.error_s:.2f}", "against": against}  # fmt: skip
        if self.clock_vs_agent is not None:
            diff, error = self.clock_vs_agent
            shown = {"diff": f"{diff:+.2f}", "error": f"{error:.2f}"}
            text += _("; %(diff)s s (±%(error)s) vs this agent") % shown
        return text

    @property
    def role(self) -> str:
        """leader, follower, or gone: a member whose heartbeat outlived HEARTBEAT_TTL is no
        follower (its agent was killed or cut off), unknown before any heartbeat was timed."""
        if self.leader:
            return "leader"
        if self.gone:
            return "gone"
        return "follower" if self.age is not None else "unknown"

    @property
    def role_text(self) -> str:
        words = {"leader": _("leader"), "follower": _("follower"), "gone": _("gone"), "unknown": _("unknown")}
        return words[self.role]

    @property
    def web_tls_shown(self) -> str:
        """The fingerprint as browsers show it (AB:CD:...), '' when there is none."""
        return show(self.web_tls) if self.web_tls else ""


@dataclass
class SiteState:
    kmsn: str
    agent: str  # the node whose view this is (this agent)
    view_age: float | None  # seconds since this agent's worker wrote the view
    lease: dict[str, Any] | None
    lease_status: str
    lease_detail: str
    store_reachable: bool
    members: list[MemberRow]
    decision: str
    renewed_ago: float | None = None
    expires_in: float | None = None
    since: datetime | None = None
    relay: RelayState | None = None
    changes_24h: int = 0
    # Elections taken before the TTL on liveness evidence or a majority's silence (causes `gone`,
    # docs/design.md §13, and `silent`, §15), ever and
    # in 24 h. An on-path attacker who drops beacons and resets TCP can force them (the store's
    # compare-and-set still arbitrates each): repeated ones are an alarm (`early_takeovers`).
    early_takeovers: int = 0
    early_takeovers_24h: int = 0
    beacon_echoes: int = 0  # our own beacons come back from our own address (broadcast), dropped
    paused: bool | None = None
    this_agent_leads: bool = False
    refusals: dict[str, Any] = field(default_factory=dict)  # what this agent refused as evidence
    detection: str = "lease only"  # or "beacons" (docs/design.md §13)
    serving: dict[str, Any] = field(default_factory=dict)  # the serving right (§15): members, W, S, fast
    watched: bool = False  # a [pool:<KMSN>] this agent only watches
    # Members of this KMSN on another store (core.share_split): the two stores are named.
    share_split: list[dict[str, Any]] = field(default_factory=list)
    addresses: list[Entry] = field(default_factory=list)  # the ownership map (runtime.ownership)
    addresses_age: float | None = None  # seconds since this agent looked (its own clock)
    repairs: list[dict[str, Any]] = field(default_factory=list)  # the latest repairs it made, newest first
    entry_here: EntryStatus | None = None  # this agent's own entry process (ENTRY = 1)
    entry_here_live: bool = False  # ...which wrote entry.json within 3 s and lives
    door_here: EntryStatus | None = None  # this agent's station door (`relay.server.station_door`)
    door_here_live: bool = False  # ...which wrote door.json within 3 s and lives

    @property
    def entries(self) -> list[MemberRow]:
        """The entry members (the router's port-forward reaches them), as their heartbeats say."""
        return [m for m in self.members if m.entry]

    @property
    def security_alarm(self) -> bool:
        """Records refused as evidence within the banner's window (forged, replayed,
        oversized, not a file...): what the site page's red banner shows."""
        recent = self.refusals.get("recent") if isinstance(self.refusals, dict) else None
        return bool(recent)

    @property
    def alarms(self) -> list[str]:
        """What is wrong with the pool, worst first (stable codes: the API's `alarms`)."""
        out = []
        if not self.has_leader:
            out.append("no_leader")
        if not self.store_reachable:
            out.append("unreachable")
        if self.security_alarm:
            out.append("security")
        if self.share_split:
            out.append("share_split")
        if self.view_stale:
            out.append("stale_view")
        if self.members and len(self.eligible) < len(self.members):
            out.append("ineligible_members")
        if self.early_takeovers_24h >= EARLY_TAKEOVERS_ALARM:
            out.append("early_takeovers")
        verdicts = {e.verdict for e in self.addresses}
        out += [code for code in ADDRESS_ALARMS if code.removeprefix("address_") in verdicts]
        if self.paused:
            out.append("paused")
        return out

    @property
    def severity(self) -> tuple[int, int, int, int]:
        """Sort key of the fleet view, larger is worse: no leader (or no share),
        then a security alarm, then members that cannot lead, then failovers."""
        down = 1 if (not self.has_leader or not self.store_reachable) else 0
        missing = len(self.members) - len(self.eligible)
        return (down, 1 if self.security_alarm else 0, missing, self.changes_24h)

    @property
    def alarm_text(self) -> str:
        """What the tab title says: NO LEADER before SECURITY ('' when neither)."""
        if not self.has_leader:
            return _("NO LEADER")
        return _("SECURITY") if self.security_alarm else ""

    @property
    def refused_total(self) -> int:
        counts = self.refusals.get("counts") if isinstance(self.refusals, dict) else None
        return sum(v for v in (counts or {}).values() if isinstance(v, int) and not isinstance(v, bool))

    store: dict[str, Any] = field(default_factory=dict)  # the pool's store: kind, where, etcd leader...

    @property
    def epoch(self) -> int | None:
        return (self.lease or {}).get("epoch")

    @property
    def view_stale(self) -> bool:
        return self.view_age is None or self.view_age > stale_after()

    @property
    def leader(self) -> str | None:
        """The node holding a live lease, as this agent sees it now (None: no leader)."""
        lease = self.lease
        if not lease or lease.get("released") or self.view_stale:
            return None
        if self.expires_in is not None and self.expires_in <= 0:
            return None
        return lease.get("node")

    @property
    def has_leader(self) -> bool:
        return self.leader is not None

    @property
    def why_no_leader(self) -> str:
        if self.view_age is None:
            return _("this agent has no view of the pool yet")
        if self.view_stale:
            return _("this agent's view of the pool is %(n).0f s old") % {"n": self.view_age}
        if not self.store_reachable:
            if self.watched and self.lease_detail:
                return _("the watched share is unreachable from this agent: %(detail)s") % {
                    "detail": self.lease_detail
                }
            return _("the lease store is unreachable from this agent")
        if self.lease is None:
            return _("no valid lease (status %(status)s)") % {"status": self.lease_status}
        node = self.lease.get("node")
        if self.lease.get("released"):
            if self.lease.get("handoff_to"):
                return _("lease released by %(node)s, handed to %(to)s") % {
                    "node": node,
                    "to": self.lease["handoff_to"],
                }
            return _("lease released by %(node)s") % {"node": node}
        return _("lease of %(node)s expired") % {"node": node}

    @property
    def eligible(self) -> list[MemberRow]:
        return [m for m in self.members if m.eligible]

    def member(self, node: str) -> MemberRow | None:
        return next((m for m in self.members if m.node == node), None)
