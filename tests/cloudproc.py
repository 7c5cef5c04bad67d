"""A real cloud relay process (`manage.py runcloud`) on its own loopback address, for tests and benches."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from harness import KMSN, ROOT, TOKEN, free_pair, free_port, listening, wait_until

from stkhost.pool_keys import cloud_key

CLOUD_IP = "127.0.0.90"
CLOUD_TOKEN = "cloud-token-9f8e7d6c5b4a3210"
LEASE_KEY = cloud_key(TOKEN, KMSN)  # the test sites' POOL_KEY is their RELAY_TOKEN


class CloudProc:
    def __init__(
        self,
        root: Path,
        ip: str = CLOUD_IP,
        token: str = CLOUD_TOKEN,
        park: float = 4.0,
        keepalive: float = 1.0,
        extra: str = "",
    ) -> None:
        self.root, self.ip, self.token = root, ip, token
        root.mkdir(parents=True, exist_ok=True)
        self.relay_port = free_pair(ip)
        self.tunnel_port, self.web_port = free_port(ip), free_port(ip)
        self.ini = root / "cloud.ini"
        (root / "lease.key").write_text(LEASE_KEY + "\n")  # as `relayctl cloud-key` prints it
        self.ini.write_text(
            "[cloud]\n"
            f"LISTEN_IP = {ip}\nRELAY_PORT = {self.relay_port}\nTUNNEL_PORT = {self.tunnel_port}\n"
            f"WEB_PORT = {self.web_port}\nDATA_DIR = {root / 'data'}\n"
            f"RELAY_KEEPALIVE = {keepalive:g}\nPARK = {park}\n{extra}"
            f"[site:{KMSN}]\nCLOUD_TOKEN = {token}\nLEASE_KEY_FILE = lease.key\n"
        )
        self.log_path = root / "cloud.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"tcp://{self.ip}:{self.tunnel_port}"

    def site_extra(self) -> dict[str, str]:
        return {"CLOUD_URL": self.url, "CLOUD_TOKEN": self.token}

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("STK_INI", None)
        with open(self.log_path, "ab") as log:
            command = [sys.executable, str(ROOT / "manage.py"), "runcloud", "--ini", str(self.ini)]
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        wait_until(lambda: listening(self.ip, self.tunnel_port) and listening(self.ip, self.web_port), 20,
                   "the cloud relay to listen")  # fmt: skip

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.ip}:{self.web_port}/status", timeout=5) as answer:
            return json.loads(answer.read())

    def pool(self) -> dict[str, Any]:
        return self.status()["pools"][KMSN]

    def tunnel_epoch(self) -> int | None:
        tunnel = self.pool()["tunnel"]
        return tunnel["epoch"] if tunnel else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


PEER_TOKEN = "peer-token-5e4d3c2b1a09f8e7"


def cloud_nodes(root: Path, endpoints: str, prefix: str, ips: list[str], park: float = 4.0,
                ttl: int = 2, keepalive: float = 1.0) -> list[CloudProc]:  # fmt: skip
    """`len(ips)` runcloud nodes (a, b, c...) sharing the directory at `endpoints`/`prefix`, not started."""
    names = [chr(ord("a") + i) for i in range(len(ips))]
    peers = {name: (ip, free_port(ip)) for name, ip in zip(names, ips, strict=True)}
    listed = ", ".join(f"{n}={ip}:{port}" for n, (ip, port) in peers.items())
    return [
        CloudProc(
            root / name,
            ip=ip,
            park=park,
            extra=f"ETCD_ENDPOINTS = {endpoints}\nETCD_PREFIX = {prefix}\nNODE_ID = {name}\n"
            f"NODES = {listed}\nPEER_PORT = {peers[name][1]}\nPEER_TOKEN = {PEER_TOKEN}\n"
            f"DIRECTORY_TTL = {ttl}\n",
        )
        for name, ip in zip(names, ips, strict=True)
    ]


def directory_history(endpoints: str, key: str, start: int) -> list[tuple[int, tuple[str, int] | None]]:
    """Every state of a directory key from revision `start` on, as etcd's revisions keep it:
    (revision, (node, epoch)) for a write, (revision, None) when the entry went (expired, revoked)."""
    from elections.ports.etcd.client import EtcdClient, unb64
    from stkconfig.etcd_endpoints import parse_endpoints

    client = EtcdClient(parse_endpoints(endpoints), 5.0)
    last = int(client.range(key)["header"]["revision"])
    states: list[tuple[int, tuple[str, int] | None]] = []
    seen_mod = None
    for rev in range(start, last + 1):
        kvs = client.range(key, revision=rev).get("kvs") or []
        mod = int(kvs[0]["mod_revision"]) if kvs else None
        if mod == seen_mod:
            continue
        seen_mod = mod
        if kvs:
            doc = json.loads(unb64(kvs[0]["value"]))
            states.append((rev, (doc["node"], doc["epoch"])))
        elif states and states[-1][1] is not None:
            states.append((rev, None))
    return states


def two_holders_at_once(states: list[tuple[int, tuple[str, int] | None]]) -> list[str]:
    """Each time the history hands a site from one node to another without the first entry
    having gone first, unless at a higher epoch (the old node's lease is then revoked)."""
    bad = []
    for (r1, x), (r2, y) in itertools.pairwise(states):
        if x is not None and y is not None and x[0] != y[0] and y[1] <= x[1]:
            bad.append(f"revision {r1}: {x} -> revision {r2}: {y}")
    return bad
