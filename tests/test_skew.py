"""Clock readings (`elections.core.skew`): from a timed window, from a heartbeat
(anything malformed is no reading), and one member against another through the store."""

import math

import pytest

from elections.core.skew import ClockReading, describe, from_window, reading_of, versus


def test_a_window_around_a_timed_event_gives_the_offset_and_its_error():
    r = from_window(100.0, 100.2, 70.1, 0.0, "file server")
    assert (round(r.offset_s, 6), round(r.error_s, 6)) == (30.0, 0.1)
    r = from_window(100.0, 100.2, 100.0, 1.0, "etcd")  # an HTTP Date: the second, truncated
    assert (round(r.offset_s, 6), round(r.error_s, 6)) == (-0.4, 0.6)
    assert from_window(100.0, 99.0, 100.0, 0.0, "etcd") is None  # the clock went back during the call
    assert from_window(math.nan, 1.0, 1.0, 0.0, "etcd") is None
    assert from_window(0.0, 0.0, 1e12, 0.0, "etcd") is None


@pytest.mark.parametrize(
    "clock",
    [None, "fast", [], {"offset_s": True, "error_s": 0.1, "against": "etcd"},
     {"offset_s": 1.0, "error_s": -1, "against": "etcd"},
     {"offset_s": 1e300, "error_s": 0, "against": "etcd"},
     {"offset_s": float("nan"), "error_s": 0, "against": "etcd"}, {"offset_s": 1.0, "error_s": 0.1},
     {"offset_s": 1.0, "error_s": 0.1, "against": "the moon"}],
)  # fmt: skip
def test_a_malformed_heartbeat_clock_is_no_reading(clock):
    assert reading_of({"clock": clock}) is None


def test_two_members_are_compared_through_the_store_they_both_read():
    a = reading_of({"clock": {"offset_s": 2.5, "error_s": 0.1, "against": "file server"}})
    b = ClockReading(-0.5, 0.2, "file server")
    diff, error = versus(a, b)
    assert (round(diff, 6), round(error, 6)) == (3.0, 0.3)
    assert versus(a, ClockReading(0.0, 0.1, "etcd")) is None and versus(None, b) is None
    assert describe(a) == "+2.50 s (±0.10) vs the file server" and describe(None) == "not measured"
