"""Issue 40's must-hold for finding 4, with real processes: one keyless host holding 1,000
connections to an entry member does not keep a remote client from another address out.

A real relay (`manage.py runrelay`, 127.0.0.31) and a real entry member
(`python -m stkrelay.child relay.server.entry`, 127.0.0.36) forwarding to it as the pool view
this test keeps fresh says; both with ``RELAY_MAX_PER_ADDRESS = 100``. The attacker (127.0.0.33)
keeps 1,000 connections open to the entry, redialling any that close (the relay's register
timeout closes idle ones); the remote client (127.0.0.34) registers through the entry 20 times.
Before the keyed header, every forwarded connection was the entry's address at the relay:
100 idle ones filled it and the remote client was refused.
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import threading
import time
from pathlib import Path

from harness import PY, ROOT, free_pair, wait_until
from test_forwarded import ForwardedWire
from test_relay_runrelay import EPOCH, RelayProc
from test_relay_server import KMSN, TOKEN
from test_relay_trust import many_files  # noqa: F401  (a fixture: 8,192 descriptors, or skipped)

from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import PoolView

ENTRY, ATTACKER, REMOTE = "127.0.0.36", "127.0.0.33", "127.0.0.34"
CAP = 100
HELD = 1000


class Attacker(threading.Thread):
    """Holds `HELD` connections to `address` from one source, reading and dropping what comes,
    redialling every one that closes."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self.address, self.stop, self.dialled = address, threading.Event(), 0
        self.sel = selectors.DefaultSelector()

    def dial(self) -> None:
        s = socket.socket()
        s.bind((ATTACKER, 0))
        s.settimeout(2)
        try:
            s.connect(self.address)
        except OSError:
            s.close()
            return
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ)
        self.dialled += 1

    @property
    def held(self) -> int:
        return len(self.sel.get_map())

    def run(self) -> None:
        while not self.stop.is_set():
            while self.held < HELD and not self.stop.is_set():
                self.dial()
            for key, _ in self.sel.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if sock.recv(1 << 16):
                        continue
                except OSError:
                    pass
                self.sel.unregister(sock)
                sock.close()
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]


def test_a_keyless_host_with_1000_connections_to_the_entry_does_not_keep_a_remote_client_out(
    tmp_path: Path,
    many_files: None,  # noqa: F811
):
    relay = RelayProc(tmp_path)
    relay.extra_env = {"STK_RELAY_MAX_PER_ADDRESS": str(CAP)}
    relay.write_state()
    relay.start()
    entry_dir = tmp_path / "entry"
    entry_dir.mkdir()
    local = LocalState(entry_dir)
    stop = threading.Event()

    def keep_view_fresh() -> None:  # what this member's worker would write: the lease it read
        lease = {"node": "S001", "epoch": EPOCH, "ip": "127.0.0.31", "port": relay.port, "ttl_s": 10,
                 "released": False}  # fmt: skip
        while not stop.is_set():
            local.write_pool(PoolView(kmsn=KMSN, node="S002", updated=time.monotonic(), lease=lease,
                                      lease_status="valid"))  # fmt: skip
            stop.wait(0.5)

    viewer = threading.Thread(target=keep_view_fresh, daemon=True)
    viewer.start()
    port = free_pair(ENTRY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env.update(PYTHONUNBUFFERED="1", STK_KMSN=KMSN, STK_STATION="S002", STK_RELAY_TOKEN=TOKEN,
               STK_DATA_DIR=str(entry_dir), STK_LEASE_DIR=str(relay.lease_dir), STK_NODE_IP=ENTRY,
               STK_ENTRY="1", STK_ENTRY_LISTEN=f"{ENTRY}:{port}", STK_RELAY_MAX_PER_ADDRESS=str(CAP),
               STK_REDIS_URL="redis://127.0.0.1:1/0")  # fmt: skip
    log = open(tmp_path / "entry.log", "wb")  # noqa: SIM115  (closed in the finally below, after the process)
    entry = subprocess.Popen([PY, "-m", "stkrelay.child", "relay.server.entry"], cwd=ROOT, env=env,
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    attacker = Attacker((ENTRY, port))
    try:
        wait_until(relay.serving, 30, "the relay to serve")
        wait_until(lambda: (local.entry().target or {}).get("port") == relay.port, 30, "the entry to forward")
        attacker.start()
        wait_until(lambda: attacker.dialled >= HELD, 60, "the attacker to hold 1,000 connections")
        wait_until(lambda: local.entry().proxy.get("refused", {}).get("per_address", 0) > 0, 10,
                   "the entry to refuse the attacker's connections over its cap")  # fmt: skip
        registered = 0
        for n in range(20):
            wire = ForwardedWire((ENTRY, port), client=None, source=REMOTE)
            reply = wire.register("commander", f"C{n:02d}")
            registered += reply.get("type") == "registered"
            if n < 19:
                wire.sock.close()
        assert registered == 20, f"{registered} of 20 registrations through the entry"
        assert attacker.held >= CAP  # the attack was on all along

        def shown() -> list[str]:
            snap = relay.status().get("snapshot", {})
            return [c["peer"] for c in snap.get("clients", [])]

        peers = wait_until(lambda: [p for p in shown() if p.startswith(f"{REMOTE}:")], 10, "relay.json")
        assert " via 127.0.0." in peers[0]  # the remote client, shown as itself via the entry
        snap = relay.status()["snapshot"]
        assert not any(k.startswith("header_") for k in snap["drops"]), snap["drops"]
        wire.sock.close()
    finally:
        attacker.stop.set()
        attacker.join(10)
        stop.set()
        entry.terminate()
        try:
            entry.wait(10)
        except subprocess.TimeoutExpired:
            entry.kill()
        log.close()
        relay.kill()
