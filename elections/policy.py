"""The pool's policy for one agent's elector (ADR 0011): eligibility from
drains, priority, health checks and the relay's own health; pause; planned
handoffs (promote, drain of the leader); priority-scaled contention.

It reads state other parts keep current: `PoolCommands` (operator commands
from the pool's event files), the last pool view (members' eligibility judged
on this agent's clock) and the relay's status file.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .projection import PoolCommands
from .store import pid_alive


class Policy(Protocol):
    """What the pool's state (ADR 0011) asks of this node's elector."""

    def eligibility(self) -> tuple[bool, str]:
        """May this node lead now? (False, why) when drained, sick, priority 0..."""

    def paused(self) -> bool:
        """Automatic failover is off for the pool (only planned handoffs)."""

    def handoff(self, epoch: int) -> tuple[str, str] | None:
        """(target, why) when a planned switchover of `epoch` is requested now."""

    def successor(self) -> str | None:
        """The member a leader that became ineligible should hand off to."""

    def contend_delay(self, handoff: bool) -> float:
        """Seconds to wait before contending (lower priority waits longer)."""


class OpenPolicy:
    """Phase 1: everyone eligible, no commands, no priorities."""

    def eligibility(self) -> tuple[bool, str]:
        return True, ""

    def paused(self) -> bool:
        return False

    def handoff(self, epoch: int) -> tuple[str, str] | None:
        return None

    def successor(self) -> str | None:
        return None

    def contend_delay(self, handoff: bool) -> float:
        return 0.0


RELAY_GRACE = 3.0  # seconds a new leader's relay has to come up before it counts
RELAY_STALE = 3.0  # a relay status older than this is a dead relay
PROMOTE_DEFERENCE = 1.0  # others wait this much longer when a promote names someone else


class PoolPolicy:
    def __init__(
        self, node: str, priority: int, commands: PoolCommands, pool_view: Callable[[], dict[str, Any]],
        leader_since: Callable[[], float | None], data_dir: Path, clock_mono: Callable[[], float],
        health_cmd: str = "", health_url: str = "", relay_attests: bool = True,
    ) -> None:  # fmt: skip
        self.node = node
        self.priority = priority
        self.commands = commands
        self.pool_view = pool_view
        self.leader_since = leader_since
        self.data_dir = data_dir
        self.mono = clock_mono
        self.health_cmd = health_cmd
        self.health_url = health_url
        self.relay_attests = relay_attests
        self._health: tuple[float, str] = (-1e9, "ok")

    # -- eligibility --------------------------------------------------------------
    def health(self) -> str:
        """'ok' or why not, from the configured checks; cached for 1 s."""
        at, status = self._health
        if self.mono() - at < 1.0:
            return status
        status = "ok"
        if self.health_cmd:
            try:
                done = subprocess.run(self.health_cmd, shell=True, capture_output=True, timeout=2)
                if done.returncode != 0:
                    status = f"health command exited {done.returncode}"
            except subprocess.TimeoutExpired:
                status = "health command timed out (2 s)"
        if status == "ok" and self.health_url:
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as resp:
                    if resp.status >= 400:
                        status = f"health URL answered {resp.status}"
            except OSError as exc:
                status = f"health URL failed: {exc}"
        self._health = (self.mono(), status)
        return status

    def relay_health(self) -> str:
        """'ok' while the local relay serves this leadership (or is still
        within its start-up grace); a lease must attest the relay, not only a
        live Celery worker."""
        since = self.leader_since()
        if since is None or self.mono() - since < RELAY_GRACE:
            return "ok"
        try:
            doc = json.loads((self.data_dir / "relay.json").read_text())
        except (OSError, ValueError):
            return "relay not running"
        age = self.mono() - float(doc.get("updated") or 0)
        if not doc.get("listening") or not isinstance(doc.get("pid"), int) or not pid_alive(doc["pid"]):
            return "relay not running"
        if age > RELAY_STALE:
            return f"relay status {age:.1f} s old > {RELAY_STALE:g} s"
        return "ok"

    def eligibility(self) -> tuple[bool, str]:
        if self.commands.drained.get(self.node):
            return False, "drained"
        if self.priority <= 0:
            return False, "priority 0 (never leader)"
        health = self.health()
        if health != "ok":
            return False, health
        if self.relay_attests and self.leader_since() is not None:
            relay = self.relay_health()
            if relay != "ok":
                return False, relay
        return True, ""

    # -- pool-level -----------------------------------------------------------------
    def paused(self) -> bool:
        return self.commands.paused

    def _eligible_others(self) -> list[tuple[int, float, str]]:
        members = (self.pool_view() or {}).get("members") or {}
        return sorted(
            (-int(m.get("priority") or 0), float(m.get("age") or 0.0), node)
            for node, m in members.items()
            if node != self.node and m.get("eligible")
        )

    def handoff(self, epoch: int) -> tuple[str, str] | None:
        target = self.commands.promote_at(epoch)
        if target is None or target == self.node:
            return None
        if target not in {node for _, _, node in self._eligible_others()}:
            return None  # checked when submitted; if it fell ineligible since, do not hand off blindly
        return target, f"promote of {target} requested"

    def successor(self) -> str | None:
        others = self._eligible_others()
        return others[0][2] if others else None

    def contend_delay(self, handoff: bool) -> float:
        if handoff:
            return 0.0
        delay = (100 - max(0, min(100, self.priority))) / 100 * 0.5
        epoch = ((self.pool_view() or {}).get("lease") or {}).get("epoch")
        target = self.commands.promote_at(epoch) if isinstance(epoch, int) else None
        if target is not None and target != self.node:
            delay += PROMOTE_DEFERENCE
        return delay
