"""Ownership benchmark (ADR 0011 phase 4): a real 2-agent site in network namespaces
(tests/netns.py, FAST timing) with a VIP, at the default OWNERSHIP_CHECK (2 s) unless
--check says otherwise.

- put right: the VIP moved by hand from the leader to the follower (`ip addr del` on
  one, `ip addr add` on the other) -> back on the leader alone; p50/p95/max over
  --rounds (each round after the address's OWNERSHIP_HOLD has passed, and a random
  part of one OWNERSHIP_CHECK later, seeded by --seed). The figure is made of the two
  agents' looks, each every OWNERSHIP_CHECK on its own timer: where the move falls
  between them is sampled by the random part; where the follower's timer falls against
  the leader's is set by their start-up, once per run, so two runs of the same code
  may differ by up to one OWNERSHIP_CHECK (measured: 2.5 s and 4.1 s p50, one commit);
- one look: the VIP executor's `observe()` (`ip addr` + the ARP probe) in the
  leader's namespace, and the map computed from it; p50/p95 over --looks.

    python bench/ownership.py [--rounds 10] [--looks 30] [--check 2]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import wait_until  # noqa: E402
from netns import NetnsSite, available  # noqa: E402

VIP = "10.77.0.100"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def line(name: str, values: list[float]) -> str:
    return (f"  {name:40s} n={len(values):3d}  p50={statistics.median(values):6.3f}  "
            f"p95={pct(values, 95):6.3f}  max={max(values):6.3f} s")  # fmt: skip


def has_vip(host) -> bool:  # type: ignore[no-untyped-def]
    out = host.run("ip", "-j", "addr", "show", "dev", "eth0").stdout
    return any(a.get("local") == VIP for link in json.loads(out) for a in link.get("addr_info", []))


def verdict(agent) -> str | None:  # type: ignore[no-untyped-def]
    try:
        entries = json.loads((agent.data_dir / "pool.json").read_text())["ownership"]["entries"]
    except (OSError, ValueError, KeyError):
        return None
    return next((e["verdict"] for e in entries if e["address"] == VIP), None)


def one_look(host) -> float:  # type: ignore[no-untyped-def]
    from elections.core.actions import action_config
    from elections.core.ownership import ownership_map
    from elections.executors import VipExecutor

    cfg, _ = action_config({"VIP_ADDRESS": f"{VIP}/24", "VIP_INTERFACE": "eth0"})
    args = asdict(cfg.vip)

    def look() -> float:
        started = time.monotonic()
        s = VipExecutor().observe(args)
        ownership_map("x", "x", 1, [s], {})
        assert s.complete, s.error
        return time.monotonic() - started

    return host.call_in(look)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--looks", type=int, default=30)
    ap.add_argument("--check", default="2", help="OWNERSHIP_CHECK of the agents")
    ap.add_argument("--seed", type=int, default=1, help="of each round's random phase")
    o = ap.parse_args()
    why = available()
    if why:
        sys.exit(f"bench/ownership.py: {why}")
    extra = {"VIP_ADDRESS": f"{VIP}/24", "VIP_INTERFACE": "eth0", "VIP_GARP": "builtin",
             "OWNERSHIP_CHECK": o.check}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="stk-bench-own-", dir="/dev/shm") as tmp:
        site = NetnsSite(Path(tmp), n=2, extra=extra)
        try:
            site.start()
            lease = site.wait_settled(timeout=60)
            leader = site.by_name(lease.node)
            follower = next(a for a in site.agents if a is not leader)
            lh, fh = site.host(leader), site.host(follower)
            hold = float(leader.setting("LEASE_TTL"))  # OWNERSHIP_HOLD's default
            wait_until(lambda: has_vip(lh) and verdict(leader) == "ok", 30, "the leader's VIP, ok")
            took = []
            phase = random.Random(o.seed)
            for _ in range(o.rounds):
                time.sleep(phase.uniform(0, float(o.check)))  # anywhere between the agents' looks
                lh.run("ip", "addr", "del", f"{VIP}/24", "dev", "eth0")
                fh.run("ip", "addr", "add", f"{VIP}/24", "dev", "eth0")
                moved = time.monotonic()
                wait_until(lambda: has_vip(lh) and not has_vip(fh), 30, "the VIP back on the leader alone",
                           every=0.02)  # fmt: skip
                took.append(time.monotonic() - moved)
                wait_until(lambda: verdict(leader) == "ok", 30, "an ok map")
                time.sleep(hold + 0.5)  # the next move must not fall within this address's hold
            looks = [one_look(lh) for _ in range(o.looks)]
            assert site.lease().epoch == lease.epoch, "an election happened during the bench"
        finally:
            site.stop()
    print(f"ownership (2 agents in namespaces, FAST timing, OWNERSHIP_CHECK {o.check} s):")
    print(line("VIP moved by hand -> back on the leader", took))
    print(line("one look (ip addr + ARP probe + map)", looks))


if __name__ == "__main__":
    main()
