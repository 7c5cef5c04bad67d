"""The lease's timing keys and how they stand together (ADR 0011): the `timing` section.

Each key is first checked alone (a number, in range: E010/E011; that is also where a negative
`PROMOTION_HOLD` is refused). Then what no single key can say:

- `stkrelay.E007`: `LEASE_TTL` > `LEASE_RENEW`; `stkrelay.E008`: `LEASE_TTL` > `RENEW_DEADLINE` >
  `LEASE_RENEW` (the old leader must stop before anyone may take over, and allow at least one
  late renewal).
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

`BEACON_INTERVAL` <= `LEASE_RENEW` / 2 is E030 (`stkconfig.beacons`).
Each message names the key to change and a value that works.
"""

from __future__ import annotations

from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw

LEASE_KEYS = ("LEASE_TTL", "LEASE_RENEW", "LEASE_POLL", "RENEW_DEADLINE")


@dataclass(frozen=True)
class LeaseTiming:
    lease_ttl: float = 10.0
    lease_renew: float = 3.0
    lease_poll: float = 2.0
    renew_deadline: float = 7.0
    heartbeat_ttl: float = 10.0  # default: LEASE_TTL
    promotion_hold: float = 5.0
    lease_watch: float = 0.25
    share_timeout: float = 2.0  # one share operation; the gates read the renew deadline themselves


def parse(raw: Raw, known: object, bad: Bad) -> LeaseTiming:
    """The timing keys, each alone and then together; a bad one at its default."""
    d = LeaseTiming()
    lease = {key: raw.number(key, bad) for key in LEASE_KEYS}
    ttl = lease["LEASE_TTL"] or d.lease_ttl
    renew = lease["LEASE_RENEW"] or d.lease_renew
    poll = lease["LEASE_POLL"] or d.lease_poll
    deadline = lease["RENEW_DEADLINE"] or d.renew_deadline
    if None not in lease.values():
        _check_deadline(ttl, renew, deadline, bad)
    hb = raw.number("HEARTBEAT_TTL", bad) if raw.text("HEARTBEAT_TTL") else ttl
    hold = raw.number("PROMOTION_HOLD", bad)
    watch = raw.number("LEASE_WATCH", bad)
    share = raw.number("SHARE_TIMEOUT", bad)
    timing = LeaseTiming(
        lease_ttl=ttl, lease_renew=renew, lease_poll=poll, renew_deadline=deadline,
        heartbeat_ttl=hb if hb is not None else ttl,
        promotion_hold=hold if hold is not None else d.promotion_hold,
        lease_watch=watch if watch is not None else d.lease_watch,
        share_timeout=share if share is not None else d.share_timeout,
    )  # fmt: skip
    if None not in (*lease.values(), hb, watch):  # each valid alone: now how they stand together
        check_ratios(timing, bad)
    return timing


def _check_deadline(ttl: float, renew: float, deadline: float, bad: Bad) -> None:
    """E007/E008: LEASE_TTL > RENEW_DEADLINE > LEASE_RENEW."""
    if ttl <= renew:
        bad("stkrelay.E007", "LEASE_TTL", f"{ttl:g} must be greater than LEASE_RENEW={renew:g}",
            "e.g. LEASE_TTL=10 with LEASE_RENEW=3")  # fmt: skip
    if deadline >= ttl:
        bad("stkrelay.E008", "RENEW_DEADLINE", f"{deadline:g} must be less than LEASE_TTL={ttl:g}",
            "the old leader must stop before anyone may take over")  # fmt: skip
    if deadline <= renew:
        bad("stkrelay.E008", "RENEW_DEADLINE", f"{deadline:g} must be greater than LEASE_RENEW={renew:g}",
            "allow at least one late renewal")  # fmt: skip


def check_ratios(timing: LeaseTiming, bad: Bad) -> None:
    """E100–E103: every broken ratio of the timing keys (which are each valid alone)."""
    renew, poll, ttl, hb = timing.lease_renew, timing.lease_poll, timing.lease_ttl, timing.heartbeat_ttl
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
    if timing.lease_watch > poll:
        bad("stkrelay.E103", "LEASE_WATCH",
            f"{timing.lease_watch:g} must not exceed LEASE_POLL={poll:g}: the watch looks between polls",
            f"lower LEASE_WATCH to {min(0.25, poll):g}")  # fmt: skip
