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
The supervisor's side (the liveness port, `send_resign`) is `ports.beacons.liveness_port`.
The serving right (docs/design.md §15, `core.serving`): the election thread asks
the book under the lock (`taken`, `serving_*`, `silent`, and the share's witness: `witness_*`),
and the silence loop kicks a cycle while a majority's silence about the holder holds (it also
says when the followed holder went `quiet`, for the pool view).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from elections.core.beacon_board import BeaconBoard, Reaction, Standing
from elections.core.beacons import MAX_STORE, RESIGN, RESIGN_COPIES, Beacon
from elections.core.evidence import merged
from elections.core.liveness import ANSWERS, CONNECTED, ENDED, REFUSED, UNREACHABLE, Liveness
from elections.core.nudge import Nudge, NudgeBoard, is_nudge
from elections.core.serving import ACKED, AckReport, ServingTiming
from elections.core.serving_book import ServingBook
from elections.core.witness import WitnessRead, WitnessVote
from elections.ports.beacons.beacon_config import BeaconConfig, new_boot, subnet_broadcast
from elections.ports.beacons.beacon_seqs import SAVE_EVERY, SeqFile
from stkhost.sockets import open_shared_udp

log = logging.getLogger("stkrelay.beacons")

JITTER = 0.2
CONNECT_TIMEOUT = 1.0  # seconds: the liveness connection to the lease holder's supervisor
HOLD_LOOK = 2.0  # seconds: a held liveness connection checks the lease's holder at least this often
RETARGET_WAIT = 2.0  # seconds: with no holder to watch, the liveness loop looks at least this often
SILENT_KICK_EVERY = 0.5  # seconds between cycles kicked while a majority's silence holds
# Seconds the silence loop may sleep at most when no silence can hold before (`silence_wait`):
# a machine suspended meanwhile (its monotonic clock stood, the book's boot clock ran on) looks
# again this long after it wakes at the latest.
SILENCE_LOOK_CAP = 0.5
SILENCE_LOOK_LATE = 0.005  # seconds after that first instant: the first look finds `S` passed
# A holder none of whose beacons came for this many intervals is `quiet` (0.6 s at 0.2 s): long
# before the silence `S` that may end its lease, the station door stops dialling it for new
# connections (a frozen host's kernel still completes their handshakes) and holds them instead.
QUIET_INTERVALS = 3.0


KEEP_KEYS = 64  # members whose recent leader keys are remembered (`heard_at`)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, service: BeaconService) -> None:
        self.service = service

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.service.received(data, addr[0])

    def error_received(self, exc: Exception) -> None:  # ICMP errors of our sends: nothing to learn
        log.debug("beacon socket: %s", exc)


class BeaconService:
    """One member's beacons: sent, received, the liveness watch of the lease's holder, and the
    serving right's book, asked under one lock."""

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
        # The serving right's book is kept on the gate's clock (`stkhost.clock.boottime`: it runs
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
        # The holder this follower's beacons say went quiet (`_look_quiet`), or None;
        # `on_quiet` is told each change (the agent writes its pool view again: the station door).
        self.quiet: str | None = None
        self.on_quiet = on_quiet
        self._silent_told: tuple[str, int] | None = None
        self._silent_at = 0.0
        # The adhered leader (node, epoch, boot) our own quiet about reached `S` for, beaconed at once
        # (`_say_silence`); and the silence loop's wake when another member's beacon comes while the
        # holder is quiet (its report may be the one a majority's silence waited for).
        self._silence_said: tuple[str, int, str] | None = None
        self._look = asyncio.Event()
        self.lock = threading.Lock()
        self._led = threading.Condition(self.lock)  # notified when `led_epoch` grows
        self.led_epoch = 0  # the highest epoch a verified leader beacon named (`winner_heard`)
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
        """The board's seqs as kept before this start (`ports.beacons.beacon_seqs`); a damaged file
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

    def winner_heard(self, epoch: int, seconds: float) -> bool:
        """Wait at most `seconds` for a verified leader beacon of an epoch above `epoch` (or
        one heard already): a claim this member lost was another's, whose lease is written
        (a leader beacons its epoch only after its claim). The elector's lost-race pause."""
        with self._led:
            return self._led.wait_for(lambda: self.led_epoch > epoch, timeout=seconds)

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
            if beacon is not None and beacon.role == "leader" and beacon.epoch > self.led_epoch:
                self.led_epoch = beacon.epoch
                self._led.notify_all()
        if switched:  # the new leader's gate waits for a majority's acks: ours goes at once
            self._wake.set()
        if self.quiet is not None and beacon is not None and beacon.role != "leader":
            self._look_now()  # its `quiet_ms` may complete a majority's silence: judge it now
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

    # -- the liveness watch (a TCP connection held to the lease holder's supervisor) ----------
    def evidence(self, node: str, epoch: int) -> str | None:
        """Why the holder `node` of `epoch` is positively gone, or None: never of a holder this
        member did not hear say it serves by acks (`ServingBook.said_acks`, rule 7's guard)."""
        with self.lock:
            if not self.book.said_acks(node, epoch):
                return None
            return self.liveness.gone(self.board, node, epoch, self.monotonic())

    def _target(self) -> tuple[str, tuple[str, int]] | None:
        return self._target_of(self.standing())

    def _target_of(self, st: Standing) -> tuple[str, tuple[str, int]] | None:
        """The holder whose liveness port to watch: the one of the lease this follower last read."""
        if st.leader_epoch is not None or st.seen_key is None or not st.holder_ip:
            return None
        if st.seen_key[0] == self.config.node:
            return None
        return st.seen_key[0], (st.holder_ip, self.config.port)

    def _saw(self, state: str) -> None:
        with self.lock:
            self.liveness.saw(state, self.monotonic())
        if state in ANSWERS:
            self._answered.set()  # the evidence loop looks closely from now on

    async def _retargeted(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._retarget.wait()

    async def _liveness_loop(self) -> None:
        pause = min(self.config.interval, 0.2)
        while True:
            target = self._target()
            self._watched = target
            self._retarget.clear()  # set again by the next send if the holder changed meanwhile
            with self.lock:
                node, address = target if target is not None else (None, None)
                self.liveness.watch(node, address, self.monotonic())
            if target is None:
                await self._retargeted(RETARGET_WAIT)  # a leader, or no holder known: nothing to watch
                continue
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    reader, writer = await asyncio.open_connection(*target[1])
            except ConnectionRefusedError:
                self._saw(REFUSED)  # the host answers: nothing listens there
                await asyncio.sleep(pause)
                continue
            except (TimeoutError, OSError):
                self._saw(UNREACHABLE)  # no answer: no evidence
                await asyncio.sleep(pause)
                continue
            self._saw(CONNECTED)
            await self._hold(reader, writer, target)
            await asyncio.sleep(min(pause, 0.05))

    async def _hold(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: tuple[str, tuple[str, int]]
    ) -> None:
        """Hold the connection until the host ends it or the lease names someone
        else (the send loop says so at its next beacon; HOLD_LOOK at the latest)."""
        loop = asyncio.get_running_loop()
        read = loop.create_task(reader.read(256))
        try:
            while True:
                retarget = loop.create_task(self._retarget.wait())
                # The read ends at once when the host ends the connection.
                done, _ = await asyncio.wait(
                    {read, retarget}, timeout=HOLD_LOOK, return_when=asyncio.FIRST_COMPLETED
                )
                retarget.cancel()
                if read not in done:
                    self._retarget.clear()
                    if self._target() != target:
                        return
                    self._watched = target
                    continue
                try:
                    data = read.result()
                except ConnectionResetError:
                    data = b""
                except OSError:  # a timeout of the kernel's own (keepalive): no answer
                    self._saw(UNREACHABLE)
                    return
                if not data:
                    self._saw(ENDED)
                    return
                read = loop.create_task(reader.read(256))  # the port says nothing: bytes are ignored
        finally:
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await read
            writer.close()

    async def _evidence_loop(self) -> None:
        # Evidence needs the host's answer first: until one comes (the liveness
        # connection ended or a reconnect refused), sleep on it instead of polling.
        while True:
            with self.lock:
                answered = self.liveness.state in ANSWERS
            if not answered:
                self._answered.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._answered.wait()
                continue
            await asyncio.sleep(self.config.interval / 4)
            st = self.standing()
            if st.leader_epoch is not None or st.seen_key is None:
                continue
            node, epoch = st.seen_key[0], st.seen_key[1]
            why = self.evidence(node, epoch)
            if why and self._reported != (node, epoch):
                self._reported = (node, epoch)
                log.warning("%s", why)
                self._hand(Reaction(why))

    # -- the serving right (core.serving), for the election thread ---------------------------
    def taken(self, epoch: int, cause: str | None, after: tuple[str, int] | None = None) -> None:
        """This member took `epoch` (over the lease of (node, epoch) `after`): its right starts
        now, and its first leader beacon goes at once."""
        members = self.members()
        with self.lock:
            self.book.taken(epoch, cause, members, after, self.gate_clock())
        self.send_now()

    def serving_fenced(self, epoch: int) -> None:
        """The relay of `epoch` stopped before its planned release: the resign may say so."""
        with self.lock:
            self.book.fenced(epoch)

    def serving_overwritten(self, epoch: int) -> None:
        """Our record of `epoch` was found under an older epoch's holder's (`ServingBook.overwritten`)."""
        with self.lock:
            self.book.overwritten(epoch, self.gate_clock())

    def serving_bound(self, epoch: int) -> float | None:
        members = self.members()
        with self.lock:
            return self.book.bound(epoch, members, self.gate_clock())

    def serving_lapsed(self, epoch: int) -> str | None:
        members = self.members()
        with self.lock:
            return self.book.lapsed(epoch, members, self.gate_clock())

    def serving_mode(self, epoch: int | None) -> str | None:
        with self.lock:
            return self.book.mode(epoch)

    def serving_told(self, epoch: int) -> None:
        with self.lock:
            news = self.book.told(epoch)
        if news:  # `serve: ack` goes out now, not up to an interval later: from it on, a freeze of
            self.send_now()  # this leader is taken over on silence, not by the TTL (rule 3a)

    def serving_untold(self, epoch: int | None) -> bool:
        with self.lock:
            return self.book.untold(epoch)

    # -- the share's witness (issue 38, core.witness), for the election thread and its keeper ------
    def witness_claims(self, holder: str, epoch: int) -> bool:
        with self.lock:
            return self.book.claims_from(holder, epoch)

    def witness_named(self, epoch: int) -> None:
        with self.lock:
            self.book.witness_named(epoch)

    def witness_claim(self, vote: WitnessVote, holder: str | None = None) -> None:
        with self.lock:
            self.book.witness_claim(vote, holder)

    def witness_look(self, epoch: int) -> tuple[WitnessVote, float | None] | None:
        """A copy of the witness's vote for our `epoch` and our acks' window, if a pool of two
        relies (or may come to rely) on it; None otherwise."""
        members = self.members()
        with self.lock:
            book, right = self.book, self.book.right
            if right is None or right.epoch != epoch or not book.paired(members) or book.witness is None:
                return None
            if right.mode != ACKED:
                return None
            return replace(book.witness), right.ack_until(*right.counted(members))

    def witness_entered(self, epoch: int, sent_at: float) -> None:
        with self.lock:
            w = self.book.witness
            if w is not None and w.epoch == epoch:
                w.entered(sent_at)

    def witness_unrelied(self, epoch: int, now: float) -> bool:
        """W2b: stop counting the witness for `epoch` if its window is over (then say so on the share)."""
        with self.lock:
            w = self.book.witness
            return w is not None and w.epoch == epoch and w.unrely(now)

    def witness_refreshed(self, epoch: int, sent_at: float, read: WitnessRead, leading: int | None) -> bool:
        with self.lock:
            w = self.book.witness
            return w is not None and w.epoch == epoch and w.refresh(sent_at, read, leading)

    def silent(self, holder: str, epoch: int) -> str | None:
        """Why a majority's silence lets this follower take `holder`'s `epoch` early, or None."""
        members = self.members()
        with self.lock:
            now = self.monotonic()
            reports = [AckReport(s.node, now - s.last_at, s.last.ack_node, s.last.ack_epoch,
                              s.last.quiet_ms / 1000) for s in self.board.members.values()]  # fmt: skip
            return self.book.silent(holder, epoch, members, reports, self.gate_clock())

    def silence_wait(self) -> float:
        """Seconds until the silence loop looks again: half an interval while a silence may
        hold, as before; until just after the first instant one may (`ServingBook.silence_from`:
        the adhered leader was heard within `S`) while none can, up to `SILENCE_LOOK_CAP`.
        The first look after that instant comes 5 ms after it, where it came up to half an
        interval after it; an idle agent's loop wakes twice a second, not ten times (issue 41)."""
        with self.lock:
            now = self.gate_clock()
            left = self.book.silence_from(now) - now
        if left <= 0:
            return self.config.interval / 2
        wait = min(left, SILENCE_LOOK_CAP) + SILENCE_LOOK_LATE
        quiet_in = self._quiet_in()
        return wait if quiet_in is None else min(wait, quiet_in + SILENCE_LOOK_LATE)

    def _quiet_in(self) -> float | None:
        """Seconds until the followed holder turns `quiet` if no beacon of it comes meanwhile
        (None: none followed, never heard, or quiet already): the loop's sleep ends then, so the
        station doors hear of a quiet holder `QUIET_INTERVALS` after its last beacon, not up to
        `SILENCE_LOOK_CAP` later."""
        if self.quiet is not None:
            return None
        st = self.standing()
        if st.leader_epoch is not None or st.seen_key is None:
            return None
        with self.lock:
            stats = self.board.members.get(st.seen_key[0])
            if stats is None:
                return None
            left = stats.last_at + QUIET_INTERVALS * self.config.interval - self.monotonic()
        return max(left, 0.0)

    def _look_quiet(self, holder: str | None) -> None:
        """`quiet`: the holder this follower follows, once none of its beacons came for
        `QUIET_INTERVALS` (a holder never heard is not quiet: its beacons may be off); each
        change is told (`on_quiet`), so the pool view says it within one look."""
        quiet = None
        if holder is not None:
            with self.lock:
                stats = self.board.members.get(holder)
                age = None if stats is None else self.monotonic() - stats.last_at
            if age is not None and age >= QUIET_INTERVALS * self.config.interval:
                quiet = holder
        if quiet != self.quiet:
            if quiet is not None:
                log.info("beacon: %s quiet (no beacon for %g intervals): station doors hold new connections",
                         quiet, QUIET_INTERVALS)  # fmt: skip
            else:
                log.info("beacon: %s no longer quiet", self.quiet)
            self.quiet = quiet
            try:
                self.on_quiet()
            except Exception:  # the runtime's trouble must not stop the beacons
                log.exception("telling a quiet holder failed")

    def _look_now(self) -> None:
        """Wake the silence loop now (thread-safe), not at its next half interval."""
        loop = self._loop
        if loop is not None and loop.is_running():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._look.set)

    def _say_silence(self) -> None:
        """Our own quiet about the leader we adhere to just reached `S`: beacon now. Another
        member's early takeover counts our report (`quiet_ms` ≥ S, `core.serving.silent_holder`),
        which would otherwise go out with our next beacon, up to an interval later; every
        follower of a frozen or cut-off leader crosses S within moments of the others, so the
        takeover waited that interval (the reason said "silent for 1.93 s ≥ S 1.82 s")."""
        with self.lock:
            adh = self.book.adherence
            crossed = adh is not None and adh.quiet(self.gate_clock()) >= self.book.timing.silence
            key = (adh.node, adh.epoch, adh.boot) if adh is not None and crossed else None
        if key is not None and key != self._silence_said:
            self._silence_said = key
            self._wake.set()

    async def _silence_loop(self) -> None:
        """A follower looks at the majority's silence about its holder twice an
        interval once it may hold (`core.serving.silent_holder`; `silence_wait`), and at once
        when another member's beacon comes while the holder is quiet; the instant its own
        quiet reaches `S` it beacons (`_say_silence`); while it
        holds, one cycle is run at once and again every `SILENT_KICK_EVERY` (a cycle busy
        with a slow share, or a lost race, must not leave the takeover to the next poll).
        The elector asks again, and the store decides."""
        while True:
            self._look.clear()
            with contextlib.suppress(TimeoutError):  # or another member's beacon while the holder is quiet
                async with asyncio.timeout(self.silence_wait()):
                    await self._look.wait()
            st = self.standing()
            self._look_quiet(None if st.leader_epoch is not None or st.seen_key is None else st.seen_key[0])
            if st.leader_epoch is not None or st.seen_key is None:
                continue
            self._say_silence()
            node, epoch = st.seen_key[0], st.seen_key[1]
            why = self.silent(node, epoch)
            now = self.monotonic()
            if not why or (self._silent_told == (node, epoch) and now - self._silent_at < SILENT_KICK_EVERY):
                continue
            if self._silent_told != (node, epoch):
                log.warning("%s", why)
            self._silent_told, self._silent_at = (node, epoch), now
            self._hand(Reaction(why))
