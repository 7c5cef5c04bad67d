"""A real cloud relay process (`manage.py runcloud`) on its own loopback address, for tests and benches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from harness import KMSN, ROOT, TOKEN, free_port, listening, wait_until

from relay.wire.auth import cloud_key

CLOUD_IP = "127.0.0.90"
CLOUD_TOKEN = "cloud-token-9f8e7d6c5b4a3210"
LEASE_KEY = cloud_key(TOKEN, KMSN)  # the test sites' POOL_KEY is their RELAY_TOKEN


def _pair(ip: str) -> int:
    """A free port whose next one is free too (JSON and passthrough)."""
    import socket

    while True:
        port = free_port(ip)
        try:
            with socket.socket() as s:
                s.bind((ip, port + 1))
            return port
        except OSError:
            continue


class CloudProc:
    def __init__(
        self,
        root: Path,
        ip: str = CLOUD_IP,
        token: str = CLOUD_TOKEN,
        park: float = 4.0,
        keepalive: float = 1.0,
    ) -> None:
        self.root, self.ip, self.token = root, ip, token
        root.mkdir(parents=True, exist_ok=True)
        self.relay_port = _pair(ip)
        self.tunnel_port, self.web_port = free_port(ip), free_port(ip)
        self.ini = root / "cloud.ini"
        (root / "lease.key").write_text(LEASE_KEY + "\n")  # as `relayctl cloud-key` prints it
        self.ini.write_text(
            "[cloud]\n"
            f"LISTEN_IP = {ip}\nRELAY_PORT = {self.relay_port}\nTUNNEL_PORT = {self.tunnel_port}\n"
            f"WEB_PORT = {self.web_port}\nDATA_DIR = {root / 'data'}\n"
            f"RELAY_KEEPALIVE = {keepalive:g}\nPARK = {park}\n"
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
