"""packaging/prometheus/alerts.yml: `promtool check rules` and `promtool test rules` (Debian's
`prometheus` package, never its service) pass, every alert has a case that fires, and the
rules and their test inputs name only series a real agent's /metrics carries, with its labels:
scraped from a real two-agent site (leader, follower, beacons), and, for what only a leader
with a cloud tunnel or an address executor exports, from the agent's collector over the files
such an agent writes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import test_panel_support
import yaml
from harness import wait_until
from test_grafana import metric_names
from test_metrics import scrape
from test_panel_support import KMSN, write_leading, write_pool, write_relay

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "packaging" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "packaging" / "prometheus" / "alerts_test.yml"
SCRAPER = {"instance", "job"}  # the labels Prometheus adds to every scraped series
# Only a leader with CLOUD_URL (tunnel) or an address executor (ownership) exports these.
NOT_ON_A_PLAIN_SITE = {"stkrelay_tunnel_connected", "stkrelay_address_verdict"}
dj = test_panel_support.dj

PROMTOOL = shutil.which("promtool")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL, "promtool is missing: run scripts/bootstrap.sh (Debian's prometheus package)"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=RULES.parent)


def alert_rules() -> list[dict]:  # type: ignore[type-arg]
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def input_series() -> list[tuple[str, set[str]]]:
    """(name, label names) of every input series of the rule tests."""
    out = []
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for s in case["input_series"]:
            m = re.fullmatch(r"(\w+)\{(.*)\}", s["series"])
            assert m, s["series"]
            out.append((m.group(1), set(re.findall(r'(\w+)="', m.group(2)))))
    return out


def label_sets(families) -> dict[str, list[set[str]]]:  # type: ignore[no-untyped-def]
    """{sample name: [its label-name sets]} of a parsed scrape."""
    out: dict[str, list[set[str]]] = {}
    for f in families.values():
        for s in f.samples:
            out.setdefault(s.name, []).append(set(s.labels))
    return out


def used_names() -> set[str]:
    """The stkrelay_* series the rules select (`up` is Prometheus's own)."""
    names = set().union(*(metric_names(r["expr"]) for r in alert_rules()))
    return {n for n in names if n != "up"}


def test_promtool_checks_the_rules_and_every_alert_fires_in_its_unit_tests():
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Each alert has a case where it fires and one where it does not (promtool fails on a
    # case whose expected alerts differ from what the rules give, either way).
    cases = [t for case in yaml.safe_load(RULE_TESTS.read_text())["tests"] for t in case["alert_rule_test"]]
    for rule in alert_rules():
        mine = [t for t in cases if t["alertname"] == rule["alert"]]
        assert any(t["exp_alerts"] for t in mine), f"{rule['alert']} never fires in {RULE_TESTS.name}"
        assert any(not t["exp_alerts"] for t in mine), f"{rule['alert']} is never shown quiet"
        assert rule["labels"]["severity"] in ("critical", "warning")


def test_promtool_fails_a_rule_that_would_not_fire(tmp_path):
    # The unit tests can fail: the same tests against a no-leader rule that never fires.
    broken = RULES.read_text().replace(
        "expr: max by (kmsn) (stkrelay_pool_has_leader) == 0",
        "expr: max by (kmsn) (stkrelay_pool_has_leader) < 0",
    )
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    assert PROMTOOL
    run = subprocess.run([PROMTOOL, "test", "rules", RULE_TESTS.name], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)  # fmt: skip
    assert run.returncode != 0 and "StkrelayNoLeader" in run.stdout + run.stderr


@pytest.mark.agents
def test_the_rules_and_their_inputs_name_series_a_real_agents_scrape_carries(site_factory):
    from prometheus_client.parser import text_string_to_metric_families

    site = site_factory(n=2)
    site.start()
    site.wait_settled(60)

    def scraped(agent) -> dict[str, list[set[str]]] | None:  # type: ignore[no-untyped-def]
        with agent.urlopen("/metrics") as r:
            sets = label_sets({f.name: f for f in text_string_to_metric_families(r.read().decode())})
        return sets if "stkrelay_beacon_loss_ratio" in sets else None  # once it heard the other's beacons

    real: dict[str, list[set[str]]] = {}
    for agent in site.agents:
        agent.wait_web()
        for name, sets in wait_until(
            lambda a=agent: scraped(a), 30, f"{agent.name}'s beacon families"
        ).items():
            real.setdefault(name, []).extend(sets)
    assert used_names() - set(real) == NOT_ON_A_PLAIN_SITE, used_names() - set(real)
    for name, labels in input_series():
        if name == "up" or name in NOT_ON_A_PLAIN_SITE:
            continue
        assert name in real, name
        assert labels - SCRAPER in real[name], f"{name}{sorted(labels)}: a real scrape has {real[name]}"
    assert all("kmsn" in labels for name, sets in real.items() if name.startswith("stkrelay_pool")
               for labels in sets)  # fmt: skip
    assert all("kmsn" in labels for labels in real["stkrelay_agent_leader"])


def test_the_tunnel_and_address_inputs_have_the_labels_of_such_an_agents_scrape(dj):
    tunnel = {"url": "tcp://cloud.example:9542", "state": "connected", "connected": False, "epoch": 7,
              "age_s": 1.0, "remote_clients": 0, "streams": 0, "bytes_in": 0, "bytes_out": 0,
              "reconnects": 3, "refusals": {}, "last_error": "refused"}  # fmt: skip
    drift = {"executor": "vip", "address": "192.0.2.10", "verdict": "drift", "expected": "S001", "epoch": 7,
             "holders": ["S002"], "foreign": [], "errors": []}  # fmt: skip
    ownership = {"at": 0, "every": 2.0, "repairs": [], "entries": [drift]}
    write_pool(dj["data_dir"], leader="S001", epoch=7, ownership=ownership)
    write_leading(dj["data_dir"], epoch=7)
    write_relay(dj["data_dir"], {"counts": {}, "relayed": {}, "drops": {}, "tunnel": tunnel})
    _, families = scrape()
    real = label_sets(families)
    assert set(real) >= NOT_ON_A_PLAIN_SITE and used_names() >= NOT_ON_A_PLAIN_SITE
    for name, labels in input_series():
        if name in NOT_ON_A_PLAIN_SITE:
            assert labels - SCRAPER in real[name], f"{name}{sorted(labels)}: the scrape has {real[name]}"
    verdicts = {s.labels["verdict"]: s.value for s in families["stkrelay_address_verdict"].samples}
    assert verdicts["drift"] == 1 and verdicts["ok"] == 0
    (down,) = families["stkrelay_tunnel_connected"].samples
    assert (down.labels["kmsn"], down.value) == (KMSN, 0)


RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_URL = "file:///opt/stkrelay/docs/runbooks.md#"  # where README "Install on a site" puts it


def github_anchor(heading: str) -> str:
    """The anchor GitHub (and most Markdown viewers) give a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_runbook_url_to_its_own_section_of_the_runbooks_page(tmp_path):
    """Issue 42 finding 7: `runbook_url` on every rule, one section per alert, and the README's install
    lines put the page where the URL points."""
    sections = [github_anchor(h) for h in re.findall(r"(?m)^## (.+)$", RUNBOOKS.read_text())]
    urls = {r["alert"]: r["annotations"].get("runbook_url", "") for r in alert_rules()}
    assert all(u.startswith(RUNBOOK_URL) for u in urls.values()), urls
    anchors = {a: u.removeprefix(RUNBOOK_URL) for a, u in urls.items()}
    assert sorted(anchors.values()) == sorted(sections), (anchors, sections)
    assert all(anchor == alert.lower() for alert, anchor in anchors.items()), anchors
    from test_packaging import _readme_install_block

    opt = tmp_path / "opt"
    (line,) = [ln for ln in _readme_install_block() if ln.startswith("install -D")]
    subprocess.run(["sh", "-ec", line.replace("/opt/", f"{opt}/")], cwd=ROOT, check=True)
    assert (opt / "stkrelay" / "docs" / "runbooks.md").read_bytes() == RUNBOOKS.read_bytes()
