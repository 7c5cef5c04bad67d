"""`ShareDeadline` (elections.ports.share.sharefiles): one share operation at a time, each
caller bounded by the timeout, and every caller failing at once while one is hung —
also a caller that was already queued when the operation it waits behind became hung."""

from __future__ import annotations

import threading
import time

import pytest
from harness import wait_until

from elections.errors import StoreUnavailable
from elections.ports.share.sharefiles import ShareDeadline

TIMEOUT = 1.0


@pytest.fixture
def gate_and_release():
    gate, release = ShareDeadline(TIMEOUT, name="test"), threading.Event()
    yield gate, release
    release.set()  # the hung operation ends, and its thread with it


def start_hung(gate: ShareDeadline, release: threading.Event) -> threading.Thread:
    """A caller whose operation hangs until `release` (the caller gives up after the timeout)."""
    running = threading.Event()

    def hang() -> None:
        running.set()
        release.wait(30)

    def caller() -> None:
        try:
            gate.run(hang)
        except StoreUnavailable:
            pass

    t = threading.Thread(target=caller, daemon=True)
    t.start()
    assert running.wait(5), "the operation never started"
    return t


def test_a_caller_queued_behind_an_operation_that_becomes_hung_fails_when_it_does(gate_and_release):
    gate, release = gate_and_release
    began = time.monotonic()
    start_hung(gate, release)
    time.sleep(0.4 * TIMEOUT)  # the second caller arrives while the first is not yet hung
    queued = time.monotonic()
    with pytest.raises(StoreUnavailable, match="hung"):
        gate.run(lambda: "never run")
    took, hung_at = time.monotonic() - queued, time.monotonic() - began
    # It fails as the first operation passes the timeout (~0.6 s after it queued), not a
    # whole timeout of its own later (1.0 s).
    assert took < 0.9 * TIMEOUT and hung_at < 1.5 * TIMEOUT, (took, hung_at)
    with pytest.raises(StoreUnavailable, match="hung"):  # and callers after it, at once
        t0 = time.monotonic()
        gate.run(lambda: "never run")
    assert time.monotonic() - t0 < 0.2


def test_a_caller_queued_behind_a_slow_operation_that_ends_in_time_is_run(gate_and_release):
    gate, release = gate_and_release
    worker = start_hung(gate, release)
    threading.Timer(0.3 * TIMEOUT, release.set).start()  # the first ends before it counts as hung
    assert gate.run(lambda: "ran") == "ran"
    worker.join(5)


def test_an_operation_cancelled_in_the_queue_is_never_run(gate_and_release):
    gate, release = gate_and_release
    start_hung(gate, release)
    ran = threading.Event()
    with pytest.raises(StoreUnavailable):
        gate.run(ran.set)
    release.set()

    def answers() -> bool:
        try:
            return gate.run(lambda: "next") == "next"
        except StoreUnavailable:
            return False

    wait_until(answers, 5, "the gate to run operations again once the hung one ended")
    assert not ran.is_set()
