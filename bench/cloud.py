"""Cloud relay benchmark (docs/design.md §14): a real cloud relay (`runcloud`, 127.0.0.90) and a
real 3-agent site (fast timing) whose leader holds the tunnel.

- latency of a commander's message to an agent, one in flight: through the cloud
  (remote commander -> cloud -> tunnel -> leader's relay -> LAN agent) vs direct (a LAN
  commander on the leader's relay); p50/p99;
- remote recovery after a kill -9 of the leader's process group: kill -> a remote
  commander's message reaches the LAN agent again (with the site's own failover,
  kill -> the LAN agent re-registered, for comparison); p50/p95 over --kills;
- remote recovery after a drain of the leader: the new leader's relay serving -> a
  remote message through it (and drain command -> flowing); p50/p95 over --drains.

    python bench/cloud.py [--messages 500] [--kills 10] [--drains 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cloudproc import CloudProc  # noqa: E402
from harness import FAST, KMSN, TOKEN, Site, listening, wait_until  # noqa: E402

from relay.client.discovery import Discovery  # noqa: E402
from relay.client.events import Received  # noqa: E402
from relay.client.relay_client import RelayClient  # noqa: E402
from relay.lease_file import lease_file  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def line(name: str, values: list[float], unit: str = "s", scale: float = 1.0) -> str:
    v = [x * scale for x in values]
    return (f"  {name:34s} n={len(v):4d}  p50={statistics.median(v):7.3f}  p95={pct(v, 95):7.3f}  "
            f"p99={pct(v, 99):7.3f}  max={max(v):7.3f} {unit}")  # fmt: skip


def client(
    role: str, station: str, *, cloud: CloudProc | None = None, site: Site | None = None
) -> RelayClient:
    if cloud is not None:
        discovery = Discovery.build(kmsn=KMSN, fallbacks=[(cloud.ip, cloud.relay_port)])
    else:
        assert site is not None
        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
    return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=discovery, keepalive=1.0)


async def latency(cmd: RelayClient, agent: RelayClient, n: int, tag: str) -> list[float]:
    """One message in flight at a time (ids unique per `tag`: the receiver drops duplicates)."""
    out = []
    for i in range(n):
        started = time.perf_counter()
        await cmd.send({"i": i}, to=agent.station, id=f"{tag}-{i}")
        while True:
            got = await agent.receive(timeout=5)
            if isinstance(got, Received) and got.data == {"i": i}:
                break
        out.append(time.perf_counter() - started)
    return out


async def flows(cmd: RelayClient, agent: RelayClient, tag: str, timeout: float = 30, epoch: int = 0) -> float:
    """Retry a remote message until it reaches `agent`, both registered with `epoch` or later
    (so through the new leader); the monotonic time it arrived."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        if (
            (cmd.epoch or 0) < epoch
            or (agent.epoch or 0) < epoch
            or not (cmd.registered and agent.registered)
        ):
            await asyncio.sleep(0.002)
            continue
        n += 1
        try:
            await cmd.send_confirmed({"tag": tag, "n": n}, to=agent.station, id=f"{tag}-{n}", timeout=0.5)
        except Exception:
            await asyncio.sleep(0.01)
            continue
        try:
            while True:
                got = await agent.receive(timeout=1)
                if isinstance(got, Received) and got.data.get("tag") == tag:
                    return time.monotonic()
        except TimeoutError:
            continue
    raise TimeoutError(f"{tag}: no remote message within {timeout} s")


def _eligible(agent, node: str) -> bool:  # type: ignore[no-untyped-def]
    """`node` is eligible again in `agent`'s own view of the pool (an undrain folded)."""
    try:
        view = json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(((view.get("members") or {}).get(node) or {}).get("eligible"))


def relayctl(agent, *args: str) -> None:  # type: ignore[no-untyped-def]
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", *args, "--json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stdout + done.stderr)


def settled(site: Site) -> None:
    wait_until(lambda: sum("follow" in a.state().get("decision", "") for a in site.agents) == 2, 60,
               "two followers")  # fmt: skip


async def run(args: argparse.Namespace, workdir: Path) -> None:
    cloud = CloudProc(workdir / "cloud")
    cloud.start()
    site = Site(workdir / "site", n=3, timing=FAST, extra=cloud.site_extra())
    results: dict[str, list[float]] = {}
    try:
        site.start()
        lease = await asyncio.to_thread(site.wait_settled)
        await asyncio.to_thread(wait_until, lambda: cloud.tunnel_epoch() == lease.epoch, 20, "the tunnel")
        port = int(site.agents[0].setting("RELAY_PORT"))
        remote = client("commander", "C01", cloud=cloud)
        direct, agent = client("commander", "C02", site=site), client("agent", "S101", site=site)
        for c in (remote, direct, agent):
            await c.start(timeout=20)
        await latency(remote, agent, 20, "warm-remote")
        await latency(direct, agent, 20, "warm-direct")
        through, straight = [], []
        for i in range(args.messages):  # interleaved, so that both see the same machine load
            through += await latency(remote, agent, 1, f"remote-{i}")
            straight += await latency(direct, agent, 1, f"direct-{i}")
        results["latency through the cloud (ms)"] = through
        results["latency direct on the site (ms)"] = straight

        site_gaps, remote_gaps = [], []
        for i in range(args.kills):
            await asyncio.to_thread(settled, site)
            rec = site.lease()
            victim = site.by_name(rec.node)
            await flows(remote, agent, f"pre-kill-{i}")
            victim.kill9()
            killed = time.monotonic()
            while not (agent.registered and (agent.epoch or 0) > rec.epoch):
                await asyncio.sleep(0.005)
            site_gaps.append(time.monotonic() - killed)
            remote_gaps.append(await flows(remote, agent, f"kill-{i}", epoch=rec.epoch + 1) - killed)
            print(f"  kill {i + 1:2d}/{args.kills}: {rec.node} epoch {rec.epoch}: site {site_gaps[-1]:.2f} s,"
                  f" remote {remote_gaps[-1]:.2f} s", flush=True)  # fmt: skip
            victim.start()
        results["kill -9: site (LAN agent back)"] = site_gaps
        results["kill -9: remote message flows"] = remote_gaps
        results["kill -9: remote minus site"] = [r - s for r, s in zip(remote_gaps, site_gaps, strict=True)]

        from_serving, from_drain = [], []
        for i in range(args.drains):
            await asyncio.to_thread(settled, site)
            rec = site.lease()
            old = site.by_name(rec.node)
            other = next(a for a in site.agents if a is not old)
            await flows(remote, agent, f"pre-drain-{i}")
            started = time.monotonic()
            await asyncio.to_thread(relayctl, other, "drain", rec.node)
            new = await asyncio.to_thread(site.wait_leader, 20, rec.node)
            fresh = site.by_name(new.node)
            await asyncio.to_thread(
                wait_until, lambda a=fresh: listening(a.ip, port, 0.05), 10, "the new relay", 0.005
            )
            serving = time.monotonic()
            arrived = await flows(remote, agent, f"drain-{i}", epoch=new.epoch)
            from_serving.append(arrived - serving)
            from_drain.append(arrived - started)
            where = f"{rec.node} -> {new.node}"
            print(f"  drain {i + 1:2d}/{args.drains}: {where}: remote {from_serving[-1]:.2f} s after the new"
                  f" relay served, {from_drain[-1]:.2f} s after the drain", flush=True)  # fmt: skip
            await asyncio.to_thread(relayctl, other, "undrain", rec.node)
            await asyncio.to_thread(
                wait_until, lambda n=rec.node: all(_eligible(a, n) for a in site.agents), 20, "the undrain"
            )
        results["drain: new relay serving -> remote"] = from_serving
        results["drain: drain command -> remote"] = from_drain
        for c in (remote, direct, agent):
            await c.close()
        status = cloud.status()
        tunnels = status["tunnels"]
    finally:
        site.stop()
        cloud.stop()
    print(f"\ncloud relay bench: {args.messages} messages, {args.kills} kills, {args.drains} drains; "
          f"site timing TTL {FAST['LEASE_TTL']} renew {FAST['LEASE_RENEW']}"
          f" poll {FAST['LEASE_POLL']}")  # fmt: skip
    for name, values in results.items():
        if not values:
            continue
        ms = "(ms)" in name
        print(line(name.replace(" (ms)", ""), values, "ms" if ms else "s", 1000.0 if ms else 1.0))
    carried = sum(t["bytes_in"] + t["bytes_out"] for t in tunnels)
    print(f"  the cloud's records: {len(tunnels)} tunnels, epochs {[t['epoch'] for t in tunnels]}, "
          f"{carried:,} bytes carried, refused {status['refused']}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--drains", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-bench-cloud-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
