"""The fleet view: the sites page's order and filter over every pool this agent
shows (its own and the watched ones, docs/design.md §11).

The default order is worst first (`SiteState.severity`: no leader or no share,
then a security alarm, then members that cannot lead, then failovers in 24 h),
so a pool that needs someone is at the top of 50. Any column sorts either way
(`?sort=epoch&dir=asc`); `?kmsn=` keeps the pools whose KMSN contains it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from elections.web.panel.site import SiteState

WORST = "worst"


# column -> (label, sort key, natural direction is descending)
SORTS: dict[str, tuple[str, Callable[[SiteState], Any], bool]] = {
    WORST: (gettext_lazy("Worst first"), lambda s: (s.severity, s.kmsn), True),
    "kmsn": ("KMSN", lambda s: s.kmsn, False),
    "leader": (gettext_lazy("Leader"), lambda s: (s.leader or "", s.kmsn), False),
    "epoch": (gettext_lazy("Epoch"), lambda s: (s.epoch or 0, s.kmsn), True),
    "age": (gettext_lazy("Lease age"), lambda s: (s.renewed_ago or 0.0, s.kmsn), True),
    "eligible": (gettext_lazy("Eligible"), lambda s: (len(s.eligible), len(s.members), s.kmsn), False),
    "failovers": (gettext_lazy("Failovers, 24 h"), lambda s: (s.changes_24h, s.kmsn), True),
    "alarms": (gettext_lazy("Alarms"), lambda s: (len(s.alarms), s.severity, s.kmsn), True),
}


DIRECTIONS = ("asc", "desc")

# Pools without the value (no leader, no lease) go last whichever way a column sorts.
MISSING: dict[str, Callable[[SiteState], bool]] = {
    "leader": lambda s: s.leader is None,
    "epoch": lambda s: s.epoch is None,
    "age": lambda s: s.renewed_ago is None,
}


@dataclass(frozen=True)
class Order:
    sort: str
    descending: bool
    kmsn: str  # the filter: part of a KMSN ('' for all)

    @classmethod
    def of(cls, params: Any) -> Order:
        sort = params.get("sort") or WORST
        sort = sort if sort in SORTS else WORST
        direction = params.get("dir")
        descending = SORTS[sort][2] if direction not in DIRECTIONS else direction == "desc"
        return cls(sort, descending, (params.get("kmsn") or "").strip()[:64])

    def apply(self, states: list[SiteState]) -> list[SiteState]:
        shown = [s for s in states if self.kmsn.lower() in s.kmsn.lower()]
        ordered = sorted(shown, key=SORTS[self.sort][1], reverse=self.descending)
        missing = MISSING.get(self.sort)
        if missing is None:
            return ordered
        return [s for s in ordered if not missing(s)] + [s for s in ordered if missing(s)]

    def label(self) -> str:
        """The order in words, for the table's caption."""
        name = str(SORTS[self.sort][0])
        if self.sort == WORST:
            return name
        if self.descending:
            return _("by %(column)s, descending") % {"column": name}
        return _("by %(column)s, ascending") % {"column": name}

    def link(self, column: str) -> str:
        """The query string that sorts by `column` (again: the other way)."""
        descending = not self.descending if column == self.sort else SORTS[column][2]
        query = {"sort": column, "dir": "desc" if descending else "asc"}
        if self.kmsn:
            query["kmsn"] = self.kmsn
        return "?" + urlencode(query)

    def headers(self) -> dict[str, dict[str, Any]]:
        """Per sortable column: its link, and aria-sort (the one in force says which way)."""
        out = {}
        for column in SORTS:
            current = column == self.sort
            aria = ("descending" if self.descending else "ascending") if current else "none"
            out[column] = {"url": self.link(column), "aria": aria}
        return out


ALARM_LABELS = {  # SiteState.alarms code -> (label, shown in red)
    "no_leader": (gettext_lazy("no leader"), True),
    "unreachable": (gettext_lazy("share unreachable"), True),
    "security": (gettext_lazy("security"), True),
    "share_split": (gettext_lazy("two stores"), True),
    "stale_view": (gettext_lazy("view stale"), True),
    "ineligible_members": (gettext_lazy("members out"), False),
    "early_takeovers": (gettext_lazy("early takeovers repeat"), True),
    "paused": (gettext_lazy("failover paused"), False),
    "address_conflict": (gettext_lazy("address on two hosts"), True),
    "address_drift": (gettext_lazy("address drifted"), True),
    "address_orphan": (gettext_lazy("address on a stranger"), True),
    "address_missing": (gettext_lazy("address missing"), True),
    "address_unknown": (gettext_lazy("address not seen"), False),
}


def alarm_badges(s: SiteState) -> list[dict[str, Any]]:
    return [{"code": a, "label": str(ALARM_LABELS[a][0]), "bad": ALARM_LABELS[a][1]} for a in s.alarms]


def counts(states: list[SiteState], shown: list[SiteState]) -> dict[str, int]:
    return {
        "total": len(states),
        "shown": len(shown),
        "no_leader": sum(1 for s in states if not s.has_leader),
        "security": sum(1 for s in states if s.security_alarm),
        "unreachable": sum(1 for s in states if not s.store_reachable),
    }
