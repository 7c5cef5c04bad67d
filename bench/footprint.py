#!/usr/bin/env python
"""Memory, idle CPU, wake-ups and start-up of every process of an agent (issues 12 and 41).

    python bench/footprint.py                # a 3-member site, 60 s of idle sampling, 10 starts
    python bench/footprint.py --seconds 20 --starts 5

Starts a real 3-member site (tests/harness.py `Site`, DESIGN timing), waits
until it has settled (a leader, both followers following), then samples, for
every process of each agent's process group (the supervisor and its
children) and its own redis-server: `VmRSS` (and `Pss` from smaps_rollup,
which splits shared pages fairly) from /proc/<pid>/status, utime+stime
from /proc/<pid>/stat, and wake-ups (voluntary and involuntary context switches
of every thread, /proc/<pid>/task/*/status) over `--seconds`. Printed: one line
per process (its component from STK_COMPONENT), and one total per agent, RSS and
PSS in MiB, CPU in % of one core and wake-ups per second averaged over the window.

Then the start-up rows (`--starts` N each): from `runagent` started (its Redis up,
the share reachable) to the agent's own leadership.json saying it follows the live
leader (a follower of the settled site, killed and started again), and to it saying
it leads an empty pool (a one-member site of its own: the first start, which makes
the database and the web certificate, and the restarts after it, the lease taken
away each time). p50, p95 and max of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from harness import DEFAULT, AgentProc, Site, wait_until  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    pid: int
    name: str
    rss_kib: int
    pss_kib: int
    ticks: int
    switches: int = 0  # context switches of all its threads: how often it woke


def _field(path: str, key: str) -> int:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        rest = fh.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])  # utime, stime (fields 14 and 15)


def _switches(pid: int) -> int:
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        for key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            total += _field(f"/proc/{pid}/task/{tid}/status", key)
    return total


def _component(pid: int) -> str:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    if b"redis-server" in cmd[0]:
        return "redis"
    for item in env:
        if item.startswith(b"STK_COMPONENT="):
            return item.split(b"=", 1)[1].decode()
    return "agent" if any(b"runagent" in c for c in cmd) else os.path.basename(cmd[0].decode())


def group(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except OSError:
                continue
    return sorted(pids)


def sample(pid: int) -> Sample | None:
    try:
        return Sample(pid, _component(pid), _field(f"/proc/{pid}/status", "VmRSS"),
                      _field(f"/proc/{pid}/smaps_rollup", "Pss"), _ticks(pid), _switches(pid))  # fmt: skip
    except OSError:
        return None


Measured = tuple[Sample, float, int, int, float]


def measure(pids: list[int], seconds: float, every: float = 5.0) -> list[Measured]:
    """Per process: the first sample, CPU % of one core over the window, peak RSS and PSS (KiB),
    and wake-ups a second."""
    first = {p: s for p in pids if (s := sample(p)) is not None}
    peak = {p: (s.rss_kib, s.pss_kib) for p, s in first.items()}
    started = time.monotonic()
    while (left := seconds - (time.monotonic() - started)) > 0:
        time.sleep(min(every, left))
        for p in first:
            s = sample(p)
            if s is not None:
                peak[p] = (max(peak[p][0], s.rss_kib), max(peak[p][1], s.pss_kib))
    elapsed = time.monotonic() - started
    out = []
    for p, s in first.items():
        last = sample(p)
        used = (last.ticks - s.ticks) if last else 0
        woke = (last.switches - s.switches) if last else 0
        out.append((s, 100.0 * used / TICK / elapsed, *peak[p], woke / elapsed))
    return out


def mib(rss_kib: float, pss_kib: float) -> str:
    return f"RSS {rss_kib / 1024:6.1f} MiB  PSS {pss_kib / 1024:6.1f} MiB"


def _percentiles(xs: list[float]) -> str:
    if not xs:
        return "no start"
    p95 = statistics.quantiles(xs, n=20, method="inclusive")[-1] if len(xs) > 1 else xs[0]
    return (f"p50 {statistics.median(xs):5.2f} s  p95 {p95:5.2f} s  max {max(xs):5.2f} s  ({len(xs)} starts: "
            f"{' '.join(f'{x:.2f}' for x in xs)})")  # fmt: skip


def _started(agent: AgentProc, says: str, timeout: float = 60) -> float:
    """Start `agent`; seconds until its leadership.json says `says` ("follow" or "leader")."""
    for name in ("leadership.json",):  # what the last run left says nothing of this one
        (agent.data_dir / name).unlink(missing_ok=True)
    began = time.monotonic()
    agent.start()

    def there() -> bool:
        state = agent.state()
        return bool(state.get("leader")) if says == "leader" else says in state.get("decision", "")

    wait_until(there, timeout, f"{agent.name} to say {says}", every=0.01)
    return time.monotonic() - began


def follower_starts(site: Site, leader: str, starts: int) -> list[float]:
    """A follower of the settled site killed and started again: seconds to following."""
    agent = next(a for a in site.agents if a.name != leader)
    took = []
    for _ in range(starts):
        agent.kill9()
        took.append(_started(agent, "follow"))
        time.sleep(1)
    return took


def leader_starts(root: Path, starts: int, extra: dict[str, str]) -> list[float]:
    """One-member sites, each new (its database and web certificate made, its share empty):
    seconds from runagent started to leading that empty pool."""
    took = []
    for i in range(starts):
        site = Site(root / f"alone{i}", n=1, timing=DEFAULT, extra=extra)
        try:
            took.append(_started(site.agents[0], "leader"))
        finally:
            site.stop()
    return took


def idle_table(site: Site, lease: Any, seconds: float) -> None:
    """Every process of every agent, sampled over `seconds` of idle, one line each and totals."""
    plan = [(a, [*group(a.pgid), a.redis.proc.pid]) for a in site.agents]  # type: ignore[attr-defined]
    everything = [p for _, pids in plan for p in pids]
    results = {r[0].pid: r for r in measure(everything, seconds)}
    print(f"idle footprint over {seconds:g} s, leader {lease.node} epoch {lease.epoch}, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")  # fmt: skip
    for agent, pids in plan:
        role = "leader" if agent.name == lease.node else "follower"
        rows = [results[p] for p in pids if p in results]
        print(f"{agent.name} ({role})")
        for s, cpu, rss, pss, woke in rows:
            print(f"  {s.name:<8} pid {s.pid:<7} {mib(rss, pss)}  CPU {cpu:5.2f} %  wake-ups {woke:5.1f}/s")
        py = [r for r in rows if r[0].name != "redis"]
        for label, part in (("python", py), ("all", rows)):
            rss, pss, cpu, woke = (sum(r[i] for r in part) for i in (2, 3, 1, 4))
            print(f"  total {label:<6} {len(part)} processes  {mib(rss, pss)}  CPU {cpu:5.2f} %  "
                  f"wake-ups {woke:5.1f}/s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--starts", type=int, default=10, help="start-up rows: starts of each kind (0: none)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an stk.ini value")
    args = ap.parse_args()
    extra = dict(item.split("=", 1) for item in args.set)
    with tempfile.TemporaryDirectory() as tmp:
        site = Site(Path(tmp) / "site", n=args.agents, timing=DEFAULT, extra=extra)
        try:
            site.start()
            lease = site.wait_settled(timeout=90)
            time.sleep(5)  # let start-up work (migrations, first ingestion) finish
            if args.seconds > 0:  # --seconds 0: the start-up rows only
                idle_table(site, lease, args.seconds)
            if args.starts:
                print(f"start-up, runagent to following a live leader: "
                      f"{_percentiles(follower_starts(site, lease.node, args.starts))}")  # fmt: skip
        finally:
            site.stop()
        if args.starts:
            print(f"start-up, runagent to leading an empty pool (a new agent): "
                  f"{_percentiles(leader_starts(Path(tmp), args.starts, extra))}")  # fmt: skip


if __name__ == "__main__":
    main()
