"""SIGTERM stops the worker within its budget (issue 42): the supervisor never has to SIGKILL it.

Celery's warm shutdown waited for the beat's sleep to its next entry, and the interpreter's own
finalization after it took 1-4 s more: every stop ended with `worker did not stop in time: SIGKILL`.
"""

import pytest
from harness import wait_until

pytestmark = pytest.mark.agents


@pytest.mark.parametrize("leads", [True, False], ids=["leader", "follower"])
def test_sigterm_stops_every_child_without_a_sigkill(site_factory, leads):
    site = site_factory(2)
    site.start()
    lease = site.wait_leader(timeout=40)
    agent = site.by_name(lease.node) if leads else next(a for a in site.agents if a.name != lease.node)
    wait_until(lambda: "follow" in next(a for a in site.agents if a.name != lease.node).state().get(
        "decision", ""), 30, "the follower to follow")  # fmt: skip
    took = agent.terminate(timeout=15)
    log = agent.log()
    assert "did not stop in time" not in log, log[-3000:]
    assert took < 4.0, f"the agent took {took:.2f} s to stop"
    assert "[agent] stopped in" in log
