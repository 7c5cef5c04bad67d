"""Three real agents whose pool is on etcd (`LEASE_STORE = etcd`, a real
3-member cluster): the failover, steering and panel paths of the file share's
tests, run once here through the same helpers."""

from __future__ import annotations

import time

import pytest
from harness import KMSN, wait_until
from test_agents_audit import api, operator_token, pool_seen, web_up
from test_agents_steering import relayctl, serving

pytestmark = pytest.mark.agents


@pytest.mark.long
def test_a_pool_on_etcd_elects_drains_fails_over_and_shows_its_store(etcd_site_factory):
    site = etcd_site_factory(3)  # fast profile: TTL 3, renew 1, poll 0.5, deadline 2
    site.start()
    first = site.wait_settled(timeout=60)
    old = site.by_name(first.node)
    wait_until(lambda: serving(old) == first.epoch, 15, "the leader's relay")
    for agent in site.agents:
        wait_until(lambda a=agent: web_up(a) and pool_seen(a), 40, f"{agent.name}'s web and pool view")

    # The panel's API (and relayctl doctor) name the store, its endpoints, the etcd leader, the revision.
    issuer = next(a for a in site.agents if a is not old)
    token = operator_token(issuer)
    status, doc = api(issuer, token, f"/sites/{KMSN}/lease")
    store = doc["store"]
    assert status == 200 and store["kind"] == "etcd" and store["prefix"] == site.prefix, doc
    assert store["endpoints"] == site.etcd.endpoints.split(",") and store["leader"] and store["revision"] > 0
    checks = {c["check"]: c for c in relayctl(issuer, "doctor")}
    etcd_rows = {k: v for k, v in checks.items() if "etcd" in k}
    assert len(etcd_rows) >= 6 and all(c["ok"] for c in etcd_rows.values()), etcd_rows
    assert checks["lease signature"]["ok"], checks

    # Steering: a drain issued on another agent is an event on etcd; the leader hands off at once.
    doc = relayctl(issuer, "drain", first.node, "--reason", "etcd maintenance")
    accepted = time.monotonic()
    assert doc["code"] == "accepted", doc
    second = site.wait_leader(timeout=10, other_than=first.node)
    took = time.monotonic() - accepted
    assert second.epoch == first.epoch + 1
    assert took < 2.0, f"drain to a new leader took {took:.2f} s"
    wait_until(lambda: serving(old) is None, 3, "the drained leader's relay to stop")

    # Failover: kill -9 the new leader; the last eligible member takes over after the TTL.
    leader = site.by_name(second.node)
    seq = second.renew_seq
    wait_until(lambda: (site.lease() or second).renew_seq > seq, 5, "a renewal")
    leader.kill9()
    killed = time.monotonic()
    third = site.wait_leader(timeout=15, other_than=second.node, min_epoch=second.epoch + 1)
    took = time.monotonic() - killed
    assert third.node != first.node, "the drained member led again"
    assert third.epoch == second.epoch + 1 and took <= 3 + 3, f"failover took {took:.1f} s"
    winner = site.by_name(third.node)
    wait_until(lambda: serving(winner) == third.epoch, 10, "the survivor's relay")

    # Every agent's history is the pool's: the events came through etcd.
    def elected(agent):
        return sorted(e for k, e, _ in agent.history() if k == "elected")

    expected = [first.epoch, second.epoch, third.epoch]
    wait_until(lambda: elected(winner) == expected, 10, "the three elections in the survivor's history")
    assert any(k == "drain_requested" for k, _, _ in winner.history())
