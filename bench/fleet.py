"""The fleet view: panel latency with many watched pools (docs/design.md §11).

    .venv/bin/python bench/fleet.py [--pools 50] [--members 10] [--elections 20] [--runs 60]

Builds `--pools` simulated pools of `--members` members each on their own
directories with their own keys (tests/poolsim.py: validly signed leases,
heartbeats and event lines; `--elections` elections each), has this agent
watch all of them with the real watchers (`elections.runtime.watch`: one
thread and one share deadline per pool, the real projector into the agent's
database), in a process of their own as in the agent (the worker watches, the
web serves), while every pool keeps renewing and heartbeating; then times the
sites page, its live poll, the API and a watched site's page through Django's
test client (in process, no network). Prints p50/p95 per page and the time of
one watcher look. Target: sites page p95 < 100 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from panel import timed, versions  # noqa: E402
from poolsim import SimPool, Ticker  # noqa: E402
from test_panel_support import django_env, make_user, write_leading, write_pool  # noqa: E402


def kmsn_of(i: int) -> str:
    return f"{1000 + i:04d}-0000-00-{i % 100:02d}"


def build(root: Path, n_pools: int, n_members: int, elections: int) -> list[SimPool]:
    pools = []
    for i in range(n_pools):
        pool = SimPool(root / f"p{i}" / "socket", kmsn_of(i), f"pool-key-{i:04d}-0123456789abc", n_members)
        for e in range(elections):
            pool.elect(pool.nodes[(e * 7 + i) % n_members], reason="lease expired")
        if i % 10 == 3:  # some pools are in trouble: worst first must find them
            pool.heartbeat(pool.nodes[0], drain=True)
        pools.append(pool)
        pool.beat_all()
    return pools


def main() -> None:
    parser = argparse.ArgumentParser(description="fleet view latency with many watched pools")
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--elections", type=int, default=20)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    paths = django_env()
    from django.conf import settings
    from django.test import Client

    from elections.ports.local.localstate import LocalState
    from elections.runtime.projection import Projector
    from elections.runtime.watch import Watchers
    from stkconfig.parsed import WatchedPool
    from stkhost.clock import SystemClock

    stk = settings.STK
    root = Path(tempfile.mkdtemp(prefix="stk-fleet-"))
    try:
        t0 = time.perf_counter()
        pools = build(root, args.pools, args.members, args.elections)
        watched = [WatchedPool(p.kmsn, str(p.dir), p.key, p.key, 2.0, "OFFICE1") for p in pools]
        settings.STK = stk = dataclasses.replace(stk, watched=watched)  # Config is frozen
        write_pool(paths["data_dir"], leader="S001", epoch=7)
        write_leading(paths["data_dir"], 7)
        projector = Projector(stk.kmsn)
        watchers = Watchers.from_settings(stk, SystemClock(), LocalState(paths["data_dir"]), projector)
        looks = []
        for w in watchers.watchers:  # the first look of every pool, timed one by one
            started = time.perf_counter()
            w.look()
            looks.append((time.perf_counter() - started) * 1000)
        projector.drain(30)
        looks.sort()
        print(
            f"{args.pools} pools x {args.members} members, {args.elections} elections each, built and "
            f"projected in {time.perf_counter() - t0:.1f} s; first look per pool p50 "
            f"{looks[len(looks) // 2]:.1f} ms, max {looks[-1]:.1f} ms"
        )
        from django.db import connections

        connections.close_all()
        child = os.fork()
        if child == 0:  # the "worker": the pools' own agents renew and heartbeat, this agent watches
            Ticker(*pools, every=1.0)
            watchers.start()
            signal.pause()
            os._exit(0)
        c = Client()
        c.force_login(make_user("bench", "operator"))
        time.sleep(2 * stk.lease_poll)
        some = f"/sites/{pools[0].kmsn}/"
        pages = [
            ("sites (worst first)", "/", {}),
            ("sites sorted by kmsn", "/?sort=kmsn", {}),
            ("sites filtered", "/?kmsn=1004", {}),
            ("poll: sites", "/?_poll=1&_v=" + versions(c, "/"), {"HTTP_HX_REQUEST": "1"}),
            ("watched site", some, {}),
            ("history (all pools)", "/history/?period=all", {}),
            ("api sites", "/api/v1/sites", {}),
            ("metrics", "/metrics", {}),
        ]
        print(f"{'page':28} {'first':>8} {'p50':>8} {'p95':>8}  status")
        sites_p95 = 0.0
        for name, url, headers in pages:
            first, p50, p95, status = timed(c, url, args.runs, **headers)
            if name.startswith("sites (worst"):
                sites_p95 = p95
            print(f"{name:28} {first:7.1f}ms {p50:7.1f}ms {p95:7.1f}ms  {status}")
        shown = c.get("/api/v1/sites").json()["sites"]
        led = sum(1 for s in shown if s["has_leader"])
        print(f"pools shown: {len(shown)} ({led} with a leader)")
        print(
            f"sites page p95 with {args.pools} watched pools of {args.members} members: {sites_p95:.1f} ms "
            f"({'within' if sites_p95 < 100 else 'over'} the 100 ms target)"
        )
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
