"""What this node writes to the lease: its `Identity`, the record of an epoch
(`make_record`), and the release of a lease it holds (`release_lease`, a
compare-and-set: only if the store still names it with that epoch). Used by the
elector and by `runagent`'s release on SIGTERM.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from elections.core.lease import LeaseRecord, legacy_lease_until
from elections.errors import StoreUnavailable
from elections.ports.store.store import LeaseStore, WriteOutcome
from stkhost.clock import Clock

if TYPE_CHECKING:
    from stkconfig.model import Config

CONTEND_ATTEMPTS = 3


@dataclass(frozen=True)
class Identity:
    node: str
    kmsn: str
    station: str
    ip: str
    port: int
    pid: int = 0


def identity(stk: Config) -> Identity:
    """This agent's identity in the lease: the supervisor's pid (`STK_AGENT_PID`), not a child's."""
    return Identity(
        node=stk.node,
        kmsn=stk.kmsn,
        station=stk.station,
        ip=stk.node_ip,
        port=stk.relay_port,
        pid=int(os.environ.get("STK_AGENT_PID") or os.getpid()),
    )


def make_record(
    me: Identity, clock: Clock, epoch: int, seq: int, ttl: float, handoff_to: str | None = None
) -> LeaseRecord:
    return LeaseRecord(
        kmsn=me.kmsn,
        station=me.station,
        ip=me.ip,
        port=me.port,
        pid=me.pid,
        epoch=epoch,
        lease_until=legacy_lease_until(clock.wall(), ttl),
        node=me.node,
        renew_seq=seq,
        ttl_s=ttl,
        handoff_to=handoff_to,
    )


def release_lease(
    store: LeaseStore,
    me: Identity,
    epoch: int,
    make: Callable[..., LeaseRecord],
    handoff_to: str | None = None,
    min_seq: int = 0,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Mark our lease of `epoch` released (`ttl_s: 0`), compare-and-set: only if
    the store still names `me` with that epoch. True if written."""
    for _ in range(CONTEND_ATTEMPTS * 2):
        try:
            read = store.read()
        except StoreUnavailable:
            return False
        rec = read.record
        if (
            read.status == "valid"
            and rec is not None
            and (rec.node != me.node or rec.epoch != epoch or rec.released)
        ):
            return False  # not ours (any more): nothing to release
        seq = max(min_seq, rec.renew_seq if rec is not None else 0) + 1
        try:
            outcome = store.write(make(epoch, seq, 0, handoff_to), expect=read.revision)
        except StoreUnavailable:
            return False
        if outcome is WriteOutcome.WRITTEN:
            return True
        sleep(0.05)
    return False
