"""Looking at the gate (`elections.core.gate`): one `Look` at `GATE_FILE` or
one run of `GATE_CMD`, each within its own deadline (`GATE_TIMEOUT`).

The file is local but written by someone else (keepalived's notify script, or
whoever can write its folder), so it is read like a share's records: regular
files only, never through a link, never blocking on a FIFO, at most
`MAX_FILE_BYTES` (`sharefiles.read_regular`). The read runs on a thread of its
own joined with the deadline; a read stuck in the kernel (a hung mount) is
left behind, and while it is stuck no other is started: each look says so.

The command runs without a shell (its argv was split by `stkconfig.gate`), in a
session of its own, with nothing on stdin and its output discarded; past the
deadline its whole process group is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from elections.core.gate import MAX_FILE_BYTES, Look, first_word
from elections.core.untrusted import Untrusted
from elections.ports.share.sharefiles import read_regular
from stkconfig.parsed import GateConfig
from stkhost.processes import kill_group, site_environment, spawn_options


class FileGate:
    def __init__(self, path: str, timeout: float) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._stuck: threading.Thread | None = None

    def look(self) -> Look:
        if self._stuck is not None and self._stuck.is_alive():
            return Look(False, why=f"gate file read stuck for more than {self.timeout:g} s")
        box: list[Look] = []
        reader = threading.Thread(target=lambda: box.append(self._read()), name="gate-file", daemon=True)
        reader.start()
        reader.join(self.timeout)
        if reader.is_alive():
            self._stuck = reader
            return Look(False, why=f"gate file read timed out ({self.timeout:g} s)")
        self._stuck = None
        return box[0] if box else Look(False, why="gate file read failed")

    def _read(self) -> Look:
        try:
            data = read_regular(self.path, MAX_FILE_BYTES)
            if data is None:
                return Look(False, why=f"gate file {self.path.name} does not exist")
            st = os.lstat(self.path)
        except Untrusted as exc:
            return Look(False, why=f"gate file refused: {exc.detail}")
        except OSError as exc:
            return Look(False, why=f"gate file unreadable: {exc.strerror or exc}")
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size, data)
        return Look(True, word=first_word(data), stamp=stamp, age_at_look=time.time() - st.st_mtime)


class CommandGate:
    def __init__(self, argv: tuple[str, ...], timeout: float) -> None:
        self.argv = list(argv)
        self.timeout = timeout

    def look(self) -> Look:
        try:
            proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                close_fds=True, env=site_environment(), **spawn_options(own_group=True),
            )  # fmt: skip
        except OSError as exc:
            return Look(False, why=f"gate command cannot start: {exc.strerror or exc}")
        try:
            code = proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Look(False, why=f"gate command timed out ({self.timeout:g} s)")
        if code == 0:
            return Look(True, word="MASTER")
        return Look(True, word="", why=f"gate command exited {code}")


def gate_for(config: GateConfig) -> FileGate | CommandGate | None:
    """The gate `stkconfig.parsed.GateConfig` describes, or None."""
    if config.file:
        return FileGate(config.file, config.timeout)
    if config.cmd:
        return CommandGate(config.cmd, config.timeout)
    return None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    kill_group(proc.pid, signal.SIGKILL)  # its own session: the group is its own, children too
    try:
        proc.wait(1.0)
    except subprocess.TimeoutExpired:
        pass
