"""The third round's mutants of the pool's model (issue 37; docs/serving-right.md "The model,
checked by SPIN"): each hole SPIN found at a third epoch put back must give a trail, so a model
that has gone blind fails. Each search takes minutes (`verify/check.sh mutants NAME`, with its
bound), so they are `long`, in a file apart from tests/test_spin_model.py's: `make long`'s two
workers take whole files, and share the searches so."""

from __future__ import annotations

import pytest
from test_spin_model import errors, run, trail

pytestmark = pytest.mark.long

# The lockless renewal's two holes (a rename landing over a claim, then a third epoch), and the
# takeover on evidence of death served by the lease beside an older leader (rule 7).
DEEP = ("NO_STALE_ALIVE", "NO_STALE_LOK", "NO_GONE_ACKED")


@pytest.mark.parametrize("mutant", DEEP)
@pytest.mark.timeout(1900)
def test_each_third_round_hole_put_back_gives_spin_a_counterexample_trail(mutant):
    out = run("mutants", mutant, timeout=1800, extra={"CC_OPT": "-O1"})
    assert errors(out) >= 1, out
    assert "assertion violated" in out, out
    assert trail(out) > 0
