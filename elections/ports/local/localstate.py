"""This agent's data directory: the files its local processes share.

`LocalState` owns them, with a typed reader and writer each (the records of
`pool.json` are in `ports.local.pool_view`, those of the relay side's files in
`ports.local.relay_files`):

| file              | written by                  | read by |
|-------------------|-----------------------------|---------|
| `leadership.json` | the worker, when its claim changes | supervisor, relay gate, executors' gate, web |
| `pool.json`       | the worker's survey          | web, relayctl, the steering service |
| `watched/<KMSN>.json` | the worker's watchers (one per `[pool:<KMSN>]`) | web, the steering service |
| `relay.health.json` | the relay, every second     | the worker's policy (relay attests), supervisor, web |
| `relay.json`      | the relay, every second      | web, relayctl, the worker's bindings (its snapshot) |
| `stations.json`   | the worker, when its station fold changes | the relay (bindings), web, relayctl |
| `relay.wanted`    | the relay executor           | the relay (standby) |
| `addresses.json`  | the worker's leader duties (`executors.held`) | the relay (`relay.server.listen_set`) |
| `stopping`        | the supervisor, on SIGTERM   | the worker (claims nothing any more) |
| `redis.json`      | the supervisor (`runtime.redis_wait`) | web (`/healthz`), relayctl doctor |

Writers replace files atomically (`host.write_atomic`); readers never raise: a
missing, damaged or hostile file reads as the empty value. Every time in these
files is this machine's monotonic clock, shared by its processes and never
compared with another machine's.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from elections.core.lease_memory import MAX_WRITERS
from elections.core.untrusted import as_float, as_int, as_text
from elections.ports.local.pool_view import PoolView
from elections.ports.local.redis_status import RedisStatus
from elections.ports.local.relay_files import EntryStatus, HeldAddress, StationsFile, held_addresses_of
from elections.ports.local.shallow import shallow_doc
from stkhost.clock import boottime
from stkhost.files import write_atomic
from stkhost.processes import pid_alive

LEADERSHIP_NAME = "leadership.json"
POOL_NAME = "pool.json"
RELAY_NAME = "relay.json"
# The relay's health (pid, epoch, listening, updated) apart from its snapshot: whatever clients make
# relay.json hold, this small record says whether the relay serves (issue 40).
RELAY_HEALTH_NAME = "relay.health.json"
MAX_HEALTH_FILE = 4 << 10
HEALTH_RELOOK = 0.05  # seconds before a second look at a health record that could not be read
HEALTH_FIELDS = ("pid", "epoch", "listening", "updated")
ENTRY_NAME = "entry.json"
DOOR_NAME = "door.json"  # the station door (relay.server.station_door), in an entry's shape
RELAY_WANTED_NAME = "relay.wanted"
ADDRESSES_NAME = "addresses.json"
STOPPING_NAME = "stopping"
STATIONS_NAME = "stations.json"
REDIS_NAME = "redis.json"
WATCHED_DIR = "watched"
MAX_LOCAL_FILE = 4 << 20  # bytes: these files are small; a huge one is not ours
FRESH_NS = 50_000_000  # a file written this recently is read again at every look
# Seconds: two deadlines this close are one (two readings of one computation, as floats): a later one
# by less says nothing new, and the earlier one written stands (`Leadership.same_claim`).
DEADLINE_NOISE = 1e-6


def _seen(value: Any) -> tuple[str, int, int] | None:
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], str):
        epoch, seq = as_int(value[1], None), as_int(value[2], None)
        if epoch is not None and seq is not None:
            return (value[0], epoch, seq)
    return None


def _writers(value: Any) -> tuple[tuple[str, int, int], ...]:
    """The holders' records remembered (`Memory.writers`): at most `MAX_WRITERS`, each a `_seen`."""
    if not isinstance(value, list):
        return ()
    kept = (_seen(v) for v in value[:MAX_WRITERS])
    return tuple(w for w in kept if w is not None)


def _successor(value: Any) -> tuple[int, str, int] | None:
    if isinstance(value, list) and len(value) == 3 and isinstance(value[1], str) and value[1]:
        epoch, port = as_int(value[0], None), as_int(value[2], None)
        if epoch is not None and port is not None:
            return (epoch, value[1], port)
    return None


def _no_later(new: float | None, written: float | None) -> bool:
    """`new` is `written`, or later than it by less than `DEADLINE_NOISE`."""
    if new is None or written is None:
        return new is written
    return 0.0 <= new - written < DEADLINE_NOISE


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
    # The same deadline on the gate's clock (`stkhost.clock.boottime`, which counts a suspend):
    # a machine that slept past it finds it passed, though its monotonic clock stood still.
    valid_until_boot: float | None = None
    # (epoch, ip, port) of the member this agent just handed its lease to, with the epoch only that
    # member may take at once: what the relay tells its clients as it stops (the handoff is on the
    # share already). A claim for clients to try first, fenced by the target's own gate.
    successor: tuple[int, str, int] | None = None
    # The newest record of each holder this worker saw (`Memory.writers`), kept across its restart:
    # an older epoch's record it saw is no news then either (`lease_memory.recalled`).
    writers: tuple[tuple[str, int, int], ...] = ()

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
            self.node, self.pid, False, None, self.max_epoch, None, self.updated, why, self.seen, None,
            writers=self.writers,
        )  # fmt: skip

    def same_claim(self, written: Leadership) -> bool:
        """Whether this state says what `written` says, its `updated` aside: every field the
        same, and each deadline the same or later by less than `DEADLINE_NOISE` (the one
        written, a hair earlier, is the safe one to leave standing). An earlier deadline,
        however close, is news: a gate is never left open past what the worker said."""
        if not (
            _no_later(self.valid_until, written.valid_until)
            and _no_later(self.valid_until_boot, written.valid_until_boot)
        ):
            return False  # a leader's gate moved: the usual case, told before any copy is made
        same_times = replace(self, updated=written.updated, valid_until=written.valid_until,
                             valid_until_boot=written.valid_until_boot)  # fmt: skip
        return same_times == written

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Leadership:
        return cls(
            node=as_text(doc.get("node")),
            pid=as_int(doc.get("pid"), None),
            leader=doc.get("leader") is True,
            epoch=as_int(doc.get("epoch"), None),
            max_epoch=as_int(doc.get("max_epoch")),
            valid_until=as_float(doc.get("valid_until")),
            updated=as_float(doc.get("updated")),
            decision=as_text(doc.get("decision")),
            seen=_seen(doc.get("seen")),
            valid_until_boot=as_float(doc.get("valid_until_boot")),
            successor=_successor(doc.get("successor")),
            writers=_writers(doc.get("writers")),
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
            updated=as_float(doc.get("updated")),
            snapshot=snapshot if isinstance(snapshot, dict) else {},
        )


class LocalState:
    """The data directory of one agent. Cheap to make: it holds the path, and
    the last document read of each file with the file's identity then (inode,
    size, times): a reader that looks often (the supervisor, the standby relay)
    pays one `stat` while a file has not been replaced, not a read and a parse."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(data_dir)
        # Each file's path as text, joined once: the supervisor and the relay's gate look at
        # leadership.json at every change of the leader's gate, and a `Path` joined at every look
        # was a quarter of that look (issue 41).
        self._paths: dict[str, str] = {}
        self._seen: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {}
        # The leadership state this object last wrote, and leadership.json's identity after the write.
        self._claimed: tuple[Leadership, tuple[int, ...] | None] | None = None

    # -- plumbing -------------------------------------------------------------
    def _path(self, name: str) -> str:
        path = self._paths.get(name)
        if path is None:
            path = self._paths[name] = os.path.join(self.dir, name)
        return path

    def _read(self, name: str) -> dict[str, Any]:
        path = self._path(name)
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

    def _ident(self, name: str) -> tuple[int, ...] | None:
        """The file's identity (inode, size, times), None if it cannot be had."""
        try:
            st = os.stat(self._path(name))
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _write(self, name: str, doc: dict[str, Any]) -> None:
        # Aside: the supervisor and the relay watch this folder, and wake once for each write.
        write_atomic(self.dir / name, json.dumps(doc).encode(), tag=str(os.getpid()), aside=True)

    # -- leadership.json --------------------------------------------------------
    def leadership(self) -> Leadership:
        return Leadership.from_doc(self._read(LEADERSHIP_NAME))

    def write_leadership(self, state: Leadership) -> None:
        self._write(LEADERSHIP_NAME, shallow_doc(state))  # every move of a leader's gate

    def publish_leadership(self, state: Leadership, restate_every: float) -> Leadership:
        """Write `state` unless the file holds, as this object last wrote it, the same claim
        (`Leadership.same_claim`) written less than `restate_every` ago; the state the file
        holds, either way. Every reader (the supervisor, the relay's gate, the standby relay)
        wakes for each write and parses it again: a follower's cycle wrote the same claim
        every second with only `updated` moved, and a leader's cycle between two renewals
        its unchanged deadline (issue 41). `updated` still moves every `restate_every` (the
        panel's /healthz reads a worker that stopped writing as down). A file another writer
        replaced meanwhile (the supervisor's disclaimer) is written again whatever it says."""
        last = self._claimed
        if (
            last is not None
            and state.updated is not None
            and last[0].updated is not None
            and state.updated - last[0].updated < restate_every
            and state.same_claim(last[0])
            and self._ident(LEADERSHIP_NAME) == last[1]
        ):
            return last[0]
        self.write_leadership(state)
        self._claimed = (state, self._ident(LEADERSHIP_NAME))
        return state

    def leads_now(self, now: float, epoch: int | None = None) -> bool:
        return self.leadership().leads_now(now, epoch)

    def disclaim(self, why: str) -> None:
        """Mark leadership "not leader" (after a release on the way out), so no
        local reader trusts a claim whose worker is gone."""
        state = self.leadership()
        if state.leader:
            self.write_leadership(state.disclaimed(why))

    def relay_stopped(self, epoch: int, began: float, within: float, look: float = 0.002) -> bool:
        """Wait, at most `within` seconds from `began` (this host's monotonic clock), for the relay
        to say after `began` that it serves `epoch` no more (stopped, or another epoch's relay, or
        none); the fence before a release (docs/design.md §5.1). False if it did not say so in time:
        its gate has read the leadership state written before `began` by then, whatever it says."""
        while time.monotonic() - began < within:
            relay = self.relay_health()
            said = relay.updated is not None and relay.updated >= began
            if said and (relay.epoch != epoch or not relay.listening):
                return True
            time.sleep(look)
        return False

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

    # -- relay.health.json and relay.json ------------------------------------------
    def relay(self) -> RelayStatus:
        """The relay's health (`relay_health`) with relay.json's snapshot ({} if that cannot be read)."""
        return replace(self.relay_health(), snapshot=RelayStatus.from_doc(self._read(RELAY_NAME)).snapshot)

    def relay_health(self) -> RelayStatus:
        """Whether the relay serves, from its small record (no snapshot). A record there that cannot
        be read is never taken for "no relay" at once: it is read again after HEALTH_RELOOK, and if
        it still cannot be, or there is none (a relay of an earlier version), relay.json's own
        fields are taken. `serving()` then also asks whether the process named lives."""
        doc = self._health_doc()
        if doc == {}:
            time.sleep(HEALTH_RELOOK)
            doc = self._health_doc()
        if not doc:
            return replace(RelayStatus.from_doc(self._read(RELAY_NAME)), snapshot={})
        return RelayStatus.from_doc(doc)

    def _health_doc(self) -> dict[str, Any] | None:
        """relay.health.json's document; None if there is none, {} if it cannot be read."""
        try:
            with open(self._path(RELAY_HEALTH_NAME), "rb") as fh:
                raw = fh.read(MAX_HEALTH_FILE + 1)
            doc = json.loads(raw) if len(raw) <= MAX_HEALTH_FILE else None
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError):
            return {}
        if not isinstance(doc, dict):
            return {}  # too large, or not an object: not the relay's record
        return {k: v for k, v in doc.items() if k in HEALTH_FIELDS}

    def write_relay(self, status: RelayStatus) -> None:
        """The health record first (small, atomic), then relay.json with the snapshot."""
        doc = shallow_doc(status)  # every second: the snapshot is dumped as it is, not deep-copied
        self._write(RELAY_HEALTH_NAME, {k: v for k, v in doc.items() if k in HEALTH_FIELDS})
        self._write(RELAY_NAME, doc)

    # -- entry.json ----------------------------------------------------------------
    def entry(self) -> EntryStatus:
        return EntryStatus.from_doc(self._read(ENTRY_NAME))

    def write_entry(self, status: EntryStatus) -> None:
        self._write(ENTRY_NAME, asdict(status))

    # -- door.json -------------------------------------------------------------------
    def door(self) -> EntryStatus:
        return EntryStatus.from_doc(self._read(DOOR_NAME))

    def write_door(self, status: EntryStatus) -> None:
        self._write(DOOR_NAME, asdict(status))

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

    # -- redis.json ----------------------------------------------------------------
    def redis(self) -> RedisStatus:
        return RedisStatus.from_doc(self._read(REDIS_NAME))

    def write_redis(self, status: RedisStatus) -> None:
        self._write(REDIS_NAME, status.to_doc())

    # -- stopping ------------------------------------------------------------------
    def stopping(self) -> bool:
        return os.path.exists(self._path(STOPPING_NAME))

    def mark_stopping(self) -> None:
        (self.dir / STOPPING_NAME).touch()

    def clear_stopping(self) -> None:
        (self.dir / STOPPING_NAME).unlink(missing_ok=True)
