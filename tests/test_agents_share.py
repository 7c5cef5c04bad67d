"""The share goes away (removed, or permissions taken): the leader steps down by
its deadline, nobody crashes, the pool recovers when the share returns."""

import os
import time

import pytest
from harness import wait_until

pytestmark = pytest.mark.agents

DEADLINE = 2.0  # fast profile's RENEW_DEADLINE


def _outage_and_recovery(site, break_share, restore_share):
    site.start()
    lease = site.wait_settled()
    leader = site.by_name(lease.node)
    broke_at = time.monotonic()
    break_share()
    wait_until(
        lambda: leader.state().get("leader") is False,
        DEADLINE + 2.0,
        "the leader to step down by its deadline",
    )
    assert time.monotonic() - broke_at <= DEADLINE + 2.0
    # While the share is away nobody leads, and every agent lives.
    end = time.monotonic() + 3
    while time.monotonic() < end:
        assert not any(a.state().get("leader") for a in site.agents)
        time.sleep(0.1)
    assert all(a.alive() for a in site.agents)
    restore_share()
    back = site.wait_leader(timeout=20, min_epoch=lease.epoch + 1)
    wait_until(
        lambda: [a.name for a in site.agents if a.state().get("leader")] == [back.node],
        10,
        "exactly the new lease holder to lead",
    )
    logs = "".join(a.log() for a in site.agents)
    assert "lease store unreachable" in logs and "Traceback" not in logs


@pytest.mark.long
def test_a_removed_share_makes_the_leader_step_down_and_the_pool_recovers(site_factory):
    site = site_factory(3)
    away = site.lease_dir.with_name("socket.away")
    _outage_and_recovery(
        site, lambda: os.rename(site.lease_dir, away), lambda: os.rename(away, site.lease_dir)
    )


@pytest.mark.skipif(os.uname().sysname != "Linux", reason="drops Linux capabilities")
@pytest.mark.long
def test_an_unreadable_share_makes_the_leader_step_down_and_the_pool_recovers(site_factory):
    site = site_factory(3)
    for agent in site.agents:  # root ignores chmod: run the agents without DAC override
        agent.wrapper = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    try:
        _outage_and_recovery(site, lambda: site.lease_dir.chmod(0), lambda: site.lease_dir.chmod(0o755))
    finally:
        site.lease_dir.chmod(0o755)
