#!/usr/bin/env python
"""Relay throughput and latency, against a raw asyncio byte forwarder (the baseline).

    python bench/relay.py            # about a minute on 2 cores
    python bench/relay.py --quick    # shorter phases, for a smoke run

Three processes: the relay (`relay.server.relay_server.RelayServer` with an always-true
gate) and the baseline each run in their own process; this process is the
load generator. On a machine with at least two CPUs the servers are pinned to
the last CPU and the load generator to the first, so each measurement is one
server core against one client core. Loopback only (127.0.0.5x).

Load model, the same for both targets:
- messages: N agent → commander pairs. Each agent writes every ``send`` frame
  with its own write (as a client library does) and keeps at most
  `IN_FLIGHT` / N messages in flight; its commander counts the frames that
  arrive. Latency under load is mostly that window over the rate. Latency is
  agent write → commander read of the same message (one clock: same process),
  under that load and, separately, with one message in flight per pair.
- passthrough: one publisher writing 64 KiB chunks to N viewers, at most
  `STREAM_WINDOW` bytes ahead of the slowest viewer (the relay drops a
  viewer more than 4 MiB behind; a bench must not measure that).
The baseline pairs connections by a 4-byte preamble and forwards each chunk
as read: no framing, no JSON, no routing table. It is the cost floor of
Python's asyncio doing the same I/O.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from statistics import quantiles

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relay.server.relay_server import RelayServer  # noqa: E402
from relay.wire.client_connection import ClientConnection  # noqa: E402
from relay.wire.events import Hello, Registered  # noqa: E402
from relay.wire.framing import encode_frame  # noqa: E402

KMSN = "9999-9999-99-99"
TOKEN = "bench-token-5f0c2a9e7d13"
HOSTS = {"relay": "127.0.0.51", "baseline": "127.0.0.52"}
IN_FLIGHT = 256  # messages in flight in all, split over the pairs
STREAM_CHUNK = 64 << 10
STREAM_WINDOW = 1 << 20
DATA = {"seq": 12345, "kind": "status", "ok": True, "text": "x" * 64}


# -- the servers (child processes) ------------------------------------------------
class Forwarder(asyncio.Protocol):
    """Baseline: b"A"/b"C"/b"P"/b"V" + 3-digit pair id, answered with b"ok"; then
    agent bytes go to its commander (and back), publisher bytes to its viewers."""

    routes: dict[tuple[str, str], list[Forwarder]] = {}

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport, self.head, self.targets = transport, b"", None

    def data_received(self, data: bytes) -> None:
        if self.targets is not None:
            for target in self.targets:
                target.transport.write(data)
            return
        self.head += data
        if len(self.head) < 4:
            return
        role, pair = self.head[:1].decode(), self.head[1:4].decode()
        self.routes.setdefault((role, pair), []).append(self)
        peer = {"A": "C", "C": "A", "P": "V", "V": "P"}[role]
        self.targets = self.routes.setdefault((peer, pair), [])
        self.transport.write(b"ok")

    def connection_lost(self, exc):  # type: ignore[no-untyped-def]
        for group in self.routes.values():
            if self in group:
                group.remove(self)


async def serve(kind: str, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    if kind == "relay":
        server = RelayServer(node="BENCH", kmsn=KMSN, token=TOKEN, gate=lambda: True, epoch=1)
        await server.start(host, port, 0)
        ports = f"{server.addresses['json'][1]} {server.addresses['passthrough'][1]}"
    else:
        listener = await loop.create_server(Forwarder, host, port, backlog=1024)
        ports = f"{listener.sockets[0].getsockname()[1]}"
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    print("ready", ports, flush=True)
    await done.wait()


# -- the load generator ----------------------------------------------------------------
class Link(asyncio.BufferedProtocol):
    """One client: handshake (relay: register; baseline: preamble), then counting."""

    def __init__(self, kind: str, role: str, station: str, pair: int) -> None:
        self.kind, self.role = kind, role
        self.ready = asyncio.get_running_loop().create_future()
        self.buf = bytearray(256 << 10)
        self.view = memoryview(self.buf)
        self.pending = bytearray()  # an incomplete frame (message receivers)
        self.got = 0
        self.on_frames = self.on_bytes = None
        raw = role in ("publisher", "viewer")
        if kind == "relay":
            self.conn: ClientConnection | None = ClientConnection(
                role=role, kmsn=KMSN, station=station, token=TOKEN, raw_mode=raw
            )
        else:
            self.conn = None
            self.preamble = role[0].upper().encode() + b"%03d" % pair
            self.ack = b""

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport
        if self.conn is None:
            transport.write(self.preamble)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def buffer_updated(self, n: int) -> None:
        if not self.ready.done():
            self._handshake(bytes(self.view[:n]))
        elif self.on_frames is not None:
            self._count_frames(self.view[:n])
        else:
            self.got += n
            if self.on_bytes is not None:
                self.on_bytes()

    def _handshake(self, data: bytes) -> None:
        if self.conn is None:
            self.ack += data
            if len(self.ack) >= 2:
                self.ready.set_result(None)
            return
        self.conn.receive_data(data)
        self.transport.write(self.conn.data_to_send())
        for event in self.conn.events_received():
            if isinstance(event, Registered):
                self.ready.set_result(None)
            elif not isinstance(event, Hello):
                self.ready.set_exception(RuntimeError(f"{self.role}: {event}"))
                return

    def _count_frames(self, data: memoryview) -> None:
        buf = self.pending
        buf += data
        pos, end, frames = 0, len(buf), 0
        while end - pos >= 4:
            size = 4 + int.from_bytes(buf[pos : pos + 4], "big")
            if end - pos < size:
                break
            pos += size
            frames += 1
        del buf[:pos]
        if frames:
            self.on_frames(frames)  # type: ignore[misc]

    def connection_lost(self, exc):  # type: ignore[no-untyped-def]
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"{self.role} closed during handshake"))


async def connect(kind: str, addr: tuple[str, int], role: str, station: str, pair: int) -> Link:
    loop = asyncio.get_running_loop()
    _, link = await loop.create_connection(lambda: Link(kind, role, station, pair), *addr)
    await asyncio.wait_for(link.ready, 10)
    return link


class Pair:
    """One agent → commander pair keeping at most `window` messages in flight."""

    def __init__(self, agent: Link, commander: Link, frame: bytes, window: int, stats: dict) -> None:
        self.agent, self.frame, self.window, self.stats = agent, frame, window, stats
        self.times: deque[float] = deque()
        self.running = True
        commander.on_frames = self.received

    def pump(self) -> None:
        write, times, frame, clock = self.agent.transport.write, self.times, self.frame, time.perf_counter
        while self.running and len(times) < self.window:
            times.append(clock())
            write(frame)

    def received(self, n: int) -> None:
        now, times, stats = time.perf_counter(), self.times, self.stats
        if stats["measuring"]:
            stats["count"] += n
            lat = stats["lat"]
            for _ in range(n):
                lat.append(now - times.popleft())
        else:
            for _ in range(n):
                times.popleft()
        self.pump()


async def messages(kind: str, addr: tuple[str, int], pairs: int, window: int, seconds: float) -> dict:
    links: list[Link] = []
    stats: dict = {"measuring": False, "count": 0, "lat": []}
    runs = []
    for i in range(pairs):
        commander = await connect(kind, addr, "commander", f"C{i:02d}", i)
        agent = await connect(kind, addr, "agent", f"S{i:02d}", i)
        links += [commander, agent]
        frame = encode_frame({"type": "send", "to": f"C{i:02d}", "data": DATA, "id": "m"})
        runs.append(Pair(agent, commander, frame, window, stats))
    for run in runs:
        run.pump()
    await asyncio.sleep(min(0.5, seconds / 4))  # warm up
    stats["measuring"], started = True, time.perf_counter()
    await asyncio.sleep(seconds)
    stats["measuring"], elapsed = False, time.perf_counter() - started
    for run in runs:
        run.running = False
    deadline = time.monotonic() + 5
    while any(run.times for run in runs) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    for link in links:
        link.transport.close()
    cuts = quantiles(stats["lat"], n=100) if len(stats["lat"]) > 1 else [float("nan")] * 99
    return {"rate": stats["count"] / elapsed, "p50": cuts[49] * 1e3, "p99": cuts[98] * 1e3}


async def stream(kind: str, addr: tuple[str, int], viewers: int, seconds: float) -> dict:
    watchers = [await connect(kind, addr, "viewer", "S00", 0) for _ in range(viewers)]
    publisher = await connect(kind, addr, "publisher", "S00", 0)
    chunk, sent = os.urandom(STREAM_CHUNK), [0]
    state = {"running": True}

    def pump() -> None:
        slowest = min(w.got for w in watchers)
        while state["running"] and sent[0] - slowest < STREAM_WINDOW:
            publisher.transport.write(chunk)
            sent[0] += len(chunk)

    for watcher in watchers:
        watcher.on_bytes = pump
    pump()
    await asyncio.sleep(min(0.5, seconds / 4))
    before, started = sum(w.got for w in watchers), time.perf_counter()
    await asyncio.sleep(seconds)
    total, elapsed = sum(w.got for w in watchers) - before, time.perf_counter() - started
    state["running"] = False
    lost = [w for w in watchers if w.transport.is_closing()]
    for link in [*watchers, publisher]:
        link.transport.close()
    return {
        "aggregate": total / elapsed / 1e6,
        "per_viewer": total / elapsed / 1e6 / viewers,
        "lost": len(lost),
    }


# -- orchestration ----------------------------------------------------------------------------
def start_server(kind: str, cpu: int | None) -> tuple[subprocess.Popen[str], list[int]]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", kind, HOSTS[kind], "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "ready":
        proc.kill()
        raise SystemExit(f"bench: the {kind} server did not start")
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    return proc, [int(p) for p in line[1:]]


def _plural(n: int, word: str) -> str:
    return f"{n:2d} {word}{'s' if n > 1 else ' '}"


async def rounds(measure, rounds: int) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    """Run `measure(kind)` for relay and baseline, interleaved, `rounds` times;
    keep the median round of each (by its first figure), so that background
    load hits both alike."""
    runs: dict[str, list[dict]] = {"relay": [], "baseline": []}
    for _ in range(rounds):
        for kind in runs:
            runs[kind].append(await measure(kind))
    out = {}
    for kind, results in runs.items():
        key = next(iter(results[0]))
        out[kind] = sorted(results, key=lambda r: r[key])[len(results) // 2]
    return out


async def run(quick: bool, pin: bool) -> None:
    seconds, idle_seconds, n = (1.0, 0.5, 1) if quick else (2.0, 1.5, 3)
    cpus = sorted(os.sched_getaffinity(0))
    pin = pin and len(cpus) >= 2
    if pin:
        os.sched_setaffinity(0, {cpus[0]})
    procs = {kind: start_server(kind, cpus[-1] if pin else None) for kind in ("relay", "baseline")}
    json_addr = {k: (HOSTS[k], procs[k][1][0]) for k in procs}
    raw_addr = {"relay": (HOSTS["relay"], procs["relay"][1][1]), "baseline": json_addr["baseline"]}
    frame_len = len(encode_frame({"type": "send", "to": "C00", "data": DATA, "id": "m"}))
    where = f" (servers on CPU {cpus[-1]}, load generator on CPU {cpus[0]})" if pin else ""
    print(f"stkrelay relay bench: Python {sys.version.split()[0]}, {len(cpus)} CPUs{where}")
    print(f"median of {n} interleaved rounds; relay = RelayServer, baseline = raw asyncio forwarder")
    print(f"messages agent -> commander: {frame_len}-byte frames, one write each, {IN_FLIGHT} in flight")
    try:
        for pairs in (1, 10):
            window = IN_FLIGHT // pairs
            res = await rounds(lambda k, p=pairs, w=window: messages(k, json_addr[k], p, w, seconds), n)
            r, b = res["relay"], res["baseline"]
            print(
                f"  {_plural(pairs, 'pair')}  relay {r['rate']:8,.0f} msg/s p50 {r['p50']:5.2f} ms "
                f"p99 {r['p99']:5.2f} ms | baseline {b['rate']:8,.0f} msg/s p50 {b['p50']:5.2f} ms "
                f"p99 {b['p99']:5.2f} ms | ratio {r['rate'] / b['rate']:4.0%}"
            )
        print("latency agent -> commander with one message in flight per pair")
        for pairs in (1, 10):
            res = await rounds(lambda k, p=pairs: messages(k, json_addr[k], p, 1, idle_seconds), 1)
            r, b = res["relay"], res["baseline"]
            print(
                f"  {_plural(pairs, 'pair')}  relay p50 {r['p50']:5.3f} ms p99 {r['p99']:5.3f} ms "
                f"| baseline p50 {b['p50']:5.3f} ms p99 {b['p99']:5.3f} ms"
            )
        print(f"passthrough: {STREAM_CHUNK >> 10} KiB writes, at most {STREAM_WINDOW >> 20} MiB ahead")
        for viewers in (1, 10):
            res = await rounds(lambda k, v=viewers: stream(k, raw_addr[k], v, seconds), n)
            r, b = res["relay"], res["baseline"]
            lost = f" ({r['lost']} viewers dropped!)" if r["lost"] else ""
            print(
                f"  {_plural(viewers, 'viewer')} relay {r['per_viewer']:6.0f} MB/s per viewer "
                f"({r['aggregate']:5.0f} total) | baseline {b['per_viewer']:6.0f} MB/s per viewer "
                f"({b['aggregate']:5.0f} total) | ratio {r['aggregate'] / b['aggregate']:4.0%}{lost}"
            )
    finally:
        for proc, _ in procs.values():
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter phases, one round")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument("--serve", nargs=3, metavar=("KIND", "HOST", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        kind, host, port = args.serve
        asyncio.run(serve(kind, host, int(port)))
    else:
        asyncio.run(run(args.quick, not args.no_pin))


if __name__ == "__main__":
    main()
