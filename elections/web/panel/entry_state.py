"""What `relayctl doctor` says of the outside entry (issue 26 part 1, docs/design.md §14.1): which
members are entries and where (their heartbeats' ``entry``), how many remote sessions each had
at its last heartbeat, and, on an entry member, its own entry process (``DATA_DIR/entry.json``,
`relay.server.entry`). The site page shows the same (`panel/_site_entry.html`)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from elections.ports.local.pool_view import PoolView
from elections.ports.local.relay_files import EntryStatus


def entry_checks(pool: PoolView, here: EntryStatus | None, now: float) -> list[tuple[str, bool, str]]:
    """(check, ok, detail) lines; `here`: this agent's entry status when it is an entry (ENTRY = 1)."""
    lines: list[tuple[str, bool, str]] = []
    leader = pool.leader
    for node, m in sorted(pool.members.items()):
        if not m.entry:
            continue
        sessions = "?" if m.entry_sessions is None else str(m.entry_sessions)
        detail = _("public side %(listen)s; remote sessions at its last heartbeat: %(sessions)s") % {
            "listen": m.entry, "sessions": sessions}  # fmt: skip
        if node == leader:
            detail += _(" (it leads: it forwards to its own relay)")
        lines.append((_("entry member %(node)s") % {"node": node}, True, detail))
    if here is not None:
        lines.append(_here(here, now, leader))
    if not lines:
        lines.append((_("outside entry"), True, _("no entry member (ENTRY = 1 nowhere): remote clients "
                                                  "come through the cloud, if there is one")))  # fmt: skip
    return lines


def _here(e: EntryStatus, now: float, leader: str | None) -> tuple[str, bool, str]:
    name = _("this agent's entry")
    if not e.fresh(now):
        return name, False, _("ENTRY = 1, but the entry process has not reported for 3 s (see agent.log)")
    if not e.listening:
        return (
            name,
            False,
            _("not listening on %(listen)s: %(error)s") % {"listen": e.listen, "error": e.error},
        )
    target: dict[str, Any] = e.target or {}
    if not target:
        ok = leader is None  # no leader, nothing to forward to: right; a leader it does not follow: wrong
        return name, ok, _("listening on %(listen)s, forwarding to nobody (no leader read): remote clients "
                           "are refused") % {"listen": e.listen}  # fmt: skip
    shown = {"listen": e.listen, "node": target.get("node"), "ip": target.get("ip"),
             "port": target.get("port"), "epoch": target.get("epoch")}  # fmt: skip
    counts = {"sessions": e.sessions, "streams": e.streams, "repointed": e.repointed}
    return (
        name,
        True,
        (
            _("listening on %(listen)s, forwarding to %(node)s (%(ip)s:%(port)s, epoch %(epoch)s)") % shown
            + "; "
            + _("remote sessions %(sessions)d, streams %(streams)d, leader changes followed %(repointed)d")
            % counts
        ),
    )
