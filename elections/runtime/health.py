"""This agent's health checks (`HEALTH_CMD`, `HEALTH_URL`), run on their own
schedule in a thread of their own: the renewal path only reads the last
result (`status()`), so a check that hangs for its whole timeout never delays
a renewal. Until the first check has finished the agent counts as not healthy
("health check pending"): a member is never made eligible on a guess.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import urllib.request
from collections.abc import Callable

log = logging.getLogger("stkrelay.health")

CHECK_TIMEOUT = 2.0  # seconds, per check
PENDING = "health check pending"


def run_checks(health_cmd: str, health_url: str, timeout: float = CHECK_TIMEOUT) -> str:
    """'ok' or why not, from the configured checks (blocking, bounded by `timeout` each)."""
    if health_cmd:
        try:
            done = subprocess.run(health_cmd, shell=True, capture_output=True, timeout=timeout)
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


class HealthMonitor:
    """Runs `check()` every `interval` seconds in a daemon thread; `status()` is
    the last result. Without checks configured it is always 'ok' and starts no thread."""

    def __init__(
        self, check: Callable[[], str] | None, interval: float = 1.0,
        wait: Callable[[threading.Event, float], bool] = lambda ev, s: ev.wait(s),
    ) -> None:  # fmt: skip
        self.check = check
        self.interval = interval
        self._wait = wait
        self._status = "ok" if check is None else PENDING
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, health_cmd: str, health_url: str) -> HealthMonitor:
        if not health_cmd and not health_url:
            return cls(None)
        return cls(lambda: run_checks(health_cmd, health_url))

    def status(self) -> str:
        return self._status

    def run_once(self) -> str:
        assert self.check is not None
        try:
            status = self.check()
        except Exception as exc:  # a broken check is a failing check, never a dead thread
            status = f"health check failed: {type(exc).__name__}: {exc}"
        if status != self._status:
            log.info("health: %s", status)
        self._status = status
        return status

    def start(self) -> HealthMonitor:
        if self.check is not None and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="health", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            if self._wait(self._stop, self.interval):
                return
