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
==============  ============================================================

Share faults hit one agent's view of the share or (``target="all"``) the file
server itself (every view; over SMB, always the server: Samba serves one
faulty view). Holds are drawn from `rng`, so one seed gives one
schedule.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import AgentProc
from netns import NetnsSite

PROCESS_KINDS = ("kill9", "sigstop", "sigterm", "skew")
SHARE_KINDS = ("share_delay", "share_errno", "share_hang", "share_stale", "share_deleted")
KINDS = (*PROCESS_KINDS, *SHARE_KINDS, "net_cut")
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
    if kind == "share_deleted":
        return ALL if ALL not in taken else None
    if kind in SHARE_KINDS and (not site.per_agent_share or rng.random() < 0.5):
        return ALL if ALL not in taken else None  # smb: faults of the one file server
    if not free:
        return None
    lease = site.lease()
    if lease is not None and lease.node in free and rng.random() < 0.5:
        return lease.node  # the leader, half the time: that is where faults hurt
    return rng.choice(free)
