"""schemathesis's default run, as an operator would type it (`schemathesis run URL`: every
phase — examples, coverage, fuzzing, stateful — and every check) against a live one-agent
site (a real `runagent` on loopback, daphne serving) with an operator's bearer token:
0 failures. Bounded by examples per operation (`-n`) and a fixed seed; the whole run takes
about a minute, in `make test` (issue 23: the contract is checked wherever a change is tested).
Its stateful phase pauses, drains and promotes: docs/panel.md "The API's contract" says where an
operator may run it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_openapi import live_api  # noqa: F401  (the fixture)

from elections.ports.local.webcert import CERT_NAME

EXAMPLES = 10


@pytest.mark.agents
def test_schemathesis_default_run_against_a_live_site_finds_no_failure(live_api, tmp_path):  # noqa: F811
    agent, auth = live_api
    exe = str(Path(sys.executable).parent / "schemathesis")
    bearer = f"Authorization: {auth['Authorization']}"
    argv = [exe, "run", f"{agent.web_url}/api/v1/openapi.json", "-H", bearer,
            "--tls-verify", str(agent.data_dir / CERT_NAME), "--max-examples", str(EXAMPLES), "--seed", "1",
            "--no-color", "--report-dir", str(tmp_path)]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    took = time.monotonic() - started
    summary = [line for line in done.stdout.splitlines() if re.match(r"=+ .* in [\d.]+s =+$", line)]
    print(*summary, sep="\n")
    assert done.returncode == 0, done.stdout[-15000:] + done.stderr[-3000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):  # every default phase ran and passed
        assert re.search(rf"✅ {phase}\b", done.stdout), (phase, done.stdout[-3000:])
    assert summary and not re.search(r"\d+ (failed|errors?)\b", summary[-1]), summary  # warnings allowed
    assert took < 180, took  # a generous bound: the run takes about a minute on 2 cores
