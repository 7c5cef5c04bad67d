"""A real agent watching many pools: its own renewals meanwhile.

    .venv/bin/python bench/fleet_agent.py [--pools 50] [--members 10] [--seconds 30]

Starts one real agent (default timing: LEASE_RENEW 3 s) whose stk.ini watches
`--pools` simulated pools of `--members` members (tests/poolsim.py, renewing
and heartbeating every second), waits until its panel shows them all, then
for `--seconds` samples its own lease: the longest gap between two renewals
seen (should stay near LEASE_RENEW), and the worker's CPU over the window.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from fleet import build  # noqa: E402
from harness import DEFAULT, Site, wait_until  # noqa: E402
from poolsim import Ticker, pool_section  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pid(data_dir: Path) -> int:
    return int(json.loads((data_dir / "leadership.json").read_text())["pid"])


def main() -> None:
    parser = argparse.ArgumentParser(description="own renewals of an agent watching many pools")
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="stk-fleet-agent-"))
    site = Site(root / "site", n=1, timing=DEFAULT)
    pools = build(root / "pools", args.pools, args.members, 5)
    agent = site.agents[0]
    with open(agent.ini, "a") as fh:
        for p in pools:
            fh.write(pool_section(p.kmsn, p.dir, p.key, NODE="OFFICE1"))
    ticker = Ticker(*pools, every=1.0)
    try:
        site.start()
        site.wait_leader(60)
        watched = agent.data_dir / "watched"

        def all_seen() -> bool:
            return not args.pools or (watched.is_dir() and len(list(watched.glob("*.json"))) == args.pools)

        wait_until(all_seen, 60, "every watched pool's view")
        pid = worker_pid(agent.data_dir)
        last_seq, last_at, longest, renewals = None, None, 0.0, 0
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            lease = site.lease()
            now = time.monotonic()
            if lease is not None and lease.renew_seq != last_seq:
                if last_at is not None:
                    longest = max(longest, now - last_at)
                    renewals += 1
                last_seq, last_at = lease.renew_seq, now
            time.sleep(0.02)
        cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
        print(
            f"agent watching {args.pools} pools x {args.members} members: {renewals} own renewals in "
            f"{args.seconds:.0f} s, longest gap {longest:.2f} s (LEASE_RENEW {DEFAULT['LEASE_RENEW']} s); "
            f"worker CPU {100 * cpu:.1f} % of a core"
        )
    finally:
        ticker.stop()
        site.stop()


if __name__ == "__main__":
    main()
