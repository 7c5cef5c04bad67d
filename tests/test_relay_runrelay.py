"""`manage.py runrelay` as a real subprocess, steered by the leadership state file
and the lease the test writes (docs/design.md §4, §8)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import harness
import pytest
from harness import PY, ROOT, free_pair, wait_until
from test_relay_server import KMSN, TOKEN, Wire

HOST = "127.0.0.31"
EPOCH = 7


class RelayProc:
    def __init__(self, tmp: Path) -> None:
        self.lease_dir, self.data_dir = tmp / "lease", tmp / "data"
        self.lease_dir.mkdir()
        self.data_dir.mkdir()
        self.port = free_pair(HOST)
        self.out, self.err = tmp / "stdout.log", tmp / "stderr.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra_env: dict[str, str] = {}  # more STK_ keys (tests/test_relay_listen.py)

    def write_state(self, leader: bool = True, epoch: int = EPOCH, valid_for: float = 60.0) -> float:
        until = time.monotonic() + valid_for
        doc = {"leader": leader, "epoch": epoch, "valid_until": until, "pid": os.getpid(), "node": "S001"}
        tmp = self.data_dir / ".leadership.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.data_dir / "leadership.json")
        return until

    def write_lease(self, node: str, ip: str, port: int, epoch: int) -> None:
        harness.write_lease(self.lease_dir, node, ip, port, epoch, token=TOKEN, kmsn=KMSN)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
        env.update(
            PYTHONUNBUFFERED="1",
            STK_KMSN=KMSN,
            STK_STATION="S001",
            STK_RELAY_TOKEN=TOKEN,
            STK_LEASE_DIR=str(self.lease_dir),
            STK_DATA_DIR=str(self.data_dir),
            STK_NODE_IP=HOST,
            STK_RELAY_PORT=str(self.port),
            STK_REDIS_URL="redis://127.0.0.1:1/0",
        )
        env.update(self.extra_env)
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [PY, str(ROOT / "manage.py"), "runrelay"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.data_dir / "relay.json").read_text())
        except (OSError, ValueError):
            return {}

    def serving(self) -> bool:
        return self.status().get("listening") is True

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def output(self) -> tuple[str, str]:
        return self.out.read_text(), self.err.read_text()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def client(self, role: str, station: str) -> Wire:
        wire = Wire((HOST, self.port))
        reply = wire.register(role, station)
        assert reply["type"] == "registered" and reply["epoch"] == EPOCH, reply
        return wire


@pytest.fixture
def relay_proc(tmp_path):
    proc = RelayProc(tmp_path)
    yield proc
    proc.kill()
    if proc.proc is not None:
        print("runrelay stdout/stderr:", *proc.output(), sep="\n")  # shown if the test failed


def _started(relay: RelayProc) -> None:
    relay.write_state()
    relay.start()
    wait_until(relay.serving, 20, "runrelay to write relay.json with listening true")


def test_it_serves_then_redirects_every_client_to_the_new_leader_and_exits(relay_proc):
    _started(relay_proc)
    status = relay_proc.status()
    assert status["pid"] == relay_proc.proc.pid and status["epoch"] == EPOCH
    agent, commander = relay_proc.client("agent", "S002"), relay_proc.client("commander", "C01")
    commander.send_frame({"type": "send", "to": "S002", "data": "ping", "id": 1})
    assert agent.frame()["data"] == "ping"
    both = {KMSN: {"S002": {"agent": 1}, "C01": {"commander": 1}}}
    wait_until(lambda: relay_proc.status()["snapshot"]["counts"] == both, 5, "relay.json to list them")
    assert relay_proc.status()["snapshot"]["relayed"]["messages"] == 1

    relay_proc.write_lease("S002", "127.0.0.32", 9530, EPOCH + 1)
    relay_proc.write_state(leader=False, epoch=EPOCH)
    expected = {"type": "leader_changed", "epoch": EPOCH + 1, "ip": "127.0.0.32", "port": 9530}
    for wire in (agent, commander):
        assert wire.frame() == expected
        assert wire.eof()
    assert relay_proc.wait(5) == 0
    final = relay_proc.status()
    assert final["listening"] is False and final["snapshot"]["connections"] == 0
    out, _ = relay_proc.output()
    assert "lost leadership" in out and "epoch=8 ip=127.0.0.32 port=9530" in out


def test_it_refuses_registration_once_the_renew_deadline_passes_before_it_exits(relay_proc):
    _started(relay_proc)
    wire = Wire((HOST, relay_proc.port))
    wire.greet()
    until = relay_proc.write_state(valid_for=1.0)
    # Freeze the relay so that its own watcher cannot get there first: the
    # register arrives after the deadline, and is the first thing it sees.
    relay_proc.proc.send_signal(signal.SIGSTOP)
    try:
        stat = Path(f"/proc/{relay_proc.proc.pid}/stat")
        wait_until(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T", 5, "the relay to stop")
        wait_until(lambda: time.monotonic() > until + 0.05, 5, "the renew deadline to pass")
        wire.send_frame(wire.register_frame("agent", "S002"))  # queued in the kernel until SIGCONT
    finally:
        relay_proc.proc.send_signal(signal.SIGCONT)
    reply = wire.frame()
    assert reply["type"] == "error" and reply["code"] == "not_leader", reply
    assert relay_proc.wait(5) == 0
    out, _ = relay_proc.output()
    assert "renew deadline" in out


def test_it_does_not_serve_when_not_leader_at_start(relay_proc):
    relay_proc.write_state(leader=False)
    relay_proc.start()
    assert relay_proc.wait(20) == 0
    out, _ = relay_proc.output()
    assert "is not the leader" in out and "not serving" in out
    assert not (relay_proc.data_dir / "relay.json").exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, relay_proc.port), timeout=2)


def test_it_says_leader_changed_with_nulls_and_exits_within_a_second_on_sigterm(relay_proc):
    _started(relay_proc)
    agent = relay_proc.client("agent", "S002")
    started = time.monotonic()
    relay_proc.proc.send_signal(signal.SIGTERM)
    assert agent.frame() == {"type": "leader_changed", "epoch": None, "ip": None, "port": None}
    assert relay_proc.wait(5) == 0
    assert time.monotonic() - started < 1.0


def test_it_exits_non_zero_with_one_clear_line_when_it_cannot_bind(relay_proc):
    squatter = socket.socket()
    squatter.bind((HOST, relay_proc.port + 1))
    squatter.listen()
    try:
        relay_proc.write_state()
        relay_proc.start()
        assert relay_proc.wait(20) != 0
    finally:
        squatter.close()
    _, err = relay_proc.output()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot listen" in lines[0] and str(relay_proc.port) in lines[0], err
