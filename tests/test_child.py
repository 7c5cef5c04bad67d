"""`python -m stkrelay.child`: the relay's Django-free children get their Config from the
composition root (real subprocesses, the environment as runagent gives it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOUND = {"STK_KMSN": "9999-9999-99-99", "STK_STATION": "S001", "STK_RELAY_TOKEN": "Zq8-child-test-token-5Kx",
         "STK_SKIP_DIR_CHECKS": "1"}  # fmt: skip


def _child(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env = {**clean, **SOUND, "STK_DATA_DIR": str(tmp_path), **env}
    return subprocess.run([sys.executable, "-m", "stkrelay.child", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_bad_configuration_stops_the_child_with_one_line_per_problem(tmp_path):
    done = _child(tmp_path, "relay.server.entry", STK_KMSN="", STK_LEASE_TTL="x")
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert "entry: config (environment): KMSN: is not set (stkrelay.E003)" in lines[0]
    assert any("LEASE_TTL: 'x' is not a number (stkrelay.E010)" in line for line in lines), lines


def test_the_entry_child_gets_the_loaded_config_and_an_unknown_child_is_refused(tmp_path):
    done = _child(tmp_path, "relay.server.entry")
    assert done.returncode == 0 and "S001 is no entry member (ENTRY = 0): nothing to do" in done.stdout, done
    refused = _child(tmp_path, "relay.server.relay_server")
    assert refused.returncode == 2 and "usage: python -m stkrelay.child" in refused.stderr
