"""`make run` (scripts/demo.py): the panels on the fixed ports 8001-8003, each replaced by
a free one only when it is busy on its agent's loopback address."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from harness import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import demo


def test_the_demo_uses_the_fixed_ports_when_they_are_free():
    assert demo.WEB_PORTS == (8001, 8002, 8003)
    free = [p for i, p in enumerate(demo.WEB_PORTS) if demo.port_free(f"127.0.0.{demo.FIRST_IP + i}", p)]
    assert [p for p in demo.web_ports() if p in demo.WEB_PORTS] == free


def test_a_busy_port_is_replaced_by_a_free_one_on_the_same_loopback_address():
    with socket.socket() as busy:
        busy.bind(("127.0.0.42", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = demo.web_ports(first_ip=42, wanted=(taken,))
        assert ports[0] != taken and demo.port_free("127.0.0.42", ports[0])
        assert demo.web_ports(first_ip=43, wanted=(taken,)) == [taken]  # free on the next address


def test_the_demo_names_no_wildcard_address():
    # What a running agent listens on is checked live in test_install.py (its own loopback address only).
    source = (ROOT / "scripts" / "demo.py").read_text() + (ROOT / "tests" / "harness.py").read_text()
    assert "0.0.0.0" not in source and "::" not in source.replace("::1", "")


@pytest.mark.long
def test_make_run_says_each_agent_as_it_starts_and_as_it_is_up_then_stops_on_ctrl_c(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        env=dict(os.environ, STK_DEMO_DIR=str(tmp_path / "demo")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            # the watch loop's own line, not an agent's "up after ... (hold: leader: ...)"
            if re.match(r"\S+  leader: ", line):
                break
        text = "\n".join(lines)
        for name in ("S001", "S002", "S003"):
            assert f"{name}: starting (pid " in text, text
            assert re.search(rf"^{name}: up after [0-9.]+ s", text, re.M), text
        started = [i for i, ln in enumerate(lines) if ": starting (pid " in ln]
        up = [i for i, ln in enumerate(lines) if ": up after " in ln]
        assert max(started) < min(up), text  # every start is said before the first wait
        assert "watching the lease" in text and re.match(r"\S+  leader: ", lines[-1]), text
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, "\n".join(lines)
