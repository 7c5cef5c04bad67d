"""What this host offers the agent: replacing a file atomically, and asking
whether a process of this machine still lives.

`write_atomic` is the one way any file of the agent is written: the bytes go
to a temp file created exclusively (`O_EXCL|O_NOFOLLOW`, an unpredictable
name, so a planted link or file is never written through), then replace the
target with `os.replace`, which readers in other processes (and on the share,
other machines) see whole or not at all.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from elections.retry import Backoff, retry

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# Windows: a reader that holds the target open makes os.replace fail for a moment.
REPLACE_BACKOFF = Backoff(tries=5, first=0.02)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    durable: bool = False,
    tag: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Replace `path` with `data`, all or nothing. `durable` fsyncs before the
    rename (the share's files); `tag` names the writer in the temp name. Raises
    OSError; the temp file never outlives a failure."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{tag + '.' if tag else ''}{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        retry(lambda: os.replace(tmp, path), on=PermissionError, backoff=REPLACE_BACKOFF, sleep=sleep)
    except BaseException:
        unlink_quietly(tmp)
        raise


def unlink_quietly(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
