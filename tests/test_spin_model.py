"""The pool's model checked by SPIN (`verify/pool.pml`, docs/serving-right.md "The model, checked by SPIN"):
the model's search finds no error at the CI bound, every rule switched off gives a
counterexample trail (a model that has gone blind fails here), and the constants the
model's inequalities stand for are the code's.

Each search is a real `spin -a`, `gcc` and `pan` run (`verify/check.sh one`), niced; the
breadth-first mutant searches print the shortest trail. The cheap ones run in `make test`,
the whole table in `make long` (and `make verify`, which prints SPIN's own output).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from elections.core.decide import Timing
from elections.core.serving import DRIFT, GATE_LAG, MIN_MEMBERS, ServingTiming, majority

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "verify" / "pool.pml"
CHECK = ROOT / "verify" / "check.sh"

# Every rule switched off, one at a time, and the three holes of issue 22's last round put back
# (`verify/check.sh` gives each its bound). In `make test`: those found in seconds; the rest `long`.
# Rule 7 and its guard, in the forger's world (-DFORGED_GONE: evidence of death while the holder
# lives, design §13's on-path writer of TCP resets): a trail each in seconds.
FAST = ("NO_FENCE", "NO_R3E", "NO_GONE_ACKED", "NO_GONE_ACKS_ONLY")
LONG = ("NO_START_QUIET", "NO_R2_TOLD", "NO_R3A", "SHORT_S", "NO_R5", "NO_R2_ACKS", "NO_R1_STICKY",
        "NO_R1_STEPDOWN", "NO_R1_SELF")  # fmt: skip
# Trails for these since issue 37's second round (the search exhaustive, with symmetry). NO_R3B is
# liveness's rule, not safety's (rule 5 alone keeps the taker's gate shut): no trail expected.
# NO_R3D and NO_BLIND give none at epochs <= 2 with two faults, searched exhaustively (README).
HOSTILE = ("NO_R4_LOK", "NO_R6_LOK", "NO_VOUCH")
# The third round's mutants (a third epoch, 2-8 min each) are in tests/test_spin_model_deep.py, a
# file of their own so that `make long`'s two workers (whole files each) share the searches.
MUTANTS = FAST + LONG + HOSTILE


def run(*args: str, timeout: float = 900, extra: dict[str, str] | None = None) -> str:
    """`verify/check.sh` (SPIN, gcc and pan, niced); SPIN's own output. `extra`: its settings
    (bounds, `CC_OPT` for a long search) from the environment."""
    env = {**os.environ, "CC_OPT": "-O0", **(extra or {})}  # a short search: an unoptimized compile
    done = subprocess.run([str(CHECK), *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def errors(out: str) -> int:
    found = re.search(r"errors: (\d+)", out)
    assert found, f"pan said nothing of errors:\n{out}"
    return int(found.group(1))


def trail(out: str) -> int:
    found = re.search(r"trail: (\d+) steps", out)
    assert found, f"no trail written:\n{out}"
    return int(found.group(1))


@pytest.mark.parametrize(
    "mutant", [pytest.param(m, marks=() if m in FAST else pytest.mark.long) for m in MUTANTS]
)
@pytest.mark.timeout(1900)  # pan's searches of the long ones take minutes on a shared machine
def test_each_rule_switched_off_gives_spin_a_counterexample_trail(mutant):
    out = run("mutants", mutant, timeout=1800, extra=None if mutant in FAST else {"CC_OPT": "-O1"})
    assert errors(out) >= 1, out
    assert "assertion violated" in out, out
    assert trail(out) > 0


@pytest.mark.long
@pytest.mark.timeout(1600)
def test_the_rules_as_built_give_no_error_at_the_ci_bound():
    """Every run of the model at the CI bound (`verify/check.sh ci`, exhaustive), and every run of
    the forger's world: no assertion fails."""
    out = run("ci", timeout=1500, extra={"CC_OPT": "-O1"})
    assert "assertion violated" not in out, out
    assert re.findall(r"errors: (\d+)", out) == ["0", "0"], out


@pytest.mark.long
@pytest.mark.timeout(960)
def test_liveness_l1_too_short_a_bound_gives_a_trail():
    """L1 (`-DLIVE`, `verify/check.sh live LB`): a gate open LB ticks after the last crash or start,
    in a world that delivers. Two ticks are fewer than a takeover needs after the leader's crash
    (the TTL is three): SPIN must find the run, or the liveness check has gone blind."""
    out = run("live", "2", extra={"LIVE_BOUND": "-DMAXE=3 -DMAXF=1"})
    assert errors(out) >= 1, out
    assert "assertion violated" in out, out


def defines() -> dict[str, int]:
    text = MODEL.read_text()
    # the constants outside any mutant's #ifdef (SHORT_S redefines S_LO only under its flag)
    plain = re.sub(r"#ifdef SHORT_S.*?#else", "", text, flags=re.S)
    return {k: int(v) for k, v in re.findall(r"^#define (\w+) (\d+)\b", plain, flags=re.M)}


def test_the_models_inequalities_are_strict_and_the_codes_constants_meet_them():
    d = defines()
    # The model (in ticks, A2): switching leader comes after the longest gate by acks; a TTL
    # after the longest renew deadline; lease_ok_at after it too; the blind gap in between.
    assert d["S_LO"] > d["W_HI"]
    assert d["TTL_LO"] > d["RD_HI"]
    assert d["LOK_LO"] > d["RD_HI"]
    assert d["BG"] == d["TTL_LO"] - d["RD_HI"] - 1
    # The code (seconds, rho = DRIFT): the same inequalities, S on the slowest clock against
    # W + GATE_LAG on the fastest, with a jittered interval to spare (docs/serving-right.md's argument).
    t = ServingTiming.of(0.2)
    # (S_LO > W_HI: W_HI is W on the fastest clock plus the relay's last byte; a beacon
    # interval is left to spare, the jitter's 1.2 of it at most partly, divided by 1 + rho)
    assert t.silence / (1 + DRIFT) > t.window / (1 - DRIFT) + GATE_LAG + t.interval
    lease = Timing()
    assert lease.ttl / (1 + DRIFT) > lease.deadline / (1 - DRIFT)
    # lease_ok_at: TTL (1+rho)/(1-rho) on the taker's clock is at least TTL/(1-rho) of real time
    assert lease.ttl * (1 + DRIFT) / (1 - DRIFT) / (1 + DRIFT) > lease.deadline / (1 - DRIFT)
    assert lease.blind_after == lease.ttl - lease.deadline
    assert t.silence < lease.ttl  # E130
    # A6: three members, a majority of two (the model's `ackok`)
    assert MIN_MEMBERS == 3 and majority(3) == 2


# -- the pool of two and the share's witness (verify/witness.pml under -DWITNESS, issue 38) ----------
WITNESS_MUTANTS = ("NO_WAIT", "BLIND_REFRESH", "SHORT_D", "NO_ENTRY_CAS", "NO_STEPDOWN_V", "UNRELY_EARLY")


@pytest.mark.parametrize("mutant", WITNESS_MUTANTS)
def test_each_witness_rule_switched_off_gives_spin_a_counterexample_trail(mutant):
    """No wait after a claim over a relied-on record, a refresh that does not check the claim,
    D no longer than V, an entry over a record that is not its own, a stepped-down leader
    acking within its witness window: each gives two open gates (breadth-first, epochs <= 2)."""
    out = run("witness-mutants", mutant)
    assert errors(out) >= 1, out
    assert "assertion violated" in out, out
    assert trail(out) > 0


@pytest.mark.long
@pytest.mark.timeout(1600)
def test_the_witness_rules_as_built_give_no_error_in_an_exhaustive_search():
    """Two members and the witness, every state of the bound (`verify/check.sh witness`:
    breadth-first, no depth cut, no hash compaction): no assertion fails."""
    out = run("witness", timeout=1500)
    assert "assertion violated" not in out, out
    assert "Search not completed" not in out, out
    assert errors(out) == 0, out


def witness_defines() -> dict[str, int]:
    text = (ROOT / "verify" / "witness.pml").read_text()
    plain = re.sub(r"#ifdef SHORT_D.*?#else", "", text, flags=re.S)
    return {k: int(v) for k, v in re.findall(r"^#define (\w+) (\d+)\b", plain, flags=re.M)}


def test_the_witness_models_inequalities_are_strict_and_the_codes_constants_meet_them():
    from elections.core.witness import WitnessTiming

    d = witness_defines()
    assert d["D_LO"] > d["V_HI"]  # the claimant's wait outlasts the longest witness window
    assert d["S_LO"] > d["W_HI"] and d["TTL_LO"] > d["RD_HI"]
    t = WitnessTiming.of(0.2)
    # D on the claimant's fastest clock against V on the holder's slowest, plus the relay's lag
    assert t.wait / (1 + DRIFT) >= t.window / (1 - DRIFT) + GATE_LAG
    assert t.silence + t.wait < Timing().ttl  # E130's bound holds with the wait too
