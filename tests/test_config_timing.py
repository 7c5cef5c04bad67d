"""The timing keys stand together (E007/E008, E011, E030, E100-E103) and the gate keys
(E104-E108) are checked at start: each bad combination is refused with its id and a
message naming the key to change; today's defaults and the test harness's FAST
profile pass."""

import os

import pytest
from harness import DEFAULT, FAST
from test_config import problems, run_agent, write_ini

from stkrelay.config import load


@pytest.mark.parametrize("profile", [DEFAULT, FAST, {}], ids=["default", "fast", "built-in"])
def test_todays_defaults_and_the_fast_profile_pass(tmp_path, profile):
    cfg = load(str(write_ini(tmp_path, **profile)), env={})
    assert cfg.problems == []


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"HEARTBEAT_TTL": "0.5"}, ("stkrelay.E100", "HEARTBEAT_TTL")),  # the example: renew 3
        ({"HEARTBEAT_TTL": "5.9"}, ("stkrelay.E100", "HEARTBEAT_TTL")),
        ({**FAST, "HEARTBEAT_TTL": "1.5"}, ("stkrelay.E100", "HEARTBEAT_TTL")),
        ({"LEASE_TTL": "5", "RENEW_DEADLINE": "4"}, ("stkrelay.E100", "HEARTBEAT_TTL")),  # = LEASE_TTL
        ({"HEARTBEAT_TTL": "6", "LEASE_POLL": "4"}, ("stkrelay.E101", "HEARTBEAT_TTL")),
        ({"LEASE_POLL": "5"}, ("stkrelay.E102", "LEASE_POLL")),
        ({**FAST, "LEASE_POLL": "1.5"}, ("stkrelay.E102", "LEASE_POLL")),
        ({"LEASE_WATCH": "2.5"}, ("stkrelay.E103", "LEASE_WATCH")),
        ({"PROMOTION_HOLD": "-1"}, ("stkrelay.E011", "PROMOTION_HOLD")),
        ({"LEASE_TTL": "3"}, ("stkrelay.E007", "LEASE_TTL")),  # LEASE_TTL > LEASE_RENEW
        ({"RENEW_DEADLINE": "10"}, ("stkrelay.E008", "RENEW_DEADLINE")),  # < LEASE_TTL
        ({"RENEW_DEADLINE": "3"}, ("stkrelay.E008", "RENEW_DEADLINE")),  # > LEASE_RENEW
        ({"BEACON_INTERVAL": "1.6"}, ("stkrelay.E030", "BEACON_INTERVAL")),  # <= LEASE_RENEW / 2
    ],
)
def test_each_bad_timing_combination_is_refused_with_its_id(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert expected in problems(cfg), [p.line() for p in cfg.problems]
    line = next(p.line() for p in cfg.problems if (p.id, p.key) == expected)
    assert line.startswith(f"{expected[1]}: "), line  # the key to change leads the line


def test_timing_messages_say_what_to_set(tmp_path):
    cfg = load(str(write_ini(tmp_path, HEARTBEAT_TTL="0.5")), env={})
    (p,) = cfg.problems
    assert "2 x LEASE_RENEW=3" in p.message and "to 6 or more" in p.hint
    cfg = load(str(write_ini(tmp_path, LEASE_POLL="6")), env={})
    (p,) = cfg.problems
    assert "half of LEASE_TTL=10" in p.message and "below 5" in p.hint


def test_a_bad_key_alone_is_not_reported_again_as_a_bad_ratio(tmp_path):
    cfg = load(str(write_ini(tmp_path, HEARTBEAT_TTL="soon")), env={})
    assert problems(cfg) == {("stkrelay.E010", "HEARTBEAT_TTL")}


def test_runagent_refuses_a_heartbeat_ttl_that_would_make_live_members_flap(tmp_path):
    out = run_agent(write_ini(tmp_path, HEARTBEAT_TTL="0.5"))
    assert out.returncode == 2
    assert "HEARTBEAT_TTL: 0.5 must be at least 2 x LEASE_RENEW=3" in out.stderr
    assert "(stkrelay.E100)" in out.stderr and "Traceback" not in out.stderr


# -- the gate keys ---------------------------------------------------------------------


def test_gate_keys_load(tmp_path):
    cfg = load(str(write_ini(tmp_path, GATE_CMD="ip -4 -o addr show to '10.0.0.1'")), env={})
    assert cfg.problems == [] and cfg.gate.cmd == ("ip", "-4", "-o", "addr", "show", "to", "10.0.0.1")
    gate = tmp_path / "gate"
    cfg = load(str(write_ini(tmp_path, GATE_FILE=str(gate), GATE_MAX_AGE="5", GATE_TIMEOUT="0.5")), env={})
    assert cfg.problems == []
    assert (cfg.gate.file, cfg.gate.max_age, cfg.gate.timeout, cfg.gate.cmd) == (str(gate), 5, 0.5, ())
    assert not load(str(write_ini(tmp_path)), env={}).gate.configured


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"GATE_CMD": "no-such-program-here --check"}, ("stkrelay.E104", "GATE_CMD")),
        ({"GATE_CMD": "check 'unclosed"}, ("stkrelay.E104", "GATE_CMD")),
        ({"GATE_FILE": "run/gate"}, ("stkrelay.E105", "GATE_FILE")),
        ({"GATE_FILE": "/no/such/folder/gate"}, ("stkrelay.E105", "GATE_FILE")),
        ({"GATE_FILE": "/tmp/gate", "GATE_CMD": "true"}, ("stkrelay.E106", "GATE_CMD")),
        ({"GATE_CMD": "true", "GATE_TIMEOUT": "3.5"}, ("stkrelay.E107", "GATE_TIMEOUT")),
        ({"GATE_CMD": "true", "GATE_TIMEOUT": "0"}, ("stkrelay.E011", "GATE_TIMEOUT")),
        ({"GATE_CMD": "true", "GATE_MAX_AGE": "10"}, ("stkrelay.E108", "GATE_MAX_AGE")),
        ({"GATE_FILE": "/tmp/gate", "GATE_MAX_AGE": "1"}, ("stkrelay.E108", "GATE_MAX_AGE")),
    ],
)
def test_each_bad_gate_setting_is_refused_with_its_id(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert expected in problems(cfg), [p.line() for p in cfg.problems]


def test_a_gate_from_the_environment_is_checked_too(tmp_path):
    ini = write_ini(tmp_path)
    cfg = load(str(ini), env={"STK_GATE_FILE": "relative"})
    assert ("stkrelay.E105", "GATE_FILE") in problems(cfg)
    assert os.path.isabs(load(str(ini), env={"STK_GATE_FILE": str(tmp_path / "g")}).gate.file)
