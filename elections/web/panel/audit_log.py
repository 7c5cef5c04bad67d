"""The audit history page: this agent's chain merged with the ones other agents
published, in its own pool and in every watched pool (filter: `kmsn`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _

from elections import audit
from elections.web.auth import panel_view
from elections.web.panel import fmt, words
from elections.web.panel.live import render_live
from elections.web.panel.operate import KINDS
from elections.web.panel.page import PAGE_SIZE, base_context
from elections.web.panel.state import all_kmsns


# -- audit history ---------------------------------------------------------------------------
# The pool's audit history: this agent's own AuditEntry rows plus the rows other
# agents published to the pool ("audit" events ingested into ElectionEvent).
@dataclass(frozen=True)
class AuditRecord:
    """One audit row, wherever it was recorded (`node`)."""

    node: str
    seq: int
    at: datetime
    phase: str
    user: str
    client: str
    via: str
    action: str
    kmsn: str
    target: str
    reason: str
    expected_epoch: int | None
    force: bool
    result: str
    message: str
    epoch: int | None
    correlation: str


RESULTS = ("accepted", "stale_epoch", "unknown_member", "refused", "forbidden", "unavailable", "error")
_RECORD_FIELDS = [f for f in AuditRecord.__dataclass_fields__ if f != "node"]


@dataclass
class AuditRow:
    intent: AuditRecord
    outcome: AuditRecord | None

    @property
    def result(self) -> str:
        return self.outcome.result if self.outcome else "no outcome recorded"

    @property
    def message(self) -> str:
        return self.outcome.message if self.outcome else "the action's outcome was never written"

    @property
    def ok(self) -> bool:
        return self.outcome is not None and self.outcome.result == "accepted"

    def as_dict(self) -> dict[str, Any]:
        e = self.intent
        return {
            "node": e.node,
            "seq": e.seq,
            "at": fmt.iso(e.at),
            "user": e.user,
            "client": e.client,
            "via": e.via,
            "action": e.action,
            "kmsn": e.kmsn,
            "target": e.target or None,
            "reason": e.reason,
            "expected_epoch": e.expected_epoch,
            "force": e.force,
            "result": self.result,
            "message": self.message,
            "epoch": self.outcome.epoch if self.outcome else None,
            "correlation": e.correlation,
        }


def writer(kmsn: str, node: str) -> str:
    """Who published a row: the node in this agent's pool, `node@KMSN` in a watched one."""
    return node if kmsn == settings.STK.kmsn else f"{node}@{kmsn}"


def _keys() -> dict[str, str]:
    """KMSN -> the key its published rows verify with (every watched pool has its own)."""
    stk = settings.STK
    return {stk.kmsn: stk.pool_key, **{w.kmsn: w.pool_key for w in stk.watched}}


def published_entries() -> dict[str, list[audit.AuditEntry]]:
    """Other agents' published audit rows (unsaved AuditEntry), per writer
    (`writer()`), one per seq: this pool's and every watched pool's."""
    from elections.models import ElectionEvent

    stk = settings.STK
    out: dict[str, dict[int, audit.AuditEntry]] = {}
    rows = ElectionEvent.objects.filter(kind="audit", kmsn__in=list(_keys())).order_by("id")
    for kmsn, node, detail in rows.values_list("kmsn", "node", "detail"):
        if kmsn == stk.kmsn and node == stk.node:
            continue  # this agent's own rows are its AuditEntry table
        doc = (detail or {}).get("audit") if isinstance(detail, dict) else None
        try:
            entry = audit.from_pool_doc(doc)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            continue  # not a row this version can read
        out.setdefault(writer(kmsn, node), {}).setdefault(entry.seq, entry)
    return {name: list(by_seq.values()) for name, by_seq in sorted(out.items())}


def pool_records(published: dict[str, list[audit.AuditEntry]]) -> list[AuditRecord]:
    own = settings.STK.node
    records = [AuditRecord(own, **row) for row in audit.AuditEntry.objects.values(*_RECORD_FIELDS)]
    for node, entries in published.items():
        records += [AuditRecord(node, **{f: getattr(e, f) for f in _RECORD_FIELDS}) for e in entries]
    return records


def audit_rows(
    params: dict[str, str], published: dict[str, list[audit.AuditEntry]] | None = None
) -> tuple[list[AuditRow], dict[str, str]]:
    """The pool's actions (intents joined with their outcomes on the same agent),
    filtered, newest first."""
    filters = {k: (params.get(k) or "").strip() for k in ("user", "action", "result", "kmsn")}
    records = pool_records(published_entries() if published is None else published)
    outcomes = {(r.node, r.correlation): r for r in records if r.phase == audit.AuditEntry.OUTCOME}
    rows = []
    for r in records:
        if r.phase != audit.AuditEntry.INTENT:
            continue
        if any(filters[k] and getattr(r, k) != filters[k] for k in ("user", "action", "kmsn")):
            continue
        row = AuditRow(r, outcomes.get((r.node, r.correlation)))
        if filters["result"] and (row.outcome is None or row.outcome.result != filters["result"]):
            continue
        rows.append(row)
    rows.sort(key=lambda row: (row.intent.at, row.intent.node, row.intent.seq), reverse=True)
    return rows, filters


def pool_chains(published: dict[str, list[audit.AuditEntry]]) -> list[tuple[str, audit.ChainStatus]]:
    """Per other agent: its chain as verified from the rows it published, with
    its own pool's key (a watched pool's writer `node@KMSN` with that pool's)."""
    keys = _keys()
    own = settings.STK.kmsn
    return [
        (name, audit.verify_published(entries, keys.get(name.rpartition("@")[2] if "@" in name else own)))
        for name, entries in published.items()
    ]


@panel_view
def audit_log(request: HttpRequest) -> HttpResponse:
    published = published_entries()
    rows, filters = audit_rows(request.GET, published)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    ctx = base_context(
        request,
        _("Audit history"),
        page=page,
        rows=[
            {
                "r": r,
                "at": fmt.when(r.intent.at),
                "action": words.of(words.COMMANDS, r.intent.action),
                "result": words.of(words.RESULTS, r.result),
                "via": words.of(words.CHANNELS, r.intent.via),
                "message": words.outcome(r.message),
            }
            for r in page
        ],
        chain=audit.verify_chain(),
        own_node=settings.STK.node,
        pool_chains=pool_chains(published),
        filters=filters,
        kinds=[(k, words.of(words.COMMANDS, k)) for k in KINDS],
        kmsns=all_kmsns(),
        results=[(r, words.of(words.RESULTS, r)) for r in RESULTS],
        zone=fmt.zone_name(),
        query=urlencode({k: v for k, v in filters.items() if v}),
    )
    return render_live(request, "panel/audit.html", ctx, {"audit-live": "panel/_audit_table.html"})
