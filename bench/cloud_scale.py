"""Cloud scale figure (issue 26 part 4), one node: a real `runcloud` process under many
simulated sites' tunnels (site relays and their tunnel clients in this one process, each
its own KMSN and epoch) and many remote commanders, each sending to its site's agent.

Prints: the cloud's memory per tunnel (RSS delta / sites), messages per second through the
cloud, p50/p99 latency remote commander -> cloud -> tunnel -> site relay -> agent. Three
nodes and the kill-to-reachable time need the etcd directory wired into runcloud: not yet.

    python bench/cloud_scale.py [--sites 200] [--clients 400] [--messages 5]

Known: with 2,000 remote clients the registrations stall (not yet diagnosed; a
cloud admission cap is the suspect, `relay.server.limits`), so the default is 400.
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

from cloudproc import CloudProc  # noqa: E402
from cloudrig import SITE_IP, TOKEN, json_client, lease, pair_port  # noqa: E402

from relay.server.cloud_tunnel import TunnelClient  # noqa: E402
from relay.server.relay_server import RelayServer  # noqa: E402
from relay.wire.auth import (  # noqa: E402
    cloud_key,
    new_nonce,
)
from relay.wire.client_connection import ClientConnection  # noqa: E402
from relay.wire.events import Message, Registered  # noqa: E402


def rss_kib(pid: int) -> int:
    for text in Path(f"/proc/{pid}/status").read_text().splitlines():
        if text.startswith("VmRSS:"):
            return int(text.split()[1])
    return 0


async def commander(ip: str, port: int, station: str, kmsn: str, c: int):  # type: ignore[no-untyped-def]
    """A remote commander, from one of 250 loopback sources (the cloud caps connections per address)."""
    source = (f"127.0.{1 + c // 250}.{1 + c % 250}", 0)
    reader, writer = await asyncio.open_connection(ip, port, local_addr=source)
    conn = ClientConnection(role="commander", kmsn=kmsn, station=station, token=TOKEN, cnonce=new_nonce())
    while True:
        conn.receive_data(await asyncio.wait_for(reader.read(65536), 10))
        writer.write(conn.data_to_send())
        if any(isinstance(e, Registered) for e in conn.events_received()):
            return reader, writer, conn


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def run(args: argparse.Namespace, root: Path) -> None:
    kmsns = [f"{9000 + i:04d}-0000-00-{i % 100:02d}" for i in range(args.sites)]
    cloud = CloudProc(root / "cloud")
    token = cloud.token
    sites = "".join(f"[site:{k}]\nCLOUD_TOKEN = {token}\nLEASE_KEY = {cloud_key(TOKEN, k)}\n" for k in kmsns)
    cloud.ini.write_text(cloud.ini.read_text().split("[site:")[0] + sites)
    cloud.start()
    try:
        base = rss_kib(cloud.proc.pid)
        tunnels, agents = [], {}
        for i, kmsn in enumerate(kmsns):
            server = RelayServer(node="S001", kmsn=kmsn, token=TOKEN, gate=lambda: True, epoch=i + 1)
            await server.start(SITE_IP, pair_port(SITE_IP))

            async def own(kmsn=kmsn, epoch=i + 1):
                return lease("S001", epoch, kmsn)

            tunnel = TunnelClient(server=server, host=cloud.ip, port=cloud.tunnel_port, token=token,
                                  lease_key=cloud_key(TOKEN, kmsn), kmsn=kmsn, node="S001", epoch=i + 1,
                                  lease=own, gate=lambda: True, keepalive=5.0)  # fmt: skip
            tunnel.start()
            tunnels.append(tunnel)
            agents[kmsn] = await json_client(SITE_IP, server.addresses["json"][1], "agent", "S101", kmsn=kmsn)
        deadline = time.monotonic() + 60
        while not all(t.state == "connected" for t in tunnels):
            assert time.monotonic() < deadline, "tunnels did not all connect"
            await asyncio.sleep(0.05)
        print(f"  {args.sites} tunnels connected", file=sys.stderr, flush=True)
        await asyncio.sleep(1)
        per_tunnel = (rss_kib(cloud.proc.pid) - base) / args.sites
        commanders = []
        for c in range(args.clients):
            kmsn = kmsns[c % args.sites]
            commanders.append(
                (kmsn, await json_client(cloud.ip, cloud.relay_port, "commander", f"C{c}", kmsn=kmsn))
            )
        print(f"  {args.clients} remote clients registered", file=sys.stderr, flush=True)
        with_clients = rss_kib(cloud.proc.pid)
        latencies: list[float] = []
        expected = args.clients * args.messages

        async def drain(kmsn: str) -> None:
            reader, _, conn = agents[kmsn]
            while len(latencies) < expected:
                data = await reader.read(1 << 16)
                if not data:
                    return
                conn.receive_data(data)
                now = time.monotonic()
                latencies.extend(
                    now - e.obj["data"] for e in conn.events_received() if isinstance(e, Message)
                )

        readers = [asyncio.create_task(drain(k)) for k in kmsns]
        start = time.monotonic()
        for m in range(args.messages):
            for _, (_, writer, conn) in commanders:
                conn.send_message(time.monotonic(), to="S101", id=f"m{m}")
                writer.write(conn.data_to_send())
            await asyncio.sleep(0)
        deadline = time.monotonic() + 60
        while len(latencies) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - start
        for task in readers:
            task.cancel()
        print(f"cloud-scale 1 node: {args.sites} tunnels, {args.clients} remote clients")
        print(
            f"  memory per tunnel: {per_tunnel:.0f} KiB (cloud RSS {base} -> {with_clients} KiB with clients)"
        )
        print(
            f"  messages/s through the cloud: {len(latencies) / elapsed:.0f} "
            f"({len(latencies)}/{expected} in {elapsed:.2f} s)"
        )
        print(
            f"  latency remote->agent: p50 {pct(latencies, 50) * 1e3:.1f} ms, "
            f"p99 {pct(latencies, 99) * 1e3:.1f} ms"
        )
        print(
            json.dumps(
                {
                    "sites": args.sites,
                    "clients": args.clients,
                    "kib_per_tunnel": round(per_tunnel),
                    "msgs_per_s": round(len(latencies) / elapsed),
                    "p99_ms": round(pct(latencies, 99) * 1e3, 1),
                }
            )
        )
    finally:
        cloud.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sites", type=int, default=200)
    ap.add_argument("--clients", type=int, default=400)  # 2,000 stall at registration: see README
    ap.add_argument("--messages", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-bench-cloud-scale-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
