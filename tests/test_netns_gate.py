"""The gate of ADR 0011 with the real keepalived: three agents, each in its own
network namespace with keepalived on its eth0 (unicast VRRP, one VIP, a notify
script writing the agent's GATE_FILE, a track script that keeps the file's mtime
moving; tests/vrrp.py). The pool follows the VRRP master:

- only the VRRP master is eligible; the BACKUPs say why (the leader's view, `relayctl list`);
- the leader's VRRP instance FAULTs (its track script fails) → it is ineligible
  within one look at the gate and hands the lease to the new VRRP master;
- keepalived on the leader's host is killed outright (no notify: its file keeps
  saying MASTER) → the file stops changing, GATE_MAX_AGE makes that not master,
  and the lease moves to the new VRRP master;
- keepalived on the last host is stopped (it notifies STOP) → nobody is master:
  the pool fails closed, no leader.
"""

import json
import subprocess
import sys
import time

import pytest
from harness import FAST, ROOT, wait_until
from netns import NetnsSite, available
from vrrp import Keepalived

from elections.core.gate import LOOK_EVERY

pytestmark = [pytest.mark.agents]

GATE_MAX_AGE = 3.0
GATE_TIMEOUT = 1.0  # the default


@pytest.fixture
def vrrp_site(tmp_path, request):
    why = available()
    if why:
        pytest.fail(why)  # never a skip on CI: the bootstrap installs what this needs
    site = NetnsSite(tmp_path / "site", 3, timing=FAST)
    request.node.stk_sites = [site]
    keepalived = []
    try:
        hosts = [site.host(i) for i in range(3)]
        for i, agent in enumerate(site.agents):
            gate = agent.data_dir / "vrrp-state"
            with agent.ini.open("a") as ini:  # each agent's own file: keepalived on its host writes it
                ini.write(f"GATE_FILE = {gate}\nGATE_MAX_AGE = {GATE_MAX_AGE:g}\n")
            others = [h for h in hosts if h is not hosts[i]]
            keepalived.append(Keepalived(hosts[i], others, tmp_path / f"vrrp{i + 1}", 150 - 50 * i, gate))
        for k in keepalived:
            k.start()
        site.start()
        yield site, keepalived
    finally:
        for k in keepalived:
            k.kill()
        site.stop()


def view(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def reasons(agent, of: str) -> list[str]:
    return view(agent).get("members", {}).get(of, {}).get("reasons", ["(not seen)"])


def relayctl_list(agent) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "list", "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)})  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.long
def test_the_pool_follows_the_vrrp_master_and_fails_closed_without_one(vrrp_site):
    site, (k1, k2, k3) = vrrp_site
    s1, s2, s3 = site.agents
    wait_until(lambda: k1.state() == "MASTER" and k2.state() == k3.state() == "BACKUP", 30, "VRRP settled")
    lease = site.wait_leader(timeout=40)
    assert lease.node == "S001", "the VRRP master leads"
    as_backup = ["gate: gate says BACKUP"]
    for backup in ("S002", "S003"):  # each member's view comes with its heartbeat: one may come later
        wait_until(lambda b=backup: reasons(s1, b) == as_backup, 15, f"{backup} ineligible as BACKUP")
    members = relayctl_list(s1)["members"]
    assert members["S003"]["reasons"] == ["gate: gate says BACKUP"] and not members["S003"]["eligible"]
    assert members["S001"]["eligible"], members["S001"]

    # 1. The leader's VRRP instance faults: ineligible within one look, the lease goes to the new master.
    k1.fault()
    wait_until(lambda: k1.state() == "FAULT", 10, "S001's instance in FAULT")
    faulted = time.monotonic()
    wait_until(lambda: "gate: gate says FAULT" in reasons(s1, "S001"), 10, "S001 judges itself ineligible")
    took = time.monotonic() - faulted
    print(f"gate FAULT → the leader ineligible in {took:.2f} s (a look each {LOOK_EVERY:g} s)")
    assert took <= LOOK_EVERY + GATE_TIMEOUT + 1.0, f"{took:.2f} s: more than one look (+ its deadline)"
    wait_until(lambda: k2.state() == "MASTER", 15, "S002 the new VRRP master")
    held = lease.epoch
    lease = site.wait_leader(timeout=15, other_than="S001", min_epoch=held + 1)
    assert lease.node == "S002"
    # Handed to S002, or to no one when S002 was still BACKUP at that look (then a release): either
    # way at once, with no TTL waited out.
    ended = [k for k, e, _ in s1.history() if e == held and k in ("handoff", "released")]
    assert ended, "S001 neither handed off nor released: it waited for a TTL"

    # 2. keepalived on the leader's host dies without a word: its MASTER goes stale, the pool moves on.
    k2.kill()
    assert k2.state() == "MASTER"  # nobody rewrote it
    wait_until(lambda: any("gate file unchanged" in r for r in reasons(s2, "S002")), 10, "S002's gate stale")
    wait_until(lambda: k3.state() == "MASTER", 15, "S003 the new VRRP master")
    lease = site.wait_leader(timeout=20, other_than="S002", min_epoch=lease.epoch + 1)
    assert lease.node == "S003"

    # 3. keepalived on the last host stops (notifies STOP): no VRRP master anywhere → no leader.
    k3.stop()
    wait_until(lambda: k3.state() == "STOP", 10, "S003's instance stopped")
    wait_until(lambda: site.lease() is None, 15, "the lease released or expired: nobody may lead")
    for agent in (s1, s2, s3):
        wait_until(lambda a=agent: not a.state().get("leader"), 10, f"{agent.name} not leading")
    # S001's view of S003 follows S003's next heartbeat (a quiet pool reads it when it changes)
    wait_until(lambda: "gate: gate says STOP" in reasons(s1, "S003"), 15, "S003's gate reason in S001's view")
