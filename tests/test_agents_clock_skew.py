"""Followers whose wall clocks are 5 minutes off (libfaketime) neither steal a
live lease nor fail to take over a dead one."""

import time
from datetime import datetime

import pytest
from harness import faketime_env, wait_until

pytestmark = pytest.mark.agents


@pytest.fixture
def skewed_env(tmp_path):
    """Environment that runs a process (and its children) with a skewed wall
    clock and a true monotonic clock, as on a real machine whose clock is off."""
    return faketime_env(tmp_path)


@pytest.mark.long
def test_followers_with_skewed_wall_clocks_follow_and_take_over(site_factory, skewed_env):
    site = site_factory(3)
    s1, s2, s3 = site.agents
    s1.start()
    lease = site.wait_leader(timeout=40)
    assert lease.node == "S001"
    for agent, skew in ((s2, "+300s"), (s3, "-300s")):
        agent.env = skewed_env(skew)
        agent.start()
    wait_until(
        lambda: all("follow" in a.state().get("decision", "") for a in (s2, s3)),
        90,  # two agents starting under faketime, on a loaded machine: CI once took longer than 40 s
        "the skewed agents to follow",
    )
    # 3 TTLs of a live leader: the skewed followers never take it.
    end = time.monotonic() + 9
    while time.monotonic() < end:
        rec = site.lease()
        assert rec is not None and (rec.node, rec.epoch) == ("S001", lease.epoch), rec
        time.sleep(0.1)
    s1.kill9()
    killed = time.monotonic()
    new = site.wait_leader(timeout=15, other_than="S001")
    assert new.epoch == lease.epoch + 1 and new.node in ("S002", "S003")
    assert time.monotonic() - killed <= 3 + 3
    # The new leader's clock really is off: its legacy lease_until shows it.
    written = datetime.strptime(new.lease_until, "%Y%m%d%H%M%S").astimezone()
    skew = (written - datetime.now().astimezone()).total_seconds() - 3  # minus the TTL
    expected = 300 if new.node == "S002" else -300
    assert abs(skew - expected) < 30, f"{new.node} wrote lease_until {new.lease_until}: skew {skew:.0f} s"
