"""Processes on this host (Linux): a child that dies with its parent, a process
group stopped as one, whether a pid lives, a pipe that wakes a `select` loop."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None]:
    def die_with_parent() -> None:
        """In the child, between fork and exec: SIGKILL me when my parent dies, and
        at once if it died before this call (then my parent is no longer `parent`)."""
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return die_with_parent


def spawn_options(*, own_group: bool = False, die_with_parent: bool = False) -> dict[str, Any]:
    """`subprocess.Popen` keyword arguments: `own_group` puts the child in a session
    (and process group) of its own, so `kill_group(child.pid, ...)` reaches whatever it
    starts; `die_with_parent` has the kernel SIGKILL it when this process dies
    (`PR_SET_PDEATHSIG`), so a kill -9 of the parent takes its children along."""
    options: dict[str, Any] = {}
    if own_group:
        options["start_new_session"] = True
    if die_with_parent:
        options["preexec_fn"] = _die_with(os.getpid())
    return options


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send `sig` to process group `pgid` (a child started with `own_group`). False
    if the group is gone or not ours to signal."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wake_pipe() -> tuple[int, int]:
    """(read end, write end) of a non-blocking, close-on-exec pipe: a byte written
    (from a signal handler too) wakes a `select` on the read end."""
    return os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
