#!/usr/bin/env python
"""Registrations per second a relay serves while 2,000 idle sockets are open.

    python bench/relay_idle.py             # about 10 s
    python bench/relay_idle.py --idle 4000 --seconds 5

The relay (`relay.server.relay_server.RelayServer`, caps sized from this process's file
limit, protocol 1.1 clients) runs in its own process; this process opens the
idle sockets (from 40 loopback addresses, never saying a word) and then, one
after another, connects, registers (``cnonce`` + ``sauth`` checked) and
disconnects, for `--seconds`. Printed: the rate with no idle socket, the rate
with the idle ones open, and what the relay refused or evicted meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relay.server.relay_server import RelayServer  # noqa: E402
from relay.wire.auth import new_nonce  # noqa: E402
from relay.wire.client_connection import ClientConnection  # noqa: E402
from relay.wire.events import Registered  # noqa: E402

KMSN = "9999-9999-99-99"
TOKEN = "bench-token-5f0c2a9e7d13"
HOST = "127.0.0.57"


def raise_file_limit(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(hard, max(soft, want))
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def serve() -> None:
    """Child: the relay; prints its port, then one JSON snapshot per line asked on stdin."""

    async def main() -> None:
        server = RelayServer(
            node="S001", kmsn=KMSN, token=TOKEN, gate=lambda: True, epoch=7, register_timeout=60
        )
        await server.start(HOST, 0, 0)
        print(server.addresses["json"][1], flush=True)
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, sys.stdin.readline):
            print(json.dumps(server.snapshot()["admission"]), flush=True)

    asyncio.run(main())


def register_once(port: int, n: int) -> None:
    conn = ClientConnection(role="agent", kmsn=KMSN, station=f"B{n}", token=TOKEN, cnonce=new_nonce())
    with socket.create_connection((HOST, port), timeout=10) as sock:
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise RuntimeError("the relay closed the connection before registering us")
            conn.receive_data(data)
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
            events = conn.events_received()
            if any(isinstance(e, Registered) for e in events):
                return
            if conn.closed:
                raise RuntimeError(f"not registered: {events}")


def rate(port: int, seconds: float) -> tuple[float, float]:
    """(registrations per second, worst registration in ms) over `seconds`."""
    n, worst = 0, 0.0
    start = time.perf_counter()
    while (now := time.perf_counter()) - start < seconds:
        register_once(port, n)
        worst = max(worst, time.perf_counter() - now)
        n += 1
    return n / (time.perf_counter() - start), worst * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    limit = raise_file_limit(2 * args.idle + 1024)
    if args.serve:
        serve()
        return
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--idle", str(args.idle)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    idle: list[socket.socket] = []
    try:
        port = int(child.stdout.readline())
        print(f"stkrelay relay idle bench: Python {sys.version.split()[0]}, file limit {limit}")
        base, base_worst = rate(port, args.seconds)
        print(f"registrations/s with no idle socket:         {base:8.0f}  (worst {base_worst:.1f} ms)")
        for i in range(args.idle):
            s = socket.socket()
            s.bind((f"127.0.0.{100 + i % 40}", 0))
            s.connect((HOST, port))
            idle.append(s)
        loaded, worst = rate(port, args.seconds)
        print(f"registrations/s with {args.idle} idle sockets open: {loaded:8.0f}  (worst {worst:.1f} ms)")
        child.stdin.write("\n")
        child.stdin.flush()
        admission = json.loads(child.stdout.readline())
        print(f"relay admission: {json.dumps(admission, sort_keys=True)}")
    finally:
        for s in idle:
            s.close()
        child.kill()
        child.wait(5)


if __name__ == "__main__":
    main()
