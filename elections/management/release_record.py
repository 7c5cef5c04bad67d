"""The history row of a release on shutdown, written by a short Django child (issue 41).

The supervisor holds no Django (`elections.management.agent_root`); the `released`
row goes through the ORM like every other (`runtime.projection.DbEventSink`). So at
the start of a leader's shutdown the supervisor starts this child, which loads
Django while the lease is handed over and the children stop, then waits for one
line on its stdin: the epoch whose release was written (nothing, or EOF: no row).
The supervisor sends it once its children are gone (the worker's `elected` row of
that epoch comes first) and waits for the child within its stop budget.
It is started from the hand-over's thread, so not with PR_SET_PDEATHSIG (which
fires when that thread ends): a supervisor gone closes its stdin, and the child
ends without a row; it is in the agent's process group like every child.

    python -m elections.management.release_record     (reads one epoch from stdin)
"""

from __future__ import annotations

import subprocess
import sys

REASON = "agent stopping (SIGTERM): lease released"


class ReleaseRecorder:
    """The child, started early (`prepare`), told the epoch once the children are gone (`record`)."""

    def __init__(self, env: dict[str, str], wait: float = 4.0) -> None:
        self.env = env
        self.wait = wait  # the supervisor's own bound (`Supervisor._bounded`) ends it sooner
        self.proc: subprocess.Popen[bytes] | None = None

    def prepare(self) -> None:
        if self.proc is None:
            # No look at LEASE_DIR while Django loads: a share that hangs held this child in the
            # kernel (config's directory checks) past the stop, and the agent's process group with it.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "elections.management.release_record"],
                env={**self.env, "STK_COMPONENT": "agent", "STK_SKIP_DIR_CHECKS": "1"},
                stdin=subprocess.PIPE,
            )

    def record(self, epoch: int) -> None:
        self.prepare()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"{epoch}\n".encode())
        self.proc.stdin.close()
        try:
            self.proc.wait(self.wait)
        except subprocess.TimeoutExpired:  # its row waits on a share that does not answer: no row
            self.proc.kill()
            raise


def main() -> int:
    import django

    django.setup()
    from django.conf import settings

    from elections.runtime.projection import pool_event_sink

    line = sys.stdin.readline().strip()
    if not line.isdigit():
        return 0  # the release was not written: no row
    pool_event_sink(settings.STK).record("released", int(line), REASON)
    return 0


if __name__ == "__main__":
    sys.exit(main())
