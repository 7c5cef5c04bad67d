"""The panel's words for what the pure core and the worker write in plain English
(the core has no Django: docs/design.md §3). Each function takes the core's text and
gives the reader's language; a text it does not know (another version's agent wrote
it) is shown as written, never dropped."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from elections.web.panel.site import EARLY_TAKEOVERS_ALARM, SiteState

_HEARTBEAT_OLD = re.compile(r"^heartbeat ([\d.]+) s old > ([\d.]+) \+ ([\d.]+)$")
_UNHEARD = re.compile(r"^beacons not heard for ([\d.]+) s > ([\d.]+) s$")  # core.eligibility: liveness
_RELAY_OLD = re.compile(r"^relay status ([\d.]+) s old > ([\d.e+]+) s$")  # runtime.policy.relay_health
# runtime.health.run_checks: why HEALTH_CMD or HEALTH_URL says no
_HEALTH = (
    (re.compile(r"^health command exited (-?\d+)$"), gettext_lazy("health command exited %(what)s")),
    (re.compile(r"^health command timed out \(([\d.e+]+) s\)$"),
     gettext_lazy("health command timed out (%(what)s s)")),
    (re.compile(r"^health URL answered (\d+)$"), gettext_lazy("health URL answered %(what)s")),
    (re.compile(r"^health URL failed: (.*)$"), gettext_lazy("health URL failed: %(what)s")),
)  # fmt: skip
# core.commands.forget_refusal's three texts
_HOLDS_LEASE = re.compile(r"^(.+) holds the lease \(epoch (.*)\): drain it so that another member leads$")
_NOT_TIMED = re.compile(r"^(.+)'s heartbeat has not been timed yet: wait for this agent to judge it$")
_FRESH = re.compile(
    r"^(.+)'s heartbeat is fresh \(([\d.]+) s old, stale after ([\d.e+]+) s\): stop its agent first$"
)

# core.eligibility's and runtime.policy's reasons that carry no value
_REASONS = {
    "this agent is stopping": gettext_lazy("this agent is stopping"),
    "relay not running": gettext_lazy("relay not running"),
    "health check pending": gettext_lazy("health check pending"),
    "drained": gettext_lazy("drained"),
    "heartbeat not yet timed": gettext_lazy("heartbeat not yet timed"),
    "priority 0 (never leader)": gettext_lazy("priority 0 (never leader)"),
    "gate signal: not master": gettext_lazy("gate signal: not master"),
}

# core.failovers.REASONS: why the leader changed
FAILOVER_REASONS = {
    "forced": gettext_lazy("forced"),
    "promoted": gettext_lazy("promoted"),
    "drained": gettext_lazy("drained"),
    "handoff": gettext_lazy("handoff"),
    "stepped down": gettext_lazy("stepped down"),
    "leader gone": gettext_lazy("leader gone"),
    "lease expired": gettext_lazy("lease expired"),
    "first election": gettext_lazy("first election"),
}

LEASE_STATUS = {
    "valid": gettext_lazy("valid"),
    "released": gettext_lazy("released"),
    "missing": gettext_lazy("missing"),
    "corrupt": gettext_lazy("corrupt"),
    "forged": gettext_lazy("forged"),
    "unreachable": gettext_lazy("unreachable"),
    "unknown": gettext_lazy("unknown"),
}

COMMANDS = {
    "drain": gettext_lazy("drain"),
    "undrain": gettext_lazy("undrain"),
    "promote": gettext_lazy("promote"),
    "pause": gettext_lazy("pause failover"),
    "resume": gettext_lazy("resume failover"),
    "unbind": gettext_lazy("reset binding"),
    "forget": gettext_lazy("forget"),
    "unlock_login": gettext_lazy("unlock login"),
    "on_role_change": gettext_lazy("role-change command"),  # elections.runtime.notify's failures
    "webhook": gettext_lazy("webhook"),
}

RESULTS = {
    "accepted": gettext_lazy("accepted"),
    "stale_epoch": gettext_lazy("stale epoch"),
    "unknown_member": gettext_lazy("unknown member"),
    "refused": gettext_lazy("refused"),
    "forbidden": gettext_lazy("forbidden"),
    "unavailable": gettext_lazy("unavailable"),
    "error": gettext_lazy("error"),
    "no outcome recorded": gettext_lazy("no outcome recorded"),
}

CHANNELS = {  # elections.steering.Actor.via: where a command came from
    "panel": gettext_lazy("the panel"),
    "api": gettext_lazy("the API"),
    "cli": gettext_lazy("the command line"),
}

PERIODS = {
    "1h": gettext_lazy("last hour"),
    "6h": gettext_lazy("last 6 hours"),
    "24h": gettext_lazy("last 24 hours"),
    "7d": gettext_lazy("last 7 days"),
    "30d": gettext_lazy("last 30 days"),
    "all": gettext_lazy("all time"),
}

WINDOWS = {
    "15m": gettext_lazy("15 min"),
    "1h": gettext_lazy("1 h"),
    "6h": gettext_lazy("6 h"),
    "24h": gettext_lazy("24 h"),
}


def reason(text: str) -> str:
    """One of core.eligibility's (or runtime.policy's) reasons why a member may not lead."""
    known = _REASONS.get(text)
    if known is not None:
        return str(known)
    m = _HEARTBEAT_OLD.match(text)
    if m:
        return _("heartbeat %(age)s s old > %(ttl)s + %(hold)s") % {"age": m[1], "ttl": m[2], "hold": m[3]}
    if m := _UNHEARD.match(text):
        return _("beacons not heard for %(age)s s > %(limit)s s") % {"age": m[1], "limit": m[2]}
    if text == "no member hears its beacons":
        return _("no member hears its beacons")
    if m := _RELAY_OLD.match(text):
        return _("relay status %(age)s s old > %(limit)s s") % {"age": m[1], "limit": m[2]}
    for pattern, msgid in _HEALTH:
        if m := pattern.match(text):
            return str(msgid) % {"what": m[1]}
    if text.startswith("health: "):
        return _("health: %(what)s") % {"what": text[len("health: ") :]}
    if text.startswith("gate: "):  # core.gate: why this host's gate is not master (keepalived's words)
        return _("gate: %(why)s") % {"why": text[len("gate: ") :]}
    return text


def forget_refusal(text: str) -> str:
    """core.commands.forget_refusal's reason why a member may not be forgotten now."""
    if m := _HOLDS_LEASE.match(text):
        return _("%(member)s holds the lease (epoch %(epoch)s): drain it so that another member leads") % {
            "member": m[1], "epoch": m[2]}  # fmt: skip
    if m := _NOT_TIMED.match(text):
        return _("%(member)s's heartbeat has not been timed yet: wait for this agent to judge it") % {
            "member": m[1]}  # fmt: skip
    if m := _FRESH.match(text):
        shown = {"member": m[1], "age": m[2], "stale": m[3]}
        fresh = _(
            "%(member)s's heartbeat is fresh (%(age)s s old, stale after %(stale)s s): stop its agent first"
        )
        return fresh % shown
    return text


def of(table: dict[str, object], code: str) -> str:
    """`code` in words from one of the tables above, else `code` itself."""
    word = table.get(code)
    return str(word) if word is not None else code


def lease_state(s: SiteState) -> str:
    """The lease's state in words; a released lease names whom it is handed to (issue 42)."""
    to = (s.lease or {}).get("handoff_to") if s.lease_status == "released" else None
    if to:
        return _("released, handing off to %(to)s") % {"to": to}
    return of(LEASE_STATUS, s.lease_status)


def trouble(s: SiteState) -> str:
    """What is wrong with the pool, in one sentence ('' when nothing is): the site page's first line."""
    if not s.has_leader:
        return _("This pool has no leader: %(why)s.") % {"why": s.why_no_leader}
    if s.security_alarm:
        return _("Security alarm: this agent refused forged or replayed records, see below.")
    if not s.store_reachable:
        return _("The lease store is unreachable from this agent.")
    if s.paused:
        return _("Automatic failover is paused: if %(leader)s fails, nobody takes over.") % {
            "leader": s.leader
        }
    gone = [m.node for m in s.members if m.gone]
    if gone:
        return _("Member(s) %(nodes)s gone: no heartbeat within the TTL.") % {"nodes": ", ".join(gone)}
    if s.early_takeovers_24h >= EARLY_TAKEOVERS_ALARM:
        return _("%(n)d early takeovers in 24 h: agents keep dying, or someone forges their deaths.") % {
            "n": s.early_takeovers_24h
        }
    if s.members and len(s.eligible) < len(s.members):
        return _("%(n)d of %(total)d members may not become leader.") % {
            "n": len(s.members) - len(s.eligible),
            "total": len(s.members),
        }
    return ""


# core.decide's and runtime.elector's decisions (`verdict: reason`), and runtime.watch's for a watched
# pool: every reason form they write is below (tests/test_decision_words.py finds each in their code);
# a text of another version's agent is shown as written.
_VERDICTS = {
    "follow": gettext_lazy("following"),
    "hold": gettext_lazy("holding"),
    "renew": gettext_lazy("renewing"),
    "wait": gettext_lazy("waiting"),
    "contend": gettext_lazy("contending"),
    "idle": gettext_lazy("idle"),
    "step_down": gettext_lazy("stepping down"),
    "hand_off": gettext_lazy("handing off"),
    "watching": gettext_lazy("watching"),
}
_NODE = r"[^\s(),;:]+"  # a member's name, as the core writes it: never spaces, parentheses or separators
_NUM = r"-?[\d.]+(?:e[+-]?\d+)?"  # a number as `{:.1f}`, `{:.2f}` or `{:g}` writes it
_LEASE = rf"{_NODE} epoch \d+ seq \d+ at \S+"  # core.lease.LeaseRecord.describe()
# core.lease.LeaseRecord.describe(): a valid lease's detail
_DESCRIBED = re.compile(r"^(.+) epoch (\d+) seq (\d+) at (.+)$")
# core.commands.check_command's accepted outcomes
_ACCEPTED_AT = re.compile(r"^(\w+) (.+) accepted at epoch (\d+|None)$")
_UNBOUND = re.compile(r"^unbind (.+) accepted: the site token is accepted for it again$")
_FORGOTTEN = re.compile(r"^forget (.+) accepted: its member record is removed, its history kept$")

# A form: the English pattern (its groups named as the msgid's placeholders), the msgid, and how
# each group's own text is said (a group not named there is data: a name, a number).
_Form = tuple[re.Pattern[str], Any, dict[str, Callable[[str], str]]]


def _form(pattern: str, msgid: Any, **nested: Callable[[str], str]) -> _Form:
    return re.compile(pattern), msgid, nested


def _said(forms: list[_Form], text: str) -> str | None:
    """`text` in the reader's language by the first form that matches it whole, or None."""
    for pattern, msgid, nested in forms:
        if m := pattern.fullmatch(text):
            values = {k: nested[k](v) if k in nested else v for k, v in m.groupdict().items()}
            return str(msgid) % values
    return None


def _or_same(forms: list[_Form]) -> Callable[[str], str]:
    return lambda text: _said(forms, text) or text


def _described(text: str) -> str:
    """A lease's `describe()` inside a reason (its holder, epoch, renewal and address)."""
    if m := _DESCRIBED.match(text):
        return _("%(node)s epoch %(epoch)s renewal #%(seq)s at %(address)s") % {
            "node": m[1], "epoch": m[2], "seq": m[3], "address": m[4]}  # fmt: skip
    return text


# core.lease.parse_lease's details of a read that is no evidence, and the read's status
_READ_DETAILS: list[_Form] = [
    _form(r"no lease file", gettext_lazy("no lease file")),
    _form(r"lease file is empty", gettext_lazy("lease file is empty")),
    _form(r"lease file is not JSON \((?P<why>.*)\)", gettext_lazy("lease file is not JSON (%(why)s)")),
    _form(r"lease file is not a JSON object", gettext_lazy("lease file is not a JSON object")),
    _form(r"lease has no '(?P<field>\w+)'", gettext_lazy("lease has no '%(field)s'")),
    _form(r"lease field '(?P<field>\w+)' has a bad type",
          gettext_lazy("lease field '%(field)s' has a bad type")),
    _form(r"lease has a negative number", gettext_lazy("lease has a negative number")),
    _form(r"lease has a number above (?P<max>\d+)", gettext_lazy("lease has a number above %(max)s")),
    _form(rf"lease has no signature \(claims (?P<node>{_NODE}) epoch (?P<epoch>-?\d+)\)",
          gettext_lazy("lease has no signature (claims %(node)s epoch %(epoch)s)")),
    _form(rf"lease has bad signature \(claims (?P<node>{_NODE}) epoch (?P<epoch>-?\d+)\)",
          gettext_lazy("lease has a bad signature (claims %(node)s epoch %(epoch)s)")),
    _form(rf"stale lease ignored \((?P<lease>{_LEASE}) < known epoch (?P<epoch>\d+)\)",
          gettext_lazy("stale lease ignored (%(lease)s < known epoch %(epoch)s)"), lease=_described),
    _form(rf"replayed lease ignored \((?P<lease>{_LEASE}) < seen seq (?P<seq>\d+)\)",
          gettext_lazy("replayed lease ignored (%(lease)s < seen renewal #%(seq)s)"), lease=_described),
]  # fmt: skip


def read_said(text: str) -> str:
    """Why a lease read is no evidence (core.decide._no_evidence): its detail, or its status."""
    return _said(_READ_DETAILS, text) or of(LEASE_STATUS, text)


# core.decide.early_refusal: why this cycle's read is no evidence for an early takeover
_REFUSALS: list[_Form] = [
    _form(r"lease store unreachable", gettext_lazy("lease store unreachable")),
    _form(rf"stale lease \((?P<lease>{_LEASE}) < known epoch (?P<epoch>\d+)\)",
          gettext_lazy("stale lease (%(lease)s < known epoch %(epoch)s)"), lease=_described),
    _form(rf"the lease names (?P<lease>{_LEASE})", gettext_lazy("the lease names %(lease)s"),
          lease=_described),
]  # fmt: skip


def _refusal(text: str) -> str:
    return _said(_REFUSALS, text) or read_said(text)


# core.liveness (a holder's agent gone) and core.serving.silent_holder (a majority's silence)
_EVIDENCE: list[_Form] = [
    _form(rf"(?P<node>{_NODE})'s agent is gone: liveness connection ended (?P<ago>{_NUM}) s ago and "
          rf"no leader beacon of epoch (?P<epoch>\d+) \(boot (?P<boot>\S+)\) for (?P<quiet>{_NUM}) s",
          gettext_lazy("%(node)s's agent is gone: its liveness connection ended %(ago)s s ago and no leader "
                       "beacon of epoch %(epoch)s (boot %(boot)s) for %(quiet)s s")),
    _form(rf"(?P<node>{_NODE})'s agent is gone: liveness reconnect refused (?P<ago>{_NUM}) s ago and "
          rf"no leader beacon of epoch (?P<epoch>\d+) \(boot (?P<boot>\S+)\) for (?P<quiet>{_NUM}) s",
          gettext_lazy("%(node)s's agent is gone: its liveness reconnect was refused %(ago)s s ago and no "
                       "leader beacon of epoch %(epoch)s (boot %(boot)s) for %(quiet)s s")),
    _form(rf"(?P<node>{_NODE}) silent for (?P<quiet>{_NUM}) s ≥ S (?P<limit>{_NUM}) s, and so say "
          rf"(?P<agree>[^()]+) \((?P<n>\d+) of (?P<members>\d+) members\)",
          gettext_lazy("%(node)s silent for %(quiet)s s ≥ S %(limit)s s, and so say %(agree)s (%(n)s of "
                       "%(members)s members)")),
]  # fmt: skip
# core.serving_book: why a leader's serving right lapsed
_LAPSED: list[_Form] = [
    _form(rf"no majority of (?P<members>\d+) members within W (?P<window>{_NUM}) s: no majority ever",
          gettext_lazy("no majority of %(members)s members within W %(window)s s: no majority ever")),
    _form(rf"no majority of (?P<members>\d+) members within W (?P<window>{_NUM}) s: majority lost "
          rf"(?P<ago>{_NUM}) s ago",
          gettext_lazy("no majority of %(members)s members within W %(window)s s: majority lost "
                       "%(ago)s s ago")),
]  # fmt: skip
WRITE_OUTCOMES = {  # elections.ports.store.backend.WriteOutcome: a write that did not happen
    "changed": gettext_lazy("the lease changed since it was read"),
    "busy": gettext_lazy("another writer held the lock"),
    "fenced": gettext_lazy("fenced at the deadline"),
    "lost": gettext_lazy("the store took the hold away"),
}
# runtime.witness_keeper.claim: why a pool of two's early takeover did not get the witness
_WITNESS: list[_Form] = [
    _form(r"the witness record is held by (?P<lease>.+)",
          gettext_lazy("the witness record is held by %(lease)s"),
          lease=_described),
    _form(r"the witness record is missing", gettext_lazy("the witness record is missing")),
    _form(r"the witness record is no evidence \((?P<cause>.*)\)",
          gettext_lazy("the witness record is no evidence (%(cause)s)")),
    _form(r"the witness cannot be claimed: (?P<why>.*)",
          gettext_lazy("the witness cannot be claimed: %(why)s")),
    _form(r"the witness claim lost \((?P<outcome>\w+)\)",
          gettext_lazy("the witness claim lost (%(outcome)s)"),
          outcome=lambda o: of(WRITE_OUTCOMES, o)),
]  # fmt: skip


def _holder(text: str) -> str:
    """`core.decide`'s holder of the last lease seen: "S001 epoch 3", or "no one"."""
    if text == "no one":
        return _("no one")
    if m := re.fullmatch(rf"({_NODE}) epoch (\d+)", text):
        return _("%(node)s epoch %(epoch)s") % {"node": m[1], "epoch": m[2]}
    return text


def _after(text: str, known: Callable[[str], str | None]) -> tuple[str, str] | None:
    """`text` as "X (Y)", split at the first " (" whose Y `known` says: (X, Y in words)."""
    if not text.endswith(")"):
        return None
    at = text.find(" (")
    while at >= 0:
        said = known(text[at + 2 : -1])
        if said is not None:
            return text[:at], said
        at = text.find(" (", at + 1)
    return None


def _evidence(text: str) -> str | None:
    return _said(_EVIDENCE, text)


def _why_or_same(text: str) -> str:
    return _why(text) or text


_PLANNED = re.compile(rf"promote of ({_NODE}) requested")  # runtime.policy.PoolPolicy.handoff's why


def _planned(text: str) -> str:
    if m := _PLANNED.fullmatch(text):
        return _("promote of %(node)s requested") % {"node": m[1]}
    return text


def _to(text: str) -> str:
    return _("anyone") if text == "anyone" else text


_N, _E = _NODE, r"\d+"
_WHYS: list[_Form] = [
    # a steady pool (core.decide, runtime.elector's renewal)
    _form(rf"(?P<role>follower|leader): (?P<node>{_N}) holds epoch (?P<epoch>{_E}), "
          rf"renewed (?P<age>{_NUM}) s ago",
          gettext_lazy("%(role)s: %(node)s holds epoch %(epoch)s, renewed %(age)s s ago"),
          role=lambda r: _("follower") if r == "follower" else _("leader")),
    _form(rf"leader: renewing epoch (?P<epoch>{_E}) \(last renewal (?P<age>{_NUM}) s ago\)",
          gettext_lazy("leader: renewing epoch %(epoch)s (last renewal %(age)s s ago)")),
    _form(rf"leader: renewed epoch (?P<epoch>{_E}) \(seq (?P<seq>{_E})\)",
          gettext_lazy("leader: renewed epoch %(epoch)s (renewal #%(seq)s)")),
    _form(r"no lease file and no leader ever seen", gettext_lazy("no lease file and no leader ever seen")),
    _form(r"no leader seen", gettext_lazy("no leader seen")),
    # a leader (core.decide._decide_leader)
    _form(rf"deadline: last renewal of epoch (?P<epoch>{_E}) (?P<age>{_NUM}) s ago > (?P<limit>{_NUM}) s",
          gettext_lazy("deadline: last renewal of epoch %(epoch)s %(age)s s ago > %(limit)s s")),
    _form(rf"lost: the lease names (?P<lease>{_LEASE})", gettext_lazy("lost: the lease names %(lease)s"),
          lease=_described),
    _form(rf"leader of epoch (?P<epoch>{_E}): lease store unreachable, stepping down in (?P<left>{_NUM}) s",
          gettext_lazy("leader of epoch %(epoch)s: lease store unreachable, stepping down in %(left)s s")),
    _form(rf"released epoch (?P<epoch>{_E})", gettext_lazy("released epoch %(epoch)s")),
    _form(rf"serving right of epoch (?P<epoch>{_E}) lapsed \((?P<why>.+)\): taking a new epoch, "
          r"serving by the lease",
          gettext_lazy("serving right of epoch %(epoch)s lapsed (%(why)s): taking a new epoch, "
                       "serving by the lease"),
          why=_or_same(_LAPSED)),
    _form(rf"leader of epoch (?P<epoch>{_E}): (?P<why>.+); rewriting own record",
          gettext_lazy("leader of epoch %(epoch)s: %(why)s; rewriting own record"), why=read_said),
    # its hand-off (core.decide, and runtime.elector once the lease is released)
    _form(rf"handed epoch (?P<epoch>{_E}) to (?P<node>{_N}): (?P<why>.+)",
          gettext_lazy("handed epoch %(epoch)s to %(node)s: %(why)s"), why=_planned),
    _form(rf"no longer eligible: (?P<why>.+): handed off to (?P<to>{_N})",
          gettext_lazy("no longer eligible: %(why)s: handed off to %(to)s"), why=reason, to=_to),
    _form(r"no longer eligible: (?P<why>.+)", gettext_lazy("no longer eligible: %(why)s"), why=reason),
    _form(rf"promote of (?P<node>{_N}) requested", gettext_lazy("promote of %(node)s requested")),
    # runtime.elector's writes
    _form(rf"elected: took epoch (?P<epoch>{_E}) \((?P<why>.+)\)",
          gettext_lazy("elected: took epoch %(epoch)s (%(why)s)"), why=_why_or_same),
    _form(rf"deadline passed before the write of epoch (?P<epoch>{_E})",
          gettext_lazy("deadline passed before the write of epoch %(epoch)s")),
    _form(rf"lost: the store took the hold of epoch (?P<epoch>{_E}) away \(its etcd lease is gone\)",
          gettext_lazy("lost: the store took the hold of epoch %(epoch)s away (its etcd lease is gone)")),
    _form(rf"renewal of epoch (?P<epoch>{_E}) not written: (?P<outcome>\w+)",
          gettext_lazy("renewal of epoch %(epoch)s not written: %(outcome)s"),
          outcome=lambda o: of(WRITE_OUTCOMES, o)),
    _form(rf"leader of epoch (?P<epoch>{_E}): renewal not written this round",
          gettext_lazy("leader of epoch %(epoch)s: renewal not written this round")),
    _form(r"no early takeover: (?P<why>.+); the TTL decides",
          gettext_lazy("no early takeover: %(why)s; the TTL decides"), why=_or_same(_WITNESS)),
    _form(r"cannot contend: (?P<why>.+)", gettext_lazy("cannot contend: %(why)s")),
    # a follower (core.decide._decide_follower, _holder_gone)
    _form(r"lease store unreachable: cannot contend",
          gettext_lazy("lease store unreachable: cannot contend")),
    _form(rf"(?P<node>{_N}) handed epoch (?P<epoch>{_E}) to me",
          gettext_lazy("%(node)s handed epoch %(epoch)s to me")),
    _form(rf"released by (?P<node>{_N}) \(epoch (?P<epoch>{_E})\)",
          gettext_lazy("released by %(node)s (epoch %(epoch)s)")),
    _form(rf"handoff to (?P<node>{_N}) not taken within (?P<ttl>{_NUM}) s",
          gettext_lazy("handoff to %(node)s not taken within %(ttl)s s")),
    _form(rf"handoff to (?P<node>{_N}) abandoned: (?P<why>.+)",
          gettext_lazy("handoff to %(node)s abandoned: %(why)s"),
          why=reason),
    _form(rf"handoff from (?P<node>{_N}) to (?P<to>{_N}); waiting (?P<left>{_NUM}) s",
          gettext_lazy("handoff from %(node)s to %(to)s; waiting %(left)s s")),
    _form(rf"lease of (?P<holder>.+?) expired: not renewed for (?P<age>{_NUM}) s ≥ (?P<ttl>{_NUM}) s",
          gettext_lazy("lease of %(holder)s expired: not renewed for %(age)s s ≥ %(ttl)s s"), holder=_holder),
    _form(rf"lease of (?P<holder>.+?) expired: not renewed for (?P<age>{_NUM}) s ≥ (?P<ttl>{_NUM}) s "
          r"\((?P<why>.+)\)",
          gettext_lazy("lease of %(holder)s expired: not renewed for %(age)s s ≥ %(ttl)s s (%(why)s)"),
          holder=_holder, why=read_said),
    _form(rf"no evidence: (?P<why>.+); lease of (?P<holder>.+?) times out in (?P<left>{_NUM}) s",
          gettext_lazy("no evidence: %(why)s; lease of %(holder)s times out in %(left)s s"),
          why=read_said, holder=_holder),
    _form(r"pool paused, automatic failover off \((?P<why>.+)\)",
          gettext_lazy("pool paused, automatic failover off (%(why)s)"), why=_why_or_same),
    _form(rf"sitting out after a release for (?P<left>{_NUM}) s \((?P<why>.+)\)",
          gettext_lazy("sitting out after a release for %(left)s s (%(why)s)"), why=_why_or_same),
    # a watched pool (runtime.watch.PoolWatcher)
    _form(r"share unreachable: (?P<detail>.*)", gettext_lazy("share unreachable: %(detail)s")),
    _form(r"no valid lease", gettext_lazy("no valid lease")),
    _form(rf"(?P<node>{_N}) holds epoch (?P<epoch>{_E})", gettext_lazy("%(node)s holds epoch %(epoch)s")),
]  # fmt: skip
_DEFERRED = re.compile(
    rf"early takeover of (?P<node>{_NODE}) epoch (?P<epoch>\d+) deferred, no evidence: (?P<rest>.+); "
    rf"lease of (?P=node) epoch (?P=epoch) times out in (?P<left>{_NUM}) s"
)


def _why(text: str) -> str | None:
    """One decision's reason in the reader's language, or None for a form it does not know."""
    said = _said(_WHYS, text) or _evidence(text)
    if said is not None:
        return said
    if text.startswith("not eligible: ") and (split := _after(text[len("not eligible: ") :], _why)):
        return _("not eligible: %(why)s (%(then)s)") % {"why": reason(split[0]), "then": split[1]}
    if (m := _DEFERRED.fullmatch(text)) and (split := _after(m["rest"], _evidence)):
        shown = {"node": m["node"], "epoch": m["epoch"], "left": m["left"], "why": _refusal(split[0]),
                 "evidence": split[1]}  # fmt: skip
        return _("early takeover of %(node)s epoch %(epoch)s deferred, no evidence: %(why)s (%(evidence)s); "
                 "lease of %(node)s epoch %(epoch)s times out in %(left)s s") % shown  # fmt: skip
    return None


def decision(text: str) -> str:
    """This agent's last decision (core.decide.Decision's `verdict: reason`)."""
    verdict, _sep, why = text.partition(": ")
    if verdict not in _VERDICTS:
        return text
    said = _why(why)
    if said is None:
        return text
    return _("%(verdict)s: %(why)s") % {"verdict": _VERDICTS[verdict], "why": said}


def lease_detail(text: str) -> str:
    """A lease read's detail: a valid lease's holder, epoch, renewal and address."""
    if m := _DESCRIBED.match(text):
        return _("%(node)s, epoch %(epoch)s, renewal #%(seq)s, at %(address)s") % {
            "node": m[1], "epoch": m[2], "seq": m[3], "address": m[4]}  # fmt: skip
    return text


def outcome(text: str) -> str:
    """An audited command's outcome message, for the accepted ones (core.commands.check_command)."""
    if m := _UNBOUND.match(text):
        return _("unbind %(station)s accepted: the site token is accepted for it again") % {"station": m[1]}
    if m := _FORGOTTEN.match(text):
        return _("forget %(member)s accepted: its member record is removed, its history kept") % {
            "member": m[1]
        }
    if (m := _ACCEPTED_AT.match(text)) and m[1] in COMMANDS:
        target = _("the pool") if m[2] == "pool" else m[2]
        return _("%(command)s %(target)s accepted at epoch %(epoch)s") % {
            "command": COMMANDS[m[1]], "target": target, "epoch": m[3]}  # fmt: skip
    return text
