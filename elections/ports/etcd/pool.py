"""One pool's place on etcd, shared by every store, sink and tail of this
process for that pool: the client, the watch, and the key layout.

Keys under the prefix (`ETCD_PREFIX`, default `/stkrelay/<KMSN>/`):

    pool/leader          the lease record: the signed JSON of relay_leader.json,
                         bound to the holder's etcd lease
    pool/epoch           the epoch counter: signed {"epoch": N, "node": ...},
                         moved in the very transaction that takes pool/leader
    pool/members/<node>  a member's signed heartbeat (members/<node>.json)
    events/<node>/<seq>  one signed event line (events/<node>.jsonl), seq
                         zero-padded to 12 digits, created once, never overwritten

A revision handed out by a read is `etcd:<mod_revision>:<lease id>` of the key
(`etcd:0:0` when there is none): writes compare on that mod_revision.

`bounded_range()` reads a range without letting anyone who can write the
prefix make this process read without bound: the answer is capped; past the
cap, the keys are listed (capped too) and fetched one by one, and a value
larger than its limit comes back as None (refused by the caller).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from elections.errors import StoreUnavailable
from elections.ports.etcd.client import (
    EtcdClient,
    Tls,
    TooLarge,
    gateway_int,
    prefix_end,
    unb64,
)
from elections.ports.etcd.watch import PrefixWatch
from stkconfig.etcd_endpoints import parse_endpoints

LEASE_KEY = "pool/leader"
EPOCH_KEY = "pool/epoch"
MEMBERS = "pool/members/"
WITNESS_KEY = "pool/witness"  # the share's witness (issue 38)
EVENTS = "events/"
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a node id, as in the share's file names
LIST_CAP = 4 << 20  # bytes of a keys-only listing


@dataclass(frozen=True)
class Kv:
    key: str  # relative to the prefix
    value: bytes | None  # None: larger than the limit (not read)
    mod: int
    create: int
    lease: int

    @property
    def revision(self) -> str:
        return revision(self.mod, self.lease)


def revision(mod: int, lease: int) -> str:
    return f"etcd:{mod}:{lease}"


def parse_revision(text: str) -> tuple[int, int] | None:
    """(mod_revision, lease) of a revision this store handed out; None for anything else.
    "" is "no record at all", as every store's `read()` of nothing says it (file: "")."""
    if text == "":
        return 0, 0
    kind, _, rest = text.partition(":")
    mod, _, lease = rest.partition(":")
    if kind != "etcd" or not mod.isdigit() or not lease.isdigit():
        return None
    return int(mod), int(lease)


class EtcdPool:
    def __init__(self, endpoints: list[str], prefix: str, timeout: float, tls: Tls | None = None,
                 fallback: float = 2.0) -> None:  # fmt: skip
        self.client = EtcdClient(endpoints, timeout, tls)
        self.prefix = prefix
        self.fallback = fallback  # a read older than this is done again, watch or not
        self.watch = PrefixWatch(
            self.client, prefix, self.part_of, self.key(LEASE_KEY), idle=max(fallback, 2.0)
        )
        self._started = False
        self._lock = threading.Lock()

    def key(self, rel: str) -> str:
        return self.prefix + rel

    def part_of(self, key: str) -> str | None:
        rel = key[len(self.prefix) :] if key.startswith(self.prefix) else None
        if rel is None:
            return None
        if rel in (LEASE_KEY, EPOCH_KEY):
            return "lease"
        if rel.startswith(MEMBERS):
            return "members"
        if rel.startswith(EVENTS):
            return "events"
        return None

    def watching(self) -> PrefixWatch:
        """The pool's watch, started on first use (short-lived readers never start one)."""
        with self._lock:
            if not self._started:
                self._started = True
                self.watch.start()
        return self.watch

    def touched(self, part: str) -> None:
        """This process changed `part`: every reader of it here reads again."""
        self.watch._bump({part})

    def describe(self) -> str:
        return f"etcd:{','.join(self.client.endpoints)}{self.prefix}"

    def bounded_range(
        self, rel: str, limit: int, value_cap: int, cap: int, **opts: Any
    ) -> tuple[list[Kv], bool]:
        """Keys starting with `rel` (at most `limit`), and whether there were more."""
        start, end = self.key(rel), prefix_end(self.key(rel))
        try:
            doc = self.client.range(start, end, cap=cap, limit=limit, **opts)
            return [self._kv(kv, value_cap) for kv in doc.get("kvs") or []], bool(doc.get("more"))
        except TooLarge:
            pass
        try:  # too much at once: list the keys, then read one at a time
            doc = self.client.range(start, end, cap=LIST_CAP, limit=limit, keys_only=True, **opts)
        except TooLarge as exc:
            raise StoreUnavailable(f"etcd keys under {start} are too many or too long: {exc}") from None
        out = []
        for meta in doc.get("kvs") or []:
            rel = unb64(meta.get("key")).decode("utf-8", "replace")[len(self.prefix) :]
            out.append(self.get(rel, value_cap) or self._kv(meta, value_cap))
        return out, bool(doc.get("more"))

    def get(self, rel: str, value_cap: int) -> Kv | None:
        """One key, its value None when larger than `value_cap` bytes."""
        key = self.key(rel)
        try:
            doc = self.client.range(key, cap=value_cap * 2 + 4096)
        except TooLarge:
            doc = self.client.range(key, keys_only=True)
            kvs = doc.get("kvs") or []
            return self._kv(dict(kvs[0], value=None), value_cap) if kvs else None
        kvs = doc.get("kvs") or []
        return self._kv(kvs[0], value_cap) if kvs else None

    def _kv(self, kv: dict[str, Any], value_cap: int) -> Kv:
        key = unb64(kv.get("key")).decode("utf-8", "replace")
        raw = kv.get("value", "")
        value = None if raw is None or len(raw) > value_cap * 4 // 3 + 8 else unb64(raw)
        if value is not None and len(value) > value_cap:
            value = None
        mod, create, lease = (gateway_int(kv.get(k)) for k in ("mod_revision", "create_revision", "lease"))
        return Kv(key[len(self.prefix) :], value, mod, create, lease)


_pools: dict[tuple[Any, ...], EtcdPool] = {}
_pools_lock = threading.Lock()


def pool_for(
    endpoints: str, prefix: str, timeout: float, tls: Tls | None = None, fallback: float = 2.0
) -> EtcdPool:
    """The one `EtcdPool` of this process for these endpoints and prefix."""
    eps = parse_endpoints(endpoints)
    key = (tuple(eps), prefix, timeout, tls, fallback)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = EtcdPool(eps, prefix, timeout, tls, fallback)
        return pool


def default_prefix(kmsn: str) -> str:
    return f"/stkrelay/{kmsn}/"
