"""Failover benchmark with beacons (docs/design.md §13; `bench/failover.py` has the
lease-only rows per store backend): kill -9 the leader's process group of a real 3-agent
site N times and time kill → a new valid lease, for the default timing with
the lease alone (`BEACON_INTERVAL = 0`), with beacons (0.2 s, docs/design.md §13),
and a fast lease-only profile. Prints p50/p95/max per profile.

With `--stops N` it also freezes the leader (SIGSTOP of its process group, beacons
on, default timing) N times: no evidence, so the new lease comes after the TTL.
With `--cuts N` (needs root: network namespaces, tests/netns.py) it pulls the
leader's cable N times (its share goes with it): the same, timed by the lease.
With `--powers N` (root, namespaces) it cuts the power of the leader's PC N times: its
links down and every process of its agent SIGKILLed together, then powered on again.
With `--stops`, a relay client (lease discovery) is timed to its registration with the
new leader too (the serving right, docs/design.md §15: ~2 s where the TTL took ~10 s).
With `--members 2` the site is a pool of two (issue 38: the share's witness is the third vote);
each failover then starts once its leader serves by acks with the witness naming its epoch and
the follower heard it say so, and `--direct-cuts N` pulls the cable of a leader whose share is
reached over another path (netns, `share="direct"`).
With `--replays N` it kills the leader N times (beacons on) while two old signed
copies of its lease are swapped in every second (issue 28): as fast as without.

    python bench/failover_beacons.py [--kills 20] [--profiles lease,beacons,fast] [--stops 10] [--cuts 10]
                                     [--powers 10] [--replays 10] [--members 3] [--direct-cuts 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, KMSN, TOKEN, Site, wait_until  # noqa: E402
from netns import NetnsSite, available  # noqa: E402

LEASE_ONLY = {"BEACON_INTERVAL": "0"}
PROFILES = {
    "lease": {**DEFAULT, **LEASE_ONLY},  # TTL 10, renew 3, poll 2, deadline 7; the lease alone
    "beacons": {**DEFAULT, "BEACON_INTERVAL": "0.2"},  # the defaults: beacons every 0.2 s
    "fast": {"LEASE_TTL": "3", "LEASE_RENEW": "1", "LEASE_POLL": "0.5", "RENEW_DEADLINE": "2", **LEASE_ONLY},
}


def everyone_hears(site: Site) -> bool:
    """Every agent's worker is up and hears every other's beacons (pool.json, its own clock):
    a restarted agent's leadership.json says "follow" from before it died, long before it beacons."""
    names = {a.name for a in site.agents}
    for agent in site.agents:
        try:
            members = (
                json.loads((agent.data_dir / "pool.json").read_text()).get("beacons", {}).get("members", {})
            )
        except (OSError, ValueError):
            return False
        if not all(n in members and members[n]["age_s"] < 1.0 for n in names - {agent.name}):
            return False
    return True


def serving_doc(agent) -> dict:  # type: ignore[no-untyped-def,type-arg]
    try:
        return json.loads((agent.data_dir / "pool.json").read_text()).get("beacons", {}).get("serving") or {}
    except (OSError, ValueError):
        return {}


def followers(site: Site) -> int:
    return sum("follow" in a.state().get("decision", "") for a in site.agents)


def armed(site: Site) -> bool:
    """The fast path of a pool of two is armed: its leader serves by acks with the witness naming
    its epoch, and every follower heard it say so (issue 38)."""
    rec = site.lease()
    if rec is None:
        return False
    leader = site.by_name(rec.node)
    mine = serving_doc(leader)
    if (mine.get("right") or {}).get("mode") != "ack" or not (mine.get("witness") or {}).get("ready"):
        return False
    for agent in site.agents:
        if agent is not leader:
            adh = serving_doc(agent).get("adheres") or {}
            if (adh.get("node"), adh.get("epoch"), adh.get("mode")) != (rec.node, rec.epoch, "ack"):
                return False
    return True


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class ClientThread:
    """A relay client (lease discovery) on an event loop of its own, registered
    with whoever leads: `epoch()` is the epoch it is registered with now. On a
    `NetnsSite` it stands on the observer host of the LAN (its sockets are made there)."""

    def __init__(self, site: Site) -> None:
        from relay.client.discovery import Discovery
        from relay.client.relay_client import RelayClient
        from relay.lease_file import lease_file

        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
        self.steps: list[tuple[float, str]] = []  # (monotonic, status): where a slow move spent its time
        self.client = RelayClient(role="agent", kmsn=KMSN, station="B01", token=TOKEN, discovery=discovery,
                                  keepalive=1.0, on_status=lambda s: self.steps.append(
                                      (time.monotonic(), s.describe())))  # fmt: skip
        self.loop = asyncio.new_event_loop()
        host = site.observer if isinstance(site, NetnsSite) else None

        def run() -> None:
            if host is not None:
                host.enter()  # this thread only: the client's sockets live on the LAN
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.client.start(timeout=30), self.loop).result(40)

    def epoch(self) -> int:
        return (self.client.epoch or 0) if self.client.registered else 0

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


class Stale:
    """A sender and a receiver registered with the leader before it fails; once the new
    leader serves, the sender sends `COUNT` messages to the old relay, and after the old
    leader is woken (or its cable mended) the receiver counts what the old relay forwarded:
    it must be nothing (issue 22: counted at the client side)."""

    COUNT = 10

    def __init__(self, site: Site, agent: object) -> None:
        from test_agents_serving import Wire

        self.site = site
        ip, port = agent.ip, int(agent.setting("RELAY_PORT"))  # type: ignore[attr-defined]

        def make() -> tuple[Wire, Wire]:
            return Wire(ip, port, "commander", "C01"), Wire(ip, port, "agent", "R01")

        self.sender, self.receiver = self._there(make)
        self.sender.send({"type": "send", "to": "R01", "data": {"n": 0}, "id": "0"})
        assert (self.receiver.frame() or {}).get("data") == {"n": 0}

    def _there(self, fn):  # type: ignore[no-untyped-def]
        return self.site.observer.call_in(fn) if isinstance(self.site, NetnsSite) else fn()

    def send_after(self) -> None:
        for n in range(1, self.COUNT + 1):
            try:
                self.sender.send({"type": "send", "to": "R01", "data": {"n": n}, "id": str(n)})
            except OSError:
                break

    def forwarded(self) -> int:
        """Messages the old relay forwarded after the new one served (the receiver reads to EOF or 5 s)."""
        got = 0
        while (frame := self.receiver.frame()) is not None:
            got += frame.get("type") == "message"
        for wire in (self.sender, self.receiver):
            wire.sock.close()
        return got


class Replays:
    """Two validly signed old copies of the lease, swapped in every second until `stop`."""

    def __init__(self, path: Path, every: float = 1.0) -> None:
        first = path.read_bytes()
        wait_until(lambda: path.read_bytes() != first, 30, "a renewal")
        self.copies, self.path, self.every = [first, path.read_bytes()], path, every
        wait_until(lambda: path.read_bytes() not in self.copies, 30, "a renewal past both")
        self.stop = threading.Event()
        threading.Thread(target=self._swap, daemon=True).start()
        wait_until(lambda: path.read_bytes() in self.copies, 5, "a replay in place")

    def _swap(self) -> None:
        i = 0
        while not self.stop.is_set():
            tmp = self.path.with_name(".bench-replay.tmp")
            tmp.write_bytes(self.copies[i % 2])
            tmp.replace(self.path)
            i += 1
            self.stop.wait(self.every)


def run_profile(
    name: str,
    kills: int,
    workdir: Path,
    freeze: bool = False,
    site: Site | None = None,
    clients: list[float] | None = None,
    replays: bool = False,
    power: bool = False,
    stale: list[int] | None = None,
    members: int = 3,
) -> list[float]:
    """`kills` times: kill -9 (or with `freeze`, SIGSTOP) the leader's process group
    at a random phase of its renew cycle, time it to a new valid lease (and, with
    `clients`, to a relay client registered with the new leader)."""
    timing = PROFILES[name]
    renew = float(timing["LEASE_RENEW"])
    site = site or Site(workdir / (name + ("-stop" if freeze else "")), n=members, timing=timing)
    gaps: list[float] = []
    client: ClientThread | None = None
    try:
        site.start()
        site.wait_leader(timeout=60)
        if clients is not None:
            client = ClientThread(site)
        for i in range(kills):
            # Everyone up and following, then kill at a random phase of the renew cycle.
            wait_until(lambda: followers(site) == members - 1, 60, "every follower")
            if timing.get("BEACON_INTERVAL", "0.2") != "0":  # and the beacons of every agent are heard
                wait_until(lambda: everyone_hears(site), 60, "every agent to hear the others")
                if members == 2:
                    wait_until(lambda: armed(site), 60, "the pool of two's fast path (the witness)")
            time.sleep(random.uniform(0, renew))
            rec = site.lease()
            assert rec is not None
            victim = site.by_name(rec.node)
            watch = Stale(site, victim) if stale is not None and not power else None
            swapper = Replays(site.lease_dir / "relay_leader.json") if replays else None
            if freeze:
                victim.signal_group(signal.SIGSTOP)
            elif power and isinstance(site, NetnsSite):  # links down and every process killed together
                site.cut(victim)
                victim.kill9()
            elif isinstance(site, NetnsSite):
                site.cut(victim)
            else:
                victim.kill9()
            killed = time.monotonic()
            new = wait_until(lambda r=rec: (x := site.lease()) and x.epoch > r.epoch and x, 60,
                             "a new leader", every=0.005)  # fmt: skip
            gap = time.monotonic() - killed
            gaps.append(gap)
            moved = None
            if swapper is not None:
                swapper.stop.set()
            if client is not None:
                wait_until(
                    lambda r=rec: client.epoch() > r.epoch, 60, "the client on the new leader", every=0.005
                )
                assert clients is not None
                moved = time.monotonic() - killed
                clients.append(moved)
                if moved > gap + 1.0:  # a slow move: say what the client did meanwhile
                    for at, step in [x for x in client.steps if x[0] >= killed]:
                        print(f"      client +{at - killed:5.2f} s: {step}", flush=True)
            if watch is not None:
                watch.send_after()
            what = (
                "stop" if freeze else "power" if power else "cut" if isinstance(site, NetnsSite) else "kill"
            )
            client_s = "" if moved is None else f", client on it at {moved:5.2f} s"
            print(f"  {name} {what} {i + 1:2d}/{kills}: {rec.node} epoch {rec.epoch} -> "
                  f"{new.node} epoch {new.epoch} in {gap:5.2f} s{client_s}", flush=True)  # fmt: skip
            if freeze:  # wake it: it steps down without writing, and follows
                victim.signal_group(signal.SIGCONT)
            elif isinstance(site, NetnsSite):
                site.mend(victim)
                if power:
                    victim.start()
            else:
                victim.start()  # back to three agents
            if watch is not None:
                assert stale is not None
                stale.append(watch.forwarded())
    finally:
        if client is not None:
            client.close()
        site.stop()
    return gaps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--profiles", default="lease,beacons,fast")
    ap.add_argument("--stops", type=int, default=10, help="SIGSTOPs of the leader (beacons on), 0 = none")
    ap.add_argument(
        "--cuts", type=int, default=10, help="cables of the leader pulled (netns, root), 0 = none"
    )
    ap.add_argument(
        "--powers", type=int, default=10, help="power losses of the leader (netns, root), 0 = none"
    )
    ap.add_argument("--replays", type=int, default=10,
                    help="kill -9s while old leases are swapped in every second, 0 = none")  # fmt: skip
    ap.add_argument("--members", type=int, default=3, help="agents (2: the share's witness decides)")
    ap.add_argument("--direct-cuts", type=int, default=0,
                    help="cables pulled, the share on another path (netns, root), 0 = none")  # fmt: skip
    ap.add_argument("--keep", default="", help="work in this folder and keep it (the agents' logs)")
    args = ap.parse_args()
    results = {}
    stale: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="stk-bench-failover-") as tmp:
        if args.keep:
            tmp = args.keep
            Path(tmp).mkdir(parents=True, exist_ok=True)
        for name in [p for p in args.profiles.split(",") if p]:
            t = PROFILES[name]
            print(f"profile {name}: TTL {t['LEASE_TTL']} renew {t['LEASE_RENEW']} poll {t['LEASE_POLL']} "
                  f"deadline {t['RENEW_DEADLINE']} beacons {t.get('BEACON_INTERVAL', '0.2')}, "
                  f"{args.kills} kills", flush=True)  # fmt: skip
            clients: list[float] | None = [] if name == "beacons" else None
            results[f"kill -9, {name}"] = run_profile(
                name, args.kills, Path(tmp), clients=clients, members=args.members
            )
            if clients:
                results[f"  client moved, {name}"] = clients
        if args.replays:
            results["kill -9, replays"] = run_profile(
                "beacons", args.replays, Path(tmp) / "r", replays=True, members=args.members
            )
        if args.stops:
            moved: list[float] = []
            stale["SIGSTOP"] = []
            results["SIGSTOP, beacons"] = run_profile(
                "beacons",
                args.stops,
                Path(tmp),
                freeze=True,
                clients=moved,
                stale=stale["SIGSTOP"],
                members=args.members,
            )
            results["  client moved, SIGSTOP"] = moved
        if args.cuts and available() is None:
            moved = []
            stale["cable cut"] = []
            site = NetnsSite(Path(tmp) / "cut", n=args.members, share="lan", timing=PROFILES["beacons"])
            results["cable cut, beacons"] = run_profile(
                "beacons",
                args.cuts,
                Path(tmp),
                site=site,
                clients=moved,
                stale=stale["cable cut"],
                members=args.members,
            )
            results["  client moved, cut"] = moved
        if args.direct_cuts and available() is None:
            moved = []
            stale["cut, share elsewhere"] = []
            site = NetnsSite(
                Path(tmp) / "cut-direct", n=args.members, share="direct", timing=PROFILES["beacons"]
            )
            results["cut, share elsewhere"] = run_profile(
                "beacons",
                args.direct_cuts,
                Path(tmp),
                site=site,
                clients=moved,
                stale=stale["cut, share elsewhere"],
                members=args.members,
            )
            results["  client moved, cut*"] = moved
        if args.powers and available() is None:
            moved = []
            site = NetnsSite(Path(tmp) / "power", n=args.members, share="lan", timing=PROFILES["beacons"])
            results["power loss, beacons"] = run_profile(
                "beacons", args.powers, Path(tmp), site=site, power=True, clients=moved, members=args.members
            )
            results["  client moved, power"] = moved
        if (args.cuts or args.powers) and available() is not None:
            print(f"cable cuts and power losses skipped: {available()}")
    print(f"\nfailover ({args.members} members): the leader's process group killed / stopped, or its cable "
          "cut -> new valid lease (s)")  # fmt: skip
    for name, gaps in results.items():
        print(f"  {name:22s}: n={len(gaps):2d}  p50={statistics.median(gaps):5.2f}  "
              f"p95={pct(gaps, 95):5.2f}  max={max(gaps):5.2f}  min={min(gaps):5.2f}")  # fmt: skip
    for name, counts in stale.items():
        print(f"  {name}: messages the old relay forwarded after the new one served: {sum(counts)} "
              f"of {Stale.COUNT * len(counts)} sent to it ({len(counts)} failovers)")  # fmt: skip


if __name__ == "__main__":
    main()
