"""Planned switchover benchmark: N promotes on a real 3-agent site (default
timing), timing the command accepted → both clients registered with the target,
and counting relay messages lost across each switchover.

"Accepted" is the instant the command is on the share: the wall time its
`promote_requested` line carries (`at`, taken by relayctl as it appends the
line, after its checks; the share record is the authority). "Registered" is
the wall time at which each client's `registered` status (`on_status`) named
the target's epoch, recorded as it happens — also when that is before
relayctl returns (with the command pushed to the leader, it usually is). One
machine, one clock: a benchmark, never a decision. relayctl's own start-up is
shown apart.

    python bench/switchover.py [--promotes 20] [--keep DIR]

An agent client streams numbered messages to a commander client the whole
time (one every 10 ms); after each switchover the bench counts which numbers
never arrived (after the client's duplicate suppression).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, KMSN, TOKEN, Site, wait_until  # noqa: E402

from relay.client.discovery import Discovery  # noqa: E402
from relay.client.events import Received  # noqa: E402
from relay.client.relay_client import RelayClient  # noqa: E402
from relay.lease_file import lease_file  # noqa: E402


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


def accepted_at(events: Path, start_size: int) -> float | None:
    """The wall time (POSIX seconds) of the first `promote_requested` line
    appended to `events` past `start_size`."""
    with events.open("rb") as f:
        f.seek(start_size)
        for raw in f:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if doc.get("kind") == "promote_requested":
                return datetime.fromisoformat(doc["at"]).timestamp()
    return None


async def run(site: Site, promotes: int) -> tuple[list[float], list[int], list[float], list[float]]:
    def client(role: str, station: str) -> RelayClient:
        d = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
        return RelayClient(
            role=role,
            kmsn=KMSN,
            station=station,
            token=TOKEN,
            discovery=d,
            keepalive=1.0,
            on_status=lambda st: registered_at(role, st),
        )

    # role -> epoch -> the wall time its client first registered at that epoch
    reg: dict[str, dict[int, float]] = {"commander": {}, "agent": {}}

    def registered_at(role: str, status) -> None:  # type: ignore[no-untyped-def]
        if status.kind == "registered" and status.epoch is not None:
            reg[role].setdefault(status.epoch, time.time())

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
    times, lost, with_cli, after_return = [], [], [], []
    previous = None
    for i in range(promotes):
        lease = site.lease()
        assert lease is not None
        # Round robin: never straight back to the member that just handed over.
        target = next(a for a in site.agents if a.name not in (lease.node, previous))
        previous = lease.node
        before = sent
        commander = site.agents[i % 3]
        events = site.lease_dir / "events" / f"{commander.name}.jsonl"
        start_size = events.stat().st_size if events.exists() else 0
        launched = time.time()
        await asyncio.to_thread(promote, commander, target.name, lease.epoch)
        returned = time.time()
        new = lease.epoch + 1
        while not all(new in reg[r] for r in reg):
            if time.time() - returned > 30:
                raise RuntimeError("clients did not follow within 30 s")
            await asyncio.sleep(0.005)
        done = max(reg[r][new] for r in reg)
        accepted = accepted_at(events, start_size)
        if accepted is None:
            raise RuntimeError(f"no promote_requested line in {events}")
        took = done - accepted
        times.append(took)
        with_cli.append(done - launched)
        after_return.append(done - returned)
        await asyncio.sleep(1.5)  # let the stream run on the new leader, then count the gap
        window = set(range(max(0, before - 50), sent - 50))
        missing = sorted(window - got)
        lost.append(len(missing))
        print(
            f"  promote {i + 1:2d}/{promotes}: {lease.node} epoch {lease.epoch} -> {target.name} "
            f"epoch {new}: clients registered {took:.3f} s after the command was accepted "
            f"({after_return[-1]:+.3f} s from relayctl's return); {len(missing)} lost",
            flush=True,
        )
    stop.set()
    await asyncio.gather(*tasks)
    await cmd.close()
    await agent.close()
    return times, lost, with_cli, after_return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--promotes", type=int, default=20)
    ap.add_argument("--keep", help="run the site in this directory and keep it (its agents' logs) afterwards")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-switch-") as scratch:
        tmp = args.keep or scratch
        share = Path(tmp) / "share" / "socket" if args.keep else None  # kept too, with its event files
        if share is not None:
            share.mkdir(parents=True, exist_ok=True)
        site = Site(Path(tmp) / "site", n=3, timing=DEFAULT, lease_dir=share)
        try:
            site.start()
            site.wait_leader(timeout=60)
            wait_until(
                lambda: all(len(pool(a).get("members", {})) == 3 for a in site.agents), 60, "pool views"
            )
            times, lost, with_cli, after_return = asyncio.run(run(site, args.promotes))
        finally:
            site.stop()
    print("\nswitchover: command accepted (its event line on the share) -> both clients registered "
          "with the target (seconds)")  # fmt: skip
    p50, p95 = statistics.median(times), pct(times, 95)
    print(f"  n={len(times)}  p50={p50:.3f}  p95={p95:.3f}  max={max(times):.3f}  min={min(times):.3f}")
    r50, r95 = statistics.median(after_return), pct(after_return, 95)
    print(f"  from relayctl's return (negative: done before it returned): p50={r50:+.3f}  p95={r95:+.3f}")
    c50, c95 = statistics.median(with_cli), pct(with_cli, 95)
    print(
        f"  counting relayctl's own start-up (Python + Django): p50={c50:.3f}  p95={c95:.3f}  "
        f"max={max(with_cli):.3f}"
    )
    print(f"  messages lost: total {sum(lost)} of the stream, per switchover max {max(lost)}")
    print(f"  load average: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
