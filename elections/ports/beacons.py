"""The beacons' thin asyncio transport (docs/design.md §13), around the pure core
(`core.beacons`, `core.beacon_board`, `core.liveness`).

`BeaconService` runs one event loop on a thread of its own, beside the
election loop (a flood of datagrams costs that thread, never a renewal):

- **send**: every `BEACON_INTERVAL` (±20 % jitter) one signed beacon saying
  what `standing()` says (leader of epoch E with its renew_seq, or follower)
  to each `BEACON_PEERS` address, or to the broadcast address of `NODE_IP`'s
  subnet; when this member stops leading, `resign` three times at once.
- **receive**: UDP on `NODE_IP:BEACON_PORT` (unicast) and, without peers, on
  the subnet's broadcast address (`reuse_port`, never `reuse_address`); every
  datagram goes to `BeaconBoard.receive`, whose `Reaction`s are handed to
  `react` (the runtime runs an election cycle: a store read, nothing more).
- **liveness**: a TCP connection to the lease holder's supervisor on
  `BEACON_PORT`; the host's answers (connection ended, reconnect refused) go
  to `Liveness`; timeouts and unreachable hosts are no answer. When the
  evidence of `core.liveness` holds, `react` is told once per (holder, epoch).

The board and the liveness record are shared with the election thread under
one lock (`evidence()`, `snapshot()`); nothing here decides anything.
The supervisor's side (the liveness port, `send_resign`) is `ports.liveness_port`;
the liveness watch is `ports.beacon_liveness`, the serving right's part `ports.beacon_serving`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from elections.core.beacon_board import BeaconBoard, Reaction, Standing
from elections.core.beacons import MAX_STORE, RESIGN, RESIGN_COPIES, Beacon
from elections.core.evidence import merged
from elections.core.liveness import Liveness
from elections.core.nudge import Nudge, NudgeBoard, is_nudge
from elections.core.serving import ServingTiming
from elections.core.serving_book import ServingBook
from elections.ports.beacon_config import BeaconConfig, new_boot, subnet_broadcast
from elections.ports.beacon_liveness import LivenessWatch
from elections.ports.beacon_seqs import SAVE_EVERY, SeqFile
from elections.ports.beacon_serving import ServingRight
from elections.ports.host.sockets import open_shared_udp

log = logging.getLogger("stkrelay.beacons")

JITTER = 0.2


KEEP_KEYS = 64  # members whose recent leader keys are remembered (`heard_at`)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, service: BeaconService) -> None:
        self.service = service

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.service.received(data, addr[0])

    def error_received(self, exc: Exception) -> None:  # ICMP errors of our sends: nothing to learn
        log.debug("beacon socket: %s", exc)


class BeaconService(LivenessWatch, ServingRight):
    def __init__(
        self,
        config: BeaconConfig,
        standing: Callable[[], Standing],
        react: Callable[[Reaction], None],
        monotonic: Callable[[], float],
        boot: str | None = None,
        nudged: Callable[[Nudge], None] | None = None,
        folded: Callable[[str], int] = lambda node: 0,
        gate_clock: Callable[[], float] | None = None,
        members: Callable[[], int] = lambda: 0,
        on_acked: Callable[[], None] = lambda: None,
        on_quiet: Callable[[], None] = lambda: None,
    ) -> None:
        self.config: BeaconConfig = config
        self.standing = standing
        self.react = react
        self.monotonic = monotonic
        # The serving right's book is kept on the gate's clock (`ports.clock.boottime`: it runs
        # on through a suspend): a leader that slept finds its acks as old as they are.
        self.gate_clock = gate_clock or monotonic
        self.boot = boot or new_boot()
        self.board = BeaconBoard(config.kmsn, config.key, config.node)
        self.seqs = SeqFile(config.seq_file) if config.seq_file else None
        self._saved = (0, 0.0)  # (board.accepted, monotonic) at the last write of the seqs
        self._restore()
        # Command nudges (core.nudge) come to the same port; `folded(node)` is the
        # highest event seq of `node` this agent has (a nudge naming it is a replay).
        self.nudges = NudgeBoard(config.kmsn, config.key, config.node, config.ip)
        self.nudged = nudged
        self.folded = folded
        # (seq, member_digest) of this member's own record as last written: in every beacon.
        self.member_record: tuple[int, str] = (0, "")
        self.liveness = Liveness(config.interval)
        # The serving right (docs/design.md §15): whom this member acknowledges; its own right while it leads.
        self.book = ServingBook(config.node, self.boot, ServingTiming.of(config.interval), config.ttl,
                                started=self.gate_clock())  # fmt: skip
        self.members = members  # the pool's size as this member counts it
        self.on_acked = on_acked  # a member's ack may have moved the gate
        # The holder this follower's beacons say went quiet (`ServingRight._look_quiet`), or None;
        # `on_quiet` is told each change (the agent writes its pool view again: the station door).
        self.quiet: str | None = None
        self.on_quiet = on_quiet
        self._silent_told: tuple[str, int] | None = None
        self._silent_at = 0.0
        self.lock = threading.Lock()
        self.targets = config.peers or [subnet_broadcast(config.ip)]
        self.sent = 0
        self._seq = 0
        self._sock: asyncio.DatagramTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._transports: list[asyncio.BaseTransport] = []
        self._reported: tuple[str, int] | None = None
        self._answered = asyncio.Event()  # set by the liveness loop when a host answers (ended, refused)
        self._retarget = asyncio.Event()  # set by the send loop when the holder to watch changed
        # set by `send_now()`: the standing changed (elected, stepped down, a new leader
        # adhered to), beacon now
        self._wake = asyncio.Event()
        self._watched: tuple[str, tuple[str, int]] | None = None  # what the liveness loop watches
        self._echoes: collections.deque[bytes] = collections.deque(maxlen=8)  # our last datagrams
        # node -> the last leader keys (node, epoch, renew_seq) its beacons named, with when each
        # was first heard: a follower that reads a renewal later times it from the beacon (`heard_at`).
        self._keys: dict[str, collections.deque[tuple[tuple[str, int, int], float]]] = {}
        self.ready = threading.Event()
        self.failed: str | None = None
        self.started = monotonic()  # since when this member has listened (`core.eligibility.unheard`)

    # -- for the election thread -------------------------------------------------
    def start(self) -> BeaconService:
        self._thread = threading.Thread(target=self._run, name="beacons", daemon=True)
        self._thread.start()
        self.ready.wait(5)
        return self

    def stop(self) -> None:
        """Stop sending, receiving and watching (its sockets closed), within a second."""
        loop = self._loop
        if loop is not None and loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(1.0)

    async def _close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.save_seqs(force=True)
        for transport in self._transports:
            transport.close()
        asyncio.get_running_loop().call_soon(asyncio.get_running_loop().stop)

    def _restore(self) -> None:
        """The board's seqs as kept before this start (`ports.beacon_seqs`); a damaged file
        starts it empty, counted with the board's refusals and logged."""
        if self.seqs is None:
            return
        doc, refused = self.seqs.load()
        if refused is not None:
            self.board.refusals.note(self.seqs.path.name, refused.cause, refused.detail, now=self.monotonic())
            log.warning("beacon seqs not restored, starting empty (%s: %s)", refused.cause, refused.detail)
            return
        taken = self.board.restore(doc)
        if taken:
            log.info("beacon seqs restored: %d (member, boot) pairs", taken)

    def save_seqs(self, force: bool = False) -> None:
        """Write the board's seqs when beacons came since the last write, at most every
        `SAVE_EVERY` (`force`: now, on the way out). Never raises: a full disk costs the
        replay memory of a restart, never a beacon."""
        if self.seqs is None:
            return
        with self.lock:
            accepted, now = self.board.accepted, self.monotonic()
            if accepted == self._saved[0] or (not force and now - self._saved[1] < SAVE_EVERY):
                return
            seqs = self.board.seqs()
        try:
            self.seqs.save(seqs)
        except OSError as exc:
            log.warning("beacon seqs not kept: %s", exc)
        self._saved = (accepted, now)

    def leader_key(self, node: str, within: float) -> tuple[str, int, int] | None:
        """(node, epoch, renew_seq) of `node`'s latest leader beacon, if one came within `within` s."""
        with self.lock:
            stats = self.board.leader_beacon(node)
            if stats is None or stats.leader_at is None or self.monotonic() - stats.leader_at > within:
                return None
            return (stats.last.node, stats.last.epoch, stats.last.renew_seq)

    def heard_at(self, key: tuple[str, int, int]) -> float | None:
        """When a leader beacon naming lease `key` (node, epoch, renew_seq) first came, if one did
        lately. Its sender wrote that lease before it sent it: a timer started then is not early."""
        with self.lock:
            return next((at for k, at in self._keys.get(key[0], ()) if k == key), None)

    def member_records(self, within: float) -> dict[str, tuple[int, str]]:
        """(mseq, mdig) of each member whose beacons came within `within` s and say
        what its member record is (`core.beacons`)."""
        with self.lock:
            now = self.monotonic()
            return {n: (s.last.mseq, s.last.mdig) for n, s in self.board.members.items()
                    if s.last.mseq and now - s.last_at <= within}  # fmt: skip

    def renewed_at(self, node: str, epoch: int) -> float | None:
        """When `node`'s beacons last named a new renewal of its lease of `epoch`."""
        heard = self.renewal_heard(node, epoch)
        return None if heard is None else heard[1]

    def renewal_heard(self, node: str, epoch: int) -> tuple[int, float] | None:
        """The newest renewal of `node`'s lease of `epoch` its leader beacons named lately:
        (renew_seq, when a beacon first named it), or None."""
        with self.lock:
            keys = self._keys.get(node)
            if not keys or keys[-1][0][1] != epoch:
                return None
            (_, _, seq), at = keys[-1]
            return seq, at

    def hears_all(self, nodes: set[str], within: float) -> bool:
        with self.lock:
            now = self.monotonic()
            return all(self.board.heard_from(node, now, within) for node in nodes)

    def heard_ages(self) -> dict[str, tuple[float, float]]:
        """node -> (seconds since its last beacon, its smoothed gap) of every member heard."""
        with self.lock:
            now = self.monotonic()
            return {n: (now - s.last_at, s.gap) for n, s in self.board.members.items()}

    def heard(self, within: float) -> list[str]:
        with self.lock:
            now = self.monotonic()
            return sorted(n for n in self.board.members if self.board.heard_from(n, now, within))

    def send_now(self) -> None:
        """Send the next beacon now rather than at the next interval (thread-safe): this
        member was elected or stepped down (a `resign` tells the handoff's target at once),
        or adheres to a new leader."""
        loop = self._loop
        if loop is not None and loop.is_running():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._wake.set)

    def snapshot(self) -> dict[str, Any]:
        """Per member arrival statistics, the liveness watch and the refusals, for the pool view."""
        members = self.members()  # never under the lock: the count asks `heard()`, which takes it
        wall = datetime.now().astimezone()  # shown with a datagram's refusal (noted on the monotonic clock)
        with self.lock:
            now = self.monotonic()
            return {**self.board.to_doc(now), "liveness": self.liveness.to_doc(now), "sent": self.sent,
                    "interval": self.config.interval, "targets": list(self.targets), "boot": self.boot,
                    "quiet": self.quiet,
                    "nudges": self.nudges.to_doc(),
                    "refusals": merged(self.board.refusals.to_doc(now, wall=wall),
                                       self.nudges.refusals.to_doc(now, wall=wall)),
                    "serving": self.book.to_doc(members, self.gate_clock())}  # fmt: skip

    # -- the loop -----------------------------------------------------------------
    def received(self, data: bytes, source: str) -> None:
        if is_nudge(data):
            self._nudge(data, source)
            return
        with self.lock:
            if data in self._echoes:  # one of our last datagrams, byte for byte: nothing to verify
                self.board.mine(data, source, self.config.ip, self.monotonic())
                return
            accepted, now, standing = self.board.accepted, self.monotonic(), self.standing()
            reaction = self.board.receive(data, source, now, standing)
            if self.board.accepted != accepted:  # the members' stats hold it last
                self._note_key(next(reversed(self.board.members.values())).last, now)
            beacon = self.board.last_accepted
            lead, floor = standing.leader_epoch, standing.max_epoch
            acked = beacon is not None and self.book.heard(beacon, lead, floor, self.gate_clock())
            switched = beacon is not None and self.book.switched
        if switched:  # the new leader's gate waits for a majority's acks: ours goes at once
            self._wake.set()
        if acked:
            self._hand_ack()
        if reaction is not None:
            self._hand(reaction)

    def _hand_ack(self) -> None:
        try:
            self.on_acked()
        except Exception:
            log.exception("serving-right update failed")

    def _note_key(self, beacon: Beacon, now: float) -> None:
        if beacon.role != "leader":
            return
        key = (beacon.node, beacon.epoch, beacon.renew_seq)
        keys = self._keys.setdefault(beacon.node, collections.deque(maxlen=4))
        if not keys or keys[-1][0] != key:
            keys.append((key, now))
        while len(self._keys) > KEEP_KEYS:
            self._keys.pop(next(iter(self._keys)))

    def _nudge(self, data: bytes, source: str) -> None:
        with self.lock:
            nudge = self.nudges.receive(data, source, self.monotonic(), self.folded, self._address_of)
        if nudge is None or self.nudged is None:
            return
        log.info("nudge: %s", nudge.describe())
        try:
            self.nudged(nudge)
        except Exception:  # the runtime's trouble must not stop the beacons
            log.exception("nudge reaction failed")

    def _address_of(self, node: str) -> str | None:
        """Where `node`'s beacons come from (under the lock)."""
        stats = self.board.members.get(node)
        return stats.source if stats is not None else None

    def _hand(self, reaction: Reaction) -> None:
        try:
            self.react(reaction)
        except Exception:  # the runtime's trouble must not stop the beacons
            log.exception("beacon reaction failed")

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._open())
        except OSError as exc:
            self.failed = f"beacons off: cannot bind {self.config.ip}:{self.config.port}: {exc}"
            log.error("%s", self.failed)
            self.ready.set()
            return
        self.ready.set()
        jobs = (self._send_loop(), self._liveness_loop(), self._evidence_loop(), self._silence_loop())
        self._tasks = [loop.create_task(job) for job in jobs]
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _open(self) -> None:
        cfg = self.config
        self._sock, _ = await open_shared_udp(lambda: _Datagrams(self), cfg.ip, cfg.port)
        self._transports.append(self._sock)
        if not cfg.peers:  # broadcasts reach only a socket bound to the broadcast address (or any)
            bcast, _ = await open_shared_udp(lambda: _Datagrams(self), self.targets[0], cfg.port)
            self._transports.append(bcast)

    def _datagram(self, role: str, epoch: int, renew_seq: int, standing: Standing | None = None) -> bytes:
        self._seq += 1
        cfg = self.config
        mseq, mdig = self.member_record
        extra: dict[str, Any] = {}
        if role == RESIGN:  # of the serving right, a resign says only whether it fenced first
            with self.lock:
                extra = self.book.resigning(epoch, self.gate_clock())
        elif standing is not None:
            members = self.members()
            with self.lock:
                extra = self.book.outgoing(standing.leader_epoch, self._seq, members, self.gate_clock())
        beacon = Beacon(cfg.kmsn, cfg.node, cfg.ip, cfg.relay_port, role, epoch, renew_seq, self.boot,
                        self._seq, store=cfg.store[:MAX_STORE], mseq=mseq, mdig=mdig, **extra)  # fmt: skip
        return beacon.encode(cfg.key)

    def _send(self, raw: bytes) -> None:
        assert self._sock is not None
        self._echoes.append(raw)
        for target in self.targets:
            try:
                self._sock.sendto(raw, (target, self.config.port))
                self.sent += 1
            except OSError as exc:  # a down link: the others learn it from silence, and the TTL
                log.debug("beacon to %s not sent: %s", target, exc)

    async def _send_loop(self) -> None:
        led: int | None = None
        while True:
            self._wake.clear()  # before the standing is read: a wake after it sends again
            standing = self.standing()
            if led is not None and standing.leader_epoch != led:
                for _ in range(RESIGN_COPIES):  # stopped leading: say so at once, thrice
                    self._send(self._datagram(RESIGN, led, standing.renew_seq))
                    await asyncio.sleep(0.01)
            led = standing.leader_epoch
            if self._target_of(standing) != self._watched:
                self._retarget.set()  # the liveness loop watches someone else now
            self._send(self._datagram(*standing.outgoing(), standing=standing))
            self.save_seqs()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.interval * random.uniform(1 - JITTER, 1 + JITTER)):
                    await self._wake.wait()
