#!/usr/bin/env python
"""The fencing proxy's cost (RELAY_KIND = exec, docs/design.md §16): an external relay reached
directly, and through `relay.server.fencing_proxy.FencingProxy` with the real gate.

    python bench/proxy.py            # about 40 s
    python bench/proxy.py --quick    # shorter phases, for a smoke run

Three processes besides this one (the load generator): the external relay
(tests/standin_relay.py, which is not stkrelay's relay: it echoes each
length-prefixed frame), and the proxy, fenced by a `relay.runner.LeadershipGate`
over a real leadership.json that says this process leads (so every forwarded
chunk pays for the gate as it does on a leader). Loopback only (127.0.0.6x).

Passthrough: one publisher writes 64 KiB chunks, at most 1 MiB ahead of one
viewer, through the external relay's raw port (it copies to the others).

Load: one client connection writes 100-byte frames, one write each, at most
`IN_FLIGHT` unanswered, and reads their echoes; msg/s counts echoes, latency
is write -> echo read of the same frame (one clock). Then, separately, one
frame in flight. Rounds interleave direct and proxy; the median is shown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from statistics import median, quantiles

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOST = "127.0.0.61"
IN_FLIGHT = 256
STREAM_CHUNK = 64 << 10
STREAM_WINDOW = 1 << 20
BODY = b'{"type":"send","data":{"seq":12345,"kind":"status","text":"' + b"x" * 40 + b'"}}'
FRAME = struct.pack(">I", len(BODY)) + BODY


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# -- the proxy (a child process) ----------------------------------------------------------
async def serve_proxy(data_dir: str, port: int, upstream: int, upstream_passthrough: int) -> None:
    from relay.runner import LeadershipGate
    from relay.server.fencing_proxy import FencingProxy

    proxy = FencingProxy(gate=LeadershipGate(data_dir, 1), upstream=(HOST, upstream),
                         upstream_passthrough=upstream_passthrough)  # fmt: skip
    await proxy.start(HOST, port, 0)
    done = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
    print("ready", proxy.addresses["passthrough"][1], flush=True)
    await done.wait()


# -- the load generator ------------------------------------------------------------------
async def load(port: int, seconds: float, window: int) -> tuple[float, list[float]]:
    """(echoes per second, latencies in s) of one connection with `window` frames in flight."""
    reader, writer = await asyncio.open_connection(HOST, port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent: deque[float] = deque()
    latencies: list[float] = []
    slots = asyncio.Semaphore(window)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    got = 0

    async def write() -> None:
        while loop.time() < end:
            await slots.acquire()
            sent.append(time.perf_counter())
            writer.write(FRAME)
            if writer.transport.get_write_buffer_size() > 1 << 16:
                await writer.drain()

    async def read() -> None:
        nonlocal got
        while loop.time() < end or sent:
            await reader.readexactly(len(FRAME))
            latencies.append(time.perf_counter() - sent.popleft())
            got += 1
            slots.release()

    started = loop.time()
    await asyncio.gather(write(), read())
    took = loop.time() - started
    await closed(writer)
    return got / took, latencies


async def stream(port: int, seconds: float) -> float:
    """MB/s from one publisher to one viewer on the passthrough port, `STREAM_WINDOW` ahead at most."""
    viewer_r, viewer_w = await asyncio.open_connection(HOST, port)
    _, pub_w = await asyncio.open_connection(HOST, port)
    chunk = b"v" * STREAM_CHUNK
    loop = asyncio.get_running_loop()
    got, written, first = 0, 0, loop.create_future()
    room = asyncio.Event()

    async def view() -> None:
        nonlocal got
        while data := await viewer_r.read(1 << 18):
            got += len(data)
            room.set()
            if not first.done():
                first.set_result(loop.time())

    async def publish() -> None:
        nonlocal written
        while not first.done():  # until the viewer is joined at the far end (earlier bytes are lost)
            pub_w.write(b"p")
            await pub_w.drain()
            await asyncio.sleep(0.01)
        start = loop.time()
        written = got
        while loop.time() < start + seconds:
            if written - got > STREAM_WINDOW:
                room.clear()
                await room.wait()
                continue
            pub_w.write(chunk)
            written += len(chunk)
            await pub_w.drain()

    viewing = asyncio.ensure_future(view())
    await publish()
    start, counted = first.result(), got
    took = loop.time() - start
    viewing.cancel()
    for w in (pub_w, viewer_w):
        await closed(w)
    return counted / took / 1e6


async def closed(writer: asyncio.StreamWriter) -> None:
    """Close a connection and wait until it is (else the relay may see it end only at its own exit)."""
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def p(values: list[float], q: int) -> float:
    return quantiles(values, n=100)[q - 1] * 1000.0 if len(values) > 100 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve-proxy", nargs=4, metavar=("DATA_DIR", "PORT", "UPSTREAM", "UPSTREAM_RAW"))
    args, _ = parser.parse_known_args()  # BENCH_ARGS of the other benches pass through
    if args.serve_proxy:
        data_dir, port, upstream, raw = args.serve_proxy
        asyncio.run(serve_proxy(data_dir, int(port), int(upstream), int(raw)))
        return 0
    from elections.ports.local.localstate import Leadership, LocalState

    seconds, rounds = (1.5, 1) if args.quick else (5.0, 3)
    data = tempfile.mkdtemp(prefix="stk-bench-proxy-")
    now = time.monotonic()
    leads = Leadership(
        node="BENCH", pid=os.getpid(), leader=True, epoch=1, valid_until=now + 3600, updated=now
    )
    LocalState(data).write_leadership(leads)
    relay_port, relay_raw, proxy_port = free_port(HOST), free_port(HOST), free_port(HOST)
    standin = [sys.executable, str(ROOT / "tests" / "standin_relay.py"), "--host", HOST,
               "--port", str(relay_port), "--passthrough-port", str(relay_raw)]  # fmt: skip
    proxy = [
        sys.executable,
        __file__,
        "--serve-proxy",
        data,
        str(proxy_port),
        str(relay_port),
        str(relay_raw),
    ]
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE) for argv in (standin, proxy)]
    try:
        said = [child.stdout.readline().split() for child in children if child.stdout is not None]
        proxy_raw = int(said[1][1])  # "ready <passthrough port>"
        results: dict[str, list[tuple[float, float, float, float]]] = {"direct": [], "proxy": []}
        for _ in range(rounds):
            for name, port, raw in (("direct", relay_port, relay_raw), ("proxy", proxy_port, proxy_raw)):
                rate, lat = asyncio.run(load(port, seconds, IN_FLIGHT))
                _, one = asyncio.run(load(port, min(seconds, 2.0), 1))
                mbps = asyncio.run(stream(raw, min(seconds, 3.0)))
                results[name].append((rate, p(lat, 99), p(one, 99), mbps))
        cpus = os.cpu_count()
        print(f"stkrelay proxy bench: Python {sys.version.split()[0]}, {cpus} CPUs, median of {rounds} "
              f"rounds; {len(FRAME)}-byte frames, {IN_FLIGHT} in flight, 1 connection")  # fmt: skip
        direct = median(r[0] for r in results["direct"])
        direct_mbps = median(r[3] for r in results["direct"])
        for name in ("direct", "proxy"):
            rate = median(r[0] for r in results[name])
            p99 = median(r[1] for r in results[name])
            one = median(r[2] for r in results[name])
            mbps = median(r[3] for r in results[name])
            share = f" ({rate / direct:.0%} of direct)" if name == "proxy" else ""
            raw_share = f" ({mbps / direct_mbps:.0%})" if name == "proxy" else ""
            print(f"  {name:<7} {rate:>9,.0f} msg/s{share:<18} p99 {p99:6.2f} ms under load, "
                  f"{one:5.2f} ms with one in flight; passthrough {mbps:,.0f} MB/s{raw_share}")  # fmt: skip
    finally:
        stop(children)
    return 0


def stop(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each child, then SIGKILL to one still running 5 s later."""
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()


if __name__ == "__main__":
    sys.exit(main())
