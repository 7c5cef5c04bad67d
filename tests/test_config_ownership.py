"""The ownership keys (stkconfig/ownership.py): defaults, and each bad value refused with its id."""

import pytest
from test_config import problems, write_ini

from stkrelay.config import load


def test_the_defaults_look_every_2_s_hold_one_ttl_and_repair(tmp_path):
    cfg = load(str(write_ini(tmp_path)), env={})
    assert cfg.problems == []
    assert (cfg.ownership_check, cfg.ownership_hold, cfg.ownership_repair) == (2.0, 10.0, True)


def test_zero_switches_the_look_off_and_good_values_load(tmp_path):
    cfg = load(
        str(write_ini(tmp_path, OWNERSHIP_CHECK="0", OWNERSHIP_HOLD="7", OWNERSHIP_REPAIR="off")), env={}
    )
    assert cfg.problems == []
    assert (cfg.ownership_check, cfg.ownership_hold, cfg.ownership_repair) == (0.0, 7.0, False)


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"OWNERSHIP_CHECK": "fast"}, ("stkrelay.E120", "OWNERSHIP_CHECK")),
        ({"OWNERSHIP_CHECK": "0.1"}, ("stkrelay.E120", "OWNERSHIP_CHECK")),
        ({"OWNERSHIP_CHECK": "301"}, ("stkrelay.E120", "OWNERSHIP_CHECK")),
        ({"OWNERSHIP_HOLD": "soon"}, ("stkrelay.E121", "OWNERSHIP_HOLD")),
        ({"OWNERSHIP_HOLD": "6.9"}, ("stkrelay.E121", "OWNERSHIP_HOLD")),  # < RENEW_DEADLINE 7
        ({"OWNERSHIP_HOLD": "86401"}, ("stkrelay.E121", "OWNERSHIP_HOLD")),
        ({"OWNERSHIP_REPAIR": "maybe"}, ("stkrelay.E122", "OWNERSHIP_REPAIR")),
    ],
)
def test_each_bad_ownership_value_is_refused_with_its_id(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert problems(cfg) == {expected}
    [p] = cfg.problems
    assert over.popitem()[0] in p.line() and p.hint


def test_the_hold_follows_the_lease_ttl_and_the_fast_test_profile_passes(tmp_path):
    from harness import FAST

    cfg = load(str(write_ini(tmp_path, **FAST)), env={})
    assert cfg.problems == [] and cfg.ownership_hold == 3.0
