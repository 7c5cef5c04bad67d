"""The one retry helper and the one atomic write."""

import os
import random

import pytest

from stkhost.files import write_atomic
from stkhost.retry import Backoff, retry


def test_it_retries_until_the_call_succeeds_sleeping_the_backoff_in_between():
    slept, calls = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise PermissionError("held open")
        return "done"

    backoff = Backoff(tries=5, first=0.1, factor=2.0)
    assert retry(flaky, on=PermissionError, backoff=backoff, sleep=slept.append) == "done"
    assert slept == [0.1, 0.2] and len(calls) == 3


def test_it_reraises_the_last_error_when_the_tries_are_used_up():
    slept = []
    with pytest.raises(PermissionError):
        retry(lambda: (_ for _ in ()).throw(PermissionError("x")), on=PermissionError,
              backoff=Backoff(tries=3, first=0.05), sleep=slept.append)  # fmt: skip
    assert slept == [0.05, 0.05]


def test_it_never_retries_other_errors():
    calls = []

    def broken():
        calls.append(1)
        raise ValueError("not transient")

    with pytest.raises(ValueError):
        retry(broken, on=PermissionError, backoff=Backoff(tries=9), sleep=lambda s: None)
    assert calls == [1]


def test_the_backoff_is_capped_and_jittered_within_its_bounds():
    b = Backoff(tries=10, first=1.0, factor=2.0, cap=30.0, jitter=0.2)
    assert [b.delay(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    rng = random.Random(3)
    assert all(0.8 * b.delay(n) <= b.delay(n, rng) <= 1.2 * b.delay(n) for n in range(9))
    assert len(list(b.delays())) == 9


def test_an_atomic_write_replaces_the_file_and_leaves_no_temp_behind(tmp_path):
    target = tmp_path / "pool.json"
    target.write_text("old")
    write_atomic(target, b"new", tag="S001")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["pool.json"]


def test_an_atomic_write_never_writes_through_a_planted_link(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("precious")
    share = tmp_path / "share"
    share.mkdir()
    # Whatever temp name an attacker guesses, the write creates its own file
    # exclusively, and the target itself is replaced, not written through.
    (share / "relay_leader.json").symlink_to(outside)
    write_atomic(share / "relay_leader.json", b"lease")
    assert outside.read_text() == "precious"
    assert (share / "relay_leader.json").read_bytes() == b"lease" and not (
        share / "relay_leader.json"
    ).is_symlink()
