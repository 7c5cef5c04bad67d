"""etcd benchmark (docs/design.md §5.2), on a real 3-member etcd cluster on loopback.

    python bench/etcd.py [--trials 10] [--pools 100] [--seconds 30] [--skip-compare] [--skip-pools]

1. The same pool of 3 contender processes (elections/runtime/contend.py, TTL 5,
   renew 1, poll 1, deadline 3.5) on the file share and on etcd, in the same
   run: crash failover (kill -9 of the leader -> a new valid lease), the same
   with the etcd leader member killed at the same moment, a planned switchover
   (SIGUSR2: the leader hands off to a named member -> its new lease), and a
   release to anyone (SIGUSR1; the contenders' priority delay included).
2. Many pools on one etcd: `--pools` pools of 3 lightweight contenders each
   (electors on threads, spread over worker processes) renewing for
   `--seconds`: renewals per second, renewal latency (keepalive + transaction)
   p50/p99, etcd's CPU and memory; meanwhile one pool's leader (a real
   process) is killed and its failover timed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from etcd import EtcdCluster, EtcdContender, etcd_pool, read_etcd_lease, unique_prefix  # noqa: E402
from harness import TOKEN, Contender, read_lease, wait_until  # noqa: E402

TIMING = {"ttl": 5, "renew": 1, "poll": 1, "deadline": 3.5}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def line(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name}: no samples"
    return (f"  {name}: n={len(values)}  p50={statistics.median(values):.3f}  p95={pct(values, 95):.3f}  "
            f"max={max(values):.3f}  min={min(values):.3f}")  # fmt: skip


# -- 1. one pool, file vs etcd ---------------------------------------------------------------
class OnePool:
    def __init__(self, kind: str, workdir: Path, cluster: EtcdCluster | None) -> None:
        self.kind, self.workdir, self.cluster = kind, workdir, cluster
        workdir.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            self.dir = workdir / "share"
            self.dir.mkdir()
        else:
            assert cluster is not None
            self.prefix = unique_prefix()
            self.pool = etcd_pool(cluster.endpoints, self.prefix, timeout=1.0)
        self.procs = {n: self._start(n) for n in ("C1", "C2", "C3")}

    def _start(self, node: str):  # type: ignore[no-untyped-def]
        if self.kind == "file":
            return Contender(self.dir, node, self.workdir, TIMING)
        assert self.cluster is not None
        return EtcdContender(
            self.cluster.endpoints, self.prefix, node, self.workdir, {**TIMING, "timeout": 1}
        )

    def lease(self):  # type: ignore[no-untyped-def]
        try:
            read = read_lease(self.dir, TOKEN) if self.kind == "file" else read_etcd_lease(self.pool, TOKEN)
        except Exception:  # etcd between leaders: no answer this instant
            return None
        rec = read.record
        return rec if read.status == "valid" and rec is not None and not rec.released else None

    def next_leader(self, epoch: int, timeout: float = 30):  # type: ignore[no-untyped-def]
        return wait_until(lambda: (r := self.lease()) and r.epoch > epoch and r, timeout, "a new leader",
                          every=0.005)  # fmt: skip

    def settled(self) -> None:
        wait_until(lambda: all(p.proc.poll() is None for p in self.procs.values()), 5, "contenders")
        wait_until(lambda: self.lease(), 30, "a leader")
        time.sleep(TIMING["renew"] * 2)  # everyone has seen the leader renew

    def crash(self, with_etcd_leader: bool = False) -> float:
        self.settled()
        time.sleep(random.uniform(0, TIMING["renew"]))
        rec = self.lease()
        victim = self.procs[rec.node]
        member = self.cluster.leader_index() if with_etcd_leader and self.cluster else None
        victim.proc.kill()
        if member is not None:
            self.cluster.kill(member)
        killed = time.monotonic()
        self.next_leader(rec.epoch)
        took = time.monotonic() - killed
        victim.proc.wait(5)
        self.procs[rec.node] = self._start(rec.node)
        if member is not None:
            self.cluster.restart(member)
            wait_until(self.cluster.healthy, 30, "the etcd member back")
        return took

    def switchover(self, handoff: bool = True) -> float:
        """SIGUSR2: a planned handoff to a named member; SIGUSR1: a release to anyone
        (then every contender waits its priority's delay, 0.25 s at priority 50)."""
        self.settled()
        rec = self.lease()
        self.procs[rec.node].send(signal.SIGUSR2 if handoff else signal.SIGUSR1)
        sent = time.monotonic()
        self.next_leader(rec.epoch)
        return time.monotonic() - sent

    def stop(self) -> None:
        for p in self.procs.values():
            p.stop()


def compare(trials: int, workdir: Path, cluster: EtcdCluster) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for kind in ("file", "etcd"):
        pool = OnePool(kind, workdir / kind, cluster)
        try:
            steps = (("crash", pool.crash), ("handoff", pool.switchover),
                     ("release", functools.partial(pool.switchover, handoff=False)))  # fmt: skip
            for name, fn in steps:
                vals = out.setdefault(f"{kind} {name}", [])
                for i in range(trials):
                    vals.append(fn())
                    print(f"  {kind} {name} {i + 1}/{trials}: {vals[-1]:.3f} s", flush=True)
            if kind == "etcd":
                vals = out.setdefault("etcd crash + etcd leader", [])
                for i in range(max(3, trials // 2)):
                    vals.append(pool.crash(with_etcd_leader=True))
                    print(f"  etcd crash with the etcd leader {i + 1}: {vals[-1]:.3f} s", flush=True)
        finally:
            pool.stop()
    return out


# -- 2. many pools on one etcd -------------------------------------------------------------------
def worker(endpoints: str, first: int, count: int, seconds: float, warmup: float, out: str) -> None:
    """`count` pools of 3 electors on threads; renewals timed after `warmup`."""
    import logging

    from elections.core.decide import Timing
    from elections.ports.etcd.pool import EtcdPool
    from elections.ports.etcd.store import EtcdLeaseStore
    from elections.runtime.contend import run_loop
    from elections.runtime.elector import Elector
    from elections.runtime.lease_writes import Identity
    from stkhost.clock import SystemClock

    logging.disable(logging.WARNING)  # 300 electors' "elected" lines say nothing here
    clock = SystemClock()
    timing = Timing(TIMING["ttl"], TIMING["renew"], TIMING["poll"], TIMING["deadline"])
    lat: list[float] = []
    lock = threading.Lock()
    start_at = time.monotonic() + warmup
    end_at = start_at + seconds

    class Timed(EtcdLeaseStore):
        def write(self, record, expect, fence=None):  # type: ignore[no-untyped-def]
            t = time.monotonic()
            outcome = super().write(record, expect, fence)
            if (
                record.renew_seq > 0
                and not record.released
                and outcome.value == "written"
                and start_at <= t < end_at
            ):
                with lock:
                    lat.append(time.monotonic() - t)
            return outcome

    stop = threading.Event()
    eps = endpoints.split(",")
    for p in range(first, first + count):
        pool = EtcdPool(eps, f"/stkrelay-bench/pool{p:04d}/", timeout=2.0, fallback=TIMING["poll"])
        for n in range(3):
            node = f"P{p:03d}N{n}"
            me = Identity(node=node, kmsn=f"K{p:04d}", station=node, ip="127.0.0.1", port=9530)
            el = Elector(Timed(pool, TOKEN, node, clock), clock, me, timing)
            threading.Thread(target=run_loop, args=(el, clock, stop), daemon=True).start()
    time.sleep(max(0.0, end_at - time.monotonic()))
    stop.set()
    Path(out).write_text(json.dumps({"latencies": lat}))


def proc_stats(pids: list[int]) -> tuple[float, int]:
    """(CPU seconds used, resident bytes) of these processes, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            for row in Path(f"/proc/{pid}/status").read_text().splitlines():
                if row.startswith("VmRSS:"):
                    rss += int(row.split()[1]) * 1024
        except OSError:
            continue
    return cpu, rss


def many_pools(cluster: EtcdCluster, pools: int, seconds: float, workers: int, workdir: Path) -> None:
    warmup = 15.0
    per = -(-(pools - 1) // workers)
    outs, procs = [], []
    for w in range(workers):
        first = 1 + w * per
        count = max(0, min(per, pools - first))
        if not count:
            continue
        out = workdir / f"worker{w}.json"
        outs.append(out)
        argv = [sys.executable, __file__, "--worker", cluster.endpoints, str(first), str(count), str(seconds),
                str(warmup), str(out)]  # fmt: skip
        procs.append(subprocess.Popen(argv, cwd=ROOT))
    one = OnePool("etcd", workdir / "pool0", cluster)  # the pool whose leader is killed: real processes
    time.sleep(warmup)
    cpu0, _ = proc_stats(cluster.pids())
    t0 = time.monotonic()
    time.sleep(seconds / 3)
    failover = one.crash()
    time.sleep(max(0.0, t0 + seconds - time.monotonic()))
    cpu1, rss = proc_stats(cluster.pids())
    wall = time.monotonic() - t0
    for p in procs:
        p.wait(120)
    one.stop()
    lat = [x for o in outs if o.exists() for x in json.loads(o.read_text())["latencies"]]
    print(f"\n{pools} pools x 3 contenders on one 3-member etcd, {seconds:g} s measured "
          f"(TTL {TIMING['ttl']}, renew {TIMING['renew']}):")  # fmt: skip
    if lat:
        ms = [1000 * x for x in lat]
        print(f"  renewals/s={len(lat) / seconds:.1f}  latency p50={statistics.median(ms):.1f} ms  "
              f"p99={pct(ms, 99):.1f} ms  max={max(ms):.1f} ms")  # fmt: skip
    cpu = 100 * (cpu1 - cpu0) / wall
    print(f"  etcd (3 members together): CPU {cpu:.0f} % of one core, RSS {rss / 2**20:.0f} MiB")
    print(f"  failover of one pool while the others renew: {failover:.2f} s")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        ep, first, count, seconds, warmup, out = sys.argv[2:8]
        worker(ep, int(first), int(count), float(seconds), float(warmup), out)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--pools", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--skip-compare", action="store_true")
    ap.add_argument("--skip-pools", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-bench-etcd-") as tmp:
        cluster = EtcdCluster(Path(tmp)).start()
        try:
            print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
            if not args.skip_compare:
                results = compare(args.trials, Path(tmp) / "compare", cluster)
                print(f"\none pool of 3 contender processes, TTL {TIMING['ttl']} renew {TIMING['renew']} "
                      f"poll {TIMING['poll']} deadline {TIMING['deadline']} (seconds):")  # fmt: skip
                for name, vals in results.items():
                    print(line(name, vals))
            if not args.skip_pools:
                many_pools(cluster, args.pools, args.seconds, args.workers, Path(tmp))
            print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
