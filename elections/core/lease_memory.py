"""What one node remembers of the lease between cycles, and how one read folds in.

`track(memory, read, now, default_ttl, max_gap)` restarts the expiry timer when
the (holder, epoch, renew_seq) this node sees changes, on its own monotonic
clock (client-go's way: another machine's `lease_until` is never read), or when
a read that is no evidence ends a gap in this node's own reads longer than
`max_gap` (`blind_gap`), or when the holder's own signed beacons name a newer
renewal than the last this node read while its read is no evidence (`vouched`; at most
`limit` past where the last valid read left the timer, in all). `current` keeps the renewal a
quiet follower remembers up with the beacons, so a replay of an older beacon is never news.
`outdated` is a validly signed record older than what
was seen (a replay, or a leader that woke up late): never evidence, never obeyed — but
one of an older epoch that is newer than every record of its holder this node has seen
(`writes_still`) restarts the timer: that holder still writes (a renewal without the lock
renamed over a claim, docs/election.md "Renewing without the lock"), and the lease path's
TTL counts from its last write, whatever its epoch — at most one TTL past where the timer
stood (`older_restart`); past that the takeover serves by acks (`older_spent`). Pure: no
I/O, no clock reads; `now` is passed in. The decisions over it are
`core.decide`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from elections.core.lease import LeaseRead

# A record may not make followers wait longer than this, whatever it claims.
MAX_TTL_S = 300.0
# `Memory.writers` keeps the newest record of at most this many holders (the others are forgotten,
# the oldest epoch first: a forgotten holder's next record restarts the timer once, as a new one).
MAX_WRITERS = 32


@dataclass(frozen=True)
class Memory:
    """What one node remembers between cycles."""

    node: str
    seen_key: tuple[str, int, int] | None = None  # last valid lease (holder, epoch, seq)
    seen_at: float | None = None  # monotonic time seen_key last changed
    seen_ttl: float = 0.0
    seen_released: bool = False
    seen_handoff: str | None = None
    max_epoch: int = 0  # highest epoch this node knows of
    leader_epoch: int | None = None  # set while this node is leader
    renewed_at: float | None = None  # monotonic start of our last good write
    renew_seq: int = 0  # our own last written renew_seq
    looked_at: float | None = None  # monotonic end of this node's last completed read of the lease
    blind_restart: bool = False  # since the last valid read, the timer restarted at a `blind_gap`
    vouch_from: float | None = None  # seen_at before the first `vouched` restart since the last valid read
    # the newest validly signed record seen of each holder, (node, epoch, renew_seq), current or not
    writers: tuple[tuple[str, int, int], ...] = ()
    # seen_at before the first `writes_still` restart since the lease last changed (`older_restart`)
    older_from: float | None = None
    # since the lease last changed, an older epoch's holder's record was refused a restart for the
    # bound: a takeover on the TTL serves by acks (`core.decide`, cause `older_writer`)
    older_spent: bool = False


def outdated(memory: Memory, read: LeaseRead) -> bool:
    """A validly signed record older than what we already know is a replay or a
    write from a leader that woke up late: no evidence, never obeyed. Older means
    a lower epoch, or, for the very (holder, epoch) we saw last, a lower
    `renew_seq` (docs/design.md §5.4: for one (node, epoch) the renew_seq only grows):
    two old copies swapped back and forth must not keep a dead leader alive."""
    rec = read.record
    if rec is None:
        return False
    if rec.epoch < memory.max_epoch:
        return True
    seen = memory.seen_key
    return seen is not None and (rec.node, rec.epoch) == seen[:2] and rec.renew_seq < seen[2]


def accepts(memory: Memory, read: LeaseRead) -> bool:
    """`track` takes this read as the lease now: validly signed and not `outdated`. Only such
    a read is published (pool.json's lease, which the entry follows): a replayed old lease is
    no evidence for the panel or the entry either."""
    return read.status == "valid" and read.record is not None and not outdated(memory, read)


def knows_a_pool(memory: Memory) -> bool:
    """This node has seen a lease or an epoch before (now, or before it restarted)."""
    return memory.seen_key is not None or memory.max_epoch > 0


def replayed(memory: Memory, read: LeaseRead) -> bool:
    """A validly signed record that `track` refuses as older than what was seen."""
    return read.status == "valid" and outdated(memory, read)


def writes_still(memory: Memory, read: LeaseRead) -> bool:
    """A validly signed record of an epoch below the highest this node knows, newer (epoch, then
    renew_seq) than every record of its holder this node has seen: its holder wrote it since, so
    it lives, whatever its epoch (issue 37: a renewal without the lock renamed over a claim, and
    its holder renews on, each of its reads finding its own write; a member that knows the newer
    epoch and timed the lease out through those writes took the next epoch in lease mode while
    that holder's gate was open). No evidence for anything else (`outdated`): it only restarts
    the TTL. Safe against replays: a copy of a record this node saw is not newer; one of a holder
    it never saw (or forgot) restarts the timer once per record, in increasing order — a delay of
    the lease path only, never an early takeover.

    A holder not remembered while `MAX_WRITERS` are is news only above the oldest of them: `noted`
    would forget it at once, so the very same copy was news at every read, and one archived record
    put back before each TTL ran out kept a pool with a dead leader from the lease path for ever
    (an attacker's review; `tests/test_older_writer_replay.py`). What it leaves out is a write of
    an epoch with 32 later epochs taken, each by another holder (an epoch is never taken twice):
    its holder's renewal without the lock would have had to land over each of their claims, in
    the instant between its read and its rename, for its reads to find its own write still."""
    rec = read.record
    if read.status != "valid" or rec is None or rec.epoch >= memory.max_epoch:
        return False
    newest = next(((e, q) for n, e, q in memory.writers if n == rec.node), None)
    if newest is not None:
        return (rec.epoch, rec.renew_seq) > newest
    return len(memory.writers) < MAX_WRITERS or (rec.epoch, rec.renew_seq) > min(
        (e, q) for _n, e, q in memory.writers
    )


def older_restart(memory: Memory, now: float, limit: float) -> float | None:
    """Where the timer stood before the first `writes_still` restart since the lease last
    changed, when a record read at `now` may restart it; None when the bound is spent.

    Bounded (issue 37, the archive replayer): since the lease this node saw last changed, these
    restarts move the timer at most `limit` (`track` passes one TTL) past where it stood before
    the first of them (`older_from`). A member that never saw an older epoch's records takes
    every archived one as news, in order: unbounded, that was a delay of the lease path as long
    as the archive's history. Past the bound the TTL runs, and the takeover it then allows
    serves by acks (`older_spent`, cause `older_writer`: rule 5), not by the lease: a genuine
    older holder's lockless renewals may go on as long as its reads find its own write
    (docs/election.md "Renewing without the lock"), its gate open by acks, and an epoch serving
    by acks is safe beside it (docs/serving-right.md, rules 1 and 2); one serving by the lease
    is not."""
    since = memory.older_from
    if since is None:
        since = now if memory.seen_at is None else min(memory.seen_at, now)
    return since if now - since <= limit else None


def noted(memory: Memory, read: LeaseRead) -> tuple[tuple[str, int, int], ...]:
    """`memory.writers` with this read's record, when it is validly signed and newer than its
    holder's last; at most `MAX_WRITERS` holders (the newest epochs kept)."""
    rec = read.record
    if read.status != "valid" or rec is None:
        return memory.writers
    return newest_writers(memory.writers, (rec.key,))


def newest_writers(
    writers: tuple[tuple[str, int, int], ...], more: tuple[tuple[str, int, int], ...]
) -> tuple[tuple[str, int, int], ...]:
    """The newest (epoch, renew_seq) of each holder of both, at most `MAX_WRITERS` holders (the
    newest epochs kept), newest first."""
    newest: dict[str, tuple[str, int, int]] = {}
    for w in (*writers, *more):
        if w[0] not in newest or w[1:] > newest[w[0]][1:]:
            newest[w[0]] = w
    return tuple(sorted(newest.values(), key=lambda w: (w[1], w[2]), reverse=True)[:MAX_WRITERS])


def recalled(memory: Memory, writers: tuple[tuple[str, int, int], ...]) -> Memory:
    """`memory` with the holders' records it saw before it restarted (leadership.json's `writers`,
    and its `seen`): `writes_still` is kept across a restart, not started afresh. Forgotten, every
    archived record of an older epoch was news again, in order, each restarting the TTL: a delay of
    the lease path as long as the archive's history (an attacker's review). Only records this node
    saw: a holder that still writes writes newer ones."""
    seen = () if memory.seen_key is None else (memory.seen_key,)
    return replace(memory, writers=newest_writers(memory.writers, (*writers, *seen)))


def blind_gap(memory: Memory, read: LeaseRead, now: float, max_gap: float) -> float | None:
    """The gap this read ends, if it restarts the expiry timer (`track`): this node did not read
    the lease for longer than `max_gap` (its own clock: frozen, its share cut, quiet) and this
    read is no evidence (missing, damaged, forged, refused, stale). Its silence during its own
    blindness says nothing of the holder, who may have renewed unseen until just before this
    look: the TTL starts again here. Once per valid read: a lease that stays damaged is still
    taken over one TTL later (a sole survivor is a relay). A valid read is judged as always."""
    if memory.looked_at is None or memory.seen_at is None or memory.blind_restart:
        return None
    if accepts(memory, read):
        return None
    gap = now - memory.looked_at
    return gap if gap > max_gap else None


def track(
    memory: Memory, read: LeaseRead, now: float, default_ttl: float, max_gap: float = math.inf
) -> Memory:
    """Fold one read into memory: restart the expiry timer when the record changed, or when a
    read that is no evidence ends a gap longer than `max_gap` (`blind_gap`; the elector passes
    `Timing.blind_after`)."""
    rec = read.record
    looked = replace(memory, looked_at=now, writers=noted(memory, read))
    if writes_still(memory, read):  # that older epoch's holder lives: the TTL starts again, bounded
        since = older_restart(memory, now, default_ttl)
        if since is None:
            return replace(looked, older_spent=True)  # the TTL runs; its takeover serves by acks
        return replace(looked, seen_at=now, seen_ttl=max(memory.seen_ttl, default_ttl), older_from=since)
    if accepts(memory, read) and rec is not None:
        max_epoch = max(memory.max_epoch, rec.epoch)
        looked = replace(looked, blind_restart=False, vouch_from=None)
        if rec.key != memory.seen_key or rec.released != memory.seen_released:
            return replace(
                looked,
                older_from=None,
                older_spent=False,
                seen_key=rec.key,
                seen_at=now,
                seen_ttl=min(float(rec.ttl_s), MAX_TTL_S) if not rec.released else default_ttl,
                seen_released=rec.released,
                seen_handoff=rec.handoff_to,
                max_epoch=max_epoch,
            )
        return replace(looked, max_epoch=max_epoch)
    if memory.seen_at is None and (read.status != "missing" or knows_a_pool(memory)):
        # First look finds no evidence: someone may hold a lease whose file is
        # damaged, or was deleted (by anyone who can write the share) while a
        # pool this node already knew lives on. Time a full TTL from now.
        return replace(looked, seen_at=now, seen_ttl=default_ttl)
    if blind_gap(memory, read, now, max_gap) is not None:  # as a first look: a full TTL from now
        return replace(looked, seen_at=now, seen_ttl=max(memory.seen_ttl, default_ttl), blind_restart=True)
    return looked


def vouched(
    memory: Memory, read: LeaseRead, renewal: tuple[int, float] | None, limit: float = math.inf
) -> Memory:
    """`memory` with its timer restarted at a renewal the holder's leader beacons named
    (`renewal`: its renew_seq, and when a beacon first named it on this node's clock) when
    this read is no evidence (missing, damaged, forged, refused, stale, outdated) and that
    renewal is newer than the last this node read. A writer without the key who puts junk
    over the lease again as soon as the holder has rewritten it hides every renewal from the
    share's readers, and the TTL of the last valid read ran out under a live holder (seen:
    `test_agents_lease_damage`); its signed beacons still say each renewal. Safe as a read:
    the holder wrote that renewal before it sent the beacon, so a timer started when the
    beacon came never starts before the write. It only ever delays a takeover of the very
    holder and epoch this node saw; a valid read is judged as always (`track`).

    Bounded (issue 40): between two valid reads the restarts move the timer at most `limit`
    past where it stood before the first of them (`vouch_from`; the elector passes one TTL);
    past that the TTL runs. A beacon sent again by someone who captured it (a restarted
    member's board knows no seqs it did not keep) "came" when it is replayed, long after
    the write: each such restart is a delay, never an early takeover, and the bound caps
    the delay a replayer can cause at `limit`, whatever it captured."""
    if renewal is None or memory.seen_key is None or memory.seen_at is None or memory.seen_released:
        return memory
    if accepts(memory, read):
        return memory
    seq, at = renewal
    node, epoch, seen_seq = memory.seen_key
    if seq <= seen_seq or at <= memory.seen_at:
        return memory
    since = memory.seen_at if memory.vouch_from is None else memory.vouch_from
    if at - since > limit:
        return memory
    return replace(memory, seen_key=(node, epoch, seq), seen_at=at, vouch_from=since)


def vouches_spent(memory: Memory, renewal: tuple[int, float] | None, limit: float) -> bool:
    """A newer renewal was named, and `vouched` refused it only for its bound."""
    if renewal is None or memory.seen_key is None or memory.seen_at is None or memory.seen_released:
        return False
    since = memory.seen_at if memory.vouch_from is None else memory.vouch_from
    return renewal[0] > memory.seen_key[2] and renewal[1] > memory.seen_at and renewal[1] - since > limit


def current(memory: Memory, renewal: tuple[int, float] | None) -> Memory:
    """The renewal a quiet follower remembers, kept up with its holder's leader beacons: a
    follower whose holder's fresh beacons name the very lease it last read reads the share
    less (issue 22), and remembered (and wrote to leadership.json, which a restart reads
    back) the renew_seq of the last lease it did read, however many renewals its beacons
    named since. Each of those was then news to `vouched` after a restart: replayed, a
    captured beacon of a dead holder restarted the timer (issue 40). Here a newer renewal
    moves `seen_key` to it, timed from when a beacon first named it (never earlier than the
    timer stood: as a read of that renewal then, which the holder wrote before its beacon
    said so). Only ever the very holder and epoch this node saw, unreleased; a follower only."""
    if renewal is None or memory.seen_key is None or memory.seen_at is None or memory.seen_released:
        return memory
    if memory.leader_epoch is not None:
        return memory
    seq, at = renewal
    node, epoch, seen_seq = memory.seen_key
    if seq <= seen_seq:
        return memory
    return replace(memory, seen_key=(node, epoch, seq), seen_at=max(memory.seen_at, at))
