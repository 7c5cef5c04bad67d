"""The faults of the chaos run, each applied to a live `netns.NetnsSite` and healed later.

`inject(kind, site, target, rng, skewed)` does the fault now and returns its
heal (a callable) and how long to hold it. Kinds (`KINDS`), with what they do:

==============  ============================================================
kill9           SIGKILL the agent's process group; heal: start it again
sigstop         SIGSTOP the group (a frozen machine); heal: SIGCONT
sigterm         SIGTERM (clean stop, hands the lease over); heal: start
skew            SIGKILL, then start again with the wall clock ±300 s off
                (libfaketime; monotonic true); it stays off until the next
                skew fault of that agent (which may set it right)
share_delay     the share answers late (each operation 0.3-1.5 s), or
                writes crawl (1-4 s per KiB)
share_errno     operations fail with EIO, EACCES or ENOSPC (probability 0.3-1)
share_hang      every operation blocks until released (1-5 s), then runs
share_stale     reads and attributes served from a copy up to 2-8 s old
share_deleted   the share's folder deleted; heal: restored from a copy taken
                as it was deleted (what came since is overwritten)
net_cut         the agent's cable pulled (its share goes with it); heal: mend
surrogate_lease a writer without the key puts a lease holding a lone surrogate
                (``"kmsn": "\ud800"``, the raw JSON escape) over the lease
                every 0.2 s (issue 40); heal: it stops, the holder rewrites
beacon_replay   the leader's beacons captured on the LAN for 2 s, the agent
                SIGKILLed and junk put over the lease; heal: it starts again
                while the captured beacons are sent again, one a second (each
                a newer renewal), for up to 10 s (issue 40: replays after a restart)
==============  ============================================================

Share faults hit one agent's view of the share or (``target="all"``) the file
server itself (every view; over SMB, always the server: Samba serves one
faulty view). Holds are drawn from `rng`, so one seed gives one
schedule.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from beacon_replay import capture, replay
from harness import KMSN, AgentProc
from netns import RELAY_PORT, SUBNET, NetnsSite

PROCESS_KINDS = ("kill9", "sigstop", "sigterm", "skew", "beacon_replay")
SHARE_KINDS = ("share_delay", "share_errno", "share_hang", "share_stale", "share_deleted", "surrogate_lease")
KINDS = (*PROCESS_KINDS, *SHARE_KINDS, "net_cut")
BEACON_PORT = RELAY_PORT + 2  # BEACON_PORT's default
BROADCAST = f"{SUBNET}.255"
ALL = "all"

Heal = Callable[[], None]


def _views(site: NetnsSite, target: str) -> list[AgentProc]:
    return list(site.agents) if target == ALL else [site.by_name(target)]


def _share_rules(site: NetnsSite, target: str, tag: str, rules: list[dict[str, Any]]) -> Heal:
    for agent in _views(site, target):
        site.share_faults(agent, tag, rules)

    def heal() -> None:
        for agent in _views(site, target):
            site.share_faults(agent, tag, [])

    return heal


def _remove_tree(path: Path) -> None:
    """Delete `path` although agents keep writing into it."""
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
    raise AssertionError(f"{path} could not be deleted")


def _copy(src: Path, dst: Path) -> None:
    """Copy what can be copied (files come and go under running agents)."""
    try:
        shutil.copytree(src, dst, dirs_exist_ok=True)
    except (shutil.Error, FileNotFoundError):
        pass


def _repeating(every: float, act: Callable[[], None]) -> Heal:
    """Run `act` every `every` s on a thread of its own until the heal."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                act()
            except OSError:
                pass  # the share's folder may be gone (another fault): the next turn tries again
            stop.wait(every)

    thread = threading.Thread(target=run, name="chaos-writer", daemon=True)
    thread.start()

    def heal() -> None:
        stop.set()
        thread.join(5)

    return heal


def _surrogate_lease(site: NetnsSite) -> Heal:
    """A lease a writer without the key makes from the one in place: its KMSN a lone surrogate."""
    path = site.lease_dir / "relay_leader.json"
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        doc = {}
    doc = {**(doc if isinstance(doc, dict) else {}), "kmsn": "\ud800"}
    poison = json.dumps(doc).encode()  # ensure_ascii: the raw escape \ud800, as the finding wrote it
    assert b"\\ud800" in poison
    return _repeating(0.2, lambda: path.write_bytes(poison))


def _beacon_replay(site: NetnsSite, agent: AgentProc, rng: random.Random) -> tuple[Heal, float]:
    """Capture the leader's beacons from the LAN, kill -9 `agent`, junk over the lease; the heal
    starts it again while the captured beacons are sent again from the LAN's observer."""
    lease = site.lease()
    leader = lease.node if lease is not None else agent.name
    captured = site.observer.call_in(capture, BROADCAST, BEACON_PORT, leader, 10, site.token, KMSN, 2.0)
    agent.kill9()
    try:
        (site.lease_dir / "relay_leader.json").write_bytes(b"\x00junk over the lease, no key\n")
    except FileNotFoundError:
        pass  # the share's folder is gone (a share_deleted fault at the same time): no lease to junk
    observer = site.observer

    def heal() -> None:
        agent.start()

        def send() -> None:
            observer.enter()
            replay(captured, BROADCAST, BEACON_PORT, observer.ip, 1.0, threading.Event())

        threading.Thread(target=send, name="chaos-replay", daemon=True).start()

    return heal, rng.uniform(0.0, 3.0)


def inject(
    kind: str,
    site: NetnsSite,
    target: str,
    rng: random.Random,
    skewed: Callable[[str], dict[str, str]],
    tag: str,
) -> tuple[Heal, float]:
    """Apply fault `kind` to `target` (an agent's name, or "all" for share faults); (heal, hold)."""
    hold = rng.uniform(1.0, 5.0)
    if kind in PROCESS_KINDS or kind == "net_cut":
        agent = site.by_name(target)
        if kind == "kill9":
            agent.kill9()
            return agent.start, rng.uniform(0.0, 3.0)
        if kind == "sigterm":
            try:
                agent.terminate(timeout=15)
            except (AssertionError, subprocess.TimeoutExpired):
                agent.kill9()  # what systemd does after TimeoutStopSec; the agent log says why it hung
            return agent.start, rng.uniform(0.0, 3.0)
        if kind == "skew":
            agent.kill9()
            agent.env = skewed(rng.choice(["+300s", "-300s"])) if rng.random() < 0.8 else {}
            return agent.start, rng.uniform(0.0, 2.0)
        if kind == "beacon_replay":
            return _beacon_replay(site, agent, rng)
        if kind == "sigstop":
            agent.signal_group(signal.SIGSTOP)
            return lambda: agent.signal_group(signal.SIGCONT), hold
        site.cut(agent)
        return lambda: site.mend(agent), hold
    if kind == "share_delay":
        if rng.random() < 0.5:
            rules = [{"delay": rng.uniform(0.3, 1.5), "jitter": 0.3}]
        else:
            rules = [{"ops": ["write"], "write_delay_per_kib": rng.uniform(1.0, 4.0)}]
        return _share_rules(site, target, tag, rules), hold
    if kind == "share_errno":
        rules = [{"errno": rng.choice(["EIO", "EACCES", "ENOSPC"]), "prob": rng.uniform(0.3, 1.0)}]
        return _share_rules(site, target, tag, rules), hold
    if kind == "share_hang":
        return _share_rules(site, target, tag, [{"hang": True}]), hold
    if kind == "share_stale":
        rules = [{"path": "/socket/*", "stale": rng.uniform(2.0, 8.0)}]
        return _share_rules(site, target, tag, rules), rng.uniform(3.0, 8.0)
    if kind == "surrogate_lease":
        return _surrogate_lease(site), hold
    if kind == "share_deleted":
        folder = site.lease_dir
        backup = folder.with_name(f"backup-{tag}")
        _copy(folder, backup)
        _remove_tree(folder)

        def restore() -> None:
            _copy(backup, folder)
            shutil.rmtree(backup, ignore_errors=True)

        return restore, hold
    raise ValueError(f"unknown fault kind {kind!r}")


def targets_for(kind: str, site: NetnsSite, rng: random.Random, taken: set[str]) -> str | None:
    """A target for `kind` not in `taken` (agents already faulted this round), or None."""
    free = [a.name for a in site.agents if a.name not in taken]
    if kind in ("share_deleted", "surrogate_lease"):  # the file server's folder itself
        return ALL if ALL not in taken else None
    if kind in SHARE_KINDS and (not site.per_agent_share or rng.random() < 0.5):
        return ALL if ALL not in taken else None  # smb: faults of the one file server
    if not free:
        return None
    lease = site.lease()
    if lease is not None and lease.node in free and rng.random() < 0.5:
        return lease.node  # the leader, half the time: that is where faults hurt
    return rng.choice(free)
