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
viewer). Both are warmed first; rounds interleave direct and door (the order flipped each
round), each row is the median of the rounds, and each ratio the median of the rounds' own
ratios (a door round against the direct round beside it, under the same load); the load
average is printed with them. The door's CPU time per message and per MB (from /proc) is the
figure least moved by other load on the machine.
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


async def serve_door(data_dir: str, port: int, copy: bool = False) -> None:
    from relay.server.station_door import StationDoor

    door = StationDoor(data_dir, "BENCH", (HOST,), port, stale_after=3600.0)
    if copy and door.proxy.pipe is not None:  # as where there is no splice: recv() and send()
        door.proxy.no_splice(OSError(0, "--copy"))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, door._stop.set)
    running = asyncio.ensure_future(door.run())
    while door.gate.target is None:
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await running


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ms(values: list[float], q: int) -> float:
    return quantiles(values, n=100)[q - 1] * 1000.0 if len(values) > 100 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--copy", action="store_true", help="the door copies (recv/send), as with no splice")
    parser.add_argument("--serve-door", nargs=2, metavar=("DATA_DIR", "PORT"))
    args, _ = parser.parse_known_args()  # BENCH_ARGS of the other benches pass through
    if args.serve_door:
        asyncio.run(serve_door(args.serve_door[0], int(args.serve_door[1]), args.copy))
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
    door = [sys.executable, __file__, "--serve-door", data, str(door_port)] + ["--copy"] * args.copy
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE) for argv in (standin, door)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline(), "a child did not start"
        ports = {"direct": relay_port, "door": door_port}
        for name in ("direct", "door"):  # warm both (first connections, imports), untimed
            asyncio.run(load(ports[name], 0.3, IN_FLIGHT))
            asyncio.run(stream(ports[name] + 1, 0.3))
        rows: dict[str, list[tuple[float, float, float, float]]] = {"direct": [], "door": []}
        spent: list[tuple[float, float]] = []  # the door's CPU seconds per message, per MB passthrough
        for n in range(rounds):  # interleaved, the order flipped each round: drift and load hit both
            for name in ("direct", "door") if n % 2 == 0 else ("door", "direct"):
                port = ports[name]
                before = cpu_seconds(children[1].pid)
                rate, _ = asyncio.run(load(port, seconds, IN_FLIGHT))
                msgs = cpu_seconds(children[1].pid) - before
                _, one = asyncio.run(load(port, min(seconds, 2.0), 1))
                before = cpu_seconds(children[1].pid)
                mbps = asyncio.run(stream(port + 1, min(seconds, 3.0)))
                raw = cpu_seconds(children[1].pid) - before
                rows[name].append((median(one) * 1000.0, ms(one, 99), rate, mbps))
                if name == "door":
                    spent.append((msgs / (rate * seconds), raw / (mbps * min(seconds, 3.0))))
        load1, load5, _ = os.getloadavg()
        print(f"stkrelay station door bench: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
              f"load average {load1:.1f} {load5:.1f}, median of {rounds} rounds; {len(FRAME)}-byte frames, "
              f"1 connection")  # fmt: skip
        for name in ("direct", "door"):
            p50, p99, rate, mbps = (median(r[k] for r in rows[name]) for k in range(4))
            print(f"  {name:<6} round trip p50 {p50:6.3f} ms p99 {p99:6.3f} ms; {rate:>9,.0f} msg/s with "
                  f"{IN_FLIGHT} in flight; passthrough {mbps:,.0f} MB/s")  # fmt: skip
        # Each door round against the direct round beside it (same load), then the median of those.
        pairs = list(zip(rows["direct"], rows["door"], strict=True))
        extra, rate, mbps = (median(f(d, o) for d, o in pairs) for f in (
            lambda d, o: o[0] - d[0], lambda d, o: o[2] / d[2], lambda d, o: o[3] / d[3]))  # fmt: skip
        per_msg, per_mb = (median(s[k] for s in spent) for k in range(2))
        print(f"         (+{extra:.3f} ms p50; {rate:.0%} msg/s, {mbps:.0%} passthrough of direct, "
              f"median of the rounds' ratios; the door's CPU {per_msg * 1e6:.2f} us/msg, "
              f"{per_mb * 1e3:.2f} ms/MB)")  # fmt: skip
    finally:
        stop(children[1:])  # the door first: its pairs end before the stand-in stops
        stop(children[:1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
