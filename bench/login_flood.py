"""A normal page's latency while bad logins flood the panel: p50/p95 of both.

    .venv/bin/python bench/login_flood.py [--seconds 8] [--attackers 4] [--no-throttle] [--parallel]

A temporary agent database (tests/test_panel_support.py) with one operator;
`--attackers` threads post wrong passwords to /login/ as fast as they get
answers, each from a new address (so the per-(user, address) limit never
bites), while the main thread fetches the sites page as a logged-in viewer
every 50 ms. All through Django's test client, in process (no network, no
Daphne), with the real Argon2 hasher. Requests are served one at a time in
arrival order, as Daphne runs Django's sync views on one thread (`--parallel`:
threads run views at once instead). `--no-throttle` lifts the per-address and
global limits (the behaviour before them) for comparison.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_panel_support import django_env, make_user, write_pool  # noqa: E402


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


class FifoLock:
    """One request at a time, first come first served (Daphne's one sync-view thread)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.next_ticket = self.serving = 0

    def __enter__(self) -> None:
        with self.cond:
            ticket, self.next_ticket = self.next_ticket, self.next_ticket + 1
            self.cond.wait_for(lambda: self.serving == ticket)

    def __exit__(self, *exc: object) -> None:
        with self.cond:
            self.serving += 1
            self.cond.notify_all()


class NoLock:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--attackers", type=int, default=4)
    ap.add_argument("--no-throttle", action="store_true")
    ap.add_argument("--parallel", action="store_true", help="views run concurrently (not as Daphne)")
    args = ap.parse_args()
    views = NoLock() if args.parallel else FifoLock()

    paths = django_env()
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from elections.audit import LoginFailure

    if args.no_throttle:
        settings.STK_LOGIN_ADDRESS_MAX_FAILURES = 10**6
        settings.STK_LOGIN_GLOBAL_RATE = 10**6
        settings.STK_LOGIN_GLOBAL_BURST = 10**6
    write_pool(paths["data_dir"])
    make_user("olga", "operator")
    viewer = Client()
    viewer.force_login(make_user("vera"))
    assert viewer.get("/").status_code == 200

    stop = threading.Event()
    addresses = itertools.count(1)
    logins: list[tuple[int, float]] = []
    lock = threading.Lock()

    def attacker() -> None:
        try:
            while not stop.is_set():
                n = next(addresses)
                c = Client(REMOTE_ADDR=f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
                started = time.perf_counter()
                with views:
                    status = c.post("/login/", {"username": "olga", "password": f"guess-{n}"}).status_code
                with lock:
                    logins.append((status, time.perf_counter() - started))
        finally:
            connection.close()

    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(args.attackers)]
    for t in threads:
        t.start()
    pages: list[float] = []
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        with views:
            assert viewer.get("/").status_code == 200
        pages.append(time.perf_counter() - started)
        stop.wait(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=30)

    hashed = [d for s, d in logins if s == 200]
    refused = [d for s, d in logins if s == 429]
    mode = "without throttle" if args.no_throttle else (
        f"throttle: {settings.STK_LOGIN_ADDRESS_MAX_FAILURES}/address/{settings.STK_LOGIN_WINDOW_S}s, "
        f"{settings.STK_LOGIN_GLOBAL_RATE:g}/s burst {settings.STK_LOGIN_GLOBAL_BURST} for everyone"
    )  # fmt: skip
    served = "views in parallel" if args.parallel else "views one at a time (as Daphne)"
    print(f"bad-login flood, {args.attackers} attackers, {args.seconds:g} s, {served}, {mode}")
    print(f"login attempts   {len(logins):6d}  ({len(logins) / args.seconds:.0f}/s): "
          f"{len(hashed)} hashed (200), {len(refused)} refused (429)")  # fmt: skip
    print(f"login            p50 {pct([d for _, d in logins], 0.5):7.1f} ms  "
          f"p95 {pct([d for _, d in logins], 0.95):7.1f} ms")  # fmt: skip
    print(f"login 429 only   p50 {pct(refused, 0.5):7.1f} ms  p95 {pct(refused, 0.95):7.1f} ms")
    print(f"sites page /     p50 {pct(pages, 0.5):7.1f} ms  p95 {pct(pages, 0.95):7.1f} ms  "
          f"max {max(pages) * 1000:.1f} ms  ({len(pages)} fetches)")  # fmt: skip
    print(f"LoginFailure rows after the flood: {LoginFailure.objects.count()}")


if __name__ == "__main__":
    main()
