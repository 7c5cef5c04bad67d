"""A cloud node's side of the etcd directory, for the event loop (issue 26 part 3).

`relay.cloud.directory.TunnelDirectory` is blocking (HTTP to etcd); this runs
it on a few worker threads (one `EtcdClient` each) and gives the server:

- `claim(kmsn, epoch)`: the entry at this epoch, or why not. A site's tunnel is
  accepted only once its claim won (compare-and-set). An entry of another node
  at the same epoch is the tunnel the site had before this one: its node may be
  dead, and then its etcd lease expires within ``DIRECTORY_TTL``; so the claim
  is tried again every `RETRY` s until that TTL and `HOLD_MARGIN` have passed,
  then refused (``directory_held``). A higher epoch in the entry: refused at once
  (``directory_stale``); an entry that is not evidence (``directory_untrusted``)
  is never overwritten; etcd not answering: ``directory_unavailable``.
- `lookup(kmsn)`: who holds the site now (cached `FRESH` s, one read per site
  at a time, however many clients ask), for forwarding a remote client.
- `run()`: the keep-alive of this node's entries every TTL/4. A site whose
  entry etcd no longer has (expired, or revoked by the node that took it with a
  higher epoch) is `on_lost`: its tunnel is closed. When etcd has not answered
  for 3/4 of the TTL this node can no longer show it holds anything, and every
  tunnel goes the same way: the entries will expire, and another node may take
  the sites; never two tunnels for one site.
- `release(kmsn, lease)`: the tunnel closed, the entry goes at once.

Everything read from etcd is untrusted (`relay.cloud.directory.read_entry`):
bounded, verified, and when it is not evidence, refused and counted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from elections.core.untrusted import Untrusted
from elections.errors import StoreUnavailable
from elections.ports.etcd.client import EtcdClient, EtcdRefused, LeaseNotFound, TooLarge
from relay.cloud.config_cluster import Cluster
from relay.cloud.directory import Held, TunnelDirectory

log = logging.getLogger("stkrelay.cloud")

WORKERS = 4
RETRY = 0.1  # s between two claims of a site another node's entry holds at the same epoch
HOLD_MARGIN = 1.0  # s past the TTL a claim keeps trying before it is refused
FRESH = 0.3  # s a looked-up holder is reused
ETCD_ERRORS = (StoreUnavailable, EtcdRefused, TooLarge, LeaseNotFound, OSError, ValueError)


class _ThreadClients:
    """One `EtcdClient` per worker thread (a requests session is not shared across threads)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.local = threading.local()

    def __getattr__(self, name: str) -> Any:
        client = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = EtcdClient(self.cluster.endpoints, self.cluster.timeout)
        return getattr(client, name)


class ClusterDirectory:
    def __init__(
        self, cluster: Cluster, count: Callable[[str], None], on_lost: Callable[[str], None]
    ) -> None:
        import etcd3gw  # noqa: F401  (at start: its import is not a cost of the first tunnel)

        self.cluster = cluster
        self.count, self.on_lost = count, on_lost
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="directory")
        # The keep-alives have threads of their own: a burst of claims and lookups (a dead node's
        # sites arriving, thousands of clients reconnecting) must never delay them past the TTL.
        self.keeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="directory-keepalive")
        self.directory = TunnelDirectory(_ThreadClients(cluster), cluster.prefix, cluster.node, cluster.ttl)  # type: ignore[arg-type]
        self.cache: dict[str, tuple[float, Held | None]] = {}
        self.pending: dict[str, asyncio.Future[Held | None]] = {}
        self.last_ok = time.monotonic()
        self.etcd_error = ""
        self.claims = {"won": 0, "retried": 0}

    async def _call(self, fn: Callable[..., Any], *args: Any, pool: ThreadPoolExecutor | None = None) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool or self.pool, fn, *args)

    # -- claims ------------------------------------------------------------------------
    async def claim(self, kmsn: str, epoch: int) -> tuple[int, str, Held | None]:
        """(the etcd lease of our entry, "", held) when won; (0, cause, held) when refused."""
        deadline = time.monotonic() + self.cluster.ttl + HOLD_MARGIN
        held: Held | None = None
        while True:
            try:
                lease, held = await self._call(self.directory.attempt, kmsn, epoch)
            except Untrusted as exc:
                self.count("directory_untrusted")
                log.warning("directory entry of %s is not evidence (%s): kept", kmsn, exc.detail[:200])
                return 0, "directory_untrusted", None
            except ETCD_ERRORS as exc:
                self.etcd_error = str(exc)[:200]
                return 0, "directory_unavailable", None
            self.last_ok = time.monotonic()
            if lease:
                self.claims["won"] += 1
                self.cache[kmsn] = (time.monotonic(), (self.cluster.node, epoch))
                return lease, "", held
            if held is not None and held[1] > epoch:
                return 0, "directory_stale", held
            if time.monotonic() + RETRY > deadline:
                return 0, "directory_held", held
            self.claims["retried"] += 1
            await asyncio.sleep(RETRY)

    def release(self, kmsn: str, lease: int) -> None:
        self.cache.pop(kmsn, None)
        future = self.pool.submit(self.directory.release, kmsn, lease)
        future.add_done_callback(lambda f: f.exception())  # an unreachable etcd: the lease expires

    # -- lookups -----------------------------------------------------------------------
    def invalidate(self, kmsn: str) -> None:
        self.cache.pop(kmsn, None)

    async def lookup(self, kmsn: str) -> Held | None:
        """The holder of `kmsn`'s entry (None: none, or not evidence, or etcd silent)."""
        cached = self.cache.get(kmsn)
        if cached is not None and time.monotonic() - cached[0] < FRESH:
            return cached[1]
        pending = self.pending.get(kmsn)
        if pending is None:
            pending = self.pending[kmsn] = asyncio.get_running_loop().create_future()
            try:
                held: Held | None = (await self._call(self.directory.entry, kmsn))[0]
                self.last_ok = time.monotonic()
            except Untrusted as exc:
                self.count("directory_untrusted")
                log.warning("directory entry of %s is not evidence (%s)", kmsn, exc.detail[:200])
                held = None
            except ETCD_ERRORS as exc:
                self.etcd_error = str(exc)[:200]
                self.count("directory_unavailable")
                held = None
            self.cache[kmsn] = (time.monotonic(), held)
            del self.pending[kmsn]
            pending.set_result(held)
            return held
        return await asyncio.shield(pending)

    # -- keep-alive --------------------------------------------------------------------
    async def run(self) -> None:
        every = max(0.1, self.cluster.ttl / 4)  # the round's own time comes on top: ~TTL/3 in all
        while True:
            await asyncio.sleep(every)
            if not self.directory.leases:
                self.last_ok = time.monotonic()
                continue
            try:
                lost = await self._call(self.directory.keepalive, pool=self.keeper)
            except ETCD_ERRORS as exc:
                self.etcd_error = str(exc)[:200]
                silent = time.monotonic() - self.last_ok
                if silent > 0.75 * self.cluster.ttl:
                    log.warning("etcd silent for %.1f s (%s): this node closes its %d tunnel(s)", silent,
                                self.etcd_error, len(self.directory.leases))  # fmt: skip
                    lost = list(self.directory.leases)
                    self.directory.leases.clear()
                    self.count("directory_silent")
                else:
                    continue
            else:
                self.last_ok = time.monotonic()
            for kmsn in lost:
                self.cache.pop(kmsn, None)
                self.on_lost(kmsn)

    def close(self) -> None:
        for kmsn, lease in list(self.directory.leases.items()):
            self.pool.submit(self.directory.release, kmsn, lease)
        self.pool.shutdown(wait=True, cancel_futures=False)
        self.keeper.shutdown(wait=False, cancel_futures=True)

    def snapshot(self) -> dict[str, Any]:
        c = self.cluster
        silent = round(time.monotonic() - self.last_ok, 3)
        return {"node": c.node, "nodes": sorted(c.nodes), "etcd": c.endpoints, "ttl_s": c.ttl,
                "entries": len(self.directory.leases), "claims": dict(self.claims),
                "etcd_silent_s": silent, "etcd_error": self.etcd_error}  # fmt: skip
