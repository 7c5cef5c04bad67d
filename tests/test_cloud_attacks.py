"""Attacks on the cloud relay (docs/design.md §14), each over real loopback sockets against a real
`CloudServer` with a real site relay and its tunnel: forged and replayed tunnels, mux credit
abuse, a site that stops reading, slow handshakes, parked-client floods. Each asserts that
nothing changed (the fence, the current tunnel, the other site's traffic) and that the attempt
was counted."""

import asyncio
import json
import logging
import socket
import time
import urllib.request

import pytest
from cloudrig import (
    CLOUD_IP,
    CLOUD_TOKEN,
    CLOUD_TOKENS,
    KMSN,
    OTHER,
    SITE_IP,
    TOKEN,
    Rig,
    json_client,
    lease,
    until,
)

from relay.cloud.peers import PARKED_LIMIT, TUNNEL_WRITE_HIGH
from relay.server.limits import Caps
from relay.wire.auth import new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import REGISTER_TIMEOUT, ErrorReceived, Message, Registered
from relay.wire.lease_mac import CLOUD_SIG, presented
from relay.wire.mux import CLOSE, CREDIT, DATA, MAX_CHUNK, PING, Mux, StreamOpened, frame
from stkhost.pool_keys import cloud_key

LEASE_KEY = cloud_key(TOKEN, KMSN)
OTHER_KEY = cloud_key(TOKEN, OTHER)


class Dial:
    """One connection to the cloud's tunnel port, speaking the tunnel's handshake."""

    def __init__(self, reader, writer, conn):
        self.reader, self.writer, self.conn = reader, writer, conn
        self.sent = bytearray()  # every byte this end sent (to replay it)
        self.rest = bytearray()  # mux bytes after registered
        self.last_error: tuple | None = None  # the refusal's (code, message)

    @classmethod
    async def open(cls, rig, *, node, epoch, doc, kmsn=KMSN, token=None, key=None, replay=None, rcvbuf=0):
        """Dial as `node` with `epoch`, presenting `doc` signed with `key` over the cloud's nonce
        (`key` None: `doc` as it is); or send the bytes `replay` instead of any handshake."""
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (CLOUD_IP, rig.cfg.tunnel_port))
        reader, writer = await asyncio.open_connection(sock=sock)
        extra = {"lease": doc} if key is None else (lambda nonce: {"lease": presented(doc, key, nonce)})
        conn = ClientConnection(role="tunnel", kmsn=kmsn, station=node, token=token or CLOUD_TOKENS[kmsn],
                                epoch=epoch, raw_mode=True, cnonce=new_nonce(), extra=extra)  # fmt: skip
        self = cls(reader, writer, conn)
        self.replay = replay
        return self

    async def outcome(self):
        """The refusal code, 'registered', or 'closed'."""
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), 10)
            if not data:
                return "closed"
            self.conn.receive_data(data)
            out = self.conn.data_to_send()
            if out:
                out = self.replay if self.replay is not None else out
                self.sent += out
                self.writer.write(out)
            for event in self.conn.events_received():
                if isinstance(event, ErrorReceived):
                    self.last_error = (event.code, event.message)
                    return event.code
                if isinstance(event, Registered):
                    return "registered"
                if hasattr(event, "data") and isinstance(event.data, bytes):
                    self.rest += event.data

    def close(self):
        self.writer.close()


async def attempt(rig, **kw):
    dial = await Dial.open(rig, **kw)
    try:
        return await dial.outcome()
    finally:
        dial.close()


def fingerprint(rig):
    """What an attack must not change: the fence, the saved epochs, the current tunnels."""
    cloud = rig.cloud
    saved = cloud.epochs_path.read_text() if cloud.epochs_path.exists() else ""
    current = {k: (r.id, r.epoch, r.node) for k, r in cloud.book.current.items()}
    return dict(cloud.fence.epochs), dict(cloud.fence.holders), saved, current


async def message_flows(rig, server, station, kmsn=KMSN):
    """A remote commander's message reaches a LAN agent of the site through the cloud."""
    agent = await json_client(SITE_IP, server.addresses["json"][1], "agent", f"A{station}", kmsn=kmsn)
    _, writer, conn = await json_client(CLOUD_IP, rig.cfg.relay_port, "commander", station, kmsn=kmsn)
    conn.send_message({"from": station}, to=f"A{station}")
    writer.write(conn.data_to_send())
    try:
        while True:
            data = await asyncio.wait_for(agent[0].read(65536), 5)
            assert data, "the agent was closed"
            agent[2].receive_data(data)
            if any(isinstance(e, Message) for e in agent[2].events_received()):
                return True
    finally:
        writer.close()
        agent[1].close()


def forged(epoch, node="S001"):
    """A lease a CLOUD_TOKEN holder can make: every field right, but no pool key behind it."""
    return {**lease(node, epoch), "sig": "f" * 64}


# -- forged tunnels --------------------------------------------------------------------------------
def test_a_cloud_token_holder_without_the_pool_key_cannot_take_a_site_s_outside_entry(tmp_path, caplog):
    """Must hold: with CLOUD_TOKEN alone, no epoch (higher, the same, huge) and no MAC it can make
    (none, keyed with the token, with a guessed pool key, random) takes the KMSN's tunnel."""
    caplog.set_level(logging.WARNING, logger="stkrelay.cloud")

    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        server, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the leader's tunnel")
        before = fingerprint(rig)
        tries = [
            {"doc": forged(8)},  # no cloud_sig at all
            {"doc": forged(8), "key": CLOUD_TOKEN},  # what the token holder could key a MAC with
            {"doc": forged(1000), "key": cloud_key("a-guessed-pool-key-123456", KMSN)},
            {"doc": {**forged(2**62), CLOUD_SIG: "0" * 64}},
            {"doc": forged(7), "key": CLOUD_TOKEN},  # the leader's own epoch: a "reconnect" would replace it
            {"doc": forged(9, "S666"), "key": cloud_key(CLOUD_TOKEN, KMSN), "node": "S666"},
        ]
        codes = [await attempt(rig, node=t.pop("node", "S001"), epoch=t["doc"]["epoch"], **t) for t in tries]
        assert codes == ["bad_auth"] * len(tries)
        assert fingerprint(rig) == before  # the fence, epochs.json and the current tunnel: untouched
        assert tunnel.state == "connected" and tunnel.accepted == 1 and tunnel.replaced_by is None
        assert await message_flows(rig, server, "C01")  # the outside entry still leads to the real leader
        pool = rig.cloud.status()["pools"][KMSN]
        assert pool["lease_refused"] == {"lease_forged": 5, "lease_unsigned": 1}
        assert pool["last_lease_refused"]["node"] == "S666" and pool["last_lease_refused"]["epoch"] == 9
        assert rig.cloud.status()["tunnel_refusals"] == {"lease_forged": 5, "lease_unsigned": 1}
        metrics = await asyncio.to_thread(get, rig, "/metrics")
        assert f'stkcloud_lease_refused_total{{cause="lease_forged",kmsn="{KMSN}"}} 5.0' in metrics
        await rig.stop()

    asyncio.run(scenario())
    security = [r.getMessage() for r in caplog.records if r.getMessage().startswith("SECURITY")]
    assert len(security) == 6 and "claims S001 epoch 1000, held by S001 epoch 7" in security[2]


def test_replayed_handshakes_sniffed_lease_macs_and_older_genuine_leases_are_refused(tmp_path):
    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        server, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the leader's tunnel")
        # A genuine handshake of the other site's leader, recorded off the (plain TCP) wire.
        genuine = await Dial.open(
            rig, kmsn=OTHER, node="T001", epoch=3, doc=lease("T001", 3, OTHER), key=OTHER_KEY
        )
        assert await genuine.outcome() == "registered"
        genuine.close()
        await until(lambda: OTHER not in rig.cloud.book.current, 5, "the recorded tunnel to close")
        recorded = bytes(genuine.sent)
        sniffed = json.loads(recorded[4:])["lease"]
        before = fingerprint(rig)
        # 1. The whole handshake replayed byte for byte: its auth is over a nonce that is spent.
        replay = await Dial.open(rig, kmsn=OTHER, node="T001", epoch=3, doc={}, replay=recorded)
        assert await replay.outcome() == "bad_auth"
        replay.close()
        # 2. A CLOUD_TOKEN holder's fresh auth with the sniffed lease and its cloud_sig: bound to that nonce.
        assert await attempt(rig, kmsn=OTHER, node="T001", epoch=3, doc=sniffed) == "bad_auth"
        # 3. The old leader (it holds the pool key) with its genuine lease of an older epoch: stale.
        assert await attempt(rig, node="S000", epoch=6, doc=lease("S000", 6), key=LEASE_KEY) == "stale_epoch"
        # 4. ...or of the same epoch from another node: an epoch names one leader.
        assert await attempt(rig, node="S002", epoch=7, doc=lease("S002", 7), key=LEASE_KEY) == "stale_epoch"
        assert fingerprint(rig) == before
        assert tunnel.state == "connected" and tunnel.accepted == 1
        assert await message_flows(rig, server, "C02")
        status = rig.cloud.status()
        assert status["tunnel_refusals"] == {"bad_token": 1, "lease_forged": 1, "stale_epoch": 2}
        assert status["pools"][OTHER]["lease_refused"] == {"lease_forged": 1}
        assert status["refused"] == {"bad_auth": 2, "stale_epoch": 2}
        await rig.stop()

    asyncio.run(scenario())


def test_a_stranger_probing_kmsns_gets_bad_auth_for_a_served_and_an_unserved_one_alike(tmp_path):
    """Without CLOUD_TOKEN, an unknown KMSN and a known one with a bad token get the same error frame
    (nothing tells which KMSNs the cloud serves); the cloud counts each by its real cause."""

    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        _, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the leader's tunnel")
        before, answers = fingerprint(rig), []
        for kmsn in ("0000-0000-00-00", KMSN):  # not served, served
            dial = await Dial.open(rig, kmsn=kmsn, node="S666", epoch=8, doc=lease("S666", 8, kmsn),
                                   token="a-strangers-guess-0123456789")  # fmt: skip
            assert await dial.outcome() == "bad_auth"
            answers.append(dial.last_error)
            dial.close()
        assert answers[0] == answers[1] and "0000-0000-00-00" not in str(answers[0])
        assert fingerprint(rig) == before and tunnel.state == "connected"
        status = rig.cloud.status()
        assert status["tunnel_refusals"] == {"bad_token": 1, "unknown_kmsn": 1}
        assert status["refused"] == {"bad_auth": 2}
        await rig.stop()

    asyncio.run(scenario())


def get(rig, path):
    with urllib.request.urlopen(f"http://{CLOUD_IP}:{rig.cfg.web_port}{path}", timeout=5) as answer:
        return answer.read().decode()


# -- a site that abuses the mux ------------------------------------------------------------------
async def hostile_site(rig, epoch):
    """OTHER's leader (it holds the pool key: the handshake passes), driven by hand, with one
    remote client registering through it: returns the dial, its mux and the stream's id."""
    dial = await Dial.open(
        rig, kmsn=OTHER, node="T001", epoch=epoch, doc=lease("T001", epoch, OTHER), key=OTHER_KEY
    )
    assert await dial.outcome() == "registered"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # it reads nothing: the cloud must hold back
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (CLOUD_IP, rig.cfg.relay_port))
    reader, writer = await asyncio.open_connection(sock=sock)
    client = ClientConnection(role="commander", kmsn=OTHER, station="X01", token=TOKEN)
    client.receive_data(await asyncio.wait_for(reader.read(65536), 5))
    writer.write(client.data_to_send())
    mux = Mux(opener=False)
    mux.receive_data(bytes(dial.rest))
    events = mux.events_received()
    while not any(isinstance(e, StreamOpened) for e in events):
        mux.receive_data(await asyncio.wait_for(dial.reader.read(65536), 5))
        events += mux.events_received()
    stream = next(e.stream for e in events if isinstance(e, StreamOpened))
    return dial, stream, (reader, writer)


ABUSES = {
    "credit for bytes never sent": lambda s: frame(CREDIT, s, (1 << 20).to_bytes(4, "big")),
    "a credit of 0xFFFFFFFF (a 'negative' one)": lambda s: frame(CREDIT, s, (0xFFFFFFFF).to_bytes(4, "big")),
    "a zero credit": lambda s: frame(CREDIT, s, (0).to_bytes(4, "big")),
    # The cloud credits what its client's socket takes; a client that reads nothing takes a few
    # MiB of kernel buffers, then none: 16 MiB sent regardless of credit is beyond the window.
    "DATA beyond the window": lambda s: frame(DATA, s, b"z" * MAX_CHUNK) * (16 << 20 >> 16),
    "DATA on a stream never opened": lambda s: frame(DATA, s + 7, b"z"),
    # issue 40: valid JSON that no UTF-8 can carry is no object either, never an exception
    "a CLOSE whose reason is a lone surrogate": lambda s: frame(CLOSE, s, b'{"reason": "\\ud800"}'),
}


@pytest.mark.parametrize("abuse", list(ABUSES))
def test_a_site_that_abuses_the_mux_credit_loses_its_own_tunnel_and_nothing_else(tmp_path, abuse):
    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        server, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the first site's tunnel")
        dial, stream, (_, writer) = await hostile_site(rig, 3)
        before = fingerprint(rig)
        dial.writer.write(ABUSES[abuse](stream))
        await until(lambda: rig.cloud.counters.get("mux_error", 0) == 1, 5, "the mux error to be counted")
        await until(lambda: OTHER not in rig.cloud.book.current, 5, "the hostile tunnel to be closed")
        # Its remote client is let go: closed, what the cloud held for it dropped within LINGER.
        assert all(r.dead for r in rig.cloud.remotes if r.kmsn == OTHER)
        await until(lambda: not any(r.kmsn == OTHER for r in rig.cloud.remotes), 10, "its client let go")
        epochs, holders, saved, current = before
        assert fingerprint(rig) == (epochs, holders, saved, {KMSN: current[KMSN]})  # only its own tunnel went
        assert tunnel.state == "connected" and tunnel.accepted == 1
        assert await message_flows(rig, server, "C03")
        writer.close()
        dial.close()
        await rig.stop()

    asyncio.run(scenario())


def test_a_site_that_sends_and_never_reads_is_no_longer_read_and_its_buffer_stays_bounded(tmp_path):
    """PINGs whose PONGs the site never reads: without backpressure the cloud would buffer them all."""

    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        server, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the first site's tunnel")
        doc = lease("T001", 3, OTHER)
        dial = await Dial.open(rig, kmsn=OTHER, node="T001", epoch=3, doc=doc, key=OTHER_KEY, rcvbuf=4096)
        writer = dial.writer
        assert await dial.outcome() == "registered"
        peer = rig.cloud.tunnels[OTHER]
        pings = frame(PING, 0) * 20_000  # 180 kB a write
        highest, sent, started = 0, 0, time.monotonic()
        while time.monotonic() - started < 3 and not peer.dead:
            writer.write(pings)
            sent += len(pings)
            try:
                await asyncio.wait_for(writer.drain(), 0.2)
            except (TimeoutError, ConnectionError):
                pass
            if peer.transport is not None and not peer.dead:
                highest = max(highest, peer.transport.get_write_buffer_size())
        assert rig.cloud.counters.get("tunnel_backpressure", 0) >= 1
        assert highest <= TUNNEL_WRITE_HIGH + (1 << 20), (
            f"{highest} bytes buffered for a site that reads nothing"
        )
        # Not read, the site is silent: closed after 3 x keepalive, counted; the other site never noticed.
        await until(lambda: peer.dead, 10, "the stuck site's tunnel to be closed")
        assert rig.cloud.counters.get("tunnel_timeout", 0) == 1
        assert tunnel.state == "connected" and await message_flows(rig, server, "C04")
        writer.close()
        await rig.stop()
        return sent, highest

    sent, highest = asyncio.run(scenario())
    print(f"the site sent {sent >> 20} MiB of PINGs; the cloud held at most {highest >> 10} KiB for it")


# -- slow handshakes ------------------------------------------------------------------------------
def test_a_handshake_sent_byte_by_byte_is_cut_at_its_deadline_and_stalls_no_other_site(tmp_path):
    async def dribble(port, frame_bytes, closed_at):
        reader, writer = await asyncio.open_connection(CLOUD_IP, port)
        opened = time.monotonic()
        await asyncio.wait_for(reader.read(65536), 5)  # the cloud's hello
        for byte in frame_bytes:
            if reader.at_eof():
                break
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break
            try:
                data = await asyncio.wait_for(reader.read(65536), 0.25)
            except TimeoutError:
                continue
            if not data or b"timeout" in data:
                break
        closed_at.append(time.monotonic() - opened)
        writer.close()

    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        register = b"\x00\x00\x04\x00" + b'{"type":"register"' + b" " * 1100  # never complete in 5 s
        closed: list[float] = []
        slow = [asyncio.create_task(dribble(rig.cfg.tunnel_port, register, closed)) for _ in range(10)]
        slow += [asyncio.create_task(dribble(rig.cfg.relay_port, register, closed)) for _ in range(10)]
        await asyncio.sleep(0.5)
        # Meanwhile two sites connect and serve: nothing waits for the slow ones.
        began = time.monotonic()
        server, tunnel = await rig.site("S001", 7)
        other_server, other = await rig.site("T001", 3, OTHER)
        await until(lambda: tunnel.state == other.state == "connected", 5, "both sites' tunnels")
        assert await message_flows(rig, server, "C05") and await message_flows(
            rig, other_server, "C06", OTHER
        )
        served = time.monotonic() - began
        await asyncio.wait_for(asyncio.gather(*slow), 30)
        assert len(closed) == 20 and all(
            REGISTER_TIMEOUT - 0.5 < t < REGISTER_TIMEOUT + 10 for t in closed
        ), closed
        assert served < REGISTER_TIMEOUT  # served while every slow handshake was still dribbling
        status = rig.cloud.status()
        assert status["tunnel_refusals"] == {"timeout": 10} and status["refused"]["timeout"] == 20
        assert {k: (p["tunnel"] or {}).get("epoch") for k, p in status["pools"].items()} == {
            KMSN: 7,
            OTHER: 3,
        }
        await rig.stop()
        return served

    served = asyncio.run(scenario())
    print(f"two sites served in {served:.2f} s beside 20 handshakes sent a byte at a time")


# -- parked floods ---------------------------------------------------------------------------------
def test_a_flood_of_parked_registers_is_capped_per_site_bounded_in_memory_and_counted(tmp_path):
    async def register(kmsn, station):
        reader, writer = await asyncio.open_connection(CLOUD_IP, rig.cfg.relay_port)
        conn = ClientConnection(role="commander", kmsn=kmsn, station=station, token=TOKEN, cnonce=new_nonce())
        conn.receive_data(await asyncio.wait_for(reader.read(65536), 5))
        writer.write(conn.data_to_send())
        await writer.drain()
        conn.events_received()  # the hello
        return reader, writer, conn

    async def answer(client, timeout):
        reader, _, conn = client
        data = await asyncio.wait_for(reader.read(65536), timeout)
        conn.receive_data(data)
        return [getattr(e, "code", type(e).__name__) for e in conn.events_received()]

    async def scenario():
        nonlocal rig
        rig = Rig(tmp_path, park=20.0, park_max=8)
        rig.cloud = type(rig.cloud)(rig.cfg, caps=Caps(total=500, preauth=200, per_address=200))
        await rig.start()
        other_server, other = await rig.site("T001", 3, OTHER)
        await until(lambda: other.state == "connected", 5, "the other site's tunnel")
        flood = [await register(KMSN, f"F{i:02d}") for i in range(40)]
        await until(lambda: rig.cloud.counters.get("park_full", 0) == 32, 5, "the overflow refused")
        assert rig.cloud.status()["pools"][KMSN]["parked"] == 8
        assert [await answer(c, 5) for c in flood[8:]] == [["not_leader"]] * 32  # at once, not after PARK
        # The parked send more than a register: each is cut at PARKED_LIMIT, so memory stays bounded.
        for _, writer, _ in flood[:4]:
            writer.write(b"\x00" * (PARKED_LIMIT + 1))
        await until(lambda: rig.cloud.status()["pools"][KMSN]["parked"] == 4, 5, "the chatty parked cut")
        held = sum(len(r.greeting.buffer) for waiting in rig.cloud.parked.values() for r in waiting)
        assert held <= 8 * PARKED_LIMIT
        # The other site never noticed; the site's tunnel arrives and the parked four get in.
        assert await message_flows(rig, other_server, "C07", OTHER)
        _, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the site's tunnel")
        assert [await answer(c, 5) for c in flood[4:8]] == [["Registered"]] * 4
        counters = rig.cloud.counters
        assert (counters["park_full"], counters["parked"]) == (32, 8)
        assert rig.cloud.refusals["not_leader"] == 32 and rig.cloud.refusals["frame_too_large"] == 4
        for _, writer, _ in flood:
            writer.close()
        await rig.stop()

    rig = None
    asyncio.run(scenario())
