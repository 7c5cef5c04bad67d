"""Cloud scale figure (issue 26 part 4): real `runcloud` processes (one node, or three
sharing the tunnel directory on a real 3-member etcd) under many simulated sites' tunnels
(site relays and their tunnel clients in this one process, each its own KMSN and epoch) and
many remote commanders, each sending to its site's agent.

Prints: the cloud's memory per tunnel (RSS delta over all nodes / sites), messages per
second through the cloud, p50/p99 latency remote commander -> cloud (-> the node holding
the tunnel) -> tunnel -> site relay -> agent; with three nodes, the time from kill -9 of
one node until every site is reachable again from a remote client at a surviving node.

    python bench/cloud_scale.py [--nodes 1|3] [--sites 200] [--clients 2000] [--messages 5]

With three nodes, site i dials node i mod 3 first and commander c connects to node c mod 3
(what a round-robin TCP load balancer does): two clients in three are forwarded.

The "2,000 clients stall" of the first version was the bench's: its commanders all came
from 127.0.0.1 (the helper that spreads them over 250 source addresses was never called),
so the cloud's per-address cap (RELAY_MAX_PER_ADDRESS, `relay.server.limits`) closed the 2,001st
connection of that address without a frame, and the test helper `json_client` spun on
read()'s b"" at EOF at 100 % CPU instead of failing. Both fixed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cloudproc import CloudProc, cloud_nodes  # noqa: E402
from cloudrig import SITE_IP, TOKEN, json_client, lease  # noqa: E402
from harness import free_pair  # noqa: E402

from relay.server.cloud_tunnel import TunnelClient  # noqa: E402
from relay.server.relay_server import RelayServer  # noqa: E402
from relay.wire.auth import new_nonce  # noqa: E402
from relay.wire.client_connection import ClientConnection  # noqa: E402
from relay.wire.events import ErrorReceived, Message, Registered  # noqa: E402
from stkhost.pool_keys import cloud_key  # noqa: E402

IPS = ["127.0.26.101", "127.0.26.102", "127.0.26.103"]


def rss_kib(pid: int) -> int:
    try:
        for text in Path(f"/proc/{pid}/status").read_text().splitlines():
            if text.startswith("VmRSS:"):
                return int(text.split()[1])
    except OSError:
        pass
    return 0


async def commander(ip: str, port: int, station: str, kmsn: str, c: int):  # type: ignore[no-untyped-def]
    """A remote commander, from one of 250 loopback sources (the cloud caps connections per address)."""
    source = (f"127.0.{1 + c // 250 % 250}.{1 + c % 250}", 0)
    reader, writer = await asyncio.open_connection(ip, port, local_addr=source)
    conn = ClientConnection(role="commander", kmsn=kmsn, station=station, token=TOKEN, cnonce=new_nonce())
    while True:
        data = await asyncio.wait_for(reader.read(65536), 30)
        if not data:
            raise ConnectionError(f"{station}: closed before registered")
        conn.receive_data(data)
        writer.write(conn.data_to_send())
        for e in conn.events_received():
            if isinstance(e, Registered):
                return reader, writer, conn
            if isinstance(e, ErrorReceived):
                writer.close()
                raise ConnectionError(e.code)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else float("nan")


async def run(args: argparse.Namespace, root: Path) -> None:
    kmsns = [f"{9000 + i:04d}-0000-00-{i % 100:02d}" for i in range(args.sites)]
    etcd = None
    if args.nodes == 1:
        nodes = [CloudProc(root / "cloud", ip=IPS[0], keepalive=args.keepalive)]
    else:
        from etcd import EtcdCluster

        etcd = EtcdCluster(root / "etcd", n=3).start()
        prefix = f"/bench-cloud-scale/{time.time_ns()}/"
        nodes = cloud_nodes(
            root, etcd.endpoints, prefix, IPS[: args.nodes], ttl=args.ttl, keepalive=args.keepalive
        )
    token = nodes[0].token
    sites = "".join(f"[site:{k}]\nCLOUD_TOKEN = {token}\nLEASE_KEY = {cloud_key(TOKEN, k)}\n" for k in kmsns)
    for node in nodes:
        node.ini.write_text(node.ini.read_text().split("[site:")[0] + sites)
        node.start()
    try:
        await measure(args, kmsns, nodes, token)
    finally:
        for node in nodes:
            node.stop()
        if etcd is not None:
            etcd.stop()


async def measure(args, kmsns, nodes, token) -> None:  # type: ignore[no-untyped-def]
    n = len(nodes)
    base = sum(rss_kib(node.proc.pid) for node in nodes)
    tunnels, agents = [], {}
    for i, kmsn in enumerate(kmsns):
        server = RelayServer(node="S001", kmsn=kmsn, token=TOKEN, gate=lambda: True, epoch=i + 1)
        await server.start(SITE_IP, free_pair(SITE_IP))

        async def own(kmsn=kmsn, epoch=i + 1):
            return lease("S001", epoch, kmsn)

        order = nodes[i % n :] + nodes[: i % n]
        tunnel = TunnelClient(server=server, host=order[0].ip, port=order[0].tunnel_port, token=token,
                              lease_key=cloud_key(TOKEN, kmsn), kmsn=kmsn, node="S001", epoch=i + 1,
                              lease=own, gate=lambda: True, keepalive=5.0,
                              also=[(o.ip, o.tunnel_port) for o in order[1:]])  # fmt: skip
        tunnel.start()
        tunnels.append(tunnel)
        agents[kmsn] = await json_client(SITE_IP, server.addresses["json"][1], "agent", "S101", kmsn=kmsn)
    deadline = time.monotonic() + 120
    while not all(t.state == "connected" for t in tunnels):
        if time.monotonic() > deadline:
            states = {t.kmsn: (t.state, t.last_error[:120]) for t in tunnels if t.state != "connected"}
            for node in nodes:
                status = node.status()
                print(node.ip, status["tunnel_refusals"], status["cluster"], file=sys.stderr)
                print(node.log()[-3000:], file=sys.stderr)
            raise AssertionError(
                f"tunnels did not all connect: {len(states)} not: {list(states.items())[:5]}"
            )
        await asyncio.sleep(0.05)
    print(f"  {args.sites} tunnels connected", file=sys.stderr, flush=True)
    await asyncio.sleep(1)
    per_tunnel = (sum(rss_kib(node.proc.pid) for node in nodes) - base) / args.sites
    latencies: list[float] = []
    arrived: dict[str, float] = {}  # probe tag -> when the agent had it

    async def drain(reader, writer, conn) -> None:  # type: ignore[no-untyped-def]
        """Read an agent's (or a commander's) socket, answer its pings, note the messages' times."""
        while True:
            data = await reader.read(1 << 16)
            if not data:
                return
            conn.receive_data(data)
            now = time.monotonic()
            for e in conn.events_received():
                if isinstance(e, Message):
                    if isinstance(e.obj["data"], float):
                        latencies.append(now - e.obj["data"])
                    else:
                        arrived.setdefault(str(e.obj["data"]), now)
            out = conn.data_to_send()
            if out:
                writer.write(out)

    readers = [asyncio.create_task(drain(*agents[k])) for k in kmsns]
    commanders: list = [None] * args.clients
    started = time.monotonic()
    gate = asyncio.Semaphore(64)  # registrations in flight at once

    retries: dict[str, int] = {}

    async def join(c: int) -> None:
        kmsn, node = kmsns[c % args.sites], nodes[c % n]
        async with gate:
            for attempt in range(10):  # a remote client retries what the cloud refused (counted)
                try:
                    commanders[c] = (kmsn, await commander(node.ip, node.relay_port, f"C{c}", kmsn, c))
                    break
                except (ConnectionError, OSError, TimeoutError) as exc:
                    retries[str(exc)[:40]] = retries.get(str(exc)[:40], 0) + 1
                    if attempt == 9:
                        raise
                    await asyncio.sleep(0.2)
        readers.append(asyncio.create_task(drain(*commanders[c][1])))

    await asyncio.gather(*(join(c) for c in range(args.clients)))
    print(f"  {args.clients} remote clients registered in {time.monotonic() - started:.1f} s "
          f"(retried: {retries or 'none'})", file=sys.stderr, flush=True)  # fmt: skip
    with_clients = sum(rss_kib(node.proc.pid) for node in nodes)
    start = time.monotonic()
    sent = 0
    for m in range(args.messages):
        for _, (_, writer, conn) in commanders:
            if conn.state.name != "OPEN":  # moved (its tunnel went) since it registered: not counted
                continue
            conn.send_message(time.monotonic(), to="S101", id=f"m{m}")
            writer.write(conn.data_to_send())
            sent += 1
        await asyncio.sleep(0)
    expected = sent
    deadline = time.monotonic() + 60
    while len(latencies) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    elapsed = time.monotonic() - start
    label = "1 node" if n == 1 else f"{n} nodes (etcd directory, 3 members, DIRECTORY_TTL {args.ttl})"
    print(f"cloud-scale {label}: {args.sites} tunnels, {args.clients} remote clients")
    print(f"  memory per tunnel: {per_tunnel:.0f} KiB (cloud RSS {base} -> {with_clients} KiB with clients)")
    print(f"  messages/s through the cloud: {len(latencies) / elapsed:.0f} "
          f"({len(latencies)}/{expected} in {elapsed:.2f} s)")  # fmt: skip
    rate, p99 = round(len(latencies) / elapsed), round(pct(latencies, 99) * 1e3, 1)
    print(f"  latency remote->agent: p50 {pct(latencies, 50) * 1e3:.1f} ms, p99 {p99:.1f} ms")
    result = {"nodes": n, "sites": args.sites, "clients": args.clients, "kib_per_tunnel": round(per_tunnel),
              "msgs_per_s": rate, "p99_ms": p99}  # fmt: skip
    if n > 1:
        result["all_reachable_after_kill_s"] = await kill_one(nodes, kmsns, tunnels, arrived)
    for _, (_, writer, _) in commanders:
        writer.close()
    for task in readers:
        task.cancel()
    for node in nodes:
        if node.alive():
            status = node.status()
            keys = ("directory_lost", "directory_silent", "directory_held", "tunnel_timeout", "moved",
                    "parked", "peer_forwarded_in", "peer_forwarded_out", "peer_unreachable",
                    "park_expired")  # fmt: skip
            counters = {k: v for k, v in status["counters"].items() if k in keys}
            print(
                f"  node {node.ip}: {counters} tunnel_refusals {status['tunnel_refusals']}", file=sys.stderr
            )
    print(json.dumps(result))


async def kill_one(nodes, kmsns, tunnels, arrived) -> float:  # type: ignore[no-untyped-def]
    """kill -9 of the first node; the time until a commander at a surviving node reaches every site."""
    dead = nodes[0]
    held = [k for k, t in zip(kmsns, tunnels, strict=True) if (t.host, t.port) == (dead.ip, dead.tunnel_port)]
    alive = nodes[1:]
    dead.stop()
    killed = time.monotonic()

    async def probe(i: int, kmsn: str) -> float:
        node, tries = alive[i % len(alive)], 0
        while time.monotonic() - killed < 60:
            tag = f"probe-{kmsn}-{tries}"
            tries += 1
            try:
                _, writer, conn = await commander(node.ip, node.relay_port, f"P{i}", kmsn, 3000 + i)
            except (OSError, TimeoutError, ConnectionError):
                await asyncio.sleep(0.05)
                continue
            conn.send_message(tag, to="S101", id=tag)
            writer.write(conn.data_to_send())
            until = time.monotonic() + 1.0
            while tag not in arrived and time.monotonic() < until:
                await asyncio.sleep(0.01)
            writer.close()
            if tag in arrived:
                return arrived[tag] - killed
        return float("inf")

    times = await asyncio.gather(*(probe(i, k) for i, k in enumerate(kmsns)))
    worst = max(times)
    moved = [t for k, t in zip(kmsns, times, strict=True) if k in held]
    p50 = pct(moved, 50)
    print(f"  kill -9 of node {dead.ip} ({len(held)} of {len(kmsns)} tunnels on it): every site reachable "
          f"again from a surviving node after {worst:.2f} s (p50 of its sites {p50:.2f} s)")  # fmt: skip
    return round(worst, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sites", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=1, choices=(1, 2, 3))
    ap.add_argument("--clients", type=int, default=2000)
    ap.add_argument("--ttl", type=int, default=2, help="DIRECTORY_TTL of the nodes (s)")
    ap.add_argument("--keepalive", type=float, default=5.0, help="RELAY_KEEPALIVE of the nodes (s)")
    ap.add_argument("--messages", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-bench-cloud-scale-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
