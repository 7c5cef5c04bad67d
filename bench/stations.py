#!/usr/bin/env python
"""Old stations through the station door (issue 36): seconds from a fault of the leader's PC to
the moment every station that can (and the commander on a PC without an agent) hears the others
through the new relay. Three PCs in network namespaces, the site's own relay (the stand-in under
``RELAY_KIND = exec``, run warm on every member), ``RELAY_FORWARD = lan``, default timing (TTL 10);
the clients, the recipe and the faults are tests/test_netns_stations.py's.

    python bench/stations.py               # 10 of each: kill -9, SIGSTOP, cable cut (~8 min)
    python bench/stations.py --count 3

Each row: p50, p95 and max over the faults of the slowest client's time (the figure a site
feels), and the same for the median client.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from statistics import median, quantiles

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def pct(values: list[float], q: int) -> float:
    return quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10)
    args, _ = parser.parse_known_args()
    from harness import DEFAULT
    from netns import NetnsSite, available
    from test_netns_stations import clients, fault, station_extra

    why = available()
    if why:
        print(f"stations bench: not run: {why}")
        return 1
    root = Path(tempfile.mkdtemp(prefix="stk-bench-stations-", dir="/dev/shm"))
    site = NetnsSite(root, 3, share="lan", timing=DEFAULT, extra=station_extra())
    rows: dict[str, list[tuple[float, float]]] = {"kill -9": [], "SIGSTOP": [], "cable cut": []}
    try:
        site.start()
        stations, commander = clients(site)
        try:
            for _ in range(args.count):
                for kind, name in (("kill", "kill -9"), ("stop", "SIGSTOP"), ("cut", "cable cut")):
                    _, took = fault(site, stations, commander, kind)
                    rows[name].append((max(took.values()), median(took.values())))
        finally:
            for client in [*stations, commander]:
                client.finish()
    finally:
        site.stop()
    print("stkrelay stations bench: 3 PCs, default timing, the site's relay under RELAY_KIND = exec, an old "
          "station per PC on its own 127.0.0.1 and a commander with two members' addresses")  # fmt: skip
    for name, got in rows.items():
        worst, mid = [w for w, _ in got], [m for _, m in got]
        print(f"  {name:<10}: n={len(got):<3} slowest client p50={median(worst):5.2f} "
              f"p95={pct(worst, 95):5.2f} max={max(worst):5.2f}   median client p50={median(mid):5.2f} "
              f"p95={pct(mid, 95):5.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
