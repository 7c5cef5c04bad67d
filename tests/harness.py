"""Real parts for tests and benchmarks: redis-servers on free ports, agents as
real `runagent` process groups on their own loopback addresses, bare
contender processes, and `wait_until` (conditions with deadlines, never sleeps).
"""

from __future__ import annotations

import atexit
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TOKEN = "test-token-0123456789abcdef"
KMSN = "9999-9999-99-99"
FAST = {"LEASE_TTL": "3", "LEASE_RENEW": "1", "LEASE_POLL": "0.5", "RENEW_DEADLINE": "2"}


def signed_lock(node: str, pid: int, nonce: str, token: str = TOKEN) -> str:
    """A lock file's content as a live (or dead) writer of the pool would leave it."""
    from elections.core.lease import sign

    doc = {"node": node, "pid": pid, "nonce": nonce}
    return json.dumps({**doc, "sig": sign(doc, token)})


DEFAULT = {"LEASE_TTL": "10", "LEASE_RENEW": "3", "LEASE_POLL": "2", "RENEW_DEADLINE": "7"}

# Debian's Chromium for Playwright (never `playwright install`); these flags keep it
# off the closed network and away from first-run and update work.
CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if os.path.exists(p)), None)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, what: str = "condition", every: float = 0.05) -> T:
    """Poll `cond` until it returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PICKED = random.Random(os.getpid() ^ time.monotonic_ns())


def _free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_pair(*hosts: str, count: int = 2) -> int:
    """A port p with p .. p + count - 1 free on every one of `hosts` (default loopback).

    Picked below the kernel's ephemeral range, so that no outgoing connection of a
    parallel test takes it between this probe and the caller's bind (a port from
    ``bind(port 0)`` is in that range, and is the usual source of "address in use")."""
    hosts = hosts or ("127.0.0.1",)
    high = _ephemeral_low() - count
    for _ in range(500):
        port = _PICKED.randrange(20000, high) if high > 20000 else _PICKED.randrange(1024, 65535 - count)
        if all(_free(h, p) for h in hosts for p in range(port, port + count)):
            return port
    raise AssertionError("no run of free ports on " + ", ".join(hosts))


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, outside the ephemeral range (see `free_pair`)."""
    return free_pair(host, count=1)


def listening(ip: str, port: int, timeout: float = 0.3) -> bool:
    """True if something accepts TCP connections on ip:port now."""
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


class Redis:
    """A redis-server on a free loopback port; `start=False` only picks the port (its agent may
    start first), `start()` (again after `kill9()`) starts one there."""

    def __init__(self, workdir: Path, start: bool = True) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is missing: run `make test` (it installs it)"
        workdir = self.workdir
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                *REDIS_IDLE,
                "--dir",
                str(workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._up, 10, f"redis-server on {self.port}")

    def _up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill9(self) -> None:
        """SIGKILL, as a crash or the OOM killer would end it."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def write_lease(
    lease_dir: Path, node: str, ip: str, port: int, epoch: int, *, token: str = TOKEN, kmsn: str = KMSN,
    ttl_s: float = 10, renew_seq: int = 1,
) -> None:  # fmt: skip
    """A signed lease naming `node`, written like the store does: temp file + atomic rename."""
    from elections.core.lease import LeaseRecord

    record = LeaseRecord(kmsn=kmsn, station=node, ip=ip, port=port, pid=4242, epoch=epoch,
                         lease_until="20990101000000", node=node, renew_seq=renew_seq,
                         ttl_s=ttl_s)  # fmt: skip
    tmp = lease_dir / ".relay_leader.json.tmp"
    tmp.write_bytes(record.encode(token))
    os.replace(tmp, lease_dir / "relay_leader.json")


def read_lease(lease_dir: Path, token: str = TOKEN):  # type: ignore[no-untyped-def]
    from elections.core.lease import parse_lease

    try:
        raw = (lease_dir / "relay_leader.json").read_bytes()
    except FileNotFoundError:
        raw = None
    return parse_lease(raw, token)


def live_lease(lease_dir: Path, token: str = TOKEN):  # type: ignore[no-untyped-def]
    """The valid, unreleased lease record, or None."""
    read = read_lease(lease_dir, token)
    rec = read.record
    return rec if read.status == "valid" and rec is not None and not rec.released else None


@dataclass
class AgentProc:
    name: str
    ip: str
    ini: Path
    data_dir: Path
    log_path: Path
    redis: Redis
    wrapper: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    command: list[str] = field(
        default_factory=list
    )  # instead of `manage.py runagent` (e.g. `stkrelay agent`)
    cwd: Path = ROOT

    def start(self) -> None:
        env = dict(os.environ, **self.env)
        env.pop("STK_INI", None)
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *self.wrapper,
                    *(self.command or [PY, str(ROOT / "manage.py"), "runagent"]),
                    "--ini",
                    str(self.ini),
                ],
                cwd=self.cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pgid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def kill9(self) -> None:
        self.signal_group(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)

    def terminate(self, timeout: float = 10) -> float:
        """SIGTERM the supervisor; returns how long the whole group took to go."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)
        wait_until(lambda: not _group_alive(self.pgid), timeout, f"{self.name}'s process group to end")
        return time.monotonic() - started

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def state(self) -> dict[str, Any]:
        from dataclasses import asdict

        from elections.ports.local.localstate import LocalState

        return asdict(LocalState(self.data_dir).leadership())

    def setting(self, key: str) -> str:
        """The value of `key` in this agent's stk.ini (as `Site` wrote it)."""
        for line in self.ini.read_text(errors="replace").splitlines():  # an old site ini: cp950
            name, sep, value = line.partition("=")
            if sep and name.strip() == key:
                return value.strip()
        raise KeyError(key)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # -- its web port: HTTPS with the certificate it made in DATA_DIR, unless WEB_PLAIN = 1 ---------
    @property
    def plain(self) -> bool:
        try:
            return self.setting("WEB_PLAIN") not in ("", "0")
        except KeyError:
            return False

    @property
    def web_url(self) -> str:
        """Its panel's base URL (no trailing slash)."""
        return f"{'http' if self.plain else 'https'}://{self.ip}:{self.setting('WEB_PORT')}"

    @property
    def ws_url(self) -> str:
        return f"{'ws' if self.plain else 'wss'}://{self.ip}:{self.setting('WEB_PORT')}"

    def web_ssl(self) -> ssl.SSLContext | None:
        """A client context that trusts this agent's own certificate only (its DATA_DIR/web-tls.crt
        as the CA file, host name = its IP checked), as a client given the file would; None in plain
        HTTP. Waits for the agent to have made the certificate."""
        if self.plain:
            return None
        from elections.ports.local.webcert import CERT_NAME

        crt = self.data_dir / CERT_NAME
        wait_until(crt.exists, 60, f"{self.name}'s web certificate")
        return ssl.create_default_context(cafile=str(crt))

    def fingerprint(self) -> str:
        """The SHA-256 of the certificate its panel serves (64 hex), as `relayctl tls` prints it."""
        from elections.ports.local.webcert import CERT_NAME
        from stkhost.fingerprints import fingerprint_of_pem

        self.web_ssl()
        return fingerprint_of_pem((self.data_dir / CERT_NAME).read_bytes())

    def urlopen(
        self, path_or_request: str | urllib.request.Request, timeout: float = 5, data: bytes | None = None
    ):  # type: ignore[no-untyped-def]
        """`urllib.request.urlopen` of a path on its panel (or of a Request naming a full URL)."""
        req = path_or_request
        if isinstance(req, str):
            req = urllib.request.Request(self.web_url + req)
        return urllib.request.urlopen(req, data=data, timeout=timeout, context=self.web_ssl())

    def wait_web(self, timeout: float = 60) -> None:
        """Until its panel accepts a TCP connection: the web server binds on its own schedule,
        apart from the election (a settled pool says nothing about it)."""
        import socket

        def answers() -> bool:
            try:
                socket.create_connection((self.ip, int(self.setting("WEB_PORT"))), timeout=1).close()
            except OSError:
                return False
            return True

        wait_until(answers, timeout, f"{self.name}'s panel to accept connections", every=0.1)

    def history(self) -> list[tuple[str, int, str]]:
        """(kind, epoch, reason) rows of this agent's election history, oldest first."""
        import sqlite3

        db = sqlite3.connect(f"file:{self.data_dir / 'stkrelay.sqlite3'}?mode=ro", uri=True, timeout=10)
        try:
            return db.execute(
                "SELECT kind, epoch, reason FROM elections_electionevent ORDER BY id"
            ).fetchall()
        finally:
            db.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Zombies count as gone.
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return any(not s.startswith("Z") for s in out.split())


# The agent's Redis as packaged (packaging/stkrelay-redis@.service): its housekeeping
# once a second, not ten times (one broker of one agent's few clients, no expiring keys).
REDIS_IDLE = ("--hz", "1", "--dynamic-hz", "no")

SHARE_ROOT = Path("/dev/shm")
_shares: list[Path] = []


def share_dir(root: Path) -> Path:
    """A fresh folder to play the file server's share, on tmpfs where there is one.

    A site's share is another machine's disk. Here it would be this one's, and
    under a parallel test run an fsync on it waits for every other test's
    journal commits (measured: up to 2.6 s at p100, 0.5 s at p99, while the
    browser and agent tests ran side by side), which a site with TTL 3 and a
    2 s share deadline takes, rightly, for a share that is not answering. The
    SMB tests put a real server's latency back in front of it. Under pytest,
    `root` is on tmpfs already (tests/conftest.py) and is used as it is."""
    on_tmpfs = str(root.resolve()).startswith(str(SHARE_ROOT) + os.sep)
    if not on_tmpfs and SHARE_ROOT.is_dir() and os.access(SHARE_ROOT, os.W_OK):
        made = Path(tempfile.mkdtemp(prefix="stk-share-", dir=SHARE_ROOT))
        if not _shares:
            atexit.register(lambda: [shutil.rmtree(p, ignore_errors=True) for p in _shares])
        _shares.append(made)
        return made / "share"  # its siblings (a FUSE test's backing folder) stay in `made`
    return root / "share"


class Site:
    """A KMSN with n agents on 127.0.0.21.., one shared lease dir, one Redis each."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        timing: dict[str, str] | None = None,
        token: str = TOKEN,
        first_ip: int = 21,
        web_ports: list[int] | None = None,
        extra: dict[str, str] | None = None,
        lease_dir: Path | None = None,
    ) -> None:
        self.root = root
        # The pool's folder as this machine sees it (for an smb:// LEASE_DIR in
        # `extra`: the folder the SMB server serves).
        self.lease_dir = lease_dir or share_dir(root) / "socket"
        self.lease_dir.mkdir(parents=True, exist_ok=True)
        root.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.agents: list[AgentProc] = []
        relay_port = self.relay_port()
        for i in range(n):
            name = f"S{i + 1:03d}"
            ip = self.node_ip(i, first_ip)
            data = root / name
            data.mkdir()
            redis = self.redis_for(i, data)
            values = {
                "KMSN": KMSN,
                "STATION": name,
                "NODE_IP": ip,
                "RELAY_PORT": str(relay_port),
                "RELAY_TOKEN": token,
                "LEASE_DIR": str(self.lease_dir_for(i)),
                "DATA_DIR": str(data),
                "WEB_PORT": str(web_ports[i] if web_ports else self.web_port(ip)),
                "REDIS_URL": redis.url,
                **(timing or FAST),
                **(extra or {}),
            }
            ini = data / "stk.ini"
            ini.write_text("[stk]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
            ini.chmod(0o600)  # it holds the token (README "Install on a site"; else stkrelay.W111)
            self.agents.append(
                AgentProc(name, ip, ini, data, data / "agent.log", redis, wrapper=self.wrapper(i))
            )

    # -- where each agent lives (tests/netns.py puts them in network namespaces) ------
    def relay_port(self) -> int:
        return free_port()

    def node_ip(self, i: int, first_ip: int) -> str:
        return f"127.0.0.{first_ip + i}"

    def web_port(self, ip: str) -> int:
        return free_port(ip)

    def redis_for(self, i: int, data: Path) -> Redis:
        return Redis(data)

    def lease_dir_for(self, i: int) -> Path:
        return self.lease_dir

    def wrapper(self, i: int) -> list[str]:
        return []

    def start(self) -> None:
        for agent in self.agents:
            agent.start()

    def by_name(self, name: str) -> AgentProc:
        return next(a for a in self.agents if a.name == name)

    def lease(self):  # type: ignore[no-untyped-def]
        return live_lease(self.lease_dir, self.token)

    def wait_leader(self, timeout: float = 30, other_than: str | None = None, min_epoch: int = 0):  # type: ignore[no-untyped-def]
        def ok():  # type: ignore[no-untyped-def]
            rec = self.lease()
            if rec and rec.node != other_than and rec.epoch >= min_epoch:
                return rec
            return None

        return wait_until(ok, timeout, f"a leader other than {other_than}" if other_than else "a leader")

    def wait_settled(self, timeout: float = 40):  # type: ignore[no-untyped-def]
        """The lease once a leader holds it, knows it, and every other agent follows it."""
        lease = self.wait_leader(timeout=timeout)
        leader = self.by_name(lease.node)
        wait_until(lambda: leader.state().get("leader"), 10, "the leader's state")
        others = len(self.agents) - 1
        wait_until(lambda: sum("follow" in a.state().get("decision", "") for a in self.agents) == others,
                   30, "every other agent to follow")  # fmt: skip
        return lease

    def stop(self) -> None:
        for agent in self.agents:
            if agent.proc is not None:
                agent.signal_group(signal.SIGCONT)
                agent.signal_group(signal.SIGKILL)
                try:
                    agent.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            agent.redis.stop()

    def logs(self) -> str:
        return "\n".join(f"===== {a.name}\n{a.log()[-6000:]}" for a in self.agents if a.log_path.exists())


LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)


def faketime_env(workdir: Path) -> Callable[[str], dict[str, str]]:
    """A maker of environments that run a process (and its children) with a wall
    clock off by `skew` (libfaketime, e.g. "+300s") and a true monotonic clock, as
    on a real machine whose clock is off. Builds tests/faketime_fix.c into `workdir`."""
    assert LIBFAKETIME, "libfaketime is missing: run `make test` (it installs faketime)"
    shim = workdir / "faketime_fix.so"
    if not shim.exists():
        src = Path(__file__).with_name("faketime_fix.c")
        gcc = shutil.which("gcc") or "gcc"
        subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(shim), str(src), "-ldl"], check=True)

    def env(skew: str) -> dict[str, str]:
        return {"LD_PRELOAD": f"{shim}:{LIBFAKETIME}", "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    return env


class Contender:
    """A bare elector process (elections/contend.py) on a lease dir."""

    def __init__(
        self, lease_dir: Path, node: str, workdir: Path, timing: dict[str, float], token: str = TOKEN
    ) -> None:
        self.node = node
        self.events = workdir / f"{node}.events.jsonl"
        self.log_path = workdir / f"{node}.log"
        args = [
            PY,
            "-m",
            "elections.runtime.contend",
            "--dir",
            str(lease_dir),
            "--node",
            node,
            "--events",
            str(self.events),
        ]
        for k, v in timing.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        with open(self.log_path, "ab") as log:
            env = dict(os.environ, STK_RELAY_TOKEN=token)  # the pool key, never on argv
            self.proc = subprocess.Popen(
                args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )

    def send(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        self.send(signal.SIGKILL)
        self.proc.wait(5)

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        from elections.ports.events.eventlog import read_events

        return [e for e in read_events(self.events) if e.get("kind") == kind]
