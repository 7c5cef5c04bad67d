"""What the serving relay reads of the pool, off the event loop: the successor, its lease.

`PoolReads` is a collaborator of `relay.runner.serve.RelayRunner`, handed the runner's
configuration, epoch and gate. A dead share may hang a read: each runs on a daemon thread of its
own, within a deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from elections.ports.store.stores import PoolPlace, open_store
from relay.runner.gate import LeadershipGate
from stkconfig.model import Config
from stkhost.clock import SystemClock

log = logging.getLogger("stkrelay.relay")

LEASE_READ_WITHIN = 0.5
Successor = tuple[int | None, str | None, int | None]
NOBODY: Successor = (None, None, None)


class PoolReads:
    """The runner's reads of the share: the lease for the cloud tunnel, the successor on the way out."""

    def __init__(self, stk: Config, epoch: int, gate: LeadershipGate) -> None:
        self.stk, self.epoch, self.gate = stk, epoch, gate

    async def read_lease(self, within: float = LEASE_READ_WITHIN) -> Any:
        """The lease read off-loop (a dead share may hang), within `within` seconds; raises if not."""
        return await self.off_loop(lambda store: store.read(), within)

    async def off_loop(self, read: Callable[[Any], Any], within: float = LEASE_READ_WITHIN) -> Any:
        """`read(store)` on a daemon thread of its own (a dead share may hang it: the
        relay still exits), within `within` seconds; raises if not."""
        stk = self.stk
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                result = read(open_store(PoolPlace.of(stk), stk.node, SystemClock()))
            except BaseException as exc:
                settle(future.set_exception, exc)
            else:
                settle(future.set_result, result)

        threading.Thread(target=run, name="lease-read", daemon=True).start()
        async with asyncio.timeout(within):
            return await asyncio.wrap_future(future)

    async def own_lease(self) -> dict[str, Any] | None:
        """The signed lease naming this node with this epoch, as the tunnel presents it; or None."""
        try:
            lease = await self.read_lease(self.stk.share_timeout + 0.5)
        except Exception as exc:
            log.warning("cannot read the lease for the cloud tunnel: %s", exc or type(exc).__name__)
            return None
        record = lease.record
        if lease.status != "valid" or record is None or record.released:
            return None
        if record.node != self.stk.node or record.epoch != self.epoch:
            return None
        return json.loads(record.encode(self.stk.pool_key))

    async def successor(self) -> Successor:
        """The new leader from the lease, read off-loop (a dead share may hang): or nulls.
        A lease this node released with a handoff names its target, not yet its holder:
        the target's address (its member record) with the next epoch, which only the
        target may take at once. A claim for the clients to try first (a hint they
        drop after a few tries), fenced by the target's own gate like any other."""
        named = self.gate.successor()
        if named is not None:  # a handoff this agent wrote: no read of the share needed
            return named
        try:
            lease = await self.read_lease()
        except Exception as exc:
            log.warning("cannot read the lease to name the new leader: %s", exc or type(exc).__name__)
            return NOBODY
        record = lease.record
        if lease.status != "valid" or record is None:
            return NOBODY
        if record.released and record.node == self.stk.node and record.epoch == self.epoch:
            return await self.handoff_target(record.handoff_to, record.epoch + 1)
        if record.released or record.node == self.stk.node or record.epoch <= self.epoch:
            return NOBODY
        return record.epoch, record.ip, record.port

    async def handoff_target(self, node: str | None, epoch: int) -> Successor:
        if not node or node == self.stk.node:
            return NOBODY

        def member_ip(store: Any) -> str | None:
            doc = store.read_member(node)
            ip = (doc or {}).get("ip")
            return ip if isinstance(ip, str) and ip else None

        try:
            ip = await self.off_loop(member_ip)
        except Exception as exc:
            log.warning("cannot read %s's member record to name it: %s", node, exc or type(exc).__name__)
            return NOBODY
        return (epoch, ip, self.stk.relay_port) if ip else NOBODY


def settle(answer: Callable[[Any], None], value: Any) -> None:
    """Answer a read's future, unless its caller stopped waiting (past its deadline the
    future is cancelled: the late answer is dropped, not a traceback in the relay's log)."""
    try:
        answer(value)
    except concurrent.futures.InvalidStateError:
        pass
