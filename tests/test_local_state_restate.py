"""leadership.json is written when the worker's claim says something new, and its `updated`
at least every `restate_every` (issue 41): a follower's cycle and a leader's cycle between two
renewals no longer rewrite it, and wake its readers, for nothing."""

from __future__ import annotations

from elections.ports.local.localstate import DEADLINE_NOISE, Leadership, LocalState


def _claim(updated: float, valid: float | None = 100.0, **kw) -> Leadership:
    return Leadership(node="S001", pid=1, leader=valid is not None, epoch=3 if valid is not None else None,
                      valid_until=valid, valid_until_boot=None if valid is None else valid + 7.0,
                      updated=updated, decision="leader: renewed", **kw)  # fmt: skip


def _written(tmp_path) -> float | None:
    return LocalState(tmp_path).leadership().updated


def test_the_same_claim_is_written_again_only_after_restate_every(tmp_path):
    local = LocalState(tmp_path)
    assert local.publish_leadership(_claim(10.0), restate_every=2.0).updated == 10.0
    held = local.publish_leadership(_claim(11.0), restate_every=2.0)
    assert held.updated == 10.0 and _written(tmp_path) == 10.0  # nothing new: not written
    assert local.publish_leadership(_claim(12.0), restate_every=2.0).updated == 12.0
    assert _written(tmp_path) == 12.0  # restated: /healthz sees a worker that writes


def test_any_change_but_updated_is_written_at_once(tmp_path):
    local = LocalState(tmp_path)
    local.publish_leadership(_claim(10.0), restate_every=2.0)
    local.publish_leadership(_claim(10.1, seen=("S001", 3, 8)), restate_every=2.0)
    assert LocalState(tmp_path).leadership().seen == ("S001", 3, 8)
    local.publish_leadership(_claim(10.2, valid=None), restate_every=2.0)  # stepped down
    assert LocalState(tmp_path).leadership().leader is False


def test_a_deadline_moved_later_is_written_and_one_moved_earlier_however_little_too(tmp_path):
    local = LocalState(tmp_path)
    local.publish_leadership(_claim(10.0, valid=100.0), restate_every=2.0)
    local.publish_leadership(_claim(10.1, valid=100.2), restate_every=2.0)  # a gate step
    assert LocalState(tmp_path).leadership().valid_until == 100.2
    local.publish_leadership(_claim(10.2, valid=100.2 - 1e-9), restate_every=2.0)  # earlier: news
    assert LocalState(tmp_path).leadership().valid_until == 100.2 - 1e-9
    # Later by less than the noise of two float readings of one deadline: the earlier one stands.
    held = local.publish_leadership(_claim(10.3, valid=100.2 - 1e-9 + DEADLINE_NOISE / 2), restate_every=2.0)
    assert held.valid_until == 100.2 - 1e-9 and _written(tmp_path) == 10.2


def test_a_file_another_writer_replaced_is_written_again(tmp_path):
    local = LocalState(tmp_path)
    local.publish_leadership(_claim(10.0), restate_every=2.0)
    LocalState(tmp_path).disclaim("left by an earlier run of this agent")  # the supervisor's write
    assert LocalState(tmp_path).leadership().leader is False
    local.publish_leadership(_claim(10.5), restate_every=2.0)
    assert LocalState(tmp_path).leadership().leader is True
