"""relayctl on a real site never shows a stale view as current (issue 23, part 1).

Every view says how old it is and where it comes from; on a host whose agent was
killed, `list`, `history` and `doctor` refuse with exit 5 (the stale-view code),
saying why and how old, unless `--stale-ok`, which shows it marked STALE; a paused
pool heads the listing with PAUSED; each member has a state; `doctor` fails when no
relay answers; `history` shows failovers by default, audit rows on `--kind audit`,
and escapes a reason's control characters.
"""

import json
import re
import subprocess
import sys
from datetime import datetime

import pytest
from harness import ROOT, wait_until
from test_agents_audit import pool_seen, web_up

pytestmark = [pytest.mark.agents]

STALE_EXIT = 5
RED = "\x1b[31mred"


CTL = "import sys; from stkrelay.cli import relayctl; sys.argv[0] = 'relayctl'; sys.exit(relayctl())"


def ctl(agent, *args):
    """`relayctl ARGS` as the console script runs it: (exit code, stdout, stderr)."""
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, "-c", CTL, *args], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env=env)  # fmt: skip
    return out.returncode, out.stdout, out.stderr


@pytest.mark.long
def test_views_state_their_age_refuse_when_stale_show_paused_and_fail_doctor_with_no_relay(site_factory):
    site = site_factory(2)
    site.start()
    lease = site.wait_leader(timeout=40)
    for agent in site.agents:
        wait_until(lambda a=agent: web_up(a) and pool_seen(a, 2), 40, f"{agent.name}'s web and pool view")
    follower = next(a for a in site.agents if a.name != lease.node)
    leader = site.by_name(lease.node)

    # Fresh: the header says where from and how old, each member has its state, in every format.
    code, out, err = ctl(follower, "list")
    assert code == 0, err
    assert "pool.json" in out and " s old (written " in out and "STALE" not in out and "PAUSED" not in out
    table = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert table[0][:2] == ["NODE", "STATE"] and "LEADER" in table[0] and "SINCE" in table[0], out  # a header
    rows = {row[0]: row[1] for row in table[1:]}
    assert rows == {lease.node: "leader", follower.name: "follower"}, out

    # "leader since", with its zone (as the panel says it), once the worker ingested the election
    def leader_row():
        rows = ctl(follower, "list")[1].splitlines()
        return next((ln for ln in rows if ln.split()[:2] == [lease.node, "leader"] and " UTC" in ln), None)

    leader_row = wait_until(leader_row, 20, "the leader's row saying since when")
    assert re.search(r" \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC([+-]\d+)? ", leader_row), leader_row
    code, out, _ = ctl(follower, "list", "-o", "json")
    doc = json.loads(out)
    assert datetime.fromisoformat(doc["leader_since"]).tzinfo is not None
    assert code == 0 and doc["stale"] is False and doc["age_s"] < 3 and doc["source"].endswith("pool.json")
    assert datetime.fromisoformat(doc["updated"]).tzinfo is not None  # wall clock, not monotonic seconds
    assert doc["members"][lease.node]["state"] == "leader"
    code, out, _ = ctl(follower, "list", "-o", "tsv")
    assert code == 0 and out.splitlines()[0].split("\t")[:2] == ["node", "state"]
    assert f"{follower.name}\tfollower\t" in out
    code, out, _ = ctl(follower, "list", "-o", "yaml")
    assert code == 0 and '"stale": false' in out and f'  "{lease.node}":' in out

    # A drain with a hostile reason: a failover row (escaped), and an audit row only on --kind audit.
    code, out, err = ctl(follower, "drain", follower.name, "--reason", RED)
    assert code == 0, out + err
    ctl(follower, "undrain", follower.name)

    def history(kind):
        code, out, err = ctl(follower, "history", "-n", "200", "--kind", kind)
        assert code == 0, err
        return out

    wait_until(lambda: "audit" in history("audit"), 20, "the drain's audit row ingested")
    failovers = history("failover")
    assert "drain_requested" in failovers and " audit " not in failovers
    assert "\\u001b[31mred" in failovers and "\x1b" not in failovers  # printed escaped, never raw
    audits = history("audit").splitlines()[1:]
    assert audits and all(" audit " in line for line in audits), audits
    assert "drain_requested" in history("all") and " audit " in history("all")

    # History: times with their zone; the leader actions' action_applied rows only on --all.
    lines = history("failover").splitlines()[1:]
    assert lines and all(" UTC" in line.split("  epoch")[0] for line in lines), lines
    wait_until(lambda: "action_applied" in ctl(follower, "history", "-n", "200", "--all")[1], 20,
               "the relay action's applied row ingested")  # fmt: skip
    assert "action_applied" not in history("failover")
    assert "action_applied" in ctl(follower, "history", "-n", "200", "--all")[1]

    # Watch: the listing again every N s, each headed by its time, until Ctrl-C (exit 0, no traceback).
    watch = subprocess.Popen([sys.executable, "-c", CTL, "list", "-w", "0.5"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={"PATH": "/usr/bin:/bin", "STK_INI": str(follower.ini)})  # fmt: skip
    try:
        frames = [watch.stdout.readline() for _ in range(2 * (4 + len(rows)))]
        heads = [f for f in frames if "Ctrl-C" in f]
        assert len(heads) >= 2 and all(" UTC" in h for h in heads), frames
    finally:
        watch.send_signal(2)
        err = watch.communicate(timeout=20)[1]
    assert watch.returncode == 0 and "Traceback" not in err, err

    # Paused: every listing says so first.
    assert ctl(follower, "pause")[0] == 0
    wait_until(lambda: ctl(follower, "list")[1].startswith("PAUSED"), 20, "PAUSED on the follower's list")
    assert ctl(follower, "resume")[0] == 0
    wait_until(lambda: ctl(follower, "list")[1].startswith("view of "), 20, "PAUSED gone after resume")

    # The follower's agent killed: its view goes stale and every reading of it is refused.
    follower.kill9()
    wait_until(lambda: ctl(follower, "list")[0] == STALE_EXIT, 20, "the stale view refused")
    code, out, err = ctl(follower, "list")
    assert out == "" and "s old (TTL 3 s)" in err and "runagent" in err and "--stale-ok" in err
    assert ctl(follower, "history")[0] == STALE_EXIT
    code, out, _ = ctl(follower, "list", "--stale-ok")
    assert code == 0 and "STALE" in out.splitlines()[0]
    assert json.loads(ctl(follower, "list", "--stale-ok", "--json")[1])["stale"] is True

    # And the leader killed too: no relay answers, and doctor says so with a failure.
    leader.kill9()
    code, out, err = ctl(follower, "doctor")
    assert code == STALE_EXIT and "stale" in err, out + err
    code, out, err = ctl(follower, "doctor", "--stale-ok")
    assert code == 1, out + err
    assert "FAIL exactly one relay answering: answering: none" in out, out
