"""The panel's words for what the pure core and the worker write in plain English
(the core has no Django: docs/design.md §3). Each function takes the core's text and
gives the reader's language; a text it does not know (another version's agent wrote
it) is shown as written, never dropped."""

from __future__ import annotations

import re

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from elections.web.panel.site import EARLY_TAKEOVERS_ALARM, SiteState

_HEARTBEAT_OLD = re.compile(r"^heartbeat ([\d.]+) s old > ([\d.]+) \+ ([\d.]+)$")
_UNHEARD = re.compile(r"^beacons not heard for ([\d.]+) s > ([\d.]+) s$")  # core.eligibility: liveness
# core.commands.forget_refusal's three texts
_HOLDS_LEASE = re.compile(r"^(.+) holds the lease \(epoch (.*)\): drain it so that another member leads$")
_NOT_TIMED = re.compile(r"^(.+)'s heartbeat has not been timed yet: wait for this agent to judge it$")
_FRESH = re.compile(
    r"^(.+)'s heartbeat is fresh \(([\d.]+) s old, stale after ([\d.e+]+) s\): stop its agent first$"
)

# core.eligibility's reasons that carry no value
_REASONS = {
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
    """One of core.eligibility's reasons why a member may not lead."""
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


# core.decide's decisions (`verdict: reason`) a steady pool shows; others are shown as written.
_VERDICTS = {
    "follow": gettext_lazy("following"),
    "hold": gettext_lazy("holding"),
    "renew": gettext_lazy("renewing"),
    "wait": gettext_lazy("waiting"),
    "contend": gettext_lazy("contending"),
    "idle": gettext_lazy("idle"),
}
_HOLDS = re.compile(r"^(follower|leader): (.+) holds epoch (\d+), renewed ([\d.]+) s ago$")
_RENEWING = re.compile(r"^leader: renewing epoch (\d+) \(last renewal ([\d.]+) s ago\)$")
_RENEWED = re.compile(r"^leader: renewed epoch (\d+) \(seq (\d+)\)$")  # runtime.elector: a renewal
_FIRST = {"no lease file and no leader ever seen": gettext_lazy("no lease file and no leader ever seen"),
          "no leader seen": gettext_lazy("no leader seen")}  # fmt: skip
# core.lease.LeaseRecord.describe(): a valid lease's detail
_DESCRIBED = re.compile(r"^(.+) epoch (\d+) seq (\d+) at (.+)$")
# core.commands.check_command's accepted outcomes
_ACCEPTED_AT = re.compile(r"^(\w+) (.+) accepted at epoch (\d+|None)$")
_UNBOUND = re.compile(r"^unbind (.+) accepted: the site token is accepted for it again$")
_FORGOTTEN = re.compile(r"^forget (.+) accepted: its member record is removed, its history kept$")


def decision(text: str) -> str:
    """This agent's last decision (core.decide.Decision's `verdict: reason`)."""
    verdict, _sep, why = text.partition(": ")
    if verdict not in _VERDICTS:
        return text
    if m := _HOLDS.match(why):
        role = _("follower") if m[1] == "follower" else _("leader")
        why = _("%(role)s: %(node)s holds epoch %(epoch)s, renewed %(age)s s ago") % {
            "role": role, "node": m[2], "epoch": m[3], "age": m[4]}  # fmt: skip
    elif m := _RENEWING.match(why):
        why = _("leader: renewing epoch %(epoch)s (last renewal %(age)s s ago)") % {
            "epoch": m[1],
            "age": m[2],
        }
    elif m := _RENEWED.match(why):
        why = _("leader: renewed epoch %(epoch)s (renewal #%(seq)s)") % {"epoch": m[1], "seq": m[2]}
    elif why in _FIRST:
        why = str(_FIRST[why])
    else:
        return text
    return _("%(verdict)s: %(why)s") % {"verdict": _VERDICTS[verdict], "why": why}


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
