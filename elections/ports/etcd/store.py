"""`EtcdLeaseStore`: the `LeaseStore` port on etcd v3 (docs/design.md §5.2): the
record layer (`records.PoolStore`: the same records, signatures and refusals
as on the share, §5.1, §5.4) over `EtcdBackend` (transactions on
`mod_revision`, the epoch counter, the record bound to an etcd lease).
"""

from __future__ import annotations

from elections.core.evidence import Refusals
from elections.ports.etcd.backend import EtcdBackend
from elections.ports.etcd.pool import EtcdPool
from elections.ports.store.backend import counted
from elections.ports.store.records import PoolStore
from stkhost.clock import Clock


class EtcdLeaseStore(PoolStore):
    backend: EtcdBackend

    def __init__(
        self, pool: EtcdPool, pool_key: str, node: str, clock: Clock, refusals: Refusals | None = None,
        watch: bool = True,
    ) -> None:  # fmt: skip
        refusals = refusals if refusals is not None else Refusals()
        backend = EtcdBackend(pool, node, watch=watch, refuse=counted(refusals, clock, pool.describe()))
        super().__init__(backend, pool_key, node, clock, refusals)
        self.pool = pool

    @property
    def held_lease(self) -> int:
        """The etcd lease under the record this store wrote as holder (0: none)."""
        return self.backend.held_lease
