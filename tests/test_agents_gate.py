"""The gate on real agents (loopback): a member whose gate is not master is
ineligible with the reason on every agent's API and in `relayctl list`; a gate
command past its deadline is not master; a gate file that is written MASTER
makes its member eligible again, and a leader whose file turns BACKUP hands off.
(keepalived itself drives the gate in tests/test_netns_gate.py.)"""

import pytest
from harness import wait_until
from test_agents_audit import KMSN, api, operator_token, pool_seen, relayctl, web_up

pytestmark = [pytest.mark.agents]


@pytest.mark.long
def test_a_member_whose_gate_is_not_master_is_ineligible_with_the_reason_everywhere(site_factory):
    site = site_factory(2)
    s1, s2 = site.agents
    gate1 = s1.data_dir / "gate"
    gate1.write_text("MASTER\n")
    with s1.ini.open("a") as ini:
        ini.write(f"GATE_FILE = {gate1}\n")
    with s2.ini.open("a") as ini:  # a check that hangs: killed at its deadline, never master
        ini.write("GATE_CMD = sleep 30\nGATE_TIMEOUT = 0.5\n")
    site.start()
    lease = site.wait_leader(timeout=40)
    assert lease.node == "S001"
    for agent in site.agents:
        wait_until(lambda a=agent: web_up(a) and pool_seen(a, 2), 40, f"{agent.name}'s web and pool view")
    token = operator_token(s2)

    def s2_reasons():
        status, doc = api(s2, token, f"/sites/{KMSN}/members")
        assert status == 200, doc
        return {m["node"]: m for m in doc["members"]}["S002"]["reasons"]

    wait_until(lambda: s2_reasons() == ["gate: gate command timed out (0.5 s)"], 20, "S002's reason on S002")
    code, listed = relayctl(s1, "list")
    assert code == 0 and listed["members"]["S002"]["reasons"] == ["gate: gate command timed out (0.5 s)"]
    assert listed["members"]["S001"]["eligible"]
    code, refused = relayctl(s1, "promote", "S002")
    assert code == 1 and "gate command timed out" in refused["message"]

    # S001's VRRP instance becomes BACKUP and nobody else is master: the leader steps aside, no one leads.
    gate1.write_text("BACKUP\n")
    wait_until(lambda: site.lease() is None, 15, "the lease released: no member may lead")
    code, listed = relayctl(s1, "list")
    assert listed["members"]["S001"]["reasons"] == ["gate: gate says BACKUP"]
    gate1.write_text("MASTER\n")
    lease = site.wait_leader(timeout=20, min_epoch=lease.epoch + 1)
    assert lease.node == "S001"
