"""A bare contender: the elector loop without Django or Celery.

    STK_RELAY_TOKEN=T python -m elections.runtime.contend --dir LEASE_DIR --node N [--ttl 10 ...]
    python -m elections.runtime.contend --etcd ENDPOINTS [--prefix P] --node N --token-file PATH ...

The pool key comes from `--token-file PATH` (`-`: stdin) or `$STK_RELAY_TOKEN`,
never from argv (`stkhost.secret_source`; `--token T` is refused).

Used by the stress tests and the failover benchmark to run many real
processes on one lease dir cheaply. SIGTERM releases the lease and exits;
SIGUSR1 releases it and sits out one election (a forced re-election);
SIGUSR2 hands it to the next member by name (a planned switchover: only that
member takes it at once, as after a promote).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from elections.core.decide import Timing
from elections.errors import StoreUnavailable
from elections.ports.events.eventlog import JsonlEventSink
from elections.ports.store.stores import ETCD, FILE, PoolPlace, open_store
from elections.runtime.elector import Elector
from elections.runtime.lease_writes import Identity
from stkconfig.etcd_endpoints import parse_endpoints
from stkconfig.parsed import EtcdSettings
from stkhost.clock import Clock, SystemClock
from stkhost.secret_source import SecretUnreadable, argv_refusal, from_environment, read_secret

TOKEN_ENV = "STK_RELAY_TOKEN"


def run_loop(elector: Elector, clock: Clock, stop: threading.Event) -> None:
    """Renew every `renew` while leader, look every `poll` otherwise, and look
    again exactly when a lease we wait on is due to expire."""
    timing = elector.timing
    next_renew = next_beat = 0.0
    while not stop.is_set():
        now = clock.monotonic()
        renewing = elector.is_leader and now >= next_renew
        decision = elector.cycle(renewing=renewing)
        if renewing:
            next_renew = now + timing.renew
        if now >= next_beat:
            elector.heartbeat()
            next_beat = now + timing.renew
        if elector.is_leader:
            wait = max(0.0, next_renew - clock.monotonic()) if next_renew > now else timing.renew
        else:
            wait = timing.poll
        if decision.wake_in is not None:
            wait = min(wait, max(decision.wake_in, 0.0) + 0.01)
        if not elector.is_leader:  # the store's watch (or a plain wait): look as soon as the lease moves
            elector.store.wait_change(wait, stop)
        else:
            stop.wait(wait)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", default="", help="the lease dir (file store)")
    ap.add_argument("--etcd", default="", help="ETCD_ENDPOINTS: the pool is on etcd (LEASE_STORE = etcd)")
    ap.add_argument("--prefix", default="", help="ETCD_PREFIX (default /stkrelay/<KMSN>/)")
    ap.add_argument("--timeout", type=float, default=2.0, help="SHARE_TIMEOUT: every store call's deadline")
    ap.add_argument("--node", required=True)
    ap.add_argument("--token", help="refused (visible in ps): use --token-file or $STK_RELAY_TOKEN")
    ap.add_argument("--token-file", metavar="PATH", help="the pool key: PATH's first line ('-': stdin)")
    ap.add_argument("--kmsn", default="9999-9999-99-99")
    ap.add_argument("--ip", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9530)
    ap.add_argument("--ttl", type=float, default=10)
    ap.add_argument("--renew", type=float, default=3)
    ap.add_argument("--poll", type=float, default=2)
    ap.add_argument("--deadline", type=float, default=7)
    ap.add_argument("--lock-stale", type=float, default=2.0)
    ap.add_argument("--events", help="JSONL file for this node's events")
    ap.add_argument("--seq-mark", help="local file keeping the highest event seq written (never reused)")
    args = ap.parse_args(argv)
    if args.token is not None:
        ap.exit(2, "contend: " + argv_refusal("--token", "--token-file PATH", "$STK_RELAY_TOKEN") + "\n")
    try:
        pool_key = (
            read_secret(args.token_file, "--token-file") if args.token_file else from_environment(TOKEN_ENV)
        )
    except SecretUnreadable as exc:
        ap.exit(2, f"contend: {exc}\n")
    if not pool_key:
        ap.exit(2, f"contend: no pool key: give --token-file PATH or ${TOKEN_ENV}\n")
    logging.basicConfig(level=logging.INFO, format=f"[{args.node}] %(levelname)s %(message)s")

    clock = SystemClock()
    timing = Timing(args.ttl, args.renew, args.poll, args.deadline)
    if not (args.dir or args.etcd):
        ap.error("give --dir or --etcd")
    etcd = EtcdSettings(tuple(parse_endpoints(args.etcd)) if args.etcd else (), args.prefix, poll=args.poll)
    place = PoolPlace(args.kmsn, args.dir, pool_key, args.timeout, ETCD if args.etcd else FILE, etcd=etcd)
    store = open_store(place, args.node, clock, lock_stale_s=args.lock_stale)
    events = (
        JsonlEventSink(args.events, args.node, clock, key=pool_key, mark=args.seq_mark)
        if args.events
        else None
    )
    me = Identity(node=args.node, kmsn=args.kmsn, station=args.node, ip=args.ip, port=args.port)
    elector = Elector(store, clock, me, timing, events=events)
    stop = threading.Event()
    lock = threading.Lock()
    requests: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        requests.append({int(signal.SIGUSR1): "release", int(signal.SIGUSR2): "handoff"}.get(signum, "stop"))
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    signal.signal(signal.SIGUSR2, on_signal)
    while True:
        run_loop(elector, clock, stop)
        with lock:
            todo, requests[:] = list(requests), []
        if "stop" in todo:
            elector.release(reason="SIGTERM")
            return
        if "handoff" in todo:
            elector.release(handoff_to=next_member(elector), reason="SIGUSR2", abstain=True, kind="handoff")
        else:
            elector.release(reason="SIGUSR1", abstain=True)
        stop.clear()


def next_member(elector: Elector) -> str | None:
    """The member after this one by name (wrapping), from the store's heartbeats."""
    try:
        others = sorted(n for n in elector.store.read_members() if n != elector.me.node)
    except StoreUnavailable:
        return None
    after = [n for n in others if n > elector.me.node]
    return (after or others)[0] if others else None


if __name__ == "__main__":
    main()
