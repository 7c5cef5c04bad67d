"""Share load benchmark: operations each agent makes on the share per second
(each open of a file, folder listing, write, lock create or remove counts one;
`elections.ports.share.sharefiles.ShareOps`, reported in `pool.json`), on a settled
real site with the default lease timing, beacons off (`BEACON_INTERVAL = 0`)
and on (0.2 s), for 3 and 10 members.

    python bench/share_load.py [--members 3,10] [--window 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, Site, wait_until  # noqa: E402


def pool(agent) -> dict:  # type: ignore[no-untyped-def]
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def per_kind(start: dict, end: dict, seconds: float) -> str:  # type: ignore[type-arg]
    """The kinds of share operations (`share_ops_by`) made in the window, per second, most first."""
    was, now = start.get("share_ops_by") or {}, end.get("share_ops_by") or {}
    rates = {k: (v - was.get(k, 0)) / seconds for k, v in now.items() if v > was.get(k, 0)}
    return ", ".join(f"{k} {r:.2f}" for k, r in sorted(rates.items(), key=lambda kv: -kv[1])) or "none"


def measure(n: int, interval: str, window: float, workdir: Path) -> tuple[float, float, float, str, str]:
    """(mean ops/s per agent, the leader's, the followers' mean, the leader's and one follower's
    operations by kind)."""
    site = Site(workdir / f"n{n}-b{interval}", n=n, timing=DEFAULT, extra={"BEACON_INTERVAL": interval})
    try:
        site.start()
        lease = site.wait_settled(timeout=60 + 10 * n)
        time.sleep(5)  # past the first elections' bursts
        start = {a.name: pool(a) for a in site.agents}
        time.sleep(window)
        wait_until(lambda: all(pool(a).get("updated", 0) > start[a.name].get("updated", 0) + window / 2
                               for a in site.agents), 30, "fresh pool views")  # fmt: skip
        rates, kinds = {}, {}
        for a in site.agents:
            end = pool(a)
            seconds = end["updated"] - start[a.name]["updated"]
            rates[a.name] = (end["share_ops"] - start[a.name]["share_ops"]) / seconds
            kinds[a.name] = per_kind(start[a.name], end, seconds)
        leader = rates.pop(lease.node)
        follower = kinds[next(iter(rates))]
        return (
            statistics.mean([leader, *rates.values()]),
            leader,
            statistics.mean(rates.values()),
            kinds[lease.node],
            follower,
        )
    finally:
        site.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", default="3,10")
    ap.add_argument("--window", type=float, default=20.0)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="stk-bench-share-") as tmp:
        for n in (int(x) for x in args.members.split(",")):
            for interval in ("0", "0.2"):
                mean, leader, followers, leader_kinds, follower_kinds = measure(
                    n, interval, args.window, Path(tmp)
                )
                mode = "beacons on " if interval != "0" else "beacons off"
                row = (f"  {n:2d} members, {mode}: {mean:5.1f} share ops/agent/s "
                       f"(leader {leader:5.1f}, followers {followers:5.1f})")  # fmt: skip
                print(row, flush=True)
                print(
                    f"      leader by kind: {leader_kinds}\n      a follower by kind: {follower_kinds}",
                    flush=True,
                )
                rows.append(row)
    print(f"\nshare load (default timing, settled site, window {args.window:.0f} s)")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
