"""This agent's health checks (`HEALTH_CMD`, `HEALTH_URL`) and its gate
(`GATE_CMD` / `GATE_FILE`, `elections.core.gate`), run on their own schedule in
a thread of their own: the renewal path only reads the last results
(`status()`, `gate()`), so a check that hangs for its whole timeout never
delays a renewal. Until the first check has finished the agent counts as not
healthy ("health check pending"), and until the first look at the gate as not
master: a member is never made eligible on a guess.

The gate is looked at on a health thread of its own (so a hanging health check
never delays it) every `interval`, within its own deadline (`GATE_TIMEOUT`): a
change of its signal is known within one interval plus that deadline, and
`on_gate` is called with it at once (the agent runs an election cycle then, so a
leader whose gate stops saying master hands off without waiting for its next tick).
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Protocol

from elections.core.gate import LOOK_EVERY, GateMemory, Look, remember, signal
from elections.core.gate import PENDING as GATE_PENDING
from stkhost.processes import site_environment

log = logging.getLogger("stkrelay.health")

CHECK_TIMEOUT = 2.0  # seconds, per check
PENDING = "health check pending"


def run_checks(health_cmd: str, health_url: str, timeout: float = CHECK_TIMEOUT) -> str:
    """'ok' or why not, from the configured checks (blocking, bounded by `timeout` each)."""
    if health_cmd:
        try:
            done = subprocess.run(health_cmd, shell=True, capture_output=True, timeout=timeout,
                                  env=site_environment())  # fmt: skip
            if done.returncode != 0:
                return f"health command exited {done.returncode}"
        except subprocess.TimeoutExpired:
            return f"health command timed out ({timeout:g} s)"
    if health_url:
        try:
            with urllib.request.urlopen(health_url, timeout=timeout) as resp:
                if resp.status >= 400:
                    return f"health URL answered {resp.status}"
        except OSError as exc:
            return f"health URL failed: {exc}"
    return "ok"


class MasterGate(Protocol):
    def look(self) -> Look: ...


class HealthMonitor:
    """Runs `check()` and looks at `gate` every `interval` seconds, each in a daemon
    thread; `status()` and `gate()` are the last results. Without checks it is
    always 'ok', without a gate `gate()` is None; with neither no thread starts."""

    def __init__(
        self, check: Callable[[], str] | None, interval: float = LOOK_EVERY,
        wait: Callable[[threading.Event, float], bool] = lambda ev, s: ev.wait(s),
        gate: MasterGate | None = None, gate_max_age: float = 0.0,
        mono: Callable[[], float] = time.monotonic, on_gate: Callable[[str], None] | None = None,
    ) -> None:  # fmt: skip
        self.check = check
        self.interval = interval
        self._wait = wait
        self._status = "ok" if check is None else PENDING
        self._gate = gate
        self._gate_max_age = gate_max_age
        self._gate_memory = GateMemory()
        self._gate_signal: str | None = None if gate is None else GATE_PENDING
        self._mono = mono
        self.on_gate = on_gate  # called with the gate's new signal, on the health thread
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_settings(cls, health_cmd: str, health_url: str, gate: MasterGate | None = None,
                      gate_max_age: float = 0.0, on_gate: Callable[[str], None] | None = None,
                      ) -> HealthMonitor:  # fmt: skip
        check = (lambda: run_checks(health_cmd, health_url)) if health_cmd or health_url else None
        return cls(check, gate=gate, gate_max_age=gate_max_age, on_gate=on_gate)

    def status(self) -> str:
        return self._status

    def gate(self) -> str | None:
        """`elections.core.gate.MASTER_SIGNAL`, why not, or None when no gate is configured."""
        return self._gate_signal

    def look_at_gate(self) -> str | None:
        """One look at the gate now (on the calling thread); the new signal."""
        if self._gate is None:
            return None
        try:
            look = self._gate.look()
        except Exception as exc:  # a broken gate is not master, never a dead thread
            look = Look(False, why=f"gate look failed: {type(exc).__name__}: {exc}")
        now = self._mono()
        self._gate_memory = remember(self._gate_memory, look, now)
        new = signal(look, self._gate_memory, now, self._gate_max_age)
        old, self._gate_signal = self._gate_signal, new
        if new != old:
            log.warning("gate: %s (was: %s)", new, old)
            if self.on_gate is not None:
                try:
                    self.on_gate(new)
                except Exception:
                    log.exception("reacting to the gate's change failed")
        return new

    def run_once(self) -> str:
        if self.check is None:
            return self._status
        try:
            status = self.check()
        except Exception as exc:  # a broken check is a failing check, never a dead thread
            status = f"health check failed: {type(exc).__name__}: {exc}"
        if status != self._status:
            log.info("health: %s", status)
        self._status = status
        return status

    def start(self) -> HealthMonitor:
        if self._threads:
            return self
        loops: list[tuple[Callable[[], object], str]] = [(self.run_once, "health")] if self.check else []
        loops += [(self.look_at_gate, "health-gate")] if self._gate is not None else []
        for step, name in loops:
            thread = threading.Thread(target=self._loop, args=(step,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, step: Callable[[], object]) -> None:
        while not self._stop.is_set():
            step()
            if self._wait(self._stop, self.interval):
                return
