"""A real etcd cluster for tests and benchmarks: Debian's `etcd` 3.4 members on
loopback, each on free ports with its own data directory, started and stopped
by pid (never by name), their directories removed at `stop()`.

    cluster = EtcdCluster(tmp_path, n=3).start()
    cluster.endpoints            # "http://127.0.0.1:p1,http://127.0.0.1:p2,..."
    cluster.kill(0)              # SIGKILL one member; cluster.restart(0) brings it back
    cluster.pause(1)             # SIGSTOP (cluster.resume(1): SIGCONT)
    cluster.leader_index()       # which member leads the raft group now
    cluster.stop()

Faults are done to real processes only: kill, SIGSTOP, and `TcpProxy`, a small
TCP forwarder in this process that can cut (close every connection, refuse
new ones) or hang (accept, forward nothing) the path between one client and
one member, for a partition without touching the host's firewall.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness import free_port, wait_until

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def have_etcd() -> bool:
    return os.access(ETCD, os.X_OK)


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _post(url: str, body: dict, timeout: float = 1.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class EtcdCluster:
    root: Path
    n: int = 3
    heartbeat_ms: int = 100
    election_ms: int = 1000
    members: list[Member] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root) / "etcd"
        self.root.mkdir(parents=True, exist_ok=True)
        self.token = f"stk-{os.getpid()}-{free_port()}"
        for i in range(self.n):
            name = f"e{i}"
            self.members.append(
                Member(name, free_port(), free_port(), self.root / name, self.root / f"{name}.log")
            )

    @property
    def endpoints(self) -> str:
        return ",".join(m.url for m in self.members)

    def _cluster_flag(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    def _spawn(self, m: Member, state: str) -> None:
        args = [
            ETCD, "--name", m.name, "--data-dir", str(m.data_dir),
            "--listen-client-urls", m.url, "--advertise-client-urls", m.url,
            "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", self._cluster_flag(), "--initial-cluster-token", self.token,
            "--initial-cluster-state", state,
            "--heartbeat-interval", str(self.heartbeat_ms), "--election-timeout", str(self.election_ms),
            "--logger", "zap", "--log-level", "warn", "--enable-v2=false",
            "--quota-backend-bytes", str(256 << 20),
        ]  # fmt: skip
        with open(m.log_path, "ab") as log:
            m.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        m.paused = False

    def start(self, timeout: float = 30) -> EtcdCluster:
        for m in self.members:
            self._spawn(m, "new")
        wait_until(self.healthy, timeout, "the etcd cluster to elect a leader")
        return self

    # -- looking ---------------------------------------------------------------------
    def status(self, i: int, timeout: float = 0.5) -> dict | None:
        m = self.members[i]
        if not m.alive() or m.paused:
            return None
        try:
            return _post(m.url + "/v3/maintenance/status", {}, timeout)
        except (OSError, ValueError):
            return None

    def leader_index(self) -> int | None:
        """The member that leads the raft group now, if the live ones agree on one."""
        ids = {}
        leaders = set()
        for i in range(self.n):
            st = self.status(i)
            if st is not None:
                ids[int(st["header"]["member_id"])] = i
                leaders.add(int(st.get("leader", 0)))
        if len(leaders) != 1:
            return None
        return ids.get(leaders.pop())

    def healthy(self) -> bool:
        """A leader exists and a linearizable read through a live member answers."""
        if self.leader_index() is None:
            return False
        for m in self.members:
            if m.alive() and not m.paused:
                try:
                    _post(m.url + "/v3/kv/range", {"key": "aGVhbHRo"}, 1.0)
                    return True
                except (OSError, ValueError):
                    continue
        return False

    # -- faults ----------------------------------------------------------------------
    def kill(self, i: int) -> None:
        m = self.members[i]
        if m.proc is not None and m.proc.poll() is None:
            if m.paused:
                os.kill(m.proc.pid, signal.SIGCONT)
            m.proc.kill()
            m.proc.wait(10)
        m.paused = False

    def restart(self, i: int) -> None:
        """Start a killed member again on its data directory (it rejoins the cluster)."""
        m = self.members[i]
        assert not m.alive()
        self._spawn(m, "existing")

    def pause(self, i: int) -> None:
        m = self.members[i]
        assert m.proc is not None
        os.kill(m.proc.pid, signal.SIGSTOP)
        m.paused = True

    def resume(self, i: int) -> None:
        m = self.members[i]
        assert m.proc is not None
        os.kill(m.proc.pid, signal.SIGCONT)
        m.paused = False

    def pids(self) -> list[int]:
        return [m.proc.pid for m in self.members if m.alive()]

    def stop(self) -> None:
        for i in range(self.n):
            self.kill(i)
        shutil.rmtree(self.root, ignore_errors=True)

    def logs(self) -> str:
        out = []
        for m in self.members:
            if m.log_path.exists():
                out.append(f"===== etcd {m.name}\n{m.log_path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)


class TcpProxy:
    """127.0.0.1:<port> forwarding to one etcd member, with a switch: `cut()`
    closes every connection and refuses new ones (a partition a client sees as
    reset), `hang()` keeps accepting but forwards nothing (a path that drops
    packets), `heal()` forwards again."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.mode = "open"
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            if self.mode == "cut":
                conn.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._conns += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while self.mode == "hang" and not self._stopped.is_set():
                    self._stopped.wait(0.05)  # hold the bytes: the path drops everything
                if self.mode == "cut":
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _close_all(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self) -> None:
        self.mode = "cut"
        self._close_all()

    def hang(self) -> None:
        self.mode = "hang"

    def heal(self) -> None:
        if self.mode == "hang":
            self._close_all()  # the held connections are dead to their clients anyway
        self.mode = "open"

    def stop(self) -> None:
        self._stopped.set()
        self._server.close()
        self._close_all()


def etcd_pool(endpoints: str, prefix: str, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    """A pool's place on etcd as a test reads it (no watch: every read is a real one)."""
    from elections.ports.etcd.pool import EtcdPool

    return EtcdPool([e for e in endpoints.split(",") if e], prefix, timeout)


def read_etcd_lease(pool, token: str):  # type: ignore[no-untyped-def]
    """The lease record under the pool's prefix, parsed as every agent parses it."""
    from elections.core.lease import parse_lease
    from elections.core.untrusted import LEASE

    kv = pool.get("pool/leader", LEASE.max_bytes)
    return parse_lease(None if kv is None else kv.value or b"", token)


def unique_prefix() -> str:
    import uuid

    return f"/stkrelay-test/{uuid.uuid4().hex[:12]}/"


class EtcdSite:
    """A `harness.Site` whose pool is on etcd (`LEASE_STORE = etcd`): the same
    agents, with `lease()` read from the cluster instead of the share."""

    def __new__(cls, root: Path, cluster: EtcdCluster, n: int = 3, timing=None, endpoints: str | None = None,
                extra: dict | None = None, **kw):  # type: ignore[no-untyped-def]  # fmt: skip
        from harness import Site

        prefix = unique_prefix()
        eps = endpoints or cluster.endpoints
        keys = {"LEASE_STORE": "etcd", "ETCD_ENDPOINTS": eps, "ETCD_PREFIX": prefix, **(extra or {})}
        site = Site(root, n=n, timing=timing, extra=keys, **kw)
        site.etcd = cluster  # type: ignore[attr-defined]
        site.prefix = prefix  # type: ignore[attr-defined]
        pool = etcd_pool(cluster.endpoints, prefix)

        def lease():  # type: ignore[no-untyped-def]
            read = read_etcd_lease(pool, site.token)
            rec = read.record
            return rec if read.status == "valid" and rec is not None and not rec.released else None

        site.lease = lease  # type: ignore[method-assign]
        site.etcd_pool = pool  # type: ignore[attr-defined]
        return site


class EtcdContender:
    """A bare elector process (elections/runtime/contend.py) on a pool on etcd,
    with the interface of `harness.Contender`."""

    def __init__(self, endpoints: str, prefix: str, node: str, workdir: Path, timing: dict[str, float],
                 token: str | None = None) -> None:  # fmt: skip
        import sys

        from harness import PY, ROOT, TOKEN

        self.node = node
        self.events = workdir / f"{node}.events.jsonl"
        self.log_path = workdir / f"{node}.log"
        args = [PY, "-m", "elections.runtime.contend", "--etcd", endpoints, "--prefix", prefix,
                "--node", node, "--events", str(self.events)]  # fmt: skip
        for k, v in timing.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env=dict(os.environ, STK_RELAY_TOKEN=token or TOKEN))  # fmt: skip
        del sys

    def send(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        self.send(signal.SIGCONT)
        self.send(signal.SIGKILL)
        self.proc.wait(5)

    def events_of(self, kind: str) -> list[dict]:
        from elections.ports.events.eventlog import read_events

        return [e for e in read_events(self.events) if e.get("kind") == kind]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def leadership_segments(contenders) -> list[tuple[str, int, float, float]]:  # type: ignore[no-untyped-def]
    """(node, epoch, from, to) of every leadership, on this machine's wall clock (the
    contenders all run here), `to` = inf while it lasts."""
    from datetime import datetime

    out = []
    for c in contenders:
        start: dict[int, float] = {}
        for e in _events(c):
            at = datetime.fromisoformat(e["at"]).timestamp()
            if e["kind"] == "elected":
                start[e["epoch"]] = at
            elif e["kind"] in ("stepped_down", "released", "handoff") and e["epoch"] in start:
                held = e.get("held_until")  # a late step-down did not lead past its deadline
                end = min(at, datetime.fromisoformat(held).timestamp()) if held else at
                out.append((c.node, e["epoch"], start.pop(e["epoch"]), end))
        out += [(c.node, ep, at, float("inf")) for ep, at in start.items()]
    return sorted(out, key=lambda s: s[2])


def _events(c) -> list[dict]:  # type: ignore[no-untyped-def]
    from elections.ports.events.eventlog import read_events

    return read_events(c.events)


def assert_one_leader_at_most(contenders) -> list[tuple[str, int, float, float]]:  # type: ignore[no-untyped-def]
    """No two leaderships overlap in time and no epoch was taken twice."""
    segs = leadership_segments(contenders)
    epochs = [s[1] for s in segs]
    assert len(epochs) == len(set(epochs)), f"an epoch was taken twice: {segs}"
    for a, b in itertools.pairwise(segs):
        assert a[3] <= b[2] + 0.05, f"two leaders at once: {a} and {b}"
        assert b[1] > a[1], f"epochs went backwards: {a} then {b}"
    return segs
