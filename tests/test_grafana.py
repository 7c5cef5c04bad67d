"""packaging/grafana/stkrelay.json asks only for metrics the agent exports: every
metric name in every panel's and variable's PromQL, compared with a real /metrics
scrape of an agent whose pool has a leader and a serving relay (so the leader-only
relay families have samples too)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import test_panel_support
from test_metrics import scrape
from test_panel_support import KMSN, event, write_leading, write_pool, write_relay

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "packaging" / "grafana" / "stkrelay.json"
dj = test_panel_support.dj

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
            "unless", "inf", "nan"}  # fmt: skip


def expressions(dashboard: dict) -> list[str]:  # type: ignore[type-arg]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if t.get("expr")]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            exprs.append(re.sub(r"^label_values\((.*?)(,[^,()]*)?\)$", r"\1", var["query"]))
    return exprs


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    keywords, label names (inside {} or by/without/on/ignoring lists), ranges or strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, legends)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges, $__range, $__rate_interval
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for m in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        if m.group(2) is None and m.group(1).lower() not in KEYWORDS:
            names.add(m.group(1))
    return names


def exported() -> set[str]:
    """Every series name the agent's /metrics can carry, from its families' types."""
    _, families = scrape()
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_sum", "_count"],
        "summary": ["_sum", "_count"],
    }
    names = {s.name for f in families.values() for s in f.samples}
    for f in families.values():
        names.update(f.name + suffix for suffix in suffixes.get(f.type, [""]))
    return names


def test_the_name_parser_finds_metrics_not_functions_or_labels():
    expr = 'histogram_quantile(0.95, sum by (le, kmsn) (rate(a_b_bucket{kmsn=~"$k", x="y(z)"}[5m]))) / c_d'
    assert metric_names(expr) == {"a_b_bucket", "c_d"}


def test_the_dashboard_asks_only_for_metrics_the_agent_exports(dj):
    from django.utils import timezone

    write_pool(dj["data_dir"], leader="S001", epoch=7)
    write_leading(dj["data_dir"], epoch=7)
    snapshot = {
        "counts": {KMSN: {"S002": {"agent": 1}}},
        "relayed": {"messages": 4, "bytes": 40},
        "drops": {"x": 1},
    }
    write_relay(dj["data_dir"], snapshot)
    event("S001", 1, "elected", 7, timezone.now(), "no lease file and no leader ever seen")
    dashboard = json.loads(DASHBOARD.read_text())
    used = set().union(*(metric_names(e) for e in expressions(dashboard)))
    have = exported()
    assert used - have == set(), f"the dashboard asks for metrics /metrics does not export: {used - have}"
    # It covers docs/panel.md's families, the security events and the failover gaps.
    for name in (
        "stkrelay_pool_has_leader",
        "stkrelay_pool_epoch",
        "stkrelay_security_events_total",
        "stkrelay_failover_gap_seconds_bucket",
        "stkrelay_relay_clients",
        "stkrelay_agent_leader",
        "stkrelay_beacon_age_seconds",
        "stkrelay_beacon_loss_ratio",
        "stkrelay_tunnel_connected",
        "stkrelay_tunnel_bytes_total",
        # an operator's first week (issue 42 finding 7): store reachable, stale view, version skew,
        # webhook and ON_ROLE_CHANGE outcomes, login lockouts
        "stkrelay_pool_store_reachable",
        "stkrelay_pool_view_stale",
        "stkrelay_build_info",
        "stkrelay_webhook_events_total",
        "stkrelay_role_change_commands_total",
        "stkrelay_login_lockouts",
    ):
        assert name in used, name  # fmt: skip
