"""The VRRP gate's reaction times (ADR 0011), with the real keepalived: a 3-agent site
in network namespaces (tests/netns.py, tests/vrrp.py; FAST timing, GATE_FILE
written by keepalived's notify script, GATE_MAX_AGE 3 with a track script
touching the file), N rounds of:

- fault: the leader's VRRP instance FAULTs (its track script fails): from the
  file saying FAULT to the leader judging itself ineligible, and to a new lease
  on the new VRRP master (a handoff, no TTL);
- kill: keepalived on the leader's host is SIGKILLed (no notify): from the kill
  to a new lease (GATE_MAX_AGE, then the handoff; the new master needs keepalived's
  own ~3 s master-down interval too).

Prints p50 and max of each. Needs root (namespaces). Taken on a loaded machine the
figures are noisy: say so when quoting them.

    python bench/gate.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import FAST, wait_until  # noqa: E402
from netns import NetnsSite, available  # noqa: E402
from vrrp import Keepalived  # noqa: E402


def reasons(agent, of: str) -> list[str]:  # type: ignore[no-untyped-def]
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())["members"][of]["reasons"]
    except (OSError, ValueError, KeyError):
        return []


def one_round(workdir: Path) -> tuple[float, float, float]:
    site = NetnsSite(workdir / "site", 3, timing=FAST)
    keepalived: list[Keepalived] = []
    try:
        hosts = [site.host(i) for i in range(3)]
        for i, agent in enumerate(site.agents):
            gate = agent.data_dir / "vrrp-state"
            with agent.ini.open("a") as ini:
                ini.write(f"GATE_FILE = {gate}\nGATE_MAX_AGE = 3\n")
            others = [h for h in hosts if h is not hosts[i]]
            vrrp = Keepalived(hosts[i], others, workdir / f"vrrp{i + 1}", 150 - 50 * i, gate)
            keepalived.append(vrrp.start())
        site.start()
        k1, k2, _ = keepalived
        lease = wait_until(lambda: (r := site.lease()) and r.node == "S001" and r, 60, "S001 leading")
        k1.fault()
        wait_until(lambda: k1.state() == "FAULT", 10, "FAULT written")
        faulted = time.monotonic()
        wait_until(lambda: "gate: gate says FAULT" in reasons(site.agents[0], "S001"), 10, "S001 ineligible")
        ineligible = time.monotonic() - faulted
        lease = site.wait_leader(timeout=20, other_than="S001", min_epoch=lease.epoch + 1)
        handed = time.monotonic() - faulted
        killed = time.monotonic()
        k2.kill()
        site.wait_leader(timeout=30, other_than=lease.node, min_epoch=lease.epoch + 1)
        return ineligible, handed, time.monotonic() - killed
    finally:
        for k in keepalived:
            k.kill()
        site.stop()


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    why = available()
    if why:
        sys.exit(f"bench/gate.py: {why}")
    rows: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="stk-bench-gate-") as tmp:
        for n in range(args.rounds):
            rows.append(one_round(Path(tmp) / f"r{n}"))
    for i, what in enumerate(("FAULT → leader ineligible", "FAULT → new lease on the new master",
                              "keepalived SIGKILL → new lease")):  # fmt: skip
        values = [r[i] for r in rows]
        print(f"gate {what:38s} p50 {statistics.median(values):5.2f} s  max {max(values):5.2f} s  "
              f"(n={len(values)})")  # fmt: skip


if __name__ == "__main__":
    main()
