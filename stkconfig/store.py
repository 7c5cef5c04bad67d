"""Where the pool's records live: `LEASE_STORE` and the etcd keys (docs/design.md §5.2); the `store`
section.

- `LEASE_STORE`: `file` (default, the share in `LEASE_DIR`) or `etcd`;
  anything else is `stkrelay.E033`.
- `ETCD_ENDPOINTS`: comma list of `http(s)://host:port`, required with etcd
  (`stkrelay.E034`).
- `ETCD_PREFIX`: default `/stkrelay/<KMSN>/`; must start and end with `/` and
  hold no whitespace (`stkrelay.E035`): two pools must never share keys.
- `ETCD_CA`, `ETCD_CERT`, `ETCD_KEY`: TLS. The files must be readable, the
  certificate and its key go together, and TLS options need `https://`
  endpoints (`stkrelay.E036`).

With etcd, `LEASE_DIR` is not needed (nothing of the pool is on a share).
Reports through `bad(id, key, message, hint)` like `config.load`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.etcd_endpoints import parse_endpoints
from stkconfig.parsed import EtcdSettings
from stkconfig.raw import Raw

STORES = ("file", "etcd")


@dataclass(frozen=True)
class Store:
    lease_store: str = "file"  # or etcd
    etcd: EtcdSettings = field(default_factory=EtcdSettings)


class StoreNeeds(Protocol):
    """What the store's keys read of the sections before them."""

    kmsn: str
    lease_poll: float


def parse(raw: Raw, known: StoreNeeds, bad: Bad) -> Store:
    """`LEASE_STORE` (E033) and, with etcd, its `ETCD_*` keys (E034–E036)."""
    store, etcd = _parse(raw.values, known.kmsn, known.lease_poll, bad)
    return Store(store, etcd)


def _parse(values: Mapping[str, str], kmsn: str, lease_poll: float, bad: Bad) -> tuple[str, EtcdSettings]:
    store = (values.get("LEASE_STORE") or "file").strip().lower()
    if store not in STORES:
        bad("stkrelay.E033", "LEASE_STORE", f"{values.get('LEASE_STORE')!r} is not a lease store",
            "use file (the share in LEASE_DIR) or etcd (ETCD_ENDPOINTS)")  # fmt: skip
        store = "file"
    ca, cert, key = (values.get(k, "") for k in ("ETCD_CA", "ETCD_CERT", "ETCD_KEY"))
    prefix = values.get("ETCD_PREFIX") or f"/stkrelay/{kmsn}/"
    if store != "etcd":
        return store, EtcdSettings((), prefix, ca, cert, key, lease_poll)
    endpoints: list[str] = []
    try:
        endpoints = parse_endpoints(values.get("ETCD_ENDPOINTS", ""))
    except ValueError as exc:
        hint = "list the etcd members, e.g. https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379"
        bad("stkrelay.E034", "ETCD_ENDPOINTS", str(exc), hint)
    if not (prefix.startswith("/") and prefix.endswith("/") and len(prefix) > 1) or any(
        c.isspace() for c in prefix
    ):
        bad("stkrelay.E035", "ETCD_PREFIX", f"{prefix!r} must start and end with / and hold no spaces",
            "e.g. /stkrelay/9999-9999-99-99/ (one prefix per pool)")  # fmt: skip
    etcd = EtcdSettings(tuple(endpoints), prefix, ca, cert, key, lease_poll)
    _check_tls(etcd, bad)
    return store, etcd


def _check_tls(etcd: EtcdSettings, bad: Bad) -> None:
    files = (("ETCD_CA", etcd.ca), ("ETCD_CERT", etcd.cert), ("ETCD_KEY", etcd.key))
    given = {k: v for k, v in files if v}
    if not given:
        return
    hint = "point ETCD_CA at the cluster's CA, ETCD_CERT/ETCD_KEY at this agent's client certificate and key"
    for key, path in given.items():
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            bad("stkrelay.E036", key, f"{path} is not a readable file", hint)
    if bool(etcd.cert) != bool(etcd.key):
        missing = "ETCD_KEY" if etcd.cert else "ETCD_CERT"
        bad("stkrelay.E036", missing, "is not set (a client certificate needs its key)", hint)
    plain = [e for e in etcd.endpoints if e.startswith("http://")]
    if plain:
        bad("stkrelay.E036", "ETCD_ENDPOINTS", f"{plain[0]} is not https:// but TLS options are set",
            "use https:// endpoints with ETCD_CA/ETCD_CERT/ETCD_KEY")  # fmt: skip
