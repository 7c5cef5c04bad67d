"""A real 3-agent site (default timing) whose share suddenly holds a 30 MB event
file — once validly signed (a pool with years of history), once garbage (an
attacker): the leader's worker RSS while it ingests (peak over baseline), the
longest gap between two renewals seen on the share meanwhile, and how long the
ingestion took.

    python bench/hostile_share.py [--mib 30]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, TOKEN, Site, wait_until  # noqa: E402

from elections.core.lease import sign  # noqa: E402


def worker_pid(agent) -> int:  # type: ignore[no-untyped-def]
    """The leader's lease worker: the process that wrote its leadership.json."""
    return int(agent.state()["pid"])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def big_file(path: Path, mib: int, signed: bool) -> int:
    reason = "x" * 180
    seq, written = 0, 0
    with open(path, "wb") as fh:
        while written < mib << 20:
            seq += 1
            if signed:
                doc = {"node": path.stem, "seq": seq, "kind": "renew_failed", "epoch": 1,
                       "at": "2020-01-01T00:00:00", "reason": reason}  # fmt: skip
                line = json.dumps({**doc, "sig": sign(doc, TOKEN)}) + "\n"
            else:
                line = f'{{"node": "S001", "seq": {seq}, "kind": "drain_requested", "target": "S001"}}\n'
            written += fh.write(line.encode())
    return seq


def measure(site: Site, name: str, mib: int, signed: bool) -> None:
    lease = site.wait_leader(timeout=60)
    leader = site.by_name(lease.node)
    # The lease is seen before the leader's first event makes events/ (never made here: a
    # writer never creates the pool's folders for another).
    wait_until(lambda: (site.lease_dir / "events").is_dir(), 30, "the pool's events/ folder")
    pid = worker_pid(leader)
    base = rss_kib(pid)
    peak, longest, stop = [base], [0.0], threading.Event()

    def watch() -> None:
        last_seq, last_at = None, time.monotonic()
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            rec = site.lease()
            now = time.monotonic()
            if rec is not None and rec.renew_seq != last_seq:
                if last_seq is not None:
                    longest[0] = max(longest[0], now - last_at)
                last_seq, last_at = rec.renew_seq, now
            stop.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    lines = big_file(site.lease_dir / "events" / f"{name}.jsonl", mib, signed)
    started = time.monotonic()
    if signed:
        wait_until(lambda: _ingested(leader, name) >= lines, 600, "the leader to ingest the file", every=0.5)
    else:
        wait_until(lambda: _refused(leader, name), 600, "the leader to refuse the file", every=0.5)
        time.sleep(10)  # the tail walks the rest of the file meanwhile; renewals are what is measured
    took = time.monotonic() - started
    time.sleep(2 * float(DEFAULT["LEASE_RENEW"]))
    stop.set()
    watcher.join(2)
    kind = "signed history" if signed else "unsigned garbage"
    print(f"  {mib} MiB of {kind:16s}: worker RSS {base / 1024:.0f} MiB -> peak {peak[0] / 1024:.0f} MiB "
          f"(+{(peak[0] - base) / 1024:.0f} MiB); longest renewal gap {longest[0]:.2f} s "
          f"(LEASE_RENEW {DEFAULT['LEASE_RENEW']} s); {'ingested' if signed else 'walked'} in {took:.1f} s",
          flush=True)  # fmt: skip


def _ingested(agent, node: str) -> int:  # type: ignore[no-untyped-def]
    import sqlite3

    db = agent.data_dir / "stkrelay.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        row = conn.execute("select count(*) from elections_electionevent where node = ?", (node,)).fetchone()
    return int(row[0])


def _refused(agent, node: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        recent = json.loads((agent.data_dir / "pool.json").read_text())["refusals"]["recent"]
    except (OSError, ValueError, KeyError):
        return False
    return any(r["source"] == f"events/{node}.jsonl" for r in recent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-bench-hostile-") as tmp:
        site = Site(Path(tmp) / "site", n=3, timing=DEFAULT)
        try:
            site.start()
            measure(site, "S900", args.mib, signed=True)
            measure(site, "S901", args.mib, signed=False)
        finally:
            site.stop()


if __name__ == "__main__":
    main()
