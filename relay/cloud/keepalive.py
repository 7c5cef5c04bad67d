"""Many etcd leases kept alive in one HTTP request (issue 26 part 4: the scale fix).

etcd's gateway endpoint ``/v3/lease/keepalive`` is a stream: a body of several
``{"ID": n}`` objects one after the other is answered with one JSON line per
lease, ``{"result": {"ID": "n", "TTL": "t"}}`` (no ``TTL`` for a lease etcd no
longer has). One request per round instead of one per lease: a node with 100
tunnels and a 2 s TTL made 200 requests a second, enough on a loaded 2-core
host to fall behind its own TTL and lose entries by the dozen.

The answer is untrusted input: at most `PER_LEASE` bytes a lease, each line a
JSON object or the round fails; a lease the answer does not mention is not
confirmed either way, and then the round fails (`StoreUnavailable`) rather than
call an entry lost or alive on no evidence.
"""

from __future__ import annotations

import json
import time
from typing import Any

from elections.errors import StoreUnavailable
from elections.ports.etcd.client import gateway_int

PER_LEASE = 1024  # bytes of answer per lease at most
BATCH = 512  # leases per request


def keepalive_many(client: Any, leases: list[int]) -> dict[int, int]:
    """{lease: TTL now (≤ 0: etcd no longer has it)} for every lease; `StoreUnavailable` if no
    member answered for all of them within the client's deadline."""
    out: dict[int, int] = {}
    for i in range(0, len(leases), BATCH):
        out.update(_batch(client, leases[i : i + BATCH]))
    return out


def _batch(client: Any, leases: list[int]) -> dict[int, int]:
    import requests

    body = "".join(json.dumps({"ID": lease}) for lease in leases)
    deadline = time.monotonic() + client.timeout
    errors: list[str] = []
    n = len(client.endpoints)
    for k in range(n):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        per = left / (n - k)
        try:
            resp = client.session(k).post(client.url_of(k, "lease/keepalive"), data=body,
                                          timeout=(min(per, 1.0), per), stream=True)  # fmt: skip
            try:
                raw = _read(resp, PER_LEASE * len(leases), time.monotonic() + per)
            finally:
                resp.close()
            if resp.status_code != 200:
                raise ValueError(f"HTTP {resp.status_code}")
            return _parse(raw, leases)
        except (requests.exceptions.RequestException, ValueError, TimeoutError) as exc:
            errors.append(f"{client.endpoints[k]}: {type(exc).__name__} {str(exc)[:80]}")
    raise StoreUnavailable("keep-alive not answered: " + ("; ".join(errors[-3:]) or "no time left"))


def _read(resp: Any, cap: int, deadline: float) -> bytes:
    parts, size = [], 0
    for chunk in resp.iter_content(chunk_size=65536):
        parts.append(chunk)
        size += len(chunk)
        if size > cap:
            raise ValueError(f"answer over {cap} bytes")
        if time.monotonic() > deadline:
            raise TimeoutError("answer not complete before the deadline")
    return b"".join(parts)


def _parse(raw: bytes, leases: list[int]) -> dict[int, int]:
    """The TTL per lease of a keep-alive stream's answer; ValueError if it is not one."""
    wanted, out = set(leases), {}
    for line in raw.splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        result = doc.get("result") if isinstance(doc, dict) else None
        if not isinstance(result, dict):
            raise ValueError("a keep-alive answer line without a result")
        lease = gateway_int(result.get("ID"))
        if lease in wanted:
            out[lease] = gateway_int(result.get("TTL")) if "TTL" in result else -1
    if set(out) != wanted:
        raise ValueError(f"{len(wanted) - len(out)} lease(s) not answered")
    return out
