"""Panel page latency with a realistic history: p50/p95 per page.

    .venv/bin/python bench/panel.py [--events 10000] [--audit 1000] [--runs 60]

Builds a temporary agent database with `--events` ElectionEvent rows (a year
of elections, step-downs, handoffs and operator commands over 3 members) and
`--audit` audit actions (2 chained rows each), writes a pool view, then times
full page renders and live polls through Django's test client (in process,
no network). Target: p95 < 100 ms for every page.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_panel_support import KMSN, django_env, make_user, write_leading, write_pool  # noqa: E402


def populate(n_events: int, n_audit: int) -> None:
    from elections import steering
    from elections.models import ElectionEvent

    rng = random.Random(7)
    nodes = ["S001", "S002", "S003"]
    t = datetime.now(UTC) - timedelta(days=365)
    step = timedelta(days=365) / max(n_events, 1)
    seqs = dict.fromkeys(nodes, 0)
    rows, epoch, leader = [], 1, "S001"

    def add(node: str, kind: str, reason: str, **detail: object) -> None:
        nonlocal t
        seqs[node] += 1
        rows.append(
            ElectionEvent(
                kmsn=KMSN,
                node=node,
                seq=seqs[node],
                epoch=epoch,
                kind=kind,
                reason=reason,
                observed_at=t,
                detail=detail,
            )
        )
        t += step

    add(leader, "elected", "no lease file and no leader ever seen")
    while len(rows) < n_events:
        nxt = rng.choice([n for n in nodes if n != leader])
        roll = rng.random()
        if roll < 0.3:
            add(nxt, "drain_requested", "maintenance", target=leader, actor="olga", correlation="x")
            add(leader, "handoff", f"released (drained), handoff to {nxt}")
            epoch += 1
            add(nxt, "elected", f"{leader} handed epoch {epoch - 1} to me")
        elif roll < 0.5:
            add(leader, "released", "released (shutdown)")
            epoch += 1
            add(nxt, "elected", f"released by {leader} (epoch {epoch - 1})")
        else:
            add(leader, "renew_failed", "renewal not written this round")
            epoch += 1
            add(nxt, "elected", f"lease of {leader} expired: not renewed for {rng.uniform(3, 4):.1f} s ≥ 3 s")
        leader = nxt
    ElectionEvent.objects.bulk_create(rows[:n_events], batch_size=1000)
    for i in range(n_audit):
        corr = f"{i:016x}"
        base = dict(
            user="olga",
            client="192.0.2.10",
            via="panel",
            action="drain",
            kmsn=KMSN,
            target=rng.choice(nodes),
            reason="bench",
            expected_epoch=i,
            correlation=corr,
        )
        trail = steering.audit_trail()
        trail.append(phase="intent", **base)
        trail.append(
            phase="outcome",
            result=rng.choice(["accepted", "stale_epoch", "refused"]),
            message="bench",
            epoch=i,
            **base,
        )
    write_pool(django_env()["data_dir"], leader="S001", epoch=epoch)
    write_leading(django_env()["data_dir"], epoch)


def versions(client, url: str) -> str:  # type: ignore[no-untyped-def]
    """The section versions a browser showing `url` would send when polling."""
    page = client.get(url).content.decode()
    return ",".join(f"{i}:{v}" for i, v in re.findall(r'<div id="([a-z-]+)" data-v="([0-9a-f]+)"', page))


def timed(client, url: str, runs: int, **headers: str) -> tuple[float, float, float, int]:  # type: ignore[no-untyped-def]
    """(first, p50, p95) in ms and the last status."""
    samples, status = [], 0
    for _ in range(runs + 1):
        start = time.perf_counter()
        response = client.get(url, **headers)
        if response.streaming:
            b"".join(response.streaming_content)
        samples.append((time.perf_counter() - start) * 1000)
        status = response.status_code
    first, rest = samples[0], sorted(samples[1:])
    return first, statistics.median(rest), rest[int(0.95 * (len(rest) - 1))], status


def main() -> None:
    parser = argparse.ArgumentParser(description="panel page latency")
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--audit", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    django_env()
    from django.test import Client

    t0 = time.perf_counter()
    populate(args.events, args.audit)
    print(
        f"populated {args.events} election events and {args.audit} audit actions "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    c = Client()
    c.force_login(make_user("bench", "operator"))
    site = f"/sites/{KMSN}/"
    pages = [
        ("sites", "/", {}),
        ("site", site, {}),
        ("site 24h timeline", f"{site}?window=24h", {}),
        ("history (all, page 1)", "/history/?period=all", {}),
        ("history (page 50)", "/history/?period=all&page=50", {}),
        ("history (reason filter)", "/history/?period=all&reason=drained", {}),
        ("history CSV (all)", "/history.csv?period=all", {}),
        ("audit (verifies chain)", "/audit/", {}),
        (
            "poll: history unchanged",
            "/history/?period=all&_poll=1&_v=" + versions(c, "/history/?period=all"),
            {"HTTP_HX_REQUEST": "1"},
        ),
        ("api sites", "/api/v1/sites", {}),
        ("api history", "/api/v1/history?period=all", {}),
        ("api audit", "/api/v1/audit", {}),
        ("metrics", "/metrics", {}),
    ]
    print(f"{'page':28} {'first':>8} {'p50':>8} {'p95':>8}  status")
    worst = 0.0
    for name, url, headers in pages:
        runs = max(args.runs // 6, 5) if "CSV" in name else args.runs
        first, p50, p95, status = timed(c, url, runs, **headers)
        worst = max(worst, p95)
        print(f"{name:28} {first:7.1f}ms {p50:7.1f}ms {p95:7.1f}ms  {status}")
    print(f"worst p95: {worst:.1f} ms ({'within' if worst < 100 else 'over'} the 100 ms target)")


if __name__ == "__main__":
    main()
