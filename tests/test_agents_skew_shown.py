"""Clock skew is shown, never used (ADR 0011): an agent whose wall clock is two
minutes fast (libfaketime) measures itself against the file server (the mtime the
server gives its heartbeat) and says so in its heartbeat; every agent's view, the
API and `relayctl doctor` show its clock against the file server's and against
this agent's, and the pool goes on as if nothing were wrong: it stays eligible."""

import pytest
from harness import faketime_env, wait_until
from test_agents_audit import KMSN, api, operator_token, pool_seen, relayctl, web_up

from elections.ports.local.localstate import LocalState

pytestmark = pytest.mark.agents

SKEW = 120.0


def clock_of(agent, node):
    m = LocalState(agent.data_dir).pool().members.get(node)
    return None if m is None else m.clock


@pytest.mark.long
def test_a_fast_clock_is_measured_against_the_file_server_and_shown_not_used(site_factory, tmp_path):
    site = site_factory(2)
    s1, s2 = site.agents
    s1.start()
    lease = site.wait_leader(timeout=40)
    s2.env = faketime_env(tmp_path)(f"+{SKEW:g}s")
    s2.start()
    wait_until(lambda: clock_of(s1, "S002") is not None and clock_of(s1, "S001") is not None, 40,
               "both members' clock readings in S001's view")  # fmt: skip
    fast, mine = clock_of(s1, "S002"), clock_of(s1, "S001")
    assert fast.against == mine.against == "file server"
    assert abs(fast.offset_s - SKEW) < 5 and fast.error_s < 2, fast
    assert abs(mine.offset_s) < 2, mine  # S001's clock is the machine's: the file server's too

    view = LocalState(s1.data_dir).pool()
    assert view.members["S002"].eligible  # nothing is decided on it
    assert lease.node == "S001" == site.lease().node

    wait_until(lambda: web_up(s1) and pool_seen(s1, 2), 40, "S001's panel")
    token = operator_token(s1)
    status, doc = api(s1, token, f"/sites/{KMSN}/members")
    assert status == 200
    shown = {m["node"]: m["clock"] for m in doc["members"]}
    assert abs(shown["S002"]["vs_this_agent_s"] - SKEW) < 5 and shown["S002"]["against"] == "file server"
    assert shown["S001"]["vs_this_agent_s"] is None  # this agent itself

    _, checks = relayctl(s1, "doctor")
    by_name = {c["check"]: c for c in checks}
    assert not by_name["clock of S002"]["ok"] and "vs the file server" in by_name["clock of S002"]["detail"]
    assert "vs S001" in by_name["clock of S002"]["detail"] and "never used for a decision" in by_name[
        "clock of S002"]["detail"]  # fmt: skip
    assert by_name["clock of S001"]["ok"], by_name["clock of S001"]
