"""A site on a LAN of network namespaces: agents that can lose their cable.

`Lan` builds a private LAN: a hub namespace holding a bridge, and one
namespace per host joined to it by a veth pair (``eth0`` inside the host's
namespace, ``chaop<i>`` on the bridge). Every name, address and interface lives
inside namespaces created here (``chao-<pid>-<n>-...``); the machine's own
interfaces and routes are never touched, and each namespace has its own
loopback. Knobs: `cut`/`mend` a host's cable (its bridge port down/up),
`netem` loss/delay on a host's link (both directions; where the kernel has
sch_netem, which this machine's has not) or `rate_limit` it (tbf), `run` a command in a
host's namespace, `call_in` a function on a thread inside it (sockets created
there stay in that namespace).

`NetnsSite` is a `harness.Site` whose agents each run in their own namespace,
as real ``runagent`` process groups (wrapped in ``ip netns exec``, which execs,
so the pid and process group are the agent's own) with their own Redis on
the namespace's loopback. Every agent uses the same ports (9530, 8000) on its
own address ``10.77.0.<11+i>``. The share is a directory every namespace sees:

- ``share="direct"``: all agents use the same directory; a cut cable leaves
  the share reachable (the file server is on another path, e.g. a second NIC).
- ``share="lan"``: each agent sees the share through its own faulty FUSE view
  (`faultyfs.FaultyMount`) of one backing directory, as a LAN client of a file
  server does: cutting its cable also makes its share fail (each operation
  after a delay, with EIO, never carried out), and per-agent share faults
  (delay, errno, hang, stale reads) are possible (`share_faults`).
- ``share="smb"``: a real Samba server (`tests/samba.py`) on its own host of
  the LAN (``10.77.0.250:445``) serves one faulty FUSE view of the backing
  directory; every agent's LEASE_DIR is ``smb://...`` to it, so a cut cable
  cuts the share by itself, and share faults hit the file server (all agents).

Cleanup: `Site.stop()` (the fixtures call it), an atexit hook, and, at start,
the removal of namespaces left by test processes that no longer exist.
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from faultyfs import FaultyMount
from harness import REDIS_IDLE, AgentProc, Site, wait_until
from samba import SMBD, Samba

PREFIX = "chao"
SUBNET = "10.77.0"
RELAY_PORT = 9530
WEB_PORT = 8000
REDIS_PORT = 6379
CUT_SHARE = [{"delay": 1.0, "errno": "EIO"}]  # what a LAN share does for a host whose cable is cut
CLONE_NEWNET = 0x40000000

T = TypeVar("T")
_counter = itertools.count(1)
_live: set[str] = set()  # namespaces this process created and has not deleted yet


def available() -> str | None:
    """Why network namespaces cannot be used here, or None if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "needs iproute2 (ip, tc)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _delete_netns(name: str) -> None:
    """Kill what still runs in namespace `name`, then delete it."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _ip("netns", "del", name, check=False)
    _live.discard(name)


def reap_stale() -> None:
    """Delete namespaces of ours whose creating process is gone (a test run killed midway)."""
    out = _ip("netns", "list", check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        found = re.fullmatch(rf"{PREFIX}-(\d+)-\d+-.+", name)
        if found and int(found.group(1)) != os.getpid() and not os.path.exists(f"/proc/{found.group(1)}"):
            _delete_netns(name)


@atexit.register
def _cleanup_at_exit() -> None:
    for name in list(_live):
        _delete_netns(name)


class ShapingUnavailable(RuntimeError):
    """The kernel lacks the traffic-control discipline asked for (e.g. no sch_netem module)."""


class Netns:
    """One network namespace of ours (created by `Lan`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        _ip("netns", "add", name)
        _live.add(name)
        _ip("-n", name, "link", "set", "lo", "up")

    @property
    def wrapper(self) -> list[str]:
        """Prefix of a command line that runs it in this namespace (``ip netns exec`` execs it)."""
        return ["ip", "netns", "exec", self.name]

    def run(self, *cmd: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.wrapper, *cmd], capture_output=True, text=True, check=check, timeout=timeout
        )

    def enter(self) -> None:
        """Move the calling thread (only it) into this namespace; threads it starts inherit it."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns({self.name}): {os.strerror(err)}")
        finally:
            os.close(fd)

    def call_in(self, fn: Callable[..., T], *args: Any, timeout: float = 30) -> T:
        """Run `fn(*args)` on a fresh thread inside this namespace and return its result."""
        box: dict[str, Any] = {}

        def body() -> None:
            try:
                self.enter()
                box["value"] = fn(*args)
            except BaseException as exc:  # handed to the caller
                box["error"] = exc

        thread = threading.Thread(target=body, name=f"netns-{self.name}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"{fn!r} in {self.name} did not return within {timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def delete(self) -> None:
        _delete_netns(self.name)


class LanHost(Netns):
    def __init__(self, name: str, label: str, ip: str, port: str) -> None:
        super().__init__(name)
        self.label, self.ip, self.port = (
            label,
            ip,
            port,
        )  # port: this host's veth end on the bridge (in the hub)


class Lan:
    """A bridge in a hub namespace, and hosts (namespaces) plugged into it."""

    def __init__(self) -> None:
        reap_stale()
        self.tag = f"{PREFIX}-{os.getpid()}-{next(_counter)}"
        self.hub = Netns(f"{self.tag}-hub")
        self.bridge = f"{PREFIX}br"
        _ip("-n", self.hub.name, "link", "add", self.bridge, "type", "bridge")
        _ip("-n", self.hub.name, "link", "set", self.bridge, "up")
        self.hosts: dict[str, LanHost] = {}

    def add(self, label: str, octet: int) -> LanHost:
        """Plug a new host `label` into the bridge with address ``10.77.0.<octet>``."""
        port = f"{PREFIX}p{len(self.hosts)}"
        host = LanHost(f"{self.tag}-{label}", label, f"{SUBNET}.{octet}", port)
        _ip(
            "-n",
            host.name,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            port,
            "netns",
            self.hub.name,
        )
        _ip("-n", self.hub.name, "link", "set", port, "master", self.bridge, "up")
        _ip("-n", host.name, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        _ip("-n", host.name, "link", "set", "eth0", "up")
        self.hosts[label] = host
        return host

    def cut(self, label: str) -> None:
        """Pull `label`'s cable: its bridge port goes down (its eth0 loses carrier)."""
        _ip("-n", self.hub.name, "link", "set", self.hosts[label].port, "down")

    def mend(self, label: str) -> None:
        _ip("-n", self.hub.name, "link", "set", self.hosts[label].port, "up")

    def netem(self, label: str, *, loss_pct: float = 0, delay_ms: float = 0, jitter_ms: float = 0) -> None:
        """Loss and delay on `label`'s link, both directions (tc netem on each end); zeros clear it.

        Raises `ShapingUnavailable` where the kernel has no netem (this machine's
        has none; `rate_limit` works everywhere).
        """
        args = (["delay", f"{delay_ms}ms"] + ([f"{jitter_ms}ms"] if jitter_ms else [])) if delay_ms else []
        args += ["loss", f"{loss_pct}%"] if loss_pct else []
        self._shape(label, ["netem", *args] if args else [])

    def rate_limit(self, label: str, kbit: int = 0) -> None:
        """A slow link for `label` (tc tbf, both directions): queues build, round trips grow; 0 clears it."""
        self._shape(label, ["tbf", "rate", f"{kbit}kbit", "burst", "4kb", "latency", "10s"] if kbit else [])

    def _shape(self, label: str, qdisc: list[str]) -> None:
        host = self.hosts[label]
        for ns, dev in ((host.name, "eth0"), (self.hub.name, host.port)):
            subprocess.run(
                ["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=20
            )
            if qdisc:
                done = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *qdisc],
                                      capture_output=True, text=True, timeout=20)  # fmt: skip
                if done.returncode != 0:
                    raise ShapingUnavailable(f"tc qdisc {qdisc[0]} on {label}: {done.stderr.strip()}")

    def close(self) -> None:
        for host in self.hosts.values():
            host.delete()
        self.hub.delete()


class NsRedis:
    """A redis-server on a namespace's own loopback (same interface as `harness.Redis`)."""

    def __init__(self, ns: Netns, workdir: Path) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is missing: run `make test` (it installs it)"
        self.ns, self.port = ns, REDIS_PORT
        self.url = f"redis://127.0.0.1:{REDIS_PORT}/0"
        args = [
            "--port",
            str(REDIS_PORT),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            *REDIS_IDLE,
        ]
        self.proc = subprocess.Popen(
            [*ns.wrapper, exe, *args, "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(lambda: ns.call_in(_redis_pong), 10, f"redis-server in {ns.name}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _redis_pong() -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", REDIS_PORT), timeout=0.3) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _listening(ip: str, port: int) -> bool:
    from harness import listening

    return listening(ip, port)


class NetnsSite(Site):
    """A `harness.Site` whose agents each live in a network namespace of one `Lan`."""

    def __init__(self, root: Path, n: int = 3, *, share: str = "direct", **kw: Any) -> None:
        if share not in ("direct", "lan", "smb"):
            raise ValueError(f"share must be 'direct', 'lan' or 'smb', not {share!r}")
        self.lan = Lan()
        self.share_mode = share
        self.views: list[FaultyMount] = []
        self.view_faults: list[dict[str, list[dict[str, Any]]]] = []
        self.samba: Any = None
        try:
            self._root = root
            if share == "smb":
                kw["extra"] = {**kw.get("extra", {}), "SMB_PASSWORD": self._start_samba(root)}
            super().__init__(root, n=n, **kw)
            self.observer = self.lan.add("obs", 200)  # where tests and clients stand on the LAN
        except BaseException:
            self.stop()
            raise

    # -- Site's hooks: where each agent lives -------------------------------------------
    def relay_port(self) -> int:
        return RELAY_PORT

    def node_ip(self, i: int, first_ip: int) -> str:
        return f"{SUBNET}.{11 + i}"

    def web_port(self, ip: str) -> int:
        return WEB_PORT

    def redis_for(self, i: int, data: Path) -> NsRedis:  # type: ignore[override]
        host = self.lan.add(f"S{i + 1:03d}", 11 + i)
        return NsRedis(host, data)

    @property
    def per_agent_share(self) -> bool:
        """Whether share faults can hit one agent's view (else only the file server)."""
        return self.share_mode == "lan"

    def _start_samba(self, root: Path) -> str:
        """Samba on a LAN host of its own, serving a faulty view of root/share; its password."""
        from samba import PASSWORD

        backing = root / "share"
        backing.mkdir(parents=True, exist_ok=True)
        view = FaultyMount(backing, root / "smbview", root / "smbcontrol", root / "faultyfs-smb.log")
        self.views.append(view)
        self.view_faults.append({})
        view.start()
        host = self.lan.add("smb", 250)
        self.samba = NsSamba(root / "samba", host, view.mountpoint)
        self.samba.start()
        return PASSWORD

    def lease_dir_for(self, i: int) -> Path:
        if self.share_mode == "smb":
            return self.samba.url(self.lease_dir.name)  # type: ignore[no-any-return]
        if self.share_mode == "direct":
            return self.lease_dir
        share = self.lease_dir.parent
        view = FaultyMount(share, self._root / f"view{i + 1}", self._root / f"control{i + 1}",
                           self._root / f"faultyfs{i + 1}.log")  # fmt: skip
        self.views.append(view)
        self.view_faults.append({})
        view.start()
        return view.mountpoint / self.lease_dir.name

    def wrapper(self, i: int) -> list[str]:
        return self.host(i).wrapper

    # -- knobs ----------------------------------------------------------------------------
    def host(self, which: int | AgentProc) -> LanHost:
        i = which if isinstance(which, int) else self.agents.index(which)
        return self.lan.hosts[f"S{i + 1:03d}"]

    def cut(self, agent: AgentProc) -> None:
        """Pull the agent's cable (and its share with it, but with ``share="direct"``)."""
        self.lan.cut(self.host(agent).label)
        if self.share_mode == "lan":
            self.share_faults(agent, "cut", CUT_SHARE)

    def mend(self, agent: AgentProc) -> None:
        self.lan.mend(self.host(agent).label)
        if self.share_mode == "lan":
            self.share_faults(agent, "cut", [])

    def netem(self, agent: AgentProc, **kw: float) -> None:
        self.lan.netem(self.host(agent).label, **kw)

    def rate_limit(self, agent: AgentProc, kbit: int = 0) -> None:
        self.lan.rate_limit(self.host(agent).label, kbit)

    def share_faults(self, agent: AgentProc, tag: str, rules: list[dict[str, Any]]) -> None:
        """Set (or, with [], clear) the faultyfs rules named `tag` on the agent's share view."""
        if self.share_mode == "direct":
            raise RuntimeError("share faults need share='lan' or 'smb'")
        i = self.agents.index(agent) if self.share_mode == "lan" else 0  # smb: the server's one view
        faults = self.view_faults[i]
        faults[tag] = rules
        if not rules:
            del faults[tag]
        self.views[i].set_rules([rule for group in faults.values() for rule in group])

    def listening(self, agent: AgentProc, port: int) -> bool:
        """Whether the agent accepts TCP on `port` at its address, as seen from the observer host."""
        return self.observer.call_in(_listening, agent.ip, port)

    def stop(self) -> None:
        try:
            if getattr(self, "agents", None) is not None:
                super().stop()
        finally:
            if self.samba is not None:
                self.samba.stop()
            for view in self.views:
                view.stop()
            self.lan.close()


class NsSamba(Samba):
    """`samba.Samba` (real smbd, private config) on a LAN host of its own, port 445, serving `served`."""

    def __init__(self, workdir: Path, host: LanHost, served: Path) -> None:
        self.lan_host, self.served = host, served
        super().__init__(workdir)  # on loopback first (its port probe runs here), then moved:
        self.host, self.port = host.ip, 445
        self.conf.write_text(self._config())

    def _config(self) -> str:
        text = super()._config().replace("interfaces = lo", f"interfaces = {self.lan_host.ip}/24")
        text = re.sub(r"smb ports = \d+", f"smb ports = {self.port}", text)
        return text.replace(f"path = {self.root}", f"path = {self.served}")

    def start(self, timeout: float = 20) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.lan_host.wrapper, SMBD, "--foreground", "--no-process-group", "-s", str(self.conf),
                 "--debug-stdout"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_until(lambda: self._answering() or self._died(), timeout, f"smbd to listen on {self.host}:445")
        if self._died():
            raise RuntimeError(f"smbd exited: {self.log_path.read_text(errors='replace')[-2000:]}")

    def _answering(self) -> bool:
        return self.lan_host.call_in(_listening, self.host, self.port)
