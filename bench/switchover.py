"""Planned switchover benchmark: N promotes on a real 3-agent site (default
timing), timing command → the new leader registering the clients, and
counting relay messages lost across each switchover. The command is timed
from relayctl's return and from the moment its event line is on the share
(relayctl returns after it has audited the outcome and shut Django down: with
the command pushed to the leader, the switchover is often over by then).

    python bench/switchover.py [--promotes 20]

An agent client streams numbered messages to a commander client the whole
time (one every 10 ms); after each switchover the bench counts which numbers
never arrived (after the client's duplicate suppression).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, KMSN, TOKEN, Site, wait_until  # noqa: E402

from relay.client.discovery import Discovery  # noqa: E402
from relay.client.events import Received  # noqa: E402
from relay.client.relay_client import RelayClient  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def pool(agent) -> dict:  # type: ignore[no-untyped-def]
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def promote(agent, target: str, epoch: int) -> None:  # type: ignore[no-untyped-def]
    argv = [sys.executable, str(ROOT / "manage.py"), "relayctl", "promote", target, "--epoch", str(epoch)]
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"promote {target} failed: {out.stdout}{out.stderr}")


class LineWatch(threading.Thread):
    """The instant a `promote_requested` line lands in one agent's event file
    (looked at every millisecond, from before relayctl starts)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.start_size = path.stat().st_size if path.exists() else 0
        self.at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and self.at is None:
            try:
                with self.path.open("rb") as f:
                    f.seek(self.start_size)
                    if b'"promote_requested"' in f.read():
                        self.at = time.monotonic()
            except OSError:
                pass
            time.sleep(0.001)


async def run(site: Site, promotes: int) -> tuple[list[float], list[int], list[float], list[float]]:
    def client(role: str, station: str) -> RelayClient:
        d = Discovery.build(token=TOKEN, kmsn=KMSN, lease_dir=str(site.lease_dir))
        return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=d, keepalive=1.0)

    cmd, agent = client("commander", "C01"), client("agent", "S301")
    await cmd.start(timeout=30)
    await agent.start(timeout=30)
    sent, got = 0, set()
    stop = asyncio.Event()

    async def produce() -> None:
        nonlocal sent
        while not stop.is_set():
            await agent.send({"n": sent})
            sent += 1
            await asyncio.sleep(0.01)

    async def consume() -> None:
        while not stop.is_set():
            try:
                item = await cmd.receive(timeout=0.5)
            except TimeoutError:
                continue
            if isinstance(item, Received):
                got.add(item.data["n"])

    tasks = [asyncio.create_task(produce()), asyncio.create_task(consume())]
    times, lost, with_cli, from_line = [], [], [], []
    previous = None
    for i in range(promotes):
        lease = site.lease()
        assert lease is not None
        # Round robin: never straight back to the member that just handed over.
        target = next(a for a in site.agents if a.name not in (lease.node, previous))
        previous = lease.node
        before = sent
        commander = site.agents[i % 3]
        line = LineWatch(site.lease_dir / "events" / f"{commander.name}.jsonl")
        line.start()
        launched = time.monotonic()
        await asyncio.to_thread(promote, commander, target.name, lease.epoch)
        accepted = time.monotonic()
        while not (cmd.registered and agent.registered and cmd.epoch == agent.epoch == lease.epoch + 1):
            if time.monotonic() - accepted > 30:
                raise RuntimeError("clients did not follow within 30 s")
            await asyncio.sleep(0.005)
        done = time.monotonic()
        line.stop.set()
        line.join()
        took = done - accepted
        times.append(took)
        with_cli.append(done - launched)
        if line.at is not None:
            from_line.append(done - line.at)
        await asyncio.sleep(1.5)  # let the stream run on the new leader, then count the gap
        window = set(range(max(0, before - 50), sent - 50))
        missing = sorted(window - got)
        lost.append(len(missing))
        print(
            f"  promote {i + 1:2d}/{promotes}: {lease.node} epoch {lease.epoch} -> {target.name} "
            f"epoch {lease.epoch + 1}: clients registered {took:.3f} s after the command, "
            f"{from_line[-1] if line.at is not None else float('nan'):.3f} s after its event line; "
            f"{len(missing)} lost",
            flush=True,
        )
    stop.set()
    await asyncio.gather(*tasks)
    await cmd.close()
    await agent.close()
    return times, lost, with_cli, from_line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--promotes", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-switch-") as tmp:
        site = Site(Path(tmp) / "site", n=3, timing=DEFAULT)
        try:
            site.start()
            site.wait_leader(timeout=60)
            wait_until(
                lambda: all(len(pool(a).get("members", {})) == 3 for a in site.agents), 60, "pool views"
            )
            times, lost, with_cli, from_line = asyncio.run(run(site, args.promotes))
        finally:
            site.stop()
    print("\nswitchover: relayctl promote accepted -> both clients registered with the new leader (seconds)")
    p50, p95 = statistics.median(times), pct(times, 95)
    print(f"  n={len(times)}  p50={p50:.3f}  p95={p95:.3f}  max={max(times):.3f}  min={min(times):.3f}")
    if from_line:
        l50, l95 = statistics.median(from_line), pct(from_line, 95)
        print(f"  from the command's event line on the share: n={len(from_line)}  p50={l50:.3f}  "
              f"p95={l95:.3f}  "
              f"max={max(from_line):.3f}")  # fmt: skip
    c50, c95 = statistics.median(with_cli), pct(with_cli, 95)
    print(
        f"  counting relayctl's own start-up (Python + Django): p50={c50:.3f}  p95={c95:.3f}  "
        f"max={max(with_cli):.3f}"
    )
    print(f"  messages lost: total {sum(lost)} of the stream, per switchover max {max(lost)}")


if __name__ == "__main__":
    main()
