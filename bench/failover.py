"""Failover benchmark: kill -9 the leader's process group of a real 3-agent
site N times and time kill → a new valid lease, for the default timing and a
fast profile. Prints p50/p95/max per profile.

    python bench/failover.py [--kills 20] [--profiles default,fast]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, Site, wait_until  # noqa: E402

PROFILES = {
    "default": DEFAULT,  # TTL 10, renew 3, poll 2, deadline 7
    "fast": {"LEASE_TTL": "3", "LEASE_RENEW": "1", "LEASE_POLL": "0.5", "RENEW_DEADLINE": "2"},
}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run_profile(name: str, kills: int, workdir: Path) -> list[float]:
    timing = PROFILES[name]
    renew = float(timing["LEASE_RENEW"])
    site = Site(workdir / name, n=3, timing=timing)
    gaps: list[float] = []
    try:
        site.start()
        site.wait_leader(timeout=60)
        for i in range(kills):
            # Everyone up and following, then kill at a random phase of the renew cycle.
            wait_until(lambda: sum("follow" in a.state().get("decision", "") for a in site.agents) == 2,
                       60, "two followers")  # fmt: skip
            time.sleep(random.uniform(0, renew))
            rec = site.lease()
            assert rec is not None
            victim = site.by_name(rec.node)
            victim.kill9()
            killed = time.monotonic()
            new = wait_until(lambda r=rec: (x := site.lease()) and x.epoch > r.epoch and x, 60,
                             "a new leader", every=0.005)  # fmt: skip
            gap = time.monotonic() - killed
            gaps.append(gap)
            print(f"  {name} kill {i + 1:2d}/{kills}: {rec.node} epoch {rec.epoch} -> "
                  f"{new.node} epoch {new.epoch} in {gap:5.2f} s", flush=True)  # fmt: skip
            victim.start()  # back to three agents
    finally:
        site.stop()
    return gaps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--profiles", default="default,fast")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="stk-bench-") as tmp:
        for name in args.profiles.split(","):
            t = PROFILES[name]
            print(f"profile {name}: TTL {t['LEASE_TTL']} renew {t['LEASE_RENEW']} poll {t['LEASE_POLL']} "
                  f"deadline {t['RENEW_DEADLINE']}, {args.kills} kills", flush=True)  # fmt: skip
            results[name] = run_profile(name, args.kills, Path(tmp))
    print("\nfailover: kill -9 of the leader's process group -> new valid lease (seconds)")
    for name, gaps in results.items():
        t = PROFILES[name]
        print(f"  {name:8s} (TTL {t['LEASE_TTL']:>2s}): n={len(gaps)}  p50={statistics.median(gaps):.2f}  "
              f"p95={pct(gaps, 95):.2f}  max={max(gaps):.2f}  min={min(gaps):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
