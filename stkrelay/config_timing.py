"""The ratios between the timing keys that the election relies on (ADR 0011).

Each key is first checked alone by `config.load` (a number, in range: E010/E011;
that is also where a negative `PROMOTION_HOLD` is refused). What is checked
here is what no single key can say:

- `stkrelay.E100`: `HEARTBEAT_TTL` >= 2 x `LEASE_RENEW`. Every member writes its
  heartbeat each `LEASE_RENEW` and a judge times it from when it *saw* the seq
  change, so a live member routinely looks up to one renew interval old, plus
  the judge's own read interval: with less than two intervals of margin one
  late write makes a live member stale, and the pool flaps.
- `stkrelay.E101`: `HEARTBEAT_TTL` >= `LEASE_RENEW` + `LEASE_POLL`: the same,
  for a judge that polls slower than members renew.
- `stkrelay.E102`: `LEASE_POLL` < `LEASE_TTL` / 2: a follower must look at a
  lease at least twice within its TTL, or an expired lease waits out a whole
  poll before anyone contends (and a handoff would lapse unread).
- `stkrelay.E103`: `LEASE_WATCH` <= `LEASE_POLL`: the cheap look exists to come
  *between* polls (a drain or a promote acts at once); slower, it never does.

`LEASE_TTL` > `RENEW_DEADLINE` > `LEASE_RENEW` is E007/E008 in `config.load`,
and `BEACON_INTERVAL` <= `LEASE_RENEW` / 2 is E030 (`config_beacons`).
Each message names the key to change and a value that works.
"""

from __future__ import annotations

from typing import Protocol

from stkconfig.bad import Bad


class TimingKeys(Protocol):
    lease_ttl: float
    lease_renew: float
    lease_poll: float
    heartbeat_ttl: float
    lease_watch: float


def check(cfg: TimingKeys, bad: Bad) -> None:
    """Report every broken ratio of `cfg`'s timing keys (which are each valid alone)."""
    renew, poll, ttl, hb = cfg.lease_renew, cfg.lease_poll, cfg.lease_ttl, cfg.heartbeat_ttl
    if hb < 2 * renew:
        bad("stkrelay.E100", "HEARTBEAT_TTL",
            f"{hb:g} must be at least 2 x LEASE_RENEW={renew:g}: live members would be judged stale",
            f"raise HEARTBEAT_TTL (default: LEASE_TTL) to {2 * renew:g} or more, or lower LEASE_RENEW",
        )  # fmt: skip
    elif hb < renew + poll:
        bad("stkrelay.E101", "HEARTBEAT_TTL",
            f"{hb:g} must be at least LEASE_RENEW + LEASE_POLL={renew + poll:g}: a judge reads heartbeats "
            "only that often", f"raise HEARTBEAT_TTL to {renew + poll:g} or more (or lower LEASE_POLL)",
        )  # fmt: skip
    if poll >= ttl / 2:
        bad("stkrelay.E102", "LEASE_POLL",
            f"{poll:g} must be less than half of LEASE_TTL={ttl:g}: followers would miss an expiry by a poll",
            f"lower LEASE_POLL below {ttl / 2:g} (or raise LEASE_TTL)")  # fmt: skip
    if cfg.lease_watch > poll:
        bad("stkrelay.E103", "LEASE_WATCH",
            f"{cfg.lease_watch:g} must not exceed LEASE_POLL={poll:g}: the watch looks between polls",
            f"lower LEASE_WATCH to {min(0.25, poll):g}")  # fmt: skip
