#!/usr/bin/env python
"""A pool's event files after 1,000,000 events, and a new agent joining it (issue 12, point 3).

    python bench/compaction.py                    # 1,000,000 events: a few minutes
    python bench/compaction.py --events 200000
    python bench/compaction.py --share /tmp/h    # writes the history there once, then reuses it

1. Three members (H001..H003, one writer process each) append `--events`
   signed events in all through the real writer (`JsonlEventSink`, default
   retention: EVENTS_SEGMENT_BYTES 1 MiB, EVENTS_KEEP_BYTES 4 MiB): mostly
   ordinary events, with drains, undrains, pauses, resumes, elections and
   audit rows among them, so the state a joiner must rebuild is known.
2. Printed: the bytes of `events/` on the share against what the rule allows
   (per member: EVENTS_KEEP_BYTES + one segment being filled + its base).
3. A fresh `EventTail` reads everything there is (in-process: the reading
   and verifying cost alone), and its command fold is compared with the fold
   of all the events written.
4. A newly started real agent (tests/harness.py `Site`, one member, its own
   Redis) joins the pool: printed is the time from its start until its
   database holds every event the files still hold and its pool view shows
   the pool's command state (pause, command clock), and the epoch it takes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from harness import DEFAULT, TOKEN, Site, wait_until  # noqa: E402

from elections.core.commands import PoolCommands  # noqa: E402
from elections.ports.events.eventlog import EventTail, JsonlEventSink  # noqa: E402
from elections.ports.events.segments import Retention  # noqa: E402
from elections.ports.local.localstate import LocalState  # noqa: E402
from stkhost.clock import FakeClock  # noqa: E402

WRITERS = ("H001", "H002", "H003")


def write(args: tuple[str, int, int, str]) -> tuple[list[dict], int, float]:
    """One member's history: its command events, its highest epoch, the seconds it took."""
    folder, index, count, key = args
    node = WRITERS[index]
    clock = FakeClock()
    sink = JsonlEventSink(Path(folder) / f"{node}.jsonl", node, clock, key=key, retention=Retention())
    commands: list[dict] = []
    epoch = 0
    started = time.monotonic()
    for i in range(1, count + 1):
        clock.advance(30.0)  # a year of history for ~a million events
        lamport = i // 1000 * 3 + index
        if i % 10_000 == index * 3000 + 1:
            epoch = (i // 10_000) * 3 + index + 1
            sink.record("elected", epoch, "won", cause="expired")
        elif i % 1000 == 7:
            kind = "drain_requested" if (i // 1000) % 2 else "undrain_requested"
            target = WRITERS[(i // 1000) % 3]
            sink.record(kind, epoch, "op", target=target, clock=lamport, actor="bench")
            commands.append({"node": node, "seq": i, "kind": kind, "target": target, "clock": lamport})
        elif i % 7000 == 11:
            kind = "pause_requested" if (i // 7000) % 2 else "resume_requested"
            sink.record(kind, epoch, "op", clock=lamport, actor="bench")
            commands.append({"node": node, "seq": i, "kind": kind, "clock": lamport})
        elif i % 5000 == 13:
            sink.record("audit", epoch, "op", audit={"seq": i, "hash": f"{i:064x}"})
        else:
            sink.record("action_applied", epoch, f"start_relay at epoch {epoch} done (step {i})",
                        verb="start_relay", target="relay", detail="x" * 80)  # fmt: skip
    assert sink.compactor is not None
    sink.compactor.join(120)
    sink.compactor.run()
    return commands, epoch, time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--share", type=Path, help="keep the written history here and reuse it next time")
    ap.add_argument("--write-only", action="store_true", help="only write (with --share)")
    args = ap.parse_args()
    rule = Retention()
    with tempfile.TemporaryDirectory() as tmp:
        site = Site(Path(tmp) / "site", n=1, timing=DEFAULT)
        events = site.lease_dir / "events"
        events.mkdir()
        saved = args.share / "expected.json" if args.share else None
        if saved is not None and saved.exists():
            shutil.copytree(args.share / "events", events, dirs_exist_ok=True)
            results = [(r[0], r[1], r[2]) for r in json.loads(saved.read_text())]
            written = json.loads((args.share / "written").read_text())
            print(f"reused: {written:,} events written earlier into {args.share}")
        else:
            per = args.events // len(WRITERS)
            started = time.monotonic()
            with multiprocessing.Pool(len(WRITERS)) as pool:
                results = pool.map(write, [(str(events), i, per, TOKEN) for i in range(len(WRITERS))])
            took = time.monotonic() - started
            written = per * len(WRITERS)
            each = ", ".join(f"{r[2]:.0f} s" for r in results)
            print(f"written: {written:,} events by {len(WRITERS)} members in {took:.1f} s "
                  f"({written / took:,.0f} events/s; per writer {each})")  # fmt: skip
            if saved is not None:
                shutil.copytree(events, args.share / "events", dirs_exist_ok=True)
                (args.share / "written").write_text(json.dumps(written))
                saved.write_text(json.dumps(results))
        sys.stdout.flush()
        if args.write_only:
            site.stop()  # its redis-server
            return
        files = sorted(events.iterdir())
        share = sum(p.stat().st_size for p in files)
        bound = len(WRITERS) * (rule.keep_bytes + rule.segment_bytes + (64 << 10))
        sys.stdout.flush()
        print(f"share: events/ holds {share / (1 << 20):.2f} MiB in {len(files)} files "
              f"(rule allows {bound / (1 << 20):.2f} MiB: {len(WRITERS)} x (keep {rule.keep_bytes >> 20} MiB "
              f"+ segment {rule.segment_bytes >> 20} MiB + base)); within: {share <= bound}")  # fmt: skip

        full = PoolCommands()
        full.apply([c for r in results for c in r[0]])
        top_epoch = max(r[1] for r in results)
        tail = EventTail(events, key=TOKEN)
        fold = PoolCommands()
        seen, calls = 0, 0
        started = time.monotonic()
        while True:
            got = tail.new_events()
            calls += 1
            seen += len(got)
            fold.apply(got)
            if not tail.backlog:
                break
        read_s = time.monotonic() - started
        same = (fold.drained, fold.paused, fold.clock) == (full.drained, full.paused, full.clock)
        drained = dict(sorted(fold.drained.items()))
        print(f"read: a fresh tail read {seen:,} events in {calls} calls, {read_s:.2f} s in-process; "
              f"refusals {tail.refusals.total()}; command state as after all {written:,} events: {same} "
              f"(paused={fold.paused}, drained={drained}, clock={fold.clock})")  # fmt: skip

        sys.stdout.flush()
        agent = site.agents[0]
        db = agent.data_dir / "stkrelay.sqlite3"

        def projected() -> int:
            if not db.exists():
                return 0
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                try:
                    return con.execute(
                        "SELECT COUNT(*) FROM elections_electionevent WHERE node LIKE 'H%'"
                    ).fetchone()[0]
                finally:
                    con.close()
            except sqlite3.Error:
                return 0

        local = LocalState(agent.data_dir)
        try:
            started = time.monotonic()
            site.start()
            wait_until(lambda: local.pool().updated is not None, 60, "the agent's first survey", every=0.05)
            first_tick = time.monotonic() - started
            view = wait_until(
                lambda: (v := local.pool()).paused == full.paused and v.command_clock == full.clock and v,
                60, "the pool's command state", every=0.05,
            )  # fmt: skip
            state_s = time.monotonic() - started
            wait_until(lambda: projected() >= seen, 120, "every event in the database", every=0.1)
            rows_s = time.monotonic() - started
            known = wait_until(lambda: local.leadership().max_epoch >= top_epoch and local.leadership(), 30,
                               "the history's highest epoch known")  # fmt: skip
            after = rows_s - first_tick
            if full.paused:
                took_over = "the pool is paused: no takeover"
            else:
                lease = site.wait_leader(timeout=60)
                took_over = f"it leads epoch {lease.epoch} (never reused: {lease.epoch > top_epoch})"
            print(f"join: a new agent's first cycle {first_tick:.2f} s after start; the pool's command "
                  f"state (paused={view.paused}, clock={view.command_clock}) {state_s:.2f} s; all {seen:,} "
                  f"events in its database {rows_s:.2f} s (after its first cycle {after:.2f} s); "
                  f"highest epoch known {known.max_epoch} (history's {top_epoch}); {took_over}")  # fmt: skip
        finally:
            site.stop()


if __name__ == "__main__":
    main()
