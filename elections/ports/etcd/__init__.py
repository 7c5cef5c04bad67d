"""The pool on etcd v3 (`LEASE_STORE = etcd`, docs/design.md §5.2): the same signed
records as on the share, kept under one key prefix.

    client.py   EtcdClient: several endpoints, a deadline on every call, failover, TLS, capped answers
    watch.py    PrefixWatch: when to read again (never what to believe)
    pool.py     EtcdPool: one pool's client, watch and key layout, shared in a process
    backend.py  EtcdBackend: the backend port (transactions on mod_revision, the epoch counter, holds)
    store.py    EtcdLeaseStore: the record layer (records.PoolStore) over EtcdBackend
    events.py   EtcdEvents: the event streams, one key per line (EtcdEventSink/EtcdEventTail: the
                event record layer, event_records, over them)

Vocabulary:

  revision   a key's mod_revision: what a compare-and-set compares
  hold       the etcd lease a leader's record is bound to; its loss is `WriteOutcome.LOST`
  watch      etcd's watch stream on the pool's prefix: it says when to read again

Opened only through `elections.ports.store.stores` (imported when a pool uses etcd).
"""
