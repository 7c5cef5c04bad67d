"""The cloud nodes' directory of tunnels in etcd (issue 26 part 3; run by `relay.cloud.cluster`).

One key per site, ``<prefix>tunnels/<KMSN>`` = ``{"node": <cloud node>, "epoch": <site epoch>}``,
under an etcd lease of its own (`ttl` seconds, kept alive by its node), so the
entries of a dead node expire and its sites' tunnels may be claimed elsewhere.

- `may_claim` (pure): a node may take a site's entry when there is none, when
  the tunnel's epoch is above the entry's, or to refresh its own entry at the
  same epoch. An entry that is not evidence (not a bounded JSON object with a
  string node and an integer epoch) is never overwritten: refuse, never risk
  two tunnels for one KMSN.
- `TunnelDirectory.claim` reads the entry, decides, and writes with a
  compare-and-set on the key's ``mod_revision``: two nodes racing for one site
  cannot both succeed, and the key's revisions in etcd are the history of who
  held each site at which epoch.
- A node that takes a site from another node (a higher epoch) revokes the
  etcd lease of the entry it replaced: the old node's next keep-alive finds
  its lease gone and it closes the site's old tunnel (`keepalive` -> lost).
- `entry` reads etcd: untrusted input, bounded by the client's answer cap and
  `ENTRY` (4 KiB, depth 2), refused (`Untrusted`) when it is not evidence.
"""

from __future__ import annotations

import json

from elections.core.untrusted import Limits, Untrusted, load_object
from elections.ports.etcd.client import EtcdClient, gateway_int, mod_is, put, unb64
from relay.cloud.keepalive import keepalive_many

ENTRY = Limits(4 << 10, max_depth=2)
Held = tuple[str, int]  # (cloud node, epoch)


def may_claim(held: Held | None, node: str, epoch: int) -> bool:
    if held is None:
        return True
    holder, at = held
    return epoch > at or (epoch == at and holder == node)


def read_entry(raw: bytes) -> Held:
    """The entry's (node, epoch); `Untrusted` if it is not one."""
    doc = load_object(raw, ENTRY, "tunnel entry")
    node, epoch = doc.get("node"), doc.get("epoch")
    if not isinstance(node, str) or not node or type(epoch) is not int or epoch < 0:
        raise Untrusted("bad_field", "a tunnel entry names a node (string) and an epoch (integer >= 0)")
    return node[:128], epoch


class TunnelDirectory:
    """This cloud node's view of the directory: claim, keep alive, read, release."""

    def __init__(self, client: EtcdClient, prefix: str, node: str, ttl: int = 2) -> None:
        self.client, self.prefix, self.node, self.ttl = client, prefix, node, ttl
        self.leases: dict[str, int] = {}  # kmsn -> the etcd lease under our entry

    def key(self, kmsn: str) -> str:
        return f"{self.prefix}tunnels/{kmsn}"

    def entry(self, kmsn: str) -> tuple[Held | None, int]:
        """The site's entry (None: none) and the key's mod_revision (0: no key).
        `Untrusted` for an entry that is not evidence."""
        held, revision, _ = self.entry_lease(kmsn)
        return held, revision

    def entry_lease(self, kmsn: str) -> tuple[Held | None, int, int]:
        """`entry`, and the etcd lease the entry lives under (0: none)."""
        kvs = self.client.range(self.key(kmsn)).get("kvs") or []
        if not kvs or not isinstance(kvs[0], dict):
            return None, 0, 0
        kv = kvs[0]
        return (
            read_entry(unb64(kv.get("value"))),
            gateway_int(kv.get("mod_revision")),
            gateway_int(kv.get("lease")),
        )

    def claim(self, kmsn: str, epoch: int) -> int:
        """Make this node the holder of `kmsn`'s tunnel at `epoch`, if the directory allows:
        the etcd lease of the new entry (0: refused, or another node won the race)."""
        return self.attempt(kmsn, epoch)[0]

    def attempt(self, kmsn: str, epoch: int) -> tuple[int, Held | None]:
        """`claim`, and the entry that refused it (None when there was none)."""
        held, revision, old_lease = self.entry_lease(kmsn)
        if not may_claim(held, self.node, epoch):
            return 0, held
        lease, _ = self.client.grant(self.ttl)
        value = json.dumps({"node": self.node, "epoch": epoch}).encode()
        doc = self.client.txn([mod_is(self.key(kmsn), revision)], [put(self.key(kmsn), value, lease)])
        if not doc.get("succeeded"):
            self.client.revoke(lease)
            return 0, held
        mine = self.leases.pop(kmsn, None)
        self.leases[kmsn] = lease
        for stale in {x for x in (mine, old_lease) if x} - {lease}:
            self.client.revoke(stale)  # ours of an older tunnel, or the node we took the site from
        return lease, held

    def keepalive(self, items: list[tuple[str, int]] | None = None) -> list[str]:
        """Refresh our entries' leases (or those of `items`) in one request
        (`relay.cloud.keepalive`); the sites whose entry etcd no longer has.
        Raises `StoreUnavailable` when etcd does not answer (the caller counts how long)."""
        items = list(self.leases.items()) if items is None else items
        if not items:
            return []
        ttls = keepalive_many(self.client, [lease for _, lease in items])
        lost = []
        for kmsn, lease in items:
            if ttls.get(lease, -1) <= 0 and self.leases.get(kmsn) == lease:  # not re-claimed meanwhile
                lost.append(kmsn)
                self.leases.pop(kmsn, None)
        return lost

    def release(self, kmsn: str, lease: int | None = None) -> None:
        """Drop our entry of `kmsn` (only if it is still under `lease`, when given)."""
        if lease is not None and self.leases.get(kmsn) != lease:
            return
        lease = self.leases.pop(kmsn, None)
        if lease is not None:
            self.client.revoke(lease)
