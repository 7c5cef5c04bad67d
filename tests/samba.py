"""A real SMB server for tests: Debian's `smbd` on loopback with a private
`smb.conf` (docs/design.md §12), serving one share whose backing folder the test
can also look at directly.

    server = Samba(tmp_path / "samba")       # private config, free port, a user
    server.start()                           # waits until it answers SMB
    server.url("socket")                     # smb://root@127.0.0.1:PORT/pool/socket
    server.path("socket")                    # the same folder on this disk
    Site(root, **server.site_options("socket"))  # agents on smb://, files seen here
    server.pause(); server.resume()          # a hung file server (SIGSTOP/SIGCONT)
    server.stop()                            # by pid, never by name

Facts this relies on (measured here): smbd must get stdin from /dev/null (with
an inherited pipe it started but never listened); `--no-process-group` keeps
it from making a group of its own, and it is started in a new session anyway:
on SIGTERM smbd signals its whole process group, which would otherwise be the
test runner's. Its helpers (notifyd, cleanupd, one child per client) are in
that one group, so they are paused, resumed and stopped with it, by its pid.
`interfaces = lo` with `bind interfaces only = yes` keep it off every other
address.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from harness import free_port, listening, wait_until

SMBD = shutil.which("smbd") or "/usr/sbin/smbd"
SMBPASSWD = shutil.which("smbpasswd") or "/usr/bin/smbpasswd"
USER = "root"  # smbpasswd adds only existing Unix users; the tests run as root
PASSWORD = "smb-test-password-0123"
SHARE = "pool"


def available() -> str | None:
    """Why Samba cannot run here, or None."""
    if not (os.path.exists(SMBD) and os.path.exists(SMBPASSWD)):
        return "smbd/smbpasswd are not installed (scripts/bootstrap.sh installs samba)"
    if os.geteuid() != 0:
        return "smbd needs root to serve a share here"
    try:
        import smbprotocol  # noqa: F401
    except ImportError:
        return "smbprotocol is not installed"
    return None


class Samba:
    def __init__(self, workdir: Path, host: str = "127.0.0.1", change_notify: bool = True) -> None:
        self.dir = workdir
        self.host = host
        self.change_notify = change_notify  # False: a server that refuses SMB2 CHANGE_NOTIFY
        self.port = free_port(host)
        self.root = workdir / "share"
        self.conf = workdir / "smb.conf"
        self.log_path = workdir / "smbd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        for sub in ("share", "private", "lock", "state", "cache", "pid", "ncalrpc", "logs"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self._config())
        subprocess.run(
            [SMBPASSWD, "-c", str(self.conf), "-s", "-a", USER],
            input=f"{PASSWORD}\n{PASSWORD}\n".encode(), check=True, capture_output=True, timeout=30,
        )  # fmt: skip

    def _config(self) -> str:
        d = self.dir
        return f"""[global]
  interfaces = lo
  bind interfaces only = yes
  smb ports = {self.port}
  disable netbios = yes
  load printers = no
  printing = bsd
  printcap name = /dev/null
  disable spoolss = yes
  server role = standalone server
  map to guest = never
  passdb backend = tdbsam:{d}/private/passdb.tdb
  private dir = {d}/private
  lock directory = {d}/lock
  state directory = {d}/state
  cache directory = {d}/cache
  pid directory = {d}/pid
  ncalrpc dir = {d}/ncalrpc
  log file = {d}/logs/log.%m
  max log size = 1000
  log level = 0
  username map script =
  server min protocol = SMB2_10
  kernel oplocks = no
  smb encrypt = desired
  change notify = {"yes" if self.change_notify else "no"}

[{SHARE}]
  path = {self.root}
  read only = no
  browseable = yes
  valid users = {USER}
  force user = root
  create mask = 0644
  directory mask = 0755
"""

    def start(self, timeout: float = 20) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [SMBD, "--foreground", "--no-process-group", "-s", str(self.conf), "--debug-stdout"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_until(lambda: self._answering() or self._died(), timeout, f"smbd to listen on :{self.port}")
        if self._died():
            raise RuntimeError(f"smbd exited: {self.log_path.read_text(errors='replace')[-2000:]}")

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def _answering(self) -> bool:
        return listening(self.host, self.port, timeout=0.3)

    def url(self, *parts: str, user: str = USER) -> str:
        tail = "/".join((SHARE, *parts))
        return f"smb://{user}@{self.host}:{self.port}/{tail}"

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def env(self) -> dict[str, str]:
        """What an agent needs to log in (STK_SMB_PASSWORD)."""
        return {"STK_SMB_PASSWORD": PASSWORD}

    def site_options(self, folder: str) -> dict[str, object]:
        """`harness.Site(root, **server.site_options("socket"))`: agents whose
        LEASE_DIR is this server's smb:// folder, while the test looks at the
        same files on this disk (`site.lease_dir`)."""
        extra = {"LEASE_DIR": self.url(folder), "SMB_PASSWORD": PASSWORD}
        return {"lease_dir": self.path(folder), "extra": extra}

    def _signal_group(self, sig: int) -> None:
        """The main smbd and every process it forked: its own process group."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def pause(self) -> None:
        """A hung file server: every smbd process stopped, connections left open."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def kill(self) -> None:
        """smbd dies at once (every session is lost); `start()` again serves the same share."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGCONT)
        self._signal_group(signal.SIGKILL)
        self.proc.wait(10)
        _wait_group_gone(self.proc.pid)

    def stop(self) -> None:
        """At the end of a test: nothing of a test server's state is worth a
        graceful shutdown (smbd takes ~2 s for one), so it is killed, by its group."""
        self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _wait_group_gone(pgid: int, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
