"""A simulated pool on a directory: validly signed records as its agents write them.

For the watched-pool tests and the fleet benchmark: a pool of N members whose
leader renews, whose members heartbeat and whose elections are event lines,
without N real agents. Every record is signed with the pool's own key through
the product's codec (`elections.core.lease`: `LeaseRecord.encode`, `sign`) and
written the way the store writes it (temp file + rename; one appender per
event file). `forge_*` write what an attacker without the key would.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class SimPool:
    """One KMSN on `lease_dir`, signed with `key`, members S001..S0NN."""

    def __init__(self, lease_dir: Path, kmsn: str, key: str, members: int = 3, port: int = 9530) -> None:
        self.dir = Path(lease_dir)
        self.kmsn = kmsn
        self.key = key
        self.port = port
        self.nodes = [f"S{i + 1:03d}" for i in range(members)]
        self.epoch = 0
        self.leader: str | None = None
        self.renew_seq = 0
        self._beat: dict[str, int] = {}
        self._event: dict[str, int] = {}
        (self.dir / "members").mkdir(parents=True, exist_ok=True)
        (self.dir / "events").mkdir(exist_ok=True)

    def ip(self, node: str) -> str:
        return f"10.{zlib.crc32(self.kmsn.encode()) % 200}.0.{self.nodes.index(node) + 1}"

    # -- what the pool's agents write ----------------------------------------------
    def elect(self, node: str, reason: str = "no leader seen") -> int:
        """`node` takes the next epoch: its claim, the lease, its `elected` event."""
        self.epoch += 1
        self.leader, self.renew_seq = node, 0
        self.heartbeat(node)
        self.renew()
        self.event(node, "elected", reason)
        return self.epoch

    def renew(self, ttl_s: float = 10) -> None:
        from elections.core.lease import LeaseRecord

        assert self.leader is not None
        self.renew_seq += 1
        rec = LeaseRecord(
            kmsn=self.kmsn, station=self.leader, ip=self.ip(self.leader), port=self.port, pid=4242,
            epoch=self.epoch, lease_until="20990101000000", node=self.leader, renew_seq=self.renew_seq,
            ttl_s=ttl_s,
        )  # fmt: skip
        _replace(self.dir / "relay_leader.json", rec.encode(self.key))

    def heartbeat(self, node: str, **fields: Any) -> None:
        from elections.core.lease import sign

        self._beat[node] = self._beat.get(node, 0) + 1
        doc = {"node": node, "ip": self.ip(node), "seq": self._beat[node], "drain": False, "health": "ok",
               "version": "sim", "epoch": self.epoch, "priority": 50, "paused": False, **fields}  # fmt: skip
        doc["sig"] = sign(doc, self.key)
        _replace(self.dir / "members" / f"{node}.json", json.dumps(doc).encode() + b"\n")

    def beat_all(self) -> None:
        for node in self.nodes:
            self.heartbeat(node)

    def event(self, node: str, kind: str, reason: str = "", **extra: Any) -> dict[str, Any]:
        from elections.core.lease import sign

        self._event[node] = self._event.get(node, 0) + 1
        doc = {"node": node, "seq": self._event[node], "kind": kind, "epoch": self.epoch,
               "at": datetime.now(UTC).isoformat(), "reason": reason, **extra}  # fmt: skip
        doc["sig"] = sign(doc, self.key)
        with open(self.dir / "events" / f"{node}.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(doc) + "\n")
        return doc

    def tick(self) -> None:
        """One renew period: the leader renews, every member heartbeats."""
        if self.leader is not None:
            self.renew()
        self.beat_all()

    # -- what someone without the key writes -------------------------------------------
    def forge_lease(self, node: str, epoch: int) -> None:
        """A lease naming `node` at `epoch`, signed with a key that is not the pool's."""
        from elections.core.lease import LeaseRecord

        rec = LeaseRecord(
            kmsn=self.kmsn, station=node, ip="10.66.6.6", port=self.port, pid=1, epoch=epoch,
            lease_until="20990101000000", node=node, renew_seq=1, ttl_s=10,
        )  # fmt: skip
        _replace(self.dir / "relay_leader.json", rec.encode("not-the-pool-key-at-all"))

    def forge_event(self, node: str, kind: str = "drain_requested", **extra: Any) -> None:
        from elections.core.lease import sign

        doc = {"node": node, "seq": 10**6, "kind": kind, "epoch": self.epoch,
               "at": datetime.now(UTC).isoformat(), "reason": "forged", **extra}  # fmt: skip
        doc["sig"] = sign(doc, "not-the-pool-key-at-all")
        with open(self.dir / "events" / f"{node}.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(doc) + "\n")


class Ticker:
    """The simulated pools' agents: each pool renews and heartbeats every `every`
    seconds on a thread of its own (a pool whose directory is gone just waits)."""

    def __init__(self, *pools: SimPool, every: float = 0.5) -> None:
        self.every = every
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in pools]
        for t in self.threads:
            t.start()

    def _run(self, pool: SimPool) -> None:
        while not self._stop.wait(self.every):
            try:
                pool.tick()
            except OSError:
                pass

    def stop(self) -> None:
        self._stop.set()


def pool_section(kmsn: str, lease_dir: Path, key: str, **extra: str) -> str:
    """The `[pool:<KMSN>]` section of stk.ini that watches such a pool."""
    values = {"LEASE_DIR": str(lease_dir), "RELAY_TOKEN": key, **extra}
    return f"\n[pool:{kmsn}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
