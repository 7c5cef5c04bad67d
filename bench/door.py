#!/usr/bin/env python
"""The station door's cost (issue 36, relay/server/station_door.py): the site's relay reached
directly, and through the door a station dials on its own PC's loopback.

    python bench/door.py            # about 40 s
    python bench/door.py --quick    # shorter phases, for a smoke run

Three processes besides this one (the load generator, bench/proxy.py's): the site's relay
(tests/standin_relay.py, which is not stkrelay's relay: it echoes each length-prefixed frame),
and the door (`StationDoor`), following a real pool.json that names that relay as the leader's,
its gate asked before every send as on a member. Loopback only (bench/proxy.py's address).

Rows: round trip with one frame in flight (p50, p99: what the door adds to each exchange of a
station), msg/s with 256 in flight on one connection, passthrough MB/s (one publisher, one
viewer). Rounds interleave direct and door; the median of the rounds is shown.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median, quantiles

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proxy import FRAME, HOST, IN_FLIGHT, free_port, load, stop, stream  # noqa: E402  (bench/proxy.py)


async def serve_door(data_dir: str, port: int) -> None:
    from relay.server.station_door import StationDoor

    door = StationDoor(data_dir, "BENCH", (HOST,), port, stale_after=3600.0)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, door._stop.set)
    running = asyncio.ensure_future(door.run())
    while door.gate.target is None:
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await running


def ms(values: list[float], q: int) -> float:
    return quantiles(values, n=100)[q - 1] * 1000.0 if len(values) > 100 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve-door", nargs=2, metavar=("DATA_DIR", "PORT"))
    args, _ = parser.parse_known_args()  # BENCH_ARGS of the other benches pass through
    if args.serve_door:
        asyncio.run(serve_door(args.serve_door[0], int(args.serve_door[1])))
        return 0
    from elections.ports.local.localstate import LocalState
    from elections.ports.local.pool_view import PoolView

    seconds, rounds = (1.5, 1) if args.quick else (5.0, 3)
    data = tempfile.mkdtemp(prefix="stk-bench-door-")
    relay_port = free_port(HOST)
    while True:  # the door takes port and port + 1, as the relay's two ports
        door_port = free_port(HOST)
        if door_port + 1 != relay_port:
            break
    relay_raw = relay_port + 1
    lease = {"node": "S002", "epoch": 1, "ip": HOST, "port": relay_port, "ttl_s": 10, "released": False}
    LocalState(data).write_pool(PoolView(kmsn="BENCH", node="S001", updated=time.monotonic(), lease=lease,
                                         lease_status="valid"))  # fmt: skip
    standin = [sys.executable, str(ROOT / "tests" / "standin_relay.py"), "--host", HOST,
               "--port", str(relay_port), "--passthrough-port", str(relay_raw)]  # fmt: skip
    door = [sys.executable, __file__, "--serve-door", data, str(door_port)]
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE) for argv in (standin, door)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline(), "a child did not start"
        rows: dict[str, list[tuple[float, float, float, float]]] = {"direct": [], "door": []}
        for _ in range(rounds):
            for name, port in (("direct", relay_port), ("door", door_port)):
                rate, _ = asyncio.run(load(port, seconds, IN_FLIGHT))
                _, one = asyncio.run(load(port, min(seconds, 2.0), 1))
                mbps = asyncio.run(stream(port + 1, min(seconds, 3.0)))
                rows[name].append((median(one) * 1000.0, ms(one, 99), rate, mbps))
        print(f"stkrelay station door bench: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
              f"median of {rounds} rounds; {len(FRAME)}-byte frames, 1 connection")  # fmt: skip
        base = {k: median(r[k] for r in rows["direct"]) for k in range(4)}
        for name in ("direct", "door"):
            p50, p99, rate, mbps = (median(r[k] for r in rows[name]) for k in range(4))
            extra = (f"  (+{p50 - base[0]:.3f} ms p50; {rate / base[2]:.0%} msg/s, {mbps / base[3]:.0%} "
                     f"passthrough of direct)") if name == "door" else ""  # fmt: skip
            print(f"  {name:<6} round trip p50 {p50:6.3f} ms p99 {p99:6.3f} ms; {rate:>9,.0f} msg/s with "
                  f"{IN_FLIGHT} in flight; passthrough {mbps:,.0f} MB/s{extra}")  # fmt: skip
    finally:
        stop(children)
    return 0


if __name__ == "__main__":
    sys.exit(main())
