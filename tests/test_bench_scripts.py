"""Every benchmark script still starts: its imports resolve and its arguments parse (``--help``).

The benches are not run by the suite (they take minutes), so a helper renamed in `tests/`
broke `bench/cloud_scale.py` unseen (it imported the removed ``cloudrig.pair_port``)."""

import subprocess
import sys

import pytest
from harness import ROOT

BENCHES = sorted((ROOT / "bench").glob("*.py"))


def test_there_are_benches():
    assert len(BENCHES) >= 10 and ROOT / "bench" / "cloud_scale.py" in BENCHES


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.name)
def test_a_bench_script_starts_and_parses_its_arguments(bench):
    out = subprocess.run([sys.executable, str(bench), "--help"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)  # fmt: skip
    assert out.returncode == 0 and "usage:" in out.stdout, out.stderr[-2000:]
