"""At-least-once delivery of the relay client across failovers, end to end.

Real sockets on 127.0.0.61-69, real `relay.server.relay_server.RelayServer`s (in the
test's loop, or as a process the test freezes with SIGSTOP and kills with
SIGKILL), real signed lease files. `Cutter` is a real TCP hop between a client
and a relay that can lose the relay's bytes, like a broken network path. Every
wait is a condition with a deadline. The outbox itself is sans-I/O and is also
tested directly.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import socket
from collections.abc import Callable

import pytest
from test_relay_client import (
    KMSN,
    Gate,
    Pool,
    Relay,
    dead_port,
    play,
    received,
    until,
    write_lease,
)

from relay.client import follow
from relay.client.discovery import Discovery, Fallbacks
from relay.client.events import ClientClosed, QueueFull, ServerError
from relay.client.follow import Redial
from relay.client.outbox import IdSource, Outbox
from relay.wire.client_connection import ClientConnection
from relay.wire.events import KeepaliveAck
from relay.wire.framing import encode_frame
from relay.wire.server_connection import ServerConnection

HOST_A, HOST_B, HOST_CUT = "127.0.0.61", "127.0.0.62", "127.0.0.63"
HOST_DEAD = "127.0.0.69"  # nothing ever listens here
AUTO_ID = re.compile(r"^[0-9a-f]{8}-[0-9]+$")
KEEPALIVE_FRAME = encode_frame({"type": "keepalive"})


# -- real parts ------------------------------------------------------------------------
class Cutter:
    """A TCP hop to `upstream`: forwards both ways; `mute` loses what the relay sends;
    `cut()` resets every connection through it. Counts the keepalives going up."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.mute = False
        self.keepalives = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.ip, self.port = "", 0

    async def start(self, host: str) -> Cutter:
        self.server = await asyncio.start_server(self._serve, host, 0)
        self.ip, self.port = self.server.sockets[0].getsockname()[:2]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers += [writer, up_writer]
        await asyncio.gather(self._pipe(reader, up_writer, up=True), self._pipe(up_reader, writer, up=False))

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, up: bool) -> None:
        try:
            while data := await src.read(1 << 16):
                if up:
                    self.keepalives += data.count(KEEPALIVE_FRAME)
                elif self.mute:
                    continue
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.transport.abort()

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        self.cut()
        await self.server.wait_closed()


def on(relay) -> Discovery:  # type: ignore[no-untyped-def]
    return Discovery([Fallbacks([(relay.ip, relay.port)])])


# -- pure parts: the outbox ----------------------------------------------------------------
def _written(box: Outbox, n: int, to: str = "S002", *, ka_sent: int = 0, now: float = 0.0) -> list:
    msgs = [box.make(i, to) for i in range(n)]
    for msg in msgs:
        box.append(msg)
    out = box.take(now)
    for msg in out:
        box.written(msg, ka_sent + 1)
    return msgs


def test_it_confirms_a_message_only_by_the_answer_to_a_keepalive_sent_after_its_routing_was_seen():
    box = Outbox(10, settle=0)
    (msg,) = _written(box, 1)
    # keepalives 1 and 2 go out (2: the periodic one) before the answer to 1 comes
    assert box.acked(1, sent=2) == []  # routed; a no_route for it may still follow the answer
    assert box.acked(2, sent=2) == []  # keepalive 2 may have been read with the message
    assert len(box.window) == 1
    assert box.acked(3, sent=3) == [msg]  # keepalive 3 was sent after answer 1 arrived
    assert len(box) == 0


def test_it_puts_the_unconfirmed_window_back_ahead_of_later_messages_in_send_order():
    box = Outbox(10, settle=0)
    first = _written(box, 3)
    later = box.make("later", "S002")
    box.append(later)
    assert box.acked(1, sent=1) == []
    assert box.lost() == (3, [])
    assert list(box.queue) == [*first, later] and not box.window


def test_it_holds_a_destination_behind_its_probe_and_behind_a_retry_while_settling():
    box = Outbox(10, settle=5.0, retry_delay=0.25)
    box.open(now=100.0)
    a1, a2, b1 = box.make("a1", "S002"), box.make("a2", "S002"), box.make("b1", "S003")
    for msg in (a1, a2, b1):
        box.append(msg)
    assert box.take(100.0) == [a1, b1]  # one probe per destination; a2 waits behind a1
    box.written(a1, 1)
    box.written(b1, 1)
    assert box.acked(1, sent=1) == []  # both routed; keepalive 2 goes out
    assert box.no_route(a1.id, 100.01) == (a1, True)  # S002 is not back yet
    assert a1.not_before == pytest.approx(100.26)
    assert box.acked(2, sent=2) == [b1] and box.reachable == {"S003"}
    assert box.take(100.1) == [] and box.next_wake(100.1) == pytest.approx(100.26)
    assert box.take(100.3) == [a1]  # the retry, still alone: a2 stays behind it
    box.written(a1, 3)
    assert box.acked(3, sent=3) == []
    assert box.acked(4, sent=4) == [a1] and "S002" in box.reachable
    assert box.take(100.4) == [a2]


def test_it_retries_no_route_with_doubling_delays_within_the_window_then_lets_it_through():
    box = Outbox(10, settle=1.0, retry_delay=0.25)
    box.open(now=0.0)
    (msg,) = _written(box, 1)
    at = 0.0
    waits = []
    while True:
        _, retried = box.no_route(msg.id, at)
        if not retried:
            break
        waits.append(round(msg.not_before - at, 3))
        at = msg.not_before
        assert box.take(at) == [msg]
        box.written(msg, 1)
    assert waits == [0.25, 0.5, 0.25]  # the last one is cut to the end of the window
    assert at == 1.0 and not box.window and not box.queue  # surfaced: the caller is told


def test_it_counts_the_window_against_the_bound_and_drops_the_oldest_of_both():
    box = Outbox(3, "drop_oldest", settle=0)
    m1, m2 = _written(box, 2)
    m3 = box.make(3, "S002")
    box.append(m3)
    assert box.full
    m4 = box.make(4, "S002")
    assert box.overflow_admit(m4) == (True, m1)
    assert list(box.window) == [m2] and list(box.queue) == [m3, m4]
    assert Outbox(1, "drop_newest").overflow_admit(m1) == (True, None)
    with pytest.raises(QueueFull):
        full = Outbox(1, "raise")
        full.append(full.make(0, None))
        full.overflow_admit(full.make(1, None))


def test_it_gives_every_message_a_unique_id_with_a_random_prefix():
    one, two = IdSource(), IdSource()
    ids = [one.next() for _ in range(3)]
    assert all(AUTO_ID.match(i) for i in ids) and len(set(ids)) == 3
    assert one.prefix != two.prefix  # two clients (or one restarted) never share ids
    assert Outbox(1, ids=IdSource("abcdef01")).make(1, None).id == "abcdef01-1"


def test_it_reports_keepalive_answers_as_events_only_when_asked():
    for asked in (False, True):
        server = ServerConnection(node="S001", epoch=7, kmsn=KMSN, token="t", nonce="0" * 32, session="s")
        client = ClientConnection(role="agent", kmsn=KMSN, station="S002", token="t", keepalive_acks=asked)
        client.receive_data(server.data_to_send())
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
        client.events_received()
        client.keepalive()
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
        assert client.events_received() == ([KeepaliveAck()] if asked else [])


# -- failover --------------------------------------------------------------------------------
def test_it_delivers_every_unconfirmed_message_exactly_once_and_in_order_after_its_relay_is_killed(
    tmp_path, relay_process
):
    a = relay_process("S061", HOST_A, 7)
    n = 50

    async def body(pool: Pool) -> None:
        write_lease(pool.lease_dir, "S061", a.ip, a.port, 7)
        receiver, sender = pool.client("agent", "S002"), pool.client("commander", "C01")
        await receiver.start(timeout=5)
        await sender.start(timeout=5)
        await sender.send_confirmed("warm-up", to="S002")  # S002 is known to be there: no holding back
        assert (await receiver.receive(5)).data == "warm-up"

        a.proc.send_signal(signal.SIGSTOP)  # reads nothing more, answers nothing more
        outcomes = [await sender.send({"n": i}, to="S002") for i in range(n)]
        assert outcomes == ["sent"] * n
        assert (sender.unconfirmed, sender.pending) == (n, 0)  # no confirmation can have come
        a.proc.kill()  # SIGKILL while stopped: the unread messages die with it
        a.proc.wait(5)
        await until(lambda: sender.pending == n, 5, "the unconfirmed messages to go back into the queue")
        assert sender.unconfirmed == 0 and sender.counters.resent == n

        b = await pool.relay("S062", HOST_B, 8)
        pool.lease(b)
        got = await received(receiver, n, timeout=10)
        assert got == [{"n": i} for i in range(n)]
        await until(lambda: sender.counters.confirmed == n + 1, 5, "B to confirm every message")
        assert (sender.pending, sender.unconfirmed, sender.node, receiver.node) == (0, 0, "S062", "S062")
        assert receiver.counters.duplicates == 0 and receiver.counters.received == n + 1  # nothing more
        assert sender.counters.errors == sender.counters.retried  # no_route only before S002 was back

    play(tmp_path, body)


def test_it_suppresses_the_copies_of_messages_a_relay_routed_but_could_not_confirm(tmp_path):
    n = 20

    async def body(pool: Pool) -> None:
        r = await pool.relay("S063", HOST_A, 7)
        cutter = await Cutter((r.ip, r.port)).start(HOST_CUT)
        try:
            receiver = pool.client("agent", "S002", on(r))
            sender = pool.client("commander", "C01", on(cutter))
            await receiver.start(timeout=5)
            await sender.start(timeout=5)
            await sender.send_confirmed("warm-up", to="S002")

            cutter.mute = True  # the relay's answers are lost on the way back
            for i in range(n):
                await sender.send(i, to="S002")
            first = await received(receiver, n + 1)
            assert first == ["warm-up", *range(n)]
            assert sender.unconfirmed == n and sender.registered
            cutter.mute = False
            cutter.cut()  # the sender reconnects through the hop and sends the window again

            await until(lambda: receiver.counters.duplicates == n, 5, "the second copies to arrive")
            await until(lambda: sender.counters.confirmed == n + 1, 5, "the relay to confirm them")
            assert sender.counters.resent == n and sender.counters.reconnects == 1
            assert receiver.counters.received == 2 * n + 1  # so the inbox holds nothing more
        finally:
            await cutter.close()

    play(tmp_path, body)


def test_it_sends_one_keepalive_after_a_burst_and_one_more_to_confirm_it(tmp_path):
    async def body(pool: Pool) -> None:
        r = await pool.relay("S063", HOST_A, 7)
        cutter = await Cutter((r.ip, r.port)).start(HOST_CUT)
        try:
            receiver = pool.client("agent", "S002", on(r))
            sender = pool.client("commander", "C01", on(cutter))  # keepalive: every 10 s
            await receiver.start(timeout=5)
            await sender.start(timeout=5)
            await sender.send_confirmed("warm-up", to="S002")
            before = cutter.keepalives
            for i in range(100):
                assert await sender.send(i, to="S002") == "sent"
            await until(lambda: sender.unconfirmed == 0, 2, "the burst to be confirmed")
            assert cutter.keepalives - before == 2
            assert len(await received(receiver, 101)) == 101
        finally:
            await cutter.close()

    play(tmp_path, body)


def test_it_retries_no_route_until_the_recipient_registers_on_the_new_relay_a_second_later(tmp_path):
    n = 10

    async def body(pool: Pool) -> None:
        b = await pool.relay("S062", HOST_B, 8)
        write_lease(pool.lease_dir, "S066", HOST_DEAD, dead_port(HOST_DEAD), 7)  # the old leader, dead
        sender = pool.client("commander", "C01")
        starting = asyncio.create_task(sender.start())
        assert [await sender.send({"n": i}, to="S002") for i in range(n)] == ["queued"] * n
        loop = asyncio.get_running_loop()
        pool.lease(b)
        await asyncio.wait_for(starting, 5)
        registered_at = loop.time()
        await until(lambda: sender.counters.retried >= 2, 3, "no_route answers being retried")
        await asyncio.sleep(max(0.0, registered_at + 1.0 - loop.time()))  # the scenario: 1 s later

        receiver = pool.client("agent", "S002", on(b))
        await receiver.start(timeout=5)
        assert await received(receiver, n, timeout=5) == [{"n": i} for i in range(n)]
        await until(lambda: sender.counters.confirmed == n, 5, "every message to be confirmed")
        c = sender.counters
        assert c.errors == c.retried >= 3  # every no_route was retried, none surfaced
        assert receiver.counters.duplicates == 0 and receiver.counters.received == n
        assert sender.pending == sender.unconfirmed == 0

    play(tmp_path, body)


def test_it_surfaces_no_route_after_the_settle_window_and_at_once_outside_it(tmp_path):
    async def body(pool: Pool) -> None:
        b = await pool.relay("S062", HOST_B, 8)
        loop = asyncio.get_running_loop()
        before = loop.time()
        sender = pool.client("commander", "C01", on(b), settle=0.6)
        await sender.start(timeout=5)
        after = loop.time()
        await sender.send("nobody", to="S404", id="in-window")
        error = await sender.receive(5)
        arrived = loop.time()
        assert isinstance(error, ServerError) and (error.code, error.id) == ("no_route", "in-window")
        assert before + 0.6 <= arrived < after + 0.6 + 1.0  # retried until the window ended
        assert sender.counters.retried >= 2

        retried = sender.counters.retried
        sent_at = loop.time()
        await sender.send("nobody", to="S404", id="late")
        error = await sender.receive(5)
        assert isinstance(error, ServerError) and error.id == "late"
        assert loop.time() - sent_at < 0.5 and sender.counters.retried == retried

    play(tmp_path, body)


@pytest.mark.parametrize(
    ("overflow", "late", "delivered", "dropped"),
    [
        ("drop_oldest", ["queued"] * 3, [4, 5, 6, 7], 3),
        ("drop_newest", ["dropped"] * 3, [1, 2, 3, 4], 3),
        ("raise", ["QueueFull"] * 3, [1, 2, 3, 4], 0),
    ],
)
def test_it_counts_the_unconfirmed_window_against_the_queue_bound(
    tmp_path, relay_process, overflow, late, delivered, dropped
):
    a = relay_process("S061", HOST_A, 7)

    async def body(pool: Pool) -> None:
        b = await pool.relay("S062", HOST_B, 8)
        receiver = pool.client("agent", "S002", on(b))
        await receiver.start(timeout=5)
        write_lease(pool.lease_dir, "S061", a.ip, a.port, 7)
        sender = pool.client("commander", "C01", queue_size=4, overflow=overflow, keepalive=0.3, settle=0)
        await sender.start(timeout=5)
        a.proc.send_signal(signal.SIGSTOP)

        def bound_holds() -> bool:
            return sender.pending + sender.unconfirmed <= 4

        assert [await sender.send(i, to="S002") for i in (1, 2, 3, 4)] == ["sent"] * 4
        assert sender.unconfirmed == 4 and bound_holds()
        got = []
        for i in (5, 6, 7):  # the 5th waits for room until the frozen relay is given up
            try:
                got.append(await sender.send(i, to="S002"))
            except QueueFull:
                got.append("QueueFull")
            assert bound_holds() and not sender.registered
        assert got == late
        assert (sender.pending, sender.unconfirmed, sender.counters.dropped) == (4, 0, dropped)
        assert sender.counters.resent == 4

        pool.lease(b)
        await sender.send_confirmed("end", to="S002", timeout=10)
        assert await received(receiver, 5) == [*delivered, "end"]

    play(tmp_path, body)


def test_it_ends_a_send_waiting_for_room_when_the_client_is_closed(tmp_path, relay_process):
    a = relay_process("S061", HOST_A, 7)

    async def body(pool: Pool) -> None:
        write_lease(pool.lease_dir, "S061", a.ip, a.port, 7)
        client = pool.client("commander", "C01", queue_size=1, settle=0)  # silence: 30 s
        await client.start(timeout=5)
        a.proc.send_signal(signal.SIGSTOP)
        assert await client.send(1, to="S002") == "sent"
        waiting = asyncio.create_task(client.send(2, to="S002"))
        await asyncio.sleep(0)  # let it start: it waits for a confirmation that cannot come
        assert not waiting.done() and client.registered
        await client.close()
        with pytest.raises(ClientClosed):
            await asyncio.wait_for(waiting, 5)
        assert client.status is not None
        assert client.status.reason == "1 unsent or unconfirmed messages discarded"

    play(tmp_path, body)


class Unanswering:
    """A leader's address that answers no client, as a failed host does: `frozen` accepts
    the TCP connection (the kernel of a SIGSTOPped host does) and never says hello; `cut`
    lets no connect complete (a full accept queue drops the SYNs, like a pulled cable)."""

    def __init__(self, host: str, kind: str) -> None:
        self.kind = kind
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.ip, self.port = self.sock.getsockname()[:2]
        self.sock.listen(0)
        self.fillers: list[socket.socket] = []
        if kind == "cut":  # fill the accept queue: later SYNs are dropped, connects hang
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex((self.ip, self.port))
                self.fillers.append(filler)

    def close(self) -> None:
        for s in [self.sock, *self.fillers]:
            s.close()


@pytest.mark.parametrize("kind", ["frozen", "cut"])
def test_an_attempt_at_a_leader_the_lease_replaced_is_given_up_at_once(tmp_path, kind):
    """The client's attempt at a host that does not answer (connect or hello) waits up to
    `connect_timeout`; when the lease names a new leader meanwhile, it goes there at once
    (issue 22: a client registered with the new relay within seconds, not a timeout later)."""
    dead = Unanswering(HOST_CUT, kind)

    async def body(pool: Pool) -> None:
        write_lease(pool.lease_dir, "S063", dead.ip, dead.port, 7)
        client = pool.client("agent", "B01", connect_timeout=30.0)
        started = asyncio.ensure_future(client.start(timeout=40))
        await until(lambda: any(s.kind == "connecting" and s.node == "S063" for s in pool.statuses["B01"]),
                    5, "an attempt at the unanswering leader")  # fmt: skip
        await asyncio.sleep(0.3)  # the attempt is under way (connecting, or waiting for a hello)
        assert not client.registered
        b = await pool.relay("S062", HOST_B, 8)
        loop = asyncio.get_running_loop()
        moved_at = loop.time()
        pool.lease(b)
        await asyncio.wait_for(started, 10)
        took = loop.time() - moved_at
        assert (client.node, client.epoch) == ("S062", 8)
        assert took < 3.0, f"registered with the new leader {took:.2f} s after the lease named it"
        reasons = [s.reason for s in pool.statuses["B01"] if s.kind == "reconnecting"]
        assert any("the lease names S062 epoch 8" in r for r in reasons), reasons

    try:
        play(tmp_path, body)
    finally:
        dead.close()


def _moved_to_a_relay_not_listening_yet(pool: Pool, station: str, waited: Callable[[list], bool], what: str):  # type: ignore[no-untyped-def,type-arg]
    """A client registered with A (epoch 7) whose lease then names B (epoch 8) at a port nothing
    listens on yet (a failover's new leader before its gate opens); once its waits after failed
    attempts at B are `waited` (`what`), B starts to listen there. Returns the client, after it
    registered with B."""

    async def run():  # type: ignore[no-untyped-def]
        a = await pool.relay("S061", HOST_A, 7)
        pool.lease(a)
        # A backoff that would grow to a second and more between attempts at a relay not up yet.
        client = pool.client(
            "agent", station, backoff=Redial(initial=0.05, maximum=2.0, rng=random.Random(7))
        )
        await client.start(timeout=5)
        port_b = dead_port(HOST_B)
        write_lease(pool.lease_dir, "S062", HOST_B, port_b, 8)
        await until(lambda: waited([s.delay for s in _at_b(pool, station)]), 20, what)
        b = Relay("S062", 8, Gate())
        await b.server.start(HOST_B, port_b, 0)
        b.ip, b.port = b.server.addresses["json"]
        pool.relays.append(b)
        await until(lambda: client.registered and client.node == "S062", 10, "the client on B")
        return client

    return run()


def _at_b(pool: Pool, station: str) -> list:  # type: ignore[type-arg]
    """The client's waits after attempts at B that failed (its relay not listening)."""
    return [s for s in pool.statuses[station] if s.kind == "reconnecting" and HOST_B in s.reason]


def test_a_leader_the_lease_newly_names_is_redialled_at_the_first_step_while_its_relay_comes_up(tmp_path):
    """A failover's new leader listens only once its gate opens (in a pool of two up to D and a
    refresh after its lease): the client dials it at the backoff's first step (within `initial`)
    for `COMING_UP` seconds, instead of waits growing to seconds (issue 38's "client moved" tail)."""

    async def body(pool: Pool) -> None:
        client = await _moved_to_a_relay_not_listening_yet(pool, "B02", lambda w: len(w) >= 10, "10 refusals")
        assert client.epoch == 8
        waits = [s.delay for s in _at_b(pool, "B02")]
        assert len(waits) >= 10 and all(w is not None and w <= 0.05 for w in waits), waits

    play(tmp_path, body)


def test_past_coming_up_a_leader_that_does_not_listen_is_redialled_with_the_growing_backoff(
    tmp_path, monkeypatch
):
    """The first step is kept `COMING_UP` seconds only: a new leader whose relay never listens (a
    port taken, a host gone since) is not dialled twenty times a second for ever."""
    monkeypatch.setattr(follow, "COMING_UP", 0.3)

    async def body(pool: Pool) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        grown = await _moved_to_a_relay_not_listening_yet(
            pool,
            "B03",
            lambda w: any(d is not None and d > 0.05 for d in w),
            "a wait longer than the first step",
        )
        assert grown.epoch == 8
        assert loop.time() - began > 0.3  # not before COMING_UP was over

    play(tmp_path, body)
