"""This agent's data directory: the files its local processes share.

One module owns them, with a typed reader and writer each:

| file              | written by                  | read by |
|-------------------|-----------------------------|---------|
| `leadership.json` | the worker, after each cycle | supervisor, relay gate, executors' gate, web |
| `pool.json`       | the worker's survey          | web, relayctl, the steering service |
| `watched/<KMSN>.json` | the worker's watchers (one per `[pool:<KMSN>]`) | web, the steering service |
| `relay.json`      | the relay, every 0.5 s       | the worker's policy (relay attests), supervisor, web |
| `stations.json`   | the worker, when its station fold changes | the relay (bindings), web, relayctl |
| `relay.wanted`    | the relay executor           | the relay (standby) |
| `addresses.json`  | the worker's leader duties (`executors.held`) | the relay (`relay.server.listen_set`) |
| `stopping`        | the supervisor, on SIGTERM   | the worker (claims nothing any more) |

Writers replace files atomically (`host.write_atomic`); readers never raise: a
missing, damaged or hostile file reads as the empty value. Every time in these
files is this machine's monotonic clock, shared by its processes and never
compared with another machine's.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elections.core.skew import ClockReading, reading_of
from elections.core.untrusted import as_int
from elections.ports.clock import boottime
from elections.ports.host.files import write_atomic
from elections.ports.host.processes import pid_alive
from elections.ports.webcert import FINGERPRINT

LEADERSHIP_NAME = "leadership.json"
POOL_NAME = "pool.json"
RELAY_NAME = "relay.json"
ENTRY_NAME = "entry.json"
RELAY_WANTED_NAME = "relay.wanted"
ADDRESSES_NAME = "addresses.json"
MAX_HELD_ADDRESSES = 16  # a leader holds a VIP and a secondary IP or so; more are not ours
HELD_KINDS = ("vip", "secondary_ip")
STOPPING_NAME = "stopping"
STATIONS_NAME = "stations.json"
MAX_STATIONS_SHOWN = 4096  # names read from stations.json; more are not ours
WATCHED_DIR = "watched"
MAX_LOCAL_FILE = 4 << 20  # bytes: these files are small; a huge one is not ours
FRESH_NS = 50_000_000  # a file written this recently is read again at every look
ENTRY_TEXT = re.compile(r"\[?[0-9A-Fa-f.:]+\]?:[0-9]{1,5}")  # an entry member's addr:port as shown


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _seen(value: Any) -> tuple[str, int, int] | None:
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], str):
        epoch, seq = as_int(value[1], None), as_int(value[2], None)
        if epoch is not None and seq is not None:
            return (value[0], epoch, seq)
    return None


def _successor(value: Any) -> tuple[int, str, int] | None:
    if isinstance(value, list) and len(value) == 3 and isinstance(value[1], str) and value[1]:
        epoch, port = as_int(value[0], None), as_int(value[2], None)
        if epoch is not None and port is not None:
            return (epoch, value[1], port)
    return None


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


@dataclass(frozen=True)
class Leadership:
    """`leadership.json`: whether this agent leads, and until when it may act."""

    node: str = ""
    pid: int | None = None
    leader: bool = False
    epoch: int | None = None
    max_epoch: int = 0
    valid_until: float | None = None  # monotonic: after it, this agent must not act as leader
    updated: float | None = None
    decision: str = ""
    seen: tuple[str, int, int] | None = None  # the last valid lease this worker saw (node, epoch, renew_seq)
    # The same deadline on the gate's clock (`ports.clock.boottime`, which counts a suspend):
    # a machine that slept past it finds it passed, though its monotonic clock stood still.
    valid_until_boot: float | None = None
    # (epoch, ip, port) of the member this agent just handed its lease to, with the epoch only that
    # member may take at once: what the relay tells its clients as it stops (the handoff is on the
    # share already). A claim for clients to try first, fenced by the target's own gate.
    successor: tuple[int, str, int] | None = None

    def leads_now(self, now: float, epoch: int | None = None, boot: float | None = None) -> bool:
        """True while this says the agent leads (with `epoch`, if given) and the
        renew deadline has not passed: at `now` on this machine's monotonic clock,
        and (where the state says it) at `boot` on its boot clock, read now if not given."""
        if not self.leader or self.valid_until is None or self.epoch is None:
            return False
        if epoch is not None and epoch != self.epoch:
            return False
        if (
            self.valid_until_boot is not None
            and (boottime() if boot is None else boot) >= self.valid_until_boot
        ):
            return False
        return now < self.valid_until

    def held_epoch(self, now: float, boot: float | None = None) -> int | None:
        """The epoch this agent may act for at `now`, None if it leads none."""
        return self.epoch if self.leads_now(now, boot=boot) else None

    def worker_alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def disclaimed(self, why: str) -> Leadership:
        return Leadership(
            self.node, self.pid, False, None, self.max_epoch, None, self.updated, why, self.seen, None
        )

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Leadership:
        return cls(
            node=_str(doc.get("node")),
            pid=as_int(doc.get("pid"), None),
            leader=doc.get("leader") is True,
            epoch=as_int(doc.get("epoch"), None),
            max_epoch=as_int(doc.get("max_epoch")),
            valid_until=_num(doc.get("valid_until")),
            updated=_num(doc.get("updated")),
            decision=_str(doc.get("decision")),
            seen=_seen(doc.get("seen")),
            valid_until_boot=_num(doc.get("valid_until_boot")),
            successor=_successor(doc.get("successor")),
        )


@dataclass(frozen=True)
class MemberView:
    """One member as this agent judged it (eligibility on its own clock)."""

    eligible: bool = False
    reasons: tuple[str, ...] = ()
    age: float | None = None
    priority: int = 50
    ip: str | None = None
    drain: bool = False
    health: Any = None
    version: Any = None
    epoch: int | None = None
    # The SHA-256 of the certificate its panel serves (64 hex), "" for plain HTTP, None if unsaid.
    web_tls: str | None = None
    clock: ClockReading | None = None  # its wall clock against the store's, as it measured it (core.skew)
    entry: str | None = None  # its ENTRY_LISTEN if it is an entry member (relay.server.entry), else None
    entry_sessions: int | None = None  # its remote clients at its last heartbeat, None if unsaid

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> MemberView:
        reasons = doc.get("reasons")
        priority = as_int(doc.get("priority"), None)
        return cls(
            eligible=doc.get("eligible") is True,
            reasons=tuple(str(r) for r in reasons) if isinstance(reasons, list) else (),
            age=_num(doc.get("age")),
            priority=50 if priority is None else priority,
            ip=doc.get("ip") if isinstance(doc.get("ip"), str) else None,
            drain=bool(doc.get("drain")),
            health=doc.get("health"),
            version=doc.get("version"),
            epoch=as_int(doc.get("epoch"), None),
            web_tls=web_tls_of(doc),
            clock=reading_of(doc),
            entry=entry_of(doc),
            entry_sessions=entry_sessions_of(doc),
        )


def entry_shown(listen: tuple[str, int]) -> str:
    """``addr:port`` (``[v6]:port``): how an entry member's `ENTRY_LISTEN` is written and shown."""
    host, port = listen
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def entry_of(doc: dict[str, Any]) -> str | None:
    """A heartbeat's (or a view's) `entry`: an ``addr:port`` of at most 64 characters, else None."""
    value = doc.get("entry")
    if isinstance(value, str) and 3 <= len(value) <= 64 and ENTRY_TEXT.fullmatch(value):
        return value
    return None


def entry_sessions_of(doc: dict[str, Any]) -> int | None:
    value = doc.get("entry_sessions")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31 else None


def web_tls_of(doc: dict[str, Any]) -> str | None:
    """A heartbeat's (or a view's) `web_tls`: 64 lowercase hex, "" (plain HTTP), else None."""
    value = doc.get("web_tls")
    if value == "" or (isinstance(value, str) and FINGERPRINT.fullmatch(value)):
        return value
    return None


@dataclass(frozen=True)
class PoolView:
    """`pool.json`: this agent's view of its pool, written by its worker."""

    kmsn: str = ""
    node: str = ""
    updated: float | None = None  # monotonic, when the worker wrote it
    lease: dict[str, Any] | None = None  # the valid lease's fields, None if none
    lease_status: str = "unknown"
    lease_detail: str = ""
    store_reachable: bool = False
    members: dict[str, MemberView] = field(default_factory=dict)
    decision: str = ""
    paused: bool | None = None
    lease_seen_at: float | None = None  # monotonic, when the lease's renew_seq last changed
    command_clock: int = 0  # the highest command clock folded (core.commands)
    refusals: dict[str, Any] = field(default_factory=dict)  # core.evidence.Refusals.to_doc()
    # ports.beacons.BeaconService.snapshot() ({} while beacons are off): per member
    # loss, jitter and last-seen age on this agent's clock, the liveness watch
    beacons: dict[str, Any] = field(default_factory=dict)
    share_ops: int = 0  # operations this agent's worker made on the share since it started (ShareOps)

    @property
    def detection(self) -> str:
        """How this agent detects a leader's death: `beacons` or `lease only`."""
        return "beacons" if self.beacons else "lease only"

    watched: bool = False  # a pool this agent only watches (DESIGN.md §11), never contends in
    store: dict[str, Any] = field(default_factory=dict)  # ports.stores.store_details(): kind, where...
    # Members of this KMSN on another store (core.share_split.Split.to_doc()): an alarm, never an action.
    share_split: list[dict[str, Any]] = field(default_factory=list)
    ownership: dict[str, Any] = field(default_factory=dict)  # runtime.ownership: the address map, repairs

    @property
    def exists(self) -> bool:
        return self.updated is not None

    @property
    def epoch(self) -> int | None:
        return as_int((self.lease or {}).get("epoch"), None)

    @property
    def leader(self) -> str | None:
        """The lease's holder, unless released (liveness is the reader's to judge)."""
        lease = self.lease or {}
        node = lease.get("node")
        return node if isinstance(node, str) and not lease.get("released") else None

    def eligible(self) -> set[str]:
        return {n for n, m in self.members.items() if m.eligible}

    def to_doc(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["members"] = {n: {**asdict(m), "reasons": list(m.reasons)} for n, m in self.members.items()}
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> PoolView:
        members = doc.get("members") if isinstance(doc.get("members"), dict) else {}
        lease = doc.get("lease")
        return cls(
            kmsn=_str(doc.get("kmsn")),
            node=_str(doc.get("node")),
            updated=_num(doc.get("updated")),
            lease=lease if isinstance(lease, dict) else None,
            lease_status=_str(doc.get("lease_status"), "unknown" if doc else "missing"),
            lease_detail=_str(doc.get("lease_detail")),
            store_reachable=doc.get("store_reachable") is True,
            members={str(n): MemberView.from_doc(m) for n, m in members.items() if isinstance(m, dict)},
            decision=_str(doc.get("decision")),
            paused=doc.get("paused") if isinstance(doc.get("paused"), bool) else None,
            lease_seen_at=_num(doc.get("lease_seen_at")),
            command_clock=as_int(doc.get("command_clock")),
            refusals=doc.get("refusals") if isinstance(doc.get("refusals"), dict) else {},
            beacons=doc.get("beacons") if isinstance(doc.get("beacons"), dict) else {},
            share_ops=as_int(doc.get("share_ops")),
            watched=doc.get("watched") is True,
            store=doc.get("store") if isinstance(doc.get("store"), dict) else {},
            share_split=[d for d in doc.get("share_split") or [] if isinstance(d, dict)][:64]
            if isinstance(doc.get("share_split"), list)
            else [],
            ownership=doc.get("ownership") if isinstance(doc.get("ownership"), dict) else {},
        )


@dataclass(frozen=True)
class RelayStatus:
    """`relay.json`: the relay process's own account of itself."""

    pid: int | None = None
    epoch: int | None = None
    listening: bool = False
    updated: float | None = None  # monotonic
    snapshot: dict[str, Any] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return self.updated is not None or self.pid is not None

    def age(self, now: float) -> float | None:
        return None if self.updated is None else now - self.updated

    def serving(self, pid: int | None = None) -> bool:
        """It says it listens (as process `pid`, if given) and that process lives."""
        if not self.listening or self.pid is None:
            return False
        if pid is not None and pid != self.pid:
            return False
        return pid_alive(self.pid)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> RelayStatus:
        snapshot = doc.get("snapshot")
        return cls(
            pid=as_int(doc.get("pid"), None),
            epoch=as_int(doc.get("epoch"), None),
            listening=doc.get("listening") is True,
            updated=_num(doc.get("updated")),
            snapshot=snapshot if isinstance(snapshot, dict) else {},
        )


@dataclass(frozen=True)
class EntryStatus:
    """`entry.json`: an entry member's public side, as `relay.server.entry` tells it."""

    pid: int | None = None
    listen: str = ""  # ENTRY_LISTEN, as shown
    listening: bool = False
    updated: float | None = None  # monotonic
    target: dict[str, Any] | None = None  # the leader it forwards to now: epoch, node, ip, port
    sessions: int = 0  # remote clients on protocol v1 now
    streams: int = 0  # passthrough connections now
    repointed: int = 0  # leader changes followed
    proxy: dict[str, Any] = field(default_factory=dict)  # relay.server.fencing_proxy.FencingProxy.snapshot()
    error: str = ""

    @property
    def exists(self) -> bool:
        return self.updated is not None

    def fresh(self, now: float, within: float = 3.0) -> bool:
        """Written within `within` seconds (it writes every second) by a process that lives."""
        return (self.updated is not None and 0 <= now - self.updated <= within
                and self.pid is not None and pid_alive(self.pid))  # fmt: skip

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> EntryStatus:
        target = doc.get("target")
        proxy = doc.get("proxy")
        return cls(
            pid=as_int(doc.get("pid"), None),
            listen=_str(doc.get("listen"))[:80],
            listening=doc.get("listening") is True,
            updated=_num(doc.get("updated")),
            target=target if isinstance(target, dict) else None,
            sessions=as_int(doc.get("sessions")),
            streams=as_int(doc.get("streams")),
            repointed=as_int(doc.get("repointed")),
            proxy=proxy if isinstance(proxy, dict) else {},
            error=_str(doc.get("error"))[:300],
        )


@dataclass(frozen=True)
class StationsFile:
    """`stations.json`: the pool's station bindings as this agent's worker folded
    them (`core.stations.StationBook.to_doc`). `exists` is False before the
    worker's first complete fold: readers then keep what they had."""

    exists: bool = False
    bound: frozenset[str] = frozenset()
    known: dict[str, str] = field(default_factory=dict)  # station -> "station" | "token"
    at: dict[str, int] = field(default_factory=dict)  # station -> clock of its last bind or reset

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> StationsFile:
        bound, known, at = doc.get("bound"), doc.get("known"), doc.get("at")
        if not isinstance(bound, list):
            return cls()
        names = frozenset(s for s in bound[:MAX_STATIONS_SHOWN] if isinstance(s, str) and 0 < len(s) <= 64)
        keys = {}
        if isinstance(known, dict):
            for station, key in list(known.items())[:MAX_STATIONS_SHOWN]:
                if isinstance(station, str) and len(station) <= 64:
                    keys[station] = "station" if key == "station" else "token"
        clocks = {}
        if isinstance(at, dict):
            for station, clock in list(at.items())[:MAX_STATIONS_SHOWN]:
                if isinstance(station, str) and len(station) <= 64 and as_int(clock, None) is not None:
                    clocks[station] = clock
        return cls(True, names, keys, clocks)


@dataclass(frozen=True)
class HeldAddress:
    """One address an executor took for this leader (`assign_vip`, `assign_secondary_ip`)."""

    address: str  # canonical (ipaddress), IPv4 or IPv6
    epoch: int  # the epoch it was taken for: the relay of another epoch does not serve it
    kind: str = "vip"  # "vip" | "secondary_ip"
    executor: str = ""  # vip, aws, oci, azure
    target: str = ""  # the action's target, for people

    @classmethod
    def from_doc(cls, doc: Any) -> HeldAddress | None:
        """One entry of `addresses.json`, or None if it is not one (never raises)."""
        if not isinstance(doc, dict):
            return None
        epoch, text = as_int(doc.get("epoch"), None), doc.get("address")
        if epoch is None or not isinstance(text, str) or len(text) > 64:
            return None
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            return None
        if ip.is_unspecified or ip.is_multicast:
            return None
        kind = doc.get("kind") if doc.get("kind") in HELD_KINDS else "vip"
        return cls(str(ip), epoch, kind, _str(doc.get("executor"))[:32], _str(doc.get("target"))[:200])


def held_addresses_of(doc: dict[str, Any]) -> tuple[HeldAddress, ...]:
    """The entries of an `addresses.json` document that are entries, at most
    MAX_HELD_ADDRESSES, one per address (the last one written wins)."""
    entries = doc.get("addresses")
    if not isinstance(entries, list):
        return ()
    found: dict[str, HeldAddress] = {}
    for raw in entries[: MAX_HELD_ADDRESSES * 4]:
        held = HeldAddress.from_doc(raw)
        if held is not None:
            found.pop(held.address, None)
            found[held.address] = held
    return tuple(found.values())[-MAX_HELD_ADDRESSES:]


class LocalState:
    """The data directory of one agent. Cheap to make: it holds the path, and
    the last document read of each file with the file's identity then (inode,
    size, times): a reader that looks often (the supervisor, the standby relay)
    pays one `stat` while a file has not been replaced, not a read and a parse."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(data_dir)
        self._seen: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {}

    # -- plumbing -------------------------------------------------------------
    def _read(self, name: str) -> dict[str, Any]:
        path = self.dir / name
        try:
            st = os.stat(path)
            ident = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            known = self._seen.get(name)
            if known is not None and known[0] == ident:
                return dict(known[1])
            with open(path, "rb") as fh:
                raw = fh.read(MAX_LOCAL_FILE + 1)
            if len(raw) > MAX_LOCAL_FILE:
                return {}
            doc = json.loads(raw)
        except (OSError, ValueError, RecursionError):
            self._seen.pop(name, None)
            return {}
        if not isinstance(doc, dict):
            return {}
        # Kept only if what was read is what the identity names, and only once the file is older
        # than the file system's time step: a rewrite in the same step (a recycled inode, the same
        # size) could otherwise look unchanged.
        if len(raw) == st.st_size and time.time_ns() - st.st_mtime_ns > FRESH_NS:
            self._seen[name] = (ident, doc)
        return dict(doc)

    def _write(self, name: str, doc: dict[str, Any]) -> None:
        write_atomic(self.dir / name, json.dumps(doc).encode(), tag=str(os.getpid()))

    # -- leadership.json --------------------------------------------------------
    def leadership(self) -> Leadership:
        return Leadership.from_doc(self._read(LEADERSHIP_NAME))

    def write_leadership(self, state: Leadership) -> None:
        self._write(LEADERSHIP_NAME, asdict(state))

    def leads_now(self, now: float, epoch: int | None = None) -> bool:
        return self.leadership().leads_now(now, epoch)

    def disclaim(self, why: str) -> None:
        """Mark leadership "not leader" (after a release on the way out), so no
        local reader trusts a claim whose worker is gone."""
        state = self.leadership()
        if state.leader:
            self.write_leadership(state.disclaimed(why))

    # -- pool.json ---------------------------------------------------------------
    def pool(self) -> PoolView:
        return PoolView.from_doc(self._read(POOL_NAME))

    def write_pool(self, view: PoolView) -> None:
        self._write(POOL_NAME, view.to_doc())

    # -- watched/<KMSN>.json ------------------------------------------------------
    def watched_pool(self, kmsn: str) -> PoolView:
        """The view of a watched pool (`exists` is False before its watcher's first look)."""
        return PoolView.from_doc(self._read(f"{WATCHED_DIR}/{kmsn}.json"))

    def write_watched_pool(self, view: PoolView) -> None:
        (self.dir / WATCHED_DIR).mkdir(exist_ok=True)
        self._write(f"{WATCHED_DIR}/{view.kmsn}.json", view.to_doc())

    # -- relay.json --------------------------------------------------------------
    def relay(self) -> RelayStatus:
        return RelayStatus.from_doc(self._read(RELAY_NAME))

    def write_relay(self, status: RelayStatus) -> None:
        self._write(RELAY_NAME, asdict(status))

    # -- entry.json ----------------------------------------------------------------
    def entry(self) -> EntryStatus:
        return EntryStatus.from_doc(self._read(ENTRY_NAME))

    def write_entry(self, status: EntryStatus) -> None:
        self._write(ENTRY_NAME, asdict(status))

    # -- stations.json -----------------------------------------------------------
    def stations(self) -> StationsFile:
        return StationsFile.from_doc(self._read(STATIONS_NAME))

    def write_stations(self, doc: dict[str, Any]) -> None:
        self._write(STATIONS_NAME, doc)

    # -- relay.wanted --------------------------------------------------------------
    def relay_wanted(self) -> int | None:
        """The epoch the relay is wanted for, or None (no marker, or unreadable)."""
        return as_int(self._read(RELAY_WANTED_NAME).get("epoch"), None)

    def want_relay(self, epoch: int) -> None:
        self._write(RELAY_WANTED_NAME, {"epoch": epoch})

    def unwant_relay(self) -> None:
        (self.dir / RELAY_WANTED_NAME).unlink(missing_ok=True)

    @property
    def relay_wanted_path(self) -> Path:
        return self.dir / RELAY_WANTED_NAME

    # -- addresses.json --------------------------------------------------------------
    def held_addresses(self) -> tuple[HeldAddress, ...]:
        """The addresses executors hold for this leader, each with its epoch (() if none)."""
        return held_addresses_of(self._read(ADDRESSES_NAME))

    def write_held_addresses(self, held: tuple[HeldAddress, ...]) -> None:
        if held:
            self._write(ADDRESSES_NAME, {"addresses": [asdict(h) for h in held]})
        else:
            (self.dir / ADDRESSES_NAME).unlink(missing_ok=True)

    # -- stopping ------------------------------------------------------------------
    def stopping(self) -> bool:
        return (self.dir / STOPPING_NAME).exists()

    def mark_stopping(self) -> None:
        (self.dir / STOPPING_NAME).touch()

    def clear_stopping(self) -> None:
        (self.dir / STOPPING_NAME).unlink(missing_ok=True)
