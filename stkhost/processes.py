"""Processes on this host (Linux): a child that dies with its parent, a process
group stopped as one, whether a pid lives, a pipe that wakes a `select` loop, and
the environment a site's own command is given (`site_environment`)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
from collections.abc import Callable, Mapping
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
    return nonblocking_pipe()


def nonblocking_pipe(size: int = 0) -> tuple[int, int]:
    """(read end, write end) of a new pipe, both non-blocking and close-on-exec, made in one
    call (no window in which a child started meanwhile inherits it). A `size` asks for a pipe
    holding up to that many bytes where the kernel lets a pipe grow (Linux's F_SETPIPE_SZ, up to
    /proc/sys/fs/pipe-max-size; elsewhere, or over that, the default size, which works in
    smaller steps)."""
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    if size:
        try:
            import fcntl

            fcntl.fcntl(write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
        except (ImportError, OSError):
            pass
    return read_fd, write_fd


# What a site's own command (ON_ROLE_CHANGE, GATE_CMD, HEALTH_CMD, RELAY_EXEC) is not given of the
# agent's environment, whose variables may hold the agent's secrets (the container image passes
# them so): every `STK_*` (any key of stk.ini, RELAY_TOKEN and POOL_KEY among them, and the
# agent's own bookkeeping); any whose name has a part (split at `_`) holding one of SECRET_WORDS
# or being one of SECRET_PARTS (a cloud CLI's keys, a database password, an SSH agent); any
# holding a URL with a password (`scheme://user:pass@`); and any whose value holds a secret's
# (the value of one of the last two kinds, or of an `STK_*` whose name says a secret).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "PRIVATE", "KEY")
SECRET_PARTS = frozenset({"PASS", "PWD", "PW", "AUTH", "COOKIE"})
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*:[^/@\s]*@")
_SECRET_MIN = 8  # a secret this long or longer is looked for in the other variables' values
# The TZ a site's command is given ("": none), set by stkrelay/settings.py before Django sets TZ to
# TIME_ZONE in the agent's own environment: the TZ the agent started with, or TIME_ZONE if set in the ini.
SITE_TZ = "STK_SITE_TZ"


def _says_secret(name: str) -> bool:
    parts = name.upper().split("_")
    if name.upper() == "PWD":  # the working directory
        return False
    return any(word in part for part in parts for word in SECRET_WORDS) or bool(SECRET_PARTS & set(parts))


def site_environment(
    extra: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a site's own command: this process's (`environ`) without the
    agent's secrets (see SECRET_WORDS), then `extra` (e.g. ON_ROLE_CHANGE's `STK_ROLE`...).
    Our own Python children (the supervisor's) are not site commands: they keep theirs."""
    source = os.environ if environ is None else environ
    secret = {
        name for name, value in source.items() if _says_secret(name) or _URL_WITH_PASSWORD.search(value)
    }
    values = [source[name] for name in secret if len(source[name]) >= _SECRET_MIN]
    env = {name: value for name, value in source.items()
           if name not in secret and not name.upper().startswith("STK_")
           and not any(v in value for v in values)}  # fmt: skip
    zone = source.get(SITE_TZ)
    if zone is not None:  # not the TZ Django set from TIME_ZONE: the site's own, or TIME_ZONE if configured
        env.pop("TZ", None)
        if zone:
            env["TZ"] = zone
    env.update(extra or {})
    return env
