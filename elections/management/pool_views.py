"""What relayctl prints of the pool: every view with its age and source, refused when stale.

`pool.json` is written by this agent's worker with this machine's monotonic clock
(ports.local.localstate), so its age is read here on the same clock; its wall-clock time, for
people and for `-o json`, is now (TIME_ZONE-aware ISO 8601) minus that age. A view older
than HEARTBEAT_TTL is refused with STALE_EXIT unless `--stale-ok`, then marked STALE.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from elections.core.witness import WITH_WITNESS, fast_takeover
from elections.web.panel.fmt import local as local_time  # '2026-06-15 20:30:15 UTC+8', as the panel

STALE_EXIT = 5  # the view is older than its TTL (the agent's worker is not writing it)
FORMATS = ("table", "json", "yaml", "tsv")
STATES = ("leader", "follower", "draining", "gone", "unreachable")


def wall_of(mono: float | None, now_mono: float | None = None) -> str | None:
    """A monotonic instant of this machine as local wall-clock ISO 8601 (None stays None)."""
    if mono is None:
        return None
    now_mono = time.monotonic() if now_mono is None else now_mono
    return timezone.localtime(timezone.now() - timedelta(seconds=max(0.0, now_mono - mono))).isoformat()


def view_age(pool: Any, now_mono: float | None = None) -> float | None:
    if pool.updated is None:
        return None
    return max(0.0, (time.monotonic() if now_mono is None else now_mono) - pool.updated)


def member_state(node: str, m: Any, leader: str | None, ttl: float) -> str:
    """leader / follower / draining / unreachable (heartbeat older than the TTL) / gone
    (no heartbeat, or older than three TTLs)."""
    if m.age is None or m.age > 3 * ttl:
        return "gone"
    if m.age > ttl:
        return "unreachable"
    if node == leader:
        return "leader"
    return "draining" if m.drain else "follower"


def stale_refusal(age: float | None, ttl: float, source: str) -> str | None:
    """Why the view is refused, or None while it is fresh."""
    if age is None or age <= ttl:
        return None
    why = _(
        "the view in %(source)s is %(age).1f s old (TTL %(ttl)g s): is this agent's runagent running? "
        "(--stale-ok shows it anyway, marked STALE)"
    )
    return why % {"source": source, "age": age, "ttl": ttl}


def header(age: float | None, ttl: float, source: str, paused: bool | None) -> list[str]:
    lines = [_("PAUSED: elections and failover are suspended (relayctl resume)")] if paused else []
    stale = _(" STALE") if age is not None and age > ttl else ""
    lines.append(_("view of %(source)s, %(age).1f s old (written %(at)s)%(stale)s")
                 % {"source": source, "age": age or 0.0, "at": wall_of(time.monotonic() - (age or 0.0)),
                    "stale": stale})  # fmt: skip
    return lines


def to_yaml(doc: Any, indent: int = 0) -> list[str]:
    """A JSON-able `doc` as block YAML; scalars in JSON form (valid YAML, control characters escaped)."""
    pad = "  " * indent
    if isinstance(doc, dict) and doc:
        out: list[str] = []
        for k, v in doc.items():
            key = json.dumps(str(k))
            if isinstance(v, (dict, list)) and v:
                out += [f"{pad}{key}:", *to_yaml(v, indent + 1)]
            else:
                out.append(f"{pad}{key}: {to_yaml(v)[0].strip()}")
        return out
    if isinstance(doc, list) and doc:
        out = []
        for v in doc:
            sub = to_yaml(v, indent + 1)
            out.append(f"{pad}- {sub[0].strip()}")
            out += sub[1:]
        return out
    return [
        pad + json.dumps({} if isinstance(doc, dict) else [] if isinstance(doc, list) else doc, default=str)
    ]


def render(fmt: str, doc: Any, lines: list[str]) -> list[str]:
    """`doc` as json or yaml, else `lines` (the table; tsv where a view has no rows)."""
    if fmt == "json":
        return json.dumps(doc, indent=2, default=str).splitlines()
    if fmt == "yaml":
        return to_yaml(doc)
    return lines


def lease_words(pool: Any) -> str:
    """The lease's state in words: "released, handing off to X" for a released lease, never "valid"."""
    if pool.handoff_to:
        return _("released, handing off to %(to)s") % {"to": pool.handoff_to}
    return _("released") if pool.lease_state == "released" else pool.lease_status


def list_view(
    pool: Any, ttl: float, source: str, age: float | None, since: datetime | None = None
) -> tuple[dict[str, Any], list[str], list[list[Any]]]:
    """`relayctl list`: the document, the table's lines (a header row, then one per member) and
    the tsv rows. `since`: when the leader took this epoch, as this agent's history has it."""
    lease = pool.lease or {}
    leader = pool.leader
    doc = pool.to_doc()
    doc["updated"] = wall_of(pool.updated)
    doc["lease_seen_at"] = wall_of(pool.lease_seen_at)
    doc["age_s"], doc["source"], doc["stale"] = age, source, age is not None and age > ttl
    doc["lease_status"], doc["handoff_to"] = pool.lease_state, pool.handoff_to  # never "valid" once released
    lines = header(age, ttl, source, pool.paused)
    lines.append(_("KMSN %(kmsn)s  leader %(leader)s  epoch %(epoch)s  lease %(status)s  (seen by %(node)s)")
                 % {"kmsn": pool.kmsn, "leader": lease.get("node", "-"), "epoch": lease.get("epoch", "-"),
                    "status": lease_words(pool), "node": pool.node})  # fmt: skip
    fast = fast_takeover(pool.beacons.get("serving"))
    doc["fast_takeover"] = fast
    if fast == WITH_WITNESS:
        lines.append(_("fast takeover: 2 members + the share's witness"))
    elif fast is not None:
        lines.append(
            _("fast takeover: %(n)s members") % {"n": (pool.beacons.get("serving") or {}).get("members")}
        )
    elif pool.beacons:
        lines.append(_("fast takeover: off (a silent leader is replaced after the TTL)"))
    doc["leader_since"] = None if since is None else timezone.localtime(since).isoformat()
    rows: list[list[Any]] = [
        ["node", "state", "ip", "priority", "heartbeat_s", "eligible", "reasons", "leader_since"]
    ]
    titles = [
        _("NODE"),
        _("STATE"),
        _("ADDRESS"),
        _("PRIO"),
        _("HEARTBEAT"),
        _("LEADER SINCE"),
        _("ELIGIBLE"),
    ]
    table = []
    for node, m in sorted(pool.members.items()):
        state = member_state(node, m, leader, ttl)
        doc["members"][node]["state"] = state
        elig = _("eligible") if m.eligible else _("NOT eligible: ") + "; ".join(m.reasons)
        beat = "-" if m.age is None else f"{m.age:.1f} s"
        took = doc["leader_since"] if node == leader else None
        table.append(
            [node, state, m.ip or "-", str(m.priority), beat, local_time(since) if took else "-", elig]
        )
        rows.append([node, state, m.ip, m.priority, m.age, m.eligible, "; ".join(m.reasons), took])
    widths = [max(len(r[i]) for r in [titles, *table]) for i in range(len(titles) - 1)]
    for row in [titles, *table]:
        lines.append(
            "  " + "  ".join(f"{f:{w}s}" for f, w in zip(row, widths, strict=False)) + "  " + row[-1]
        )
    return doc, lines, rows


def history_header(kind: str, kmsn: str, age: float | None, ttl: float) -> list[str]:
    """`relayctl history`'s first line: which rows, from where, as fresh as the view its worker keeps."""
    kinds = {"failover": _("failovers and commands"), "audit": _("audit rows"), "all": _("all rows")}[kind]
    fresh = _("ingested by its worker, view %(age).1f s old%(stale)s") % {
        "age": age or 0.0,
        "stale": _(" STALE") if age is not None and age > ttl else "",
    }
    no_view = _("no view of the pool yet")
    return [
        _("history of %(kmsn)s (%(kinds)s, --kind) in this agent's database, %(fresh)s")
        % {"kmsn": kmsn, "kinds": kinds, "fresh": fresh if age is not None else no_view}
    ]
