"""A quiet pool (issue 22) on a real 3-agent site, default timing, beacons on:
the agents touch the share far less than they used to (counted as
`bench/share_load.py` counts: `share_ops` in each agent's `pool.json`), and a
change made on a follower still reaches the leader at once: a `relayctl
drain` there is folded by the leader within a second or two (its nudge), and
the drained member's new record is in the leader's view soon after (its
beacons' record digest changed, so the leader reads that one file)."""

import json
import subprocess
import sys
import time

import pytest
from harness import DEFAULT, ROOT, wait_until

pytestmark = pytest.mark.agents

WINDOW = 15.0
# Before issue 22: leader 9.8, followers 3.3 a second (bench/share_load.py, 3 members). Now about
# 5 and 1; the bounds leave room for a loaded machine and still fail the old behaviour.
LEADER_MAX, FOLLOWER_MAX = 7.0, 1.8


def pool_view(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def hears_everyone(site, agent) -> bool:
    members = pool_view(agent).get("beacons", {}).get("members", {})
    others = {a.name for a in site.agents if a is not agent}
    return others <= set(members) and all(members[n]["age_s"] < 1.0 for n in others)


def rates(site, window: float) -> dict[str, float]:
    start = {a.name: pool_view(a) for a in site.agents}
    time.sleep(window)

    def fresh() -> bool:
        return all(
            pool_view(a).get("updated", 0) > start[a.name]["updated"] + window / 2 for a in site.agents
        )

    wait_until(fresh, 30, "fresh pool views")
    out = {}
    for a in site.agents:
        end = pool_view(a)
        out[a.name] = (end["share_ops"] - start[a.name]["share_ops"]) / (
            end["updated"] - start[a.name]["updated"]
        )
    return out


@pytest.mark.long
def test_a_steady_pool_reads_the_share_little_and_a_drain_on_a_follower_reaches_the_leader_at_once(
    site_factory,
):
    site = site_factory(3, timing=DEFAULT)
    site.start()
    lease = site.wait_settled(timeout=90)
    wait_until(lambda: all(hears_everyone(site, a) for a in site.agents), 30, "everyone to hear the others")
    wait_until(lambda: all(len(pool_view(a).get("members") or {}) == 3 for a in site.agents), 30, "views")
    time.sleep(5)  # past the first election's bursts
    ops = rates(site, WINDOW)
    leader = site.by_name(lease.node)
    followers = [a for a in site.agents if a is not leader]
    assert ops[leader.name] <= LEADER_MAX, ops
    assert all(ops[f.name] <= FOLLOWER_MAX for f in followers), ops
    assert site.lease().epoch == lease.epoch  # steady all along

    drained, commander = followers
    before = pool_view(leader)["command_clock"]
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(commander.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "drain", drained.name],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    returned = time.monotonic()
    # The leader's own looks at the event files are LEASE_RENEW (3 s) apart while quiet.
    wait_until(lambda: pool_view(leader).get("command_clock", 0) > before, 10, "the leader to fold the drain")
    assert time.monotonic() - returned < 2.0, "the leader found the drain by a look, not by its nudge"
    assert "nudge: drain_requested" in leader.log()

    def drained_in_leaders_view() -> bool:
        member = (pool_view(leader).get("members") or {}).get(drained.name) or {}
        return bool(member.get("drain")) and not member.get("eligible")

    wait_until(drained_in_leaders_view, 10, "the drained member's record in the leader's view")
