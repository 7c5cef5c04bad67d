"""The third round's mutants of the pool's model (issue 37; docs/serving-right.md "The model,
checked by SPIN"): each hole SPIN found at a third epoch put back must give a trail, so a model
that has gone blind fails. Each search takes minutes (`verify/check.sh mutants NAME`, with its
bound), so they are `long`, in a file apart from tests/test_spin_model.py's: `make long`'s two
workers take whole files, and share the searches so."""

from __future__ import annotations

import pytest
from test_spin_model import errors, run, trail

pytestmark = pytest.mark.long

# The lockless renewal's two holes (a rename landing over a claim, then a third epoch). (Rule 7b's
# `NO_GONE_LOK_CHECK` gives no trail once rule 7's guard is in: docs/serving-right.md.)
DEEP = ("NO_STALE_ALIVE", "NO_STALE_LOK")


@pytest.mark.parametrize("mutant", DEEP)
@pytest.mark.timeout(1900)
def test_each_third_round_hole_put_back_gives_spin_a_counterexample_trail(mutant):
    out = run("mutants", mutant, timeout=1800, extra={"CC_OPT": "-O1"})
    assert errors(out) >= 1, out
    assert "assertion violated" in out, out
    assert trail(out) > 0


@pytest.mark.timeout(1000)
def test_rule_7b_as_proposed_is_refuted_by_a_forger_of_evidence_of_death():
    """Rule 7b (a takeover on evidence of death in `lease` mode when the dead holder's newest
    beacon said `lok`; `-DGONE_LOK`, not built: docs/serving-right.md "Found by SPIN, fourth
    round"), evidence forged while the holder lives (`-DFORGED_GONE`), and only of a holder heard
    serving by acks (`-DGONE_ACKS_ONLY`): SPIN must find two gates (the holder's by its acks and
    renew deadline, the taker's by the lease). Without `-DGONE_LOK` the same world has no trail."""
    out = run("one", "-DMAXE=2", "-DMAXF=0", "-DFORGED_GONE", "-DGONE_ACKS_ONLY", "-DGONE_LOK", "-DSYM",
              "-DHC4", timeout=900, extra={"CC_OPT": "-O1"})  # fmt: skip
    assert errors(out) >= 1, out
    assert "assertion violated" in out, out
    assert trail(out) > 0
