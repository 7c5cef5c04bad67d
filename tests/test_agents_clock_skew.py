"""Followers whose wall clocks are 5 minutes off (libfaketime) neither steal a
live lease nor fail to take over a dead one."""

import shutil
import time

import pytest
from harness import wait_until

pytestmark = pytest.mark.agents


@pytest.mark.skipif(shutil.which("faketime") is None, reason="faketime is installed by make test")
def test_followers_with_skewed_wall_clocks_follow_and_take_over(site_factory):
    site = site_factory(3)
    s1, s2, s3 = site.agents
    s1.start()
    lease = site.wait_leader(timeout=40)
    assert lease.node == "S001"
    for agent, skew in ((s2, "+300s"), (s3, "-300s")):
        agent.wrapper = ["faketime", "-f", skew]
        agent.env = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        agent.start()
    wait_until(
        lambda: all("follow" in a.state().get("decision", "") for a in (s2, s3)),
        40,
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
