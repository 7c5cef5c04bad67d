"""What a running agent costs (issue 12, point 4): which processes it runs and
how much memory they hold. Figures are measured by `make bench-footprint`;
this test holds the process model and a generous bound, so that a regression
(a beat process again, Django in the standby relay) fails.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness import wait_until

PYTHON_CHILDREN = {"web", "worker", "relay"}  # beside the supervisor ("agent")
RSS_BOUND_MIB = 300  # all Python processes of one idle agent; measured ~230 (was ~440 with five)


def _group(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def _component(pid: int) -> str:
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"STK_COMPONENT="):
            return item.split(b"=", 1)[1].decode()
    return "agent"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_an_idle_agent_runs_four_interpreters_within_a_memory_bound(site_factory):
    site = site_factory(n=1)
    site.start()
    site.wait_leader(timeout=60)
    (agent,) = site.agents
    wait_until(lambda: agent.state().get("leader"), 30, "the agent to know it leads")

    def settled() -> dict[str, int] | None:
        pids = {_component(p): p for p in _group(agent.pgid)}
        return pids if set(pids) == {"agent", *PYTHON_CHILDREN} else None

    pids = wait_until(settled, 30, "the agent's process set")
    assert len(_group(agent.pgid)) == 4  # no beat process: it is a thread of the worker
    cmdlines = {name: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for name, pid in pids.items()}
    assert b"--stk-beat" in cmdlines["worker"]
    assert b"stkrelay.worker" in cmdlines["worker"]  # not Celery's command line (its REPL, issue 41)
    assert b"relay.runner" in cmdlines["relay"]  # the standby relay is no management command
    # Without Django the standby relay holds ~26 MiB; a management command ~50 (~78 before).
    assert _rss_mib(pids["relay"]) < 40
    # The supervisor loads no Django (issue 41): ~40 MiB; ~57 as a management command.
    assert _rss_mib(pids["agent"]) < 48
    total = sum(_rss_mib(p) for p in pids.values())
    assert total < RSS_BOUND_MIB, {name: round(_rss_mib(p), 1) for name, p in pids.items()}
