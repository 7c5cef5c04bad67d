"""The relay runner's reads of the share off its loop (`relay.runner.lease_reads`): a read
past its deadline is given up, and its late answer is dropped quietly."""

from __future__ import annotations

import asyncio
import threading

import pytest
from test_config import write_ini

from relay.runner.gate import LeadershipGate
from relay.runner.lease_reads import PoolReads
from stkrelay.config import load


def test_a_read_past_its_deadline_is_given_up_and_its_late_answer_is_no_traceback(tmp_path, monkeypatch):
    # A hung share answering after the relay stopped waiting: the thread's answer met a
    # cancelled future (InvalidStateError, a traceback in the relay's log in make chaos).
    crashed: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args.exc_value))
    stk = load(str(write_ini(tmp_path)), env={})
    reads = PoolReads(stk, 1, LeadershipGate(stk.data_dir, 1))
    release, answered = threading.Event(), threading.Event()

    def hung(store):  # type: ignore[no-untyped-def]
        release.wait(10)
        answered.set()
        return "late"

    with pytest.raises(TimeoutError):
        asyncio.run(reads.off_loop(hung, within=0.05))
    release.set()
    assert answered.wait(10), "the hung read never answered"
    for thread in [t for t in threading.enumerate() if t.name == "lease-read"]:
        thread.join(10)
    assert crashed == []
    assert asyncio.run(reads.off_loop(lambda store: "on time", within=5)) == "on time"
