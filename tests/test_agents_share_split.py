"""A share that is not shared (issue 19 item 6), with real agents and beacons on loopback.

Two agents of one KMSN whose LEASE_DIRs are two different folders (one of
them "a local copy of W:\\socket") each lead a pool of one. Their beacons
cross; each finds, after the grace, a member whose file its store lacks and a
leader whose lease its store does not have, and says so naming both folders:
in pool.json (the panel's source), the /metrics gauge and `relayctl doctor`.
Two agents on one folder raise nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import FAST, ROOT, Site, wait_until

pytestmark = pytest.mark.agents


class TwoStores(Site):
    """Agent i's LEASE_DIR is a folder of its own: the share, and a local copy of it."""

    def lease_dir_for(self, i: int) -> Path:
        if i == 0:
            return self.lease_dir
        copy = self.root / f"local-copy-{i}" / "socket"
        copy.mkdir(parents=True, exist_ok=True)
        return copy


def pool(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def doctor(agent) -> dict[str, dict]:
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "doctor", "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    return {c["check"]: c for c in json.loads(out.stdout)}


@pytest.fixture
def two_stores(tmp_path):
    site = TwoStores(tmp_path / "site", n=2, timing=FAST)
    yield site
    site.stop()


def test_two_agents_of_one_kmsn_on_two_folders_raise_the_alarm_naming_both(two_stores):
    site = two_stores
    s001, s002 = site.agents
    share, copy = str(site.lease_dir_for(0)), str(site.lease_dir_for(1))
    site.start()
    # Each leads its own pool of one (that is the harm): both relays run, each has epoch 1.
    for agent in site.agents:
        wait_until(
            lambda a=agent: (pool(a).get("lease") or {}).get("node") == a.name, 60, f"{agent.name} leads"
        )

    def kinds(agent) -> set[str]:
        return {f["kind"] for f in pool(agent).get("share_split") or []}

    # member_missing may come first (a member beacons as follower before it leads): wait for both.
    both = {"member_missing", "foreign_leader"}
    wait_until(lambda: kinds(s001) == both and kinds(s002) == both, 60,
               "both agents to find the other on another store, both ways")  # fmt: skip
    for f in pool(s001)["share_split"]:
        assert f["node"] == "S002" and f["ours"] == f"file:{share}" and f["theirs"] == f"file:{copy}"
        assert share in f["detail"] and copy in f["detail"]
    for f in pool(s002)["share_split"]:
        assert f["node"] == "S001" and f["ours"] == f"file:{copy}" and f["theirs"] == f"file:{share}"
    wait_until(lambda: s001.log().count("SHARE SPLIT") >= 2, 10, "the findings logged")
    checks = doctor(s002)
    check = checks["one store for the whole pool (S001)"]
    assert check["ok"] is False and share in check["detail"] and copy in check["detail"]
    with s001.urlopen("/metrics") as response:
        body = response.read().decode()
    assert 'stkrelay_share_split{kmsn="9999-9999-99-99"} 1.0' in body
    assert s001.log().count("SHARE SPLIT") == 2  # once per finding, not at every survey since


@pytest.mark.long
def test_two_agents_on_one_folder_raise_nothing(site_factory):
    site = site_factory(n=2, timing=FAST)
    site.start()
    leader = site.wait_leader(60)
    follower = next(a for a in site.agents if a.name != leader.node)
    # Past the grace (2 x TTL = 6 s) with beacons flowing both ways, and a leader beaconing.
    wait_until(lambda: "S001" in pool(follower).get("beacons", {}).get("members", {})
               or "S002" in pool(follower).get("beacons", {}).get("members", {}), 30, "beacons")  # fmt: skip
    heard_since = pool(follower)["updated"]
    wait_until(lambda: pool(follower).get("updated", 0) - heard_since > 8, 30, "8 s of surveys")
    for agent in site.agents:
        assert pool(agent).get("share_split") == [], pool(agent).get("share_split")
    assert doctor(follower)["one store for the whole pool"]["ok"] is True
