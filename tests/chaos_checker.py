"""The chaos run's judge: what clients saw, checked from the recorded history alone.

Pure: a list of history records in, a `Report` out; no I/O, no clock. The
history (one JSON object per line, written by `tests/chaos_clients.py`) holds
client operations on the runner's monotonic clock (seconds), Jepsen style:
an ``invoke`` and then an ``ok`` or ``fail`` from the same ``proc`` (each
process does one operation at a time), plus ``info`` records that have no
invocation::

    {"type": "invoke", "f": "probe", "proc": "probe-S001", "time": 3.1, "agent": "S001"}
    {"type": "ok", "f": "probe", "proc": "probe-S001", "time": 3.2, "node": "S001", "epoch": 4}
    {"type": "fail", "f": "probe", "proc": "probe-S002", "time": 3.2, "agent": "S002", "error": "not_leader"}
    {"type": "invoke", "f": "send",  "proc": "C01", "time": 3.3, "id": "c-17"}
    {"type": "ok",     "f": "send",  "proc": "C01", "time": 3.4, "id": "c-17", "epoch": 4}
    {"type": "info",   "f": "recv",  "proc": "P01", "time": 3.35, "id": "c-17"}
    {"type": "info",   "f": "registered", "proc": "C01", "time": 3.0, "node": "S001", "epoch": 4}
    {"type": "info",   "f": "fault", "phase": "start", "fault": 12, "kind": "kill9", "time": 5.0}
    {"type": "info",   "f": "fault", "phase": "end",   "fault": 12, "kind": "kill9", "time": 6.0}

What is checked (each failure is a `Violation`):

- ``overlapping_leaders``: a registration accepted by node A with epoch Ea
  was *invoked after* node B, with a higher epoch Eb, had already
  *acknowledged* one. Each acceptance happened somewhere between its invoke
  and its ok; only this order proves both served at one moment (A after B's
  acceptance), so nothing that merely might have overlapped is reported.
- ``epoch_reused``: one epoch reported by two nodes (probes and the streaming
  clients' registrations).
- ``lost_message``: a send acknowledged (``ok``: the relay confirmed it) whose
  id no receiver ever got (at least once; duplicates are fine).
- ``slow_recovery`` / ``no_recovery``: after a fault, the pool must accept a
  registration again within the bound of its kind. Faults may overlap, so
  recovery is timed from the fault's *quiet point*: the first instant at or
  after its end when no fault at all is active, and the bound is the largest
  of the kinds in that group of overlapping faults (they heal as the slowest
  of them). ``no_recovery`` is reported only if the history goes on at least
  the bound past that point.

Violations are attributed, for the table, to every fault kind active around
them (from a second before a fault's start to its quiet point plus bound).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NONE_KIND = "(no fault)"


@dataclass(frozen=True)
class Violation:
    kind: str
    time: float
    detail: str


@dataclass(frozen=True)
class Fault:
    id: int
    kind: str
    start: float
    end: float
    target: str = ""


@dataclass(frozen=True)
class Recovery:
    fault: Fault
    quiet: float  # when no fault was active any more
    after: float | None  # seconds from `quiet` to the first accepted registration; None: never


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    attributed: dict[str, int] = field(default_factory=dict)  # fault kind -> violations
    counts: dict[str, int] = field(default_factory=dict)  # op -> number of ok completions
    indeterminate: int = 0  # sends neither acknowledged nor failed

    @property
    def ok(self) -> bool:
        return not self.violations

    def rows(self) -> list[tuple[str, int, float | None, int]]:
        """(fault kind, count, worst recovery in s, violations attributed), by kind."""
        by_kind: dict[str, list[Recovery]] = defaultdict(list)
        for rec in self.recoveries:
            by_kind[rec.fault.kind].append(rec)
        kinds = sorted(set(by_kind) | set(self.attributed))
        rows = []
        for kind in kinds:
            recs = by_kind.get(kind, [])
            times = [r.after for r in recs if r.after is not None]
            worst = None if any(r.after is None for r in recs) or not times else max(times)
            rows.append((kind, len(recs), worst, self.attributed.get(kind, 0)))
        return rows

    def table(self) -> str:
        lines = [f"{'fault kind':<16} {'count':>6} {'worst recovery':>15} {'violations':>11}"]
        for kind, count, worst, bad in self.rows():
            shown = "never" if worst is None and count else ("-" if worst is None else f"{worst:.2f} s")
            lines.append(f"{kind:<16} {count:>6} {shown:>15} {bad:>11}")
        total = len(self.recoveries)
        lines.append(f"{'total':<16} {total:>6} {'':>15} {len(self.violations):>11}")
        return "\n".join(lines)


def load(lines: Iterable[str]) -> list[dict[str, Any]]:
    """History records from JSON lines (blank lines skipped)."""
    return [json.loads(line) for line in lines if line.strip()]


def completed(history: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(invoke, completion or None) pairs: each proc's invoke with its next ok/fail."""
    open_ops: dict[str, dict[str, Any]] = {}
    pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for rec in history:
        kind, proc = rec.get("type"), rec.get("proc")
        if kind == "invoke":
            if proc in open_ops:
                pairs.append((open_ops.pop(proc), None))
            open_ops[proc] = rec
        elif kind in ("ok", "fail") and proc in open_ops:
            pairs.append((open_ops.pop(proc), rec))
    pairs.extend((inv, None) for inv in open_ops.values())
    return pairs


def faults_of(history: list[dict[str, Any]]) -> list[Fault]:
    starts: dict[int, dict[str, Any]] = {}
    faults = []
    for rec in history:
        if rec.get("f") != "fault":
            continue
        if rec.get("phase") == "start":
            starts[rec["fault"]] = rec
        elif rec.get("phase") == "end" and rec["fault"] in starts:
            s = starts.pop(rec["fault"])
            faults.append(Fault(rec["fault"], s["kind"], s["time"], rec["time"], str(s.get("target", ""))))
    end = max((r["time"] for r in history), default=0.0)
    faults += [Fault(i, s["kind"], s["time"], end, str(s.get("target", ""))) for i, s in starts.items()]
    return sorted(faults, key=lambda f: (f.start, f.id))


def quiet_points(faults: list[Fault]) -> dict[int, float]:
    """Fault id -> end of the run of overlapping faults its end falls in."""
    out: dict[int, float] = {}
    ordered = sorted(faults, key=lambda f: f.start)
    i = 0
    while i < len(ordered):
        group, reach = [ordered[i]], ordered[i].end
        j = i + 1
        while j < len(ordered) and ordered[j].start <= reach:
            group.append(ordered[j])
            reach = max(reach, ordered[j].end)
            j += 1
        for f in group:
            out[f.id] = reach
        i = j
    return out


def check(history: list[dict[str, Any]], bounds: Mapping[str, float] | None = None) -> Report:
    """Judge `history`; `bounds` (fault kind -> seconds) default to the run record's."""
    history = sorted(history, key=lambda r: r.get("time", 0.0))
    if bounds is None:
        run = next((r for r in history if r.get("f") == "run" and "bounds" in r), {})
        bounds = run.get("bounds", {})
    report = Report()
    pairs = completed(history)
    accepted = [
        (inv, done) for inv, done in pairs if inv.get("f") == "probe" and done and done["type"] == "ok"
    ]
    for inv, done in pairs:
        if done is not None and done["type"] == "ok":
            report.counts[inv["f"]] = report.counts.get(inv["f"], 0) + 1
    report.violations += _leaders(accepted, history)
    report.violations += _messages(pairs, history, report)
    faults = faults_of(history)
    end = max((r["time"] for r in history), default=0.0)
    report.recoveries, slow = _recoveries(faults, accepted, bounds, end)
    report.violations += slow
    report.violations.sort(key=lambda v: v.time)
    report.attributed = _attribute(report.violations, faults, quiet_points(faults), bounds)
    return report


def _leaders(
    accepted: list[tuple[dict[str, Any], dict[str, Any]]], history: list[dict[str, Any]]
) -> list[Violation]:
    out: list[Violation] = []
    # (node, epoch) -> [earliest acknowledgement, latest invocation] of its accepted registrations
    spans: dict[tuple[str, int], list[float]] = {}
    nodes_of: dict[int, set[str]] = defaultdict(set)
    first_seen: dict[int, float] = {}
    for inv, done in accepted:
        node, epoch = str(done.get("node") or done.get("agent")), int(done["epoch"])
        span = spans.setdefault((node, epoch), [done["time"], inv["time"]])
        span[0], span[1] = min(span[0], done["time"]), max(span[1], inv["time"])
        nodes_of[epoch].add(node)
        first_seen.setdefault(epoch, done["time"])
    for rec in history:
        if rec.get("f") == "registered" and rec.get("epoch") is not None and rec.get("node"):
            nodes_of[int(rec["epoch"])].add(str(rec["node"]))
            first_seen.setdefault(int(rec["epoch"]), rec["time"])
    for epoch, nodes in sorted(nodes_of.items()):
        if len(nodes) > 1:
            out.append(
                Violation("epoch_reused", first_seen[epoch], f"epoch {epoch} reported by {sorted(nodes)}")
            )
    items = sorted(spans.items(), key=lambda kv: kv[0][1])
    for (a, ea), (_, a_last_inv) in items:
        for (b, eb), (b_first_ok, _) in items:
            if a != b and ea < eb and a_last_inv > b_first_ok:
                out.append(Violation(
                    "overlapping_leaders", b_first_ok,
                    f"{a} (epoch {ea}) accepted a registration invoked at {a_last_inv:.3f}, after {b} "
                    f"(epoch {eb}) had acknowledged one at {b_first_ok:.3f}",
                ))  # fmt: skip
    return out


def _messages(pairs: list[tuple[dict[str, Any], dict[str, Any] | None]], history: list[dict[str, Any]],
              report: Report) -> list[Violation]:  # fmt: skip
    received = {rec.get("id") for rec in history if rec.get("f") == "recv"}
    out = []
    for inv, done in pairs:
        if inv.get("f") != "send":
            continue
        if done is None:
            report.indeterminate += 1
        elif done["type"] == "ok" and inv.get("id") not in received:
            what = f"message {inv.get('id')!r} acknowledged at {done['time']:.3f} (epoch {done.get('epoch')})"
            out.append(Violation("lost_message", done["time"], f"{what} was never delivered"))
    return out


def _recoveries(
    faults: list[Fault], accepted: list[tuple[dict[str, Any], dict[str, Any]]], bounds: Mapping[str, float],
    end: float,
) -> tuple[list[Recovery], list[Violation]]:  # fmt: skip
    quiet = quiet_points(faults)
    served = sorted((inv["time"], done["time"]) for inv, done in accepted)
    group_bound: dict[float, float] = defaultdict(float)  # a group of overlapping faults heals as its slowest
    for fault in faults:
        group_bound[quiet[fault.id]] = max(group_bound[quiet[fault.id]], bounds.get(fault.kind, 0.0))
    recoveries, out = [], []
    for fault in faults:
        q = quiet[fault.id]
        first = next((ok for inv, ok in served if inv >= q), None)
        after = None if first is None else first - q
        bound = group_bound[q] if fault.kind in bounds else None
        if after is None and bound is not None and end - q >= bound:
            out.append(Violation("no_recovery", q, f"fault {fault.id} ({fault.kind} {fault.target}): no "
                                 f"registration accepted in the {end - q:.1f} s after {q:.3f}"))  # fmt: skip
        elif after is not None and bound is not None and after > bound:
            out.append(Violation("slow_recovery", q, f"fault {fault.id} ({fault.kind} {fault.target}): "
                                 f"recovered {after:.2f} s after {q:.3f}, bound {bound:g} s"))  # fmt: skip
        recoveries.append(Recovery(fault, q, after))
    return recoveries, out


def _attribute(violations: list[Violation], faults: list[Fault], quiet: dict[int, float],
               bounds: Mapping[str, float]) -> dict[str, int]:  # fmt: skip
    counts: dict[str, int] = defaultdict(int)
    for v in violations:
        kinds = {f.kind for f in faults if f.start - 1 <= v.time <= quiet[f.id] + bounds.get(f.kind, 0)}
        for kind in kinds or {NONE_KIND}:
            counts[kind] += 1
    return dict(counts)


def merged(reports: Iterable[Report]) -> Report:
    """One report of several runs (e.g. a long run made of chunks): everything summed."""
    out = Report()
    for report in reports:
        out.violations += report.violations
        out.recoveries += report.recoveries
        out.indeterminate += report.indeterminate
        for kind, n in report.attributed.items():
            out.attributed[kind] = out.attributed.get(kind, 0) + n
        for op, n in report.counts.items():
            out.counts[op] = out.counts.get(op, 0) + n
    return out


if __name__ == "__main__":  # judge kept histories again: python tests/chaos_checker.py FILE...
    import sys

    judged = []
    for name in sys.argv[1:]:
        with open(name) as fh:
            judged.append(check(load(fh)))
    total = merged(judged)
    print(total.table())
    for v in total.violations:
        print(f"{v.kind} at {v.time:.3f}: {v.detail}")
    sys.exit(0 if total.ok else 1)
