"""relay.json's snapshot, bounded in bytes (issue 40).

The snapshot lists what clients named: every session (`clients`), the
sessions per station (`counts`), the stations admitted with the site token or
a credential and those refused (`stations`). Names are bounded at
registration (`relay.wire.events.MAX_NAME`), their number is not: a site-token
holder can register as many stations as it has connections. Past the local
files' read limit the file reads as nothing, so the snapshot is cut here,
before it is written, never after:

1. each list (and the stations of each KMSN in `counts`, and `refused`) keeps
   its first `MAX_LISTED` entries;
2. if the whole still takes more than `MAX_BYTES` of JSON, the lists go
   (`clients`, `counts`, then the stations' lists) until it fits.

What was cut is counted in ``dropped`` (entries left out, by list), and the
health of the relay is never in the snapshot: it has its own small record
(`elections.ports.local.localstate`, ``relay.health.json``).
"""

from __future__ import annotations

import json
from typing import Any

MAX_LISTED = 512  # entries per list of the snapshot
MAX_BYTES = 2 << 20  # the snapshot's JSON at most (the local files' reader takes 4 MiB)
STATION_LISTS = ("credential", "token", "refused")


def _size(doc: Any) -> int:
    return len(json.dumps(doc))


def bounded(
    snapshot: dict[str, Any], max_listed: int = MAX_LISTED, max_bytes: int = MAX_BYTES
) -> dict[str, Any]:
    """A copy of `snapshot` that holds at most `max_listed` entries per list and `max_bytes` of JSON,
    with ``dropped`` counting what was left out (absent when nothing was)."""
    out = dict(snapshot)
    dropped: dict[str, int] = {}

    def cut(name: str, items: Any) -> Any:
        if isinstance(items, list) and len(items) > max_listed:
            dropped[name] = dropped.get(name, 0) + len(items) - max_listed
            return items[:max_listed]
        if isinstance(items, dict) and len(items) > max_listed:
            dropped[name] = dropped.get(name, 0) + len(items) - max_listed
            return dict(list(items.items())[:max_listed])
        return items

    out["clients"] = cut("clients", out.get("clients", []))
    counts = out.get("counts")
    if isinstance(counts, dict):
        out["counts"] = {
            kmsn: cut("counts", stations) for kmsn, stations in list(counts.items())[:max_listed]
        }
    stations = out.get("stations")
    if isinstance(stations, dict):
        out["stations"] = {
            k: cut(f"stations.{k}", v) if k in STATION_LISTS else v for k, v in stations.items()
        }
    for name in ("clients", "counts", "stations"):
        if _size(out) <= max_bytes:
            break
        if name == "stations" and isinstance(out.get("stations"), dict):
            kept = out["stations"]
            for k in STATION_LISTS:
                dropped[f"stations.{k}"] = dropped.get(f"stations.{k}", 0) + len(kept.get(k) or ())
            out["stations"] = {k: v for k, v in kept.items() if k not in STATION_LISTS}
        else:
            dropped[name] = dropped.get(name, 0) + len(out.get(name) or ())
            out[name] = [] if name == "clients" else {}
    if dropped:
        out["dropped"] = dropped
    return out
