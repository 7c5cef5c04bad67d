"""Ports and their adapters (docs/design.md §3, layer 2).

The small interfaces the runtime talks through, each with its real
implementation, one sub-package per subsystem. Nothing here decides anything.

Vocabulary:

  store/       the backend port, the record layer, the `LeaseStore`, `stores` that opens them
  share/       a folder of a file server: local, mounted or SMB; the backend and lock on it
  events/      the pool's signed event lines, one writer per node, and their files
  beacons/     signed UDP datagrams between members, the liveness watch, nudges
  local/       this agent's data directory shared by its processes, its certificate, its gate
  etcd/        the pool on etcd v3: the same ports on another store

Below every app, `stkhost` holds what both the election and the relay use of the host:
the clock, the OS seam, retries, pinned HTTPS.
"""
