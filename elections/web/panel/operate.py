"""What the panel shows around an operator command: `preview()` says what a
command will do, with the ActionPlan dry run from `elections.core.actions`;
`progress()` tells, from the pool view, whether an accepted command has taken
effect. Performing a command is the steering service's (`elections.steering`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace

from django.conf import settings
from django.utils.translation import gettext as _

from elections import audit
from elections.core import actions
from elections.core.commands import KINDS
from elections.core.eligibility import successor
from elections.web.panel.site import SiteState

log = logging.getLogger("stkrelay.panel")

__all__ = ["KINDS", "Preview", "Progress", "likely_successor", "preview", "progress"]


@dataclass
class Preview:
    summary: str
    steps: list[str] = field(default_factory=list)
    plan: str = ""  # elections.core.actions' rendered ActionPlan, when available
    plan_source: str = ""
    successor: str | None = None


def likely_successor(site: SiteState, excluding: str | None) -> str | None:
    """The member the pool will pick: the pool's own successor rule
    (`core.eligibility.successor`) over this agent's view of the members."""
    members = {
        m.node: SimpleNamespace(
            eligible=m.eligible, priority=m.priority if isinstance(m.priority, int) else 50
        )
        for m in site.members
    }
    return successor(members, excluding=excluding)


def _plan(epoch: int, node: str, old_leader: str | None) -> tuple[str, str]:
    """The dry run: the old leader's demotion plan and `node`'s plan for `epoch`."""
    try:
        config = settings.STK.actions
        parts = []
        if old_leader:
            parts.append(actions.demotion_plan(epoch - 1, old_leader, config).render())
        parts.append(actions.plan_for(epoch, node, config).render())
        return "\n\n".join(parts), "elections.core.actions"
    except Exception as exc:
        log.warning("plan_for(%s, %s) failed: %s", epoch, node, exc)
        return "", "panel"


def preview(kind: str, site: SiteState, target: str | None) -> Preview:
    """What `kind` on `target` will do, as a list of steps and the dry-run plan."""
    epoch = site.epoch or 0
    leader = site.leader
    nxt = epoch + 1
    words = {"target": target, "epoch": epoch, "next": nxt, "leader": leader or _("nobody")}

    def move(to: str | None, why: str) -> Preview:
        named = {**words, "to": to or _("another eligible member"), "old": leader or _("the leader")}
        steps = [
            _("%(old)s %(why)s and stops its relay") % {**named, "why": why},
            _("%(to)s takes epoch %(next)s") % named,
            _("the relay starts on %(to)s") % named,
            _("clients follow via leader_changed (and the lease) and reconnect"),
        ]
        p = Preview("", steps, successor=to)
        if to and site.watched:  # this agent's leader actions are its own pool's, not that pool's
            p.plan_source = _("the watched pool's own agents (their leader actions are not configured here)")
        elif to:
            p.plan, p.plan_source = _plan(nxt, to, leader)
        return p

    if kind == "drain":
        if target == leader:
            p = move(likely_successor(site, target), _("hands epoch %(epoch)s off") % words)
            p.summary = (
                _(
                    "Drain %(target)s, the current leader: it becomes ineligible and hands leadership over. "
                    "Clients reconnect once."
                )
                % words
            )
            p.steps.append(_("%(target)s stays drained (never elected) until undrained") % words)
            return p
        return Preview(
            _("Drain %(target)s: it becomes ineligible to lead. Leadership stays with %(leader)s "
              "at epoch %(epoch)s; nothing moves now.") % words,
            [_("%(target)s is marked drained") % words,
             _("%(target)s will not be elected until undrained") % words],
        )  # fmt: skip
    if kind == "undrain":
        return Preview(
            _("Undrain %(target)s: it becomes eligible again once its heartbeat shows it; "
              "leadership does not move.") % words,
            [_("%(target)s's drain mark is cleared") % words, _("no change of leader")],
        )  # fmt: skip
    if kind == "promote":
        p = move(target, _("hands epoch %(epoch)s over to %(target)s") % words)
        p.summary = _("Promote %(target)s: a planned switchover from %(leader)s to %(target)s.") % words
        return p
    if kind == "unbind":
        named = {"station": target}
        return Preview(
            _("Reset the binding of station %(station)s: the relay accepts the site token for it again, "
              "until it next registers with its station credential.") % named,
            [_("an unbind event is written to the pool's event log (audited)"),
             _("every agent stops holding %(station)s to its credential") % named,
             _("a client that knows only the site token can then register as %(station)s") % named],
        )  # fmt: skip
    if kind == "forget":
        named = {"member": target}
        return Preview(
            _("Forget %(member)s: a member gone for good is retired from the pool. Its member record is "
              "removed from the store; its events and this pool's history of it are kept.") % named,
            [_("a forget event is written to the pool's event log (audited), with %(member)s's epoch claim")
             % named, _("this agent removes %(member)s's member record from the store") % named,
             _("every agent stops listing %(member)s; if it ever heartbeats again it is a member again")
             % named],
        )  # fmt: skip
    if kind == "pause":
        return Preview(
            _("Pause automatic failover: if the leader fails while paused, "
              "no member takes over until resumed."),
            [_("%(leader)s keeps leading epoch %(epoch)s") % {**words, "leader": leader or _("the leader")},
             _("no automatic elections until resumed")],
        )  # fmt: skip
    return Preview(
        _("Resume automatic failover: members contend again when the lease lapses."),
        [_("automatic elections resume"), _("no change of leader now")],
    )


@dataclass
class Progress:
    done: bool
    failed: bool
    text: str


def progress(entry: audit.AuditEntry, site: SiteState, wall_now: datetime, timeout_s: float) -> Progress:
    """Has the accepted command in `entry` (its outcome row) taken effect yet?"""
    if entry.result != "accepted":
        return Progress(True, True, _("%(action)s was not accepted: %(message)s") % {
            "action": entry.action, "message": entry.message})  # fmt: skip
    waited = (wall_now - entry.at).total_seconds()
    from_epoch = entry.epoch or 0
    leader, epoch = site.leader, site.epoch or 0
    target = entry.target
    member = site.member(target) if target else None
    w = {"leader": leader, "epoch": epoch, "from": from_epoch, "target": target, "action": entry.action}
    state = _("%(leader)s leads epoch %(epoch)s") % w if leader else _("no leader at the moment")
    if entry.action == "promote":
        if leader == target and epoch > from_epoch:
            return Progress(True, False, _("%(leader)s leads epoch %(epoch)s (was epoch %(from)s)") % w)
        if leader and epoch > from_epoch:
            return Progress(True, True, _("%(leader)s leads epoch %(epoch)s, not %(target)s") % w)
        what = _("waiting for %(target)s to take over from epoch %(from)s") % w
    elif entry.action == "drain":
        drained = member is None or member.drain
        if leader and leader != target and drained:
            if epoch > from_epoch:
                text = _("%(target)s is drained; %(leader)s leads epoch %(epoch)s (was epoch %(from)s)") % w
            else:
                text = _("%(target)s is drained; %(leader)s leads epoch %(epoch)s") % w
            return Progress(True, False, text)
        if drained and leader is None and not site.eligible and site.lease is not None:
            return Progress(
                True,
                False,
                _("%(target)s is drained; no eligible member is left: the pool has no leader") % w,
            )
        if leader == target:
            what = _("waiting for %(target)s to be drained and hand off") % w
        else:
            what = _("waiting for %(target)s to be drained") % w
    elif entry.action == "forget":
        if member is None:
            return Progress(True, False, _("%(target)s is no longer a member; its history is kept") % w)
        what = _("waiting for this agent's view to drop %(target)s") % w
    elif entry.action == "undrain":
        if member is not None and not member.drain:
            return Progress(
                True, False, _("%(target)s is no longer drained; %(state)s") % {**w, "state": state}
            )
        what = _("waiting for %(target)s's heartbeat to show the undrain") % w
    else:
        return Progress(
            True, False, _("%(action)s recorded at epoch %(from)s; the pool reads it at its next poll") % w
        )
    if waited > timeout_s:
        return Progress(True, True, _("no effect seen within %(n).0f s (%(state)s); check the site page") % {
            "n": timeout_s, "state": state})  # fmt: skip
    return Progress(
        False, False, _("%(what)s — %(state)s (%(n).0f s)") % {"what": what, "state": state, "n": waited}
    )
