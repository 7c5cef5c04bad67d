"""Nothing from the LAN is trusted (docs/design.md §5.4, §8 protocol 1.1), end to end on loopback.

Rogue relays (tiny asyncio servers that cannot prove the key, or that say
``leader_changed`` epoch 10^15), an unsigned leader answer naming a huge
epoch, a man in the middle who injects ``leader_changed`` after the proof,
station credentials, keys-only mode, the replacement rule, and the
connection caps under 2,000 idle sockets. Real sockets on 127.0.0.7x/100+,
real `relay.server.relay_server.RelayServer`s; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import socket
import time
from typing import Any

import pytest
from harness import wait_until
from test_relay_client import KMSN, TOKEN, Gate, Pool, cli, play, until  # noqa: F401  (cli: a fixture)
from test_relay_client import LeaderApi as _LeaderApi
from test_relay_server import Relay as ThreadRelay
from test_relay_server import Wire

from relay.client.discovery import Discovery, Fallbacks
from relay.client.events import Refused
from relay.client.follow import Redial
from relay.client.relay_client import RelayClient
from relay.server.limits import Caps
from relay.server.relay_server import RelayServer
from relay.wire.auth import new_nonce
from relay.wire.events import MAGIC
from relay.wire.framing import FrameDecoder, encode_frame
from stkhost.pool_keys import station_credential

HOST_REAL, HOST_ROGUE, HOST_MITM, HOST_API = "127.0.0.71", "127.0.0.72", "127.0.0.73", "127.0.0.74"
POOL_KEY = "trust-pool-key"
HUGE = 10**15


async def real_relay(pool: Pool, **kw: Any) -> RelayServer:
    server = RelayServer(node="S071", kmsn=KMSN, token=TOKEN, gate=Gate(), epoch=7, **kw)
    await server.start(HOST_REAL, 0, 0)

    class Handle:  # what Pool.close() needs
        def __init__(self) -> None:
            self.server = server

    pool.relays.append(Handle())  # type: ignore[arg-type]
    return server


def client(pool: Pool, station: str, discovery: Discovery, role: str = "agent", **kw: Any) -> RelayClient:
    statuses = pool.statuses.setdefault(station, [])
    kw.setdefault("token", TOKEN)
    made = RelayClient(
        role=role,
        kmsn=KMSN,
        station=station,
        discovery=discovery,
        backoff=Redial(initial=0.05, maximum=0.2, rng=random.Random(station)),
        connect_timeout=2.0,
        on_status=statuses.append,
        **kw,
    )
    pool.clients.append(made)
    return made


class Rogue:
    """A server on the LAN that speaks the protocol but does not know the key."""

    def __init__(self, mode: str) -> None:
        self.mode, self.connections = mode, 0
        self.server: asyncio.Server | None = None
        self.address = ("", 0)

    async def start(self) -> Rogue:
        self.server = await asyncio.start_server(self._serve, HOST_ROGUE, 0)
        self.address = self.server.sockets[0].getsockname()[:2]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        ip, port = self.address
        moved = {"type": "leader_changed", "epoch": HUGE, "ip": ip, "port": port}
        try:
            if self.mode == "leader_changed_at_once":
                writer.write(encode_frame(moved))
                return
            hello = {"type": "hello", "magic": MAGIC, "epoch": HUGE, "node": "S666", "nonce": new_nonce()}
            writer.write(encode_frame(hello))
            await asyncio.wait_for(reader.read(1 << 16), 2)  # the register frame
            registered = {"type": "registered", "epoch": HUGE, "session": "rogue"}
            if self.mode == "bad_sauth":
                registered["sauth"] = "ab" * 32
            writer.write(encode_frame(registered) + encode_frame(moved))
            await writer.drain()
            await asyncio.wait_for(reader.read(1), 2)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


def reasons(pool: Pool, station: str) -> list[str]:
    return [s.reason for s in pool.statuses[station] if s.kind == "reconnecting"]


@pytest.mark.parametrize("mode", ["no_sauth", "bad_sauth", "leader_changed_at_once"])
def test_a_rogue_fallback_cannot_poison_the_epoch_and_the_client_registers_with_the_real_relay(
    tmp_path, mode
):
    async def body(pool: Pool) -> None:
        real = await real_relay(pool)
        rogue = await Rogue(mode).start()
        try:
            fallbacks = Fallbacks([rogue.address, real.addresses["json"]])
            c = client(pool, "S002", Discovery([fallbacks]))
            await c.start(timeout=10)
            assert (c.node, c.epoch, c.known_epoch) == ("S071", 7, 7)
            assert rogue.connections == 1 and rogue.address in c._follower.distrusted
            said = reasons(pool, "S002")[0]
            assert "did not prove" in said or "without proving itself" in said
            # the real relay drops us: the rogue, still avoided, is not asked again
            next(p for p in real.peers if p.station == "S002").drop("test: a blip")
            await until(lambda: c.counters.reconnects == 1 and c.registered, 5, "the client to come back")
            assert rogue.connections == 1 and c.known_epoch == 7
        finally:
            rogue.close()

    play(tmp_path, body)


def test_an_unsigned_leader_answer_with_a_huge_epoch_does_not_make_the_real_leader_refuse_us(tmp_path):
    api = _LeaderApi(HOST_API)

    async def body(pool: Pool) -> None:
        real = await real_relay(pool)
        ip, port = real.addresses["json"]
        api.names("S071", ip, port, HUGE)
        c = client(pool, "S002", Discovery.build(kmsn=KMSN, agents=[api.url]))
        await c.start(timeout=10)
        assert (c.node, c.epoch, c.known_epoch) == ("S071", 7, 7)
        assert not [s for s in pool.statuses["S002"] if s.kind == "refused"]

    try:
        play(tmp_path, body)
    finally:
        api.close()


class Injector:
    """A man in the middle: forwards both ways, and after the relay's proven
    ``registered`` injects ``leader_changed`` epoch 10^15 naming the real relay."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream, self.injected = upstream, 0
        self.server: asyncio.Server | None = None
        self.address = ("", 0)

    async def start(self) -> Injector:
        self.server = await asyncio.start_server(self._serve, HOST_MITM, 0)
        self.address = self.server.sockets[0].getsockname()[:2]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def up() -> None:
            while data := await reader.read(1 << 16):
                up_writer.write(data)

        async def down() -> None:
            decoder = FrameDecoder()
            while data := await up_reader.read(1 << 16):
                decoder.feed(data)
                for frame in decoder.events():
                    assert isinstance(frame, dict)
                    writer.write(encode_frame(frame))
                    if frame.get("type") == "registered":
                        ip, port = self.upstream
                        self.injected += 1
                        writer.write(
                            encode_frame({"type": "leader_changed", "epoch": HUGE, "ip": ip, "port": port})
                        )

        try:
            await asyncio.wait([asyncio.create_task(up()), asyncio.create_task(down())], timeout=10,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            writer.close()
            up_writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


def test_a_leader_changed_injected_after_the_proof_moves_the_epoch_a_bounded_step_then_is_dropped(tmp_path):
    async def body(pool: Pool) -> None:
        real = await real_relay(pool)
        mitm = await Injector(real.addresses["json"]).start()
        try:
            c = client(pool, "S002", Discovery([Fallbacks([mitm.address])]))
            await c.start(timeout=10)  # through the man in the middle: the proof is the relay's
            await until(lambda: c.counters.reconnects >= 1 and c.registered, 10, "the client to re-register")
            assert mitm.injected == 1 and c.leader is not None and c.leader.address == real.addresses["json"]
            assert (c.epoch, c.known_epoch) == (7, 7)
            refused = [s.reason for s in pool.statuses["S002"] if s.kind == "refused"]
            assert refused and "client epoch 23" in refused[0]  # 7 + MAX_EPOCH_JUMP, not 10^15
        finally:
            mitm.close()

    play(tmp_path, body)


# -- station credentials -------------------------------------------------------------------------
def credential(station: str) -> str:
    return station_credential(POOL_KEY, KMSN, station)


def test_a_station_credential_registers_that_station_and_no_other(tmp_path):
    async def body(pool: Pool) -> None:
        real = await real_relay(pool, pool_key=POOL_KEY)
        where = Discovery([Fallbacks([real.addresses["json"]])])
        own = client(pool, "S002", where, token="", credential=credential("S002"))
        await own.start(timeout=5)
        assert next(p for p in real.peers if p.station == "S002").station_key
        other = client(pool, "S003", where, token="", credential=credential("S002"))
        with pytest.raises(Refused) as refused:
            await other.start(timeout=5)
        assert refused.value.code == "bad_auth"

    play(tmp_path, body)


def test_station_keys_only_refuses_the_site_token_and_takes_the_credential(tmp_path):
    async def body(pool: Pool) -> None:
        real = await real_relay(pool, pool_key=POOL_KEY, station_keys_only=True)
        where = Discovery([Fallbacks([real.addresses["json"]])])
        with pytest.raises(Refused) as refused:
            await client(pool, "S002", where).start(timeout=5)
        assert refused.value.code == "bad_auth" and "RELAY_STATION_KEYS_ONLY" in str(refused.value)
        ok = client(pool, "S002", where, token="", credential=credential("S002"))
        await ok.start(timeout=5)
        assert ok.registered

    play(tmp_path, body)


def test_the_site_token_cannot_steal_a_station_held_by_its_credential(tmp_path):
    async def body(pool: Pool) -> None:
        real = await real_relay(pool, pool_key=POOL_KEY)
        where = Discovery([Fallbacks([real.addresses["json"]])])
        holder = client(pool, "S002", where, credential=credential("S002"), token="")
        await holder.start(timeout=5)
        thief = client(pool, "S002", where)  # the site token, as any machine of the site has it
        with pytest.raises(Refused) as refused:
            await thief.start(timeout=5)
        assert refused.value.code == "bad_auth" and "held by a client with its station credential" in str(
            refused.value
        )
        commander = client(pool, "C01", where, role="commander")
        await commander.start(timeout=5)
        await commander.send_confirmed({"for": "S002"}, to="S002")
        assert (await holder.receive(5)).data == {"for": "S002"}
        assert holder.counters.reconnects == 0 and real.router.counters.replaced == 0

    play(tmp_path, body)


# -- connection caps ---------------------------------------------------------------------------------
@pytest.fixture
def many_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(hard, max(soft, 8192))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < 5000:
        pytest.skip(f"needs about 5000 file descriptors; the hard limit is {hard}")
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def thread_relay():
    relays: list[ThreadRelay] = []

    def make(**kw: Any) -> ThreadRelay:
        relays.append(ThreadRelay(**kw))
        return relays[-1]

    yield make
    for r in relays:
        r.stop()


def idle_sockets(addr: tuple[str, int], n: int, sources: int) -> list[socket.socket]:
    """`n` connections that never say a word, from `sources` loopback addresses."""
    out = []
    for i in range(n):
        s = socket.socket()
        s.bind((f"127.0.0.{100 + i % sources}", 0))
        s.settimeout(10)
        s.connect(addr)
        out.append(s)
    return out


def register_within(relay: ThreadRelay, station: str, bound: float) -> float:
    start = time.monotonic()
    wire = Wire(relay.json)
    reply = wire.register("agent", station)
    assert reply["type"] == "registered", reply
    took = time.monotonic() - start
    assert took < bound
    wire.sock.close()
    return took


@pytest.mark.parametrize(
    "caps", [None, Caps(total=1000, preauth=100, per_address=60)], ids=["sized_from_rlimit", "small_caps"]
)
def test_2000_idle_connections_do_not_stop_a_legitimate_registration(many_files, thread_relay, caps):
    relay = thread_relay(caps=caps, register_timeout=30.0)
    idle = idle_sockets(relay.json, 2000, sources=40)
    try:
        register_within(relay, "S002", 10.0)
        admission = relay.snapshot()["admission"]
        if caps is None:
            assert admission["refused"] == {"total": 0, "per_address": 0, "evicted": 0}
        else:
            assert admission["refused"]["evicted"] >= 1800 and admission["preauth"] <= 100
            first = idle[0]  # the oldest was evicted with a timeout error after its hello
            first.settimeout(5)
            data = b""
            while chunk := first.recv(1 << 16):
                data += chunk
            decoder = FrameDecoder()
            decoder.feed(data)
            kinds = [(f.get("type"), f.get("code")) for f in decoder.events() if isinstance(f, dict)]
            assert kinds == [("hello", None), ("error", "timeout")]
    finally:
        for s in idle:
            s.close()


def test_over_the_per_address_cap_a_connection_is_closed_without_a_frame_and_counted(thread_relay):
    relay = thread_relay(caps=Caps(total=100, preauth=50, per_address=5))
    socks = idle_sockets(relay.json, 8, sources=1)
    try:
        said = []
        for s in socks:
            s.settimeout(5)
            said.append(s.recv(1 << 16))
        assert sum(1 for d in said if d) == 5 and said[5:] == [b"", b"", b""]
        wait_until(lambda: relay.snapshot()["admission"]["refused"]["per_address"] == 3, 5, "3 refusals")
        register_within(relay, "S002", 5.0)  # another address is not affected
    finally:
        for s in socks:
            s.close()


def test_a_relay_full_of_registered_clients_refuses_newcomers_without_a_frame(thread_relay):
    relay = thread_relay(caps=Caps(total=3, preauth=3, per_address=10))
    clients = [relay.client("agent", f"S00{n}") for n in range(3)]
    late = socket.create_connection(relay.json, timeout=5)
    try:
        assert late.recv(1 << 16) == b""
        snap = relay.snapshot()
        assert snap["admission"]["refused"]["total"] == 1 and snap["admission"]["limits"]["total"] == 3
        clients[0].send_frame({"type": "keepalive"})
        assert clients[0].frame() == {"type": "keepalive_ack"}  # the registered ones are untouched
    finally:
        late.close()


# -- the command line ------------------------------------------------------------------------------
def test_relayclient_registers_with_a_credential_read_from_a_file_and_refuses_an_empty_one(cli):  # noqa: F811
    key = cli.tmp / "S002.key"
    key.write_text(station_credential(TOKEN, KMSN, "S002") + "\n")  # POOL_KEY defaults to the token
    done = cli.run("ping", "--json", "--count", "1", "--station", "S002", "--credential-file", str(key))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["leader"] == "S056"
    assert "warning" not in done.stderr  # nothing was passed on argv
    key.write_text("")
    empty = cli.run("ping", "--station", "S002", "--credential-file", str(key))
    assert empty.returncode == 2 and "is empty" in empty.stderr


def test_relayclient_takes_the_site_token_from_a_file_and_refuses_it_on_argv(cli):  # noqa: F811
    """Turn 2's finding: `--token` shows the site token in `ps` and shell history."""
    relay = f"{cli.relay.ip}:{cli.relay.port}"
    token_file = cli.tmp / "token"
    token_file.write_text("wrong-token-0123456789abcdef\n")  # the environment's token is right: the file wins
    wrong = cli.run("send", "--role", "agent", "--station", "S002", "--token-file", str(token_file),
                    "--fallback", relay, "{}")  # fmt: skip
    assert wrong.returncode == 4 and "bad_auth" in wrong.stderr, wrong.stderr
    token_file.write_text(TOKEN + "\n")
    done = cli.run("ping", "--json", "--count", "1", "--token-file", str(token_file))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["leader"] == "S056" and "warning" not in done.stderr
    on_argv = cli.run("ping", "--count", "1", "--token", TOKEN)  # refused, never used (issue 27)
    assert on_argv.returncode == 2 and "--token" in on_argv.stderr and on_argv.stdout == "", on_argv.stderr
