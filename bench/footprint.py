#!/usr/bin/env python
"""Memory and idle CPU of every process of an agent (issue 12, point 4).

    python bench/footprint.py                # a 3-member site, 60 s of idle sampling
    python bench/footprint.py --seconds 20

Starts a real 3-member site (tests/harness.py `Site`, DESIGN timing), waits
until it has settled (a leader, both followers following), then samples, for
every process of each agent's process group (the supervisor and its
children) and its own redis-server: `VmRSS` (and `Pss` from smaps_rollup,
which splits shared pages fairly) from /proc/<pid>/status, and utime+stime
from /proc/<pid>/stat over `--seconds`. Printed: one line per process (its
component from STK_COMPONENT), and one total per agent, RSS in MiB and CPU
in % of one core averaged over the window.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from harness import DEFAULT, Site  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    pid: int
    name: str
    rss_kib: int
    pss_kib: int
    ticks: int


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
                      _field(f"/proc/{pid}/smaps_rollup", "Pss"), _ticks(pid))  # fmt: skip
    except OSError:
        return None


def measure(pids: list[int], seconds: float, every: float = 5.0) -> list[tuple[Sample, float, int, int]]:
    """Per process: the first sample, CPU % of one core over the window, peak RSS and PSS (KiB)."""
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
        out.append((s, 100.0 * used / TICK / elapsed, *peak[p]))
    return out


def mib(rss_kib: float, pss_kib: float) -> str:
    return f"RSS {rss_kib / 1024:6.1f} MiB  PSS {pss_kib / 1024:6.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an stk.ini value")
    args = ap.parse_args()
    extra = dict(item.split("=", 1) for item in args.set)
    with tempfile.TemporaryDirectory() as tmp:
        site = Site(Path(tmp) / "site", n=args.agents, timing=DEFAULT, extra=extra)
        try:
            site.start()
            lease = site.wait_settled(timeout=90)
            time.sleep(5)  # let start-up work (migrations, first ingestion) finish
            plan = [(a, [*group(a.pgid), a.redis.proc.pid]) for a in site.agents]  # type: ignore[attr-defined]
            everything = [p for _, pids in plan for p in pids]
            results = {s.pid: (s, cpu, rss, pss) for s, cpu, rss, pss in measure(everything, args.seconds)}
            print(f"idle footprint over {args.seconds:g} s, leader {lease.node} epoch {lease.epoch}, "
                  f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")  # fmt: skip
            for agent, pids in plan:
                role = "leader" if agent.name == lease.node else "follower"
                rows = [results[p] for p in pids if p in results]
                print(f"{agent.name} ({role})")
                for s, cpu, rss, pss in rows:
                    print(f"  {s.name:<8} pid {s.pid:<7} {mib(rss, pss)}  CPU {cpu:5.2f} %")
                py = [r for r in rows if r[0].name != "redis"]
                for label, part in (("python", py), ("all", rows)):
                    rss, pss, cpu = (sum(r[i] for r in part) for i in (2, 3, 1))
                    print(f"  total {label:<6} {len(part)} processes  {mib(rss, pss)}  CPU {cpu:5.2f} %")
        finally:
            site.stop()


if __name__ == "__main__":
    main()
