"""Failover benchmark: kill -9 the leader's process group of a real 3-agent
site N times and time kill → a new valid lease, for the default timing and a
fast profile, on each backend asked for: `file` (a local directory) and `smb`
(an smb:// lease dir on a real smbd on loopback, no mount; docs/design.md §5.3).
Prints p50/p95/max per backend and profile and, for smb, the SMB operations
of one renewal and of one heartbeat.

    python bench/failover.py [--kills 20] [--profiles default,fast] [--backends file,smb]
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, Site, wait_until  # noqa: E402

# The lease alone (BEACON_INTERVAL = 0): the beacons' rows are bench/failover_beacons.py.
PROFILES = {
    "default": {**DEFAULT, "BEACON_INTERVAL": "0"},  # TTL 10, renew 3, poll 2, deadline 7
    "fast": {
        "LEASE_TTL": "3",
        "LEASE_RENEW": "1",
        "LEASE_POLL": "0.5",
        "RENEW_DEADLINE": "2",
        "BEACON_INTERVAL": "0",
    },
}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def make_site(backend: str, name: str, workdir: Path, timing: dict[str, str]) -> Site:
    if backend == "file":
        return Site(workdir / f"{backend}-{name}", n=3, timing=timing)
    server = samba_server(workdir)
    return Site(workdir / f"{backend}-{name}", n=3, timing=timing, **server.site_options(name))


_samba = []


def samba_server(workdir: Path):  # type: ignore[no-untyped-def]
    """One smbd on loopback for the whole run (tests/samba.py)."""
    if not _samba:
        from samba import Samba, available

        why = available()
        if why:
            raise SystemExit(f"--backends smb: {why}")
        _samba.append(Samba(workdir / "samba"))
        _samba[0].start()
    return _samba[0]


def smb_operations(workdir: Path, renewals: int = 50) -> tuple[float, float, float, float]:
    """(round trips, requests) of one renewal and of one heartbeat by a leader
    whose lease dir is on SMB, counted by its `SmbShare`."""
    from samba import PASSWORD

    from elections.core.decide import Timing
    from elections.ports.share.smbshare import SmbShare
    from elections.ports.store.store import FileLeaseStore
    from elections.runtime.elector import Elector
    from elections.runtime.lease_writes import Identity
    from stkconfig.smburl import parse_smb_url
    from stkhost.clock import SystemClock

    server = samba_server(workdir)
    server.path("ops").mkdir()
    share = SmbShare(parse_smb_url(server.url("ops")), PASSWORD, 2.0)
    clock = SystemClock()
    store = FileLeaseStore(share, "bench-token-0123456789", "S001", clock, timeout=2.0)
    me = Identity(node="S001", kmsn="9999-9999-99-99", station="S001", ip="127.0.0.1", port=9530)
    elector = Elector(store, clock, me, Timing(10, 3, 2, 7))
    wait_until(lambda: elector.cycle(renewing=False) and elector.is_leader, 10, "the bench elector to lead")
    elector.heartbeat()
    trips, reqs = share.round_trips, share.requests
    for _ in range(renewals):
        elector.cycle(renewing=True)
    assert elector.is_leader
    renew = ((share.round_trips - trips) / renewals, (share.requests - reqs) / renewals)
    trips, reqs = share.round_trips, share.requests
    for _ in range(renewals):
        elector.heartbeat()
    beat = ((share.round_trips - trips) / renewals, (share.requests - reqs) / renewals)
    return (*renew, *beat)


def run_profile(backend: str, name: str, kills: int, workdir: Path) -> list[float]:
    timing = PROFILES[name]
    renew = float(timing["LEASE_RENEW"])
    site = make_site(backend, name, workdir, timing)
    gaps: list[float] = []
    try:
        site.start()
        site.wait_leader(timeout=60)
        for i in range(kills):
            # Everyone up and following, then kill at a random phase of the renew cycle.
            wait_until(lambda: sum("follow" in a.state().get("decision", "") for a in site.agents) == 2,
                       60, "two followers")  # fmt: skip
            time.sleep(random.uniform(0, renew))
            rec = site.lease()
            assert rec is not None
            victim = site.by_name(rec.node)
            victim.kill9()
            killed = time.monotonic()
            new = wait_until(lambda r=rec: (x := site.lease()) and x.epoch > r.epoch and x, 60,
                             "a new leader", every=0.005)  # fmt: skip
            gap = time.monotonic() - killed
            gaps.append(gap)
            print(f"  {backend} {name} kill {i + 1:2d}/{kills}: {rec.node} epoch {rec.epoch} -> "
                  f"{new.node} epoch {new.epoch} in {gap:5.2f} s", flush=True)  # fmt: skip
            victim.start()  # back to three agents
    finally:
        site.stop()
    return gaps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--profiles", default="default,fast")
    ap.add_argument("--backends", default="file", help="file, smb or both (file,smb), in the same run")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the sites and smbd on the way out
    results = {}
    ops = None
    with tempfile.TemporaryDirectory(prefix="stk-bench-") as tmp:
        try:
            for backend in args.backends.split(","):
                for name in args.profiles.split(","):
                    t = PROFILES[name]
                    print(f"{backend} profile {name}: TTL {t['LEASE_TTL']} renew {t['LEASE_RENEW']} "
                          f"poll {t['LEASE_POLL']} deadline {t['RENEW_DEADLINE']}, {args.kills} kills",
                          flush=True)  # fmt: skip
                    results[(backend, name)] = run_profile(backend, name, args.kills, Path(tmp))
            if "smb" in args.backends.split(","):
                ops = smb_operations(Path(tmp))
        finally:
            for server in _samba:
                server.stop()
    print("\nfailover: kill -9 of the leader's process group -> new valid lease (seconds)")
    for (backend, name), gaps in results.items():
        t = PROFILES[name]
        print(f"  {backend:4s} {name:8s} (TTL {t['LEASE_TTL']:>2s}): n={len(gaps)}  "
              f"p50={statistics.median(gaps):.2f}  p95={pct(gaps, 95):.2f}  max={max(gaps):.2f}  "
              f"min={min(gaps):.2f}")  # fmt: skip
    if ops is not None:
        print(
            f"SMB operations per renewal: {ops[0]:.1f} round trips ({ops[1]:.1f} requests); "
            f"per heartbeat: {ops[2]:.1f} round trips ({ops[3]:.1f} requests)"
        )


if __name__ == "__main__":
    main()
