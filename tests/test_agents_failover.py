"""Three real `runagent` agents on 127.0.0.21-23, one lease dir, one Redis each."""

import signal
import time

import pytest
from harness import DEFAULT, listening, wait_until

from elections.ports.local.localstate import LocalState

pytestmark = pytest.mark.agents


def pool_detection(agent) -> str | None:
    pool = LocalState(agent.data_dir).pool()
    return pool.detection if pool.exists else None


@pytest.mark.long
def test_it_elects_one_leader_and_fails_over_within_ttl_plus_3s_after_kill_9(site_factory):
    # The lease alone, as before beacons (BEACON_INTERVAL = 0): tests/test_agents_beacons.py has them on.
    site = site_factory(3, timing=DEFAULT, extra={"BEACON_INTERVAL": "0"})
    site.start()
    first = site.wait_leader(timeout=40)
    # Every agent agrees: exactly one says it leads.
    wait_until(
        lambda: sum(a.state().get("leader") is True for a in site.agents) == 1,
        15,
        "exactly one agent to report leadership",
    )
    leader = site.by_name(first.node)
    # Beacons off: no liveness port, and every agent says it detects by the lease alone.
    assert not listening(leader.ip, int(leader.setting("RELAY_PORT")) + 2)
    wait_until(lambda: all(pool_detection(a) == "lease only" for a in site.agents), 15, "the pool views")
    # Kill right after a renewal is seen, the worst case for the followers' timers.
    seq = first.renew_seq
    wait_until(lambda: (site.lease() or first).renew_seq > seq, 10, "a renewal")
    leader.kill9()
    killed_at = time.monotonic()
    new = site.wait_leader(timeout=30, other_than=first.node)
    took = time.monotonic() - killed_at
    assert new.epoch == first.epoch + 1
    assert took <= 10 + 3, f"failover took {took:.1f} s > LEASE_TTL + 3 s"
    assert all(a.alive() for a in site.agents if a is not leader)
    # The row follows the lease write by a moment: wait for it, then read its reason.
    winner = site.by_name(new.node)
    wait_until(lambda: ("elected", new.epoch) in [(k, e) for k, e, _ in winner.history()], 5, "the row")
    reasons = [r for k, e, r in winner.history() if (k, e) == ("elected", new.epoch)]
    assert reasons and "expired" in reasons[0], reasons


@pytest.mark.long
def test_sigterm_stops_the_leader_within_5s_and_hands_over_at_once(site_factory):
    site = site_factory(3, timing=DEFAULT)
    site.start()
    first = site.wait_leader(timeout=40)
    leader = site.by_name(first.node)
    wait_until(lambda: leader.state().get("leader"), 10, "the leader's state")
    took = leader.terminate()
    stopped = time.monotonic()
    assert took < 5.0, f"the agent took {took:.2f} s to stop"
    new = site.wait_leader(timeout=10, other_than=first.node)
    handover = time.monotonic() - stopped
    assert new.epoch == first.epoch + 1
    # No TTL (10 s) waited out: followers see the release at their next poll (2 s).
    assert handover < 2 + 1.0 + 1.5, f"handover took {handover:.1f} s"
    rows = [(k, e) for k, e, _ in leader.history()]
    assert rows.index(("released", first.epoch)) > rows.index(("elected", first.epoch)), rows


@pytest.mark.long
def test_a_frozen_leader_never_acts_after_its_deadline(site_factory):
    site = site_factory(3)  # fast profile: TTL 3, renew 1, poll 0.5, deadline 2
    site.start()
    first = site.wait_leader(timeout=40)
    old = site.by_name(first.node)
    wait_until(lambda: old.state().get("leader"), 10, "the leader's state file")
    old.signal_group(signal.SIGSTOP)
    frozen_at = time.monotonic()
    new = site.wait_leader(timeout=15, other_than=first.node)
    time.sleep(max(0.0, frozen_at + 2 * 3 - time.monotonic()))  # frozen for 2 x TTL in all
    old.signal_group(signal.SIGCONT)
    # From the moment it wakes: it steps down, never writes the lease again.
    wait_until(lambda: old.state().get("leader") is False, 5, "the old leader to step down")
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        rec = site.lease()
        assert rec is not None and rec.node == new.node and rec.epoch == new.epoch, rec
        time.sleep(0.05)
    assert "deadline" in old.log()
    assert old.alive()
    steps = [(k, e, r) for k, e, r in old.history() if k == "stepped_down"]
    assert steps and steps[-1][1] == first.epoch and "deadline" in steps[-1][2], steps
