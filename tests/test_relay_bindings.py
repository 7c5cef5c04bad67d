"""Stations bound to their credentials, at the relay (`relay.server.bindings`, `relay.server.binding_feed`).

A real `RelayServer` on loopback, fed the pool's bindings from a real
``stations.json`` by the real `BindingFeed` thread, and real relay clients:
a token-only impostor of a bound station is refused ``bad_auth`` and counted
even while the real station is away, the real station receives every message
the commander sends, a credential registration holds the station before the
pool has bound it, and a reset in the file lets the token in again. Every
wait has a deadline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_relay_client import KMSN, TOKEN, Pool, play
from test_relay_server import Wire
from test_relay_trust import POOL_KEY, client, credential, real_relay

from elections.core.stations import BOUND, UNBIND, StationBook
from elections.ports.local.localstate import LocalState
from relay.client.discovery import Discovery, Fallbacks
from relay.client.events import Received, Refused
from relay.server.binding_feed import BindingFeed
from relay.server.bindings import StationBindings
from relay.server.relay_server import RelayServer
from relay.wire.auth import auth_digest


def write_bindings(data: Path, *events: dict) -> None:
    """stations.json as the worker writes it: the fold of station events."""
    book = StationBook()
    book.apply(list(events))
    LocalState(data).write_stations(book.to_doc())


def bind(station: str, clock: int = 1) -> dict:
    return {"kind": BOUND, "station": station, "node": "S001", "seq": clock, "clock": clock}


async def fed_relay(pool: Pool, data: Path) -> tuple[RelayServer, BindingFeed]:
    bindings = StationBindings()
    feed = BindingFeed(asyncio.get_running_loop(), data, bindings, every=0.05).start()
    assert await feed.first(5)
    relay = await real_relay(pool, pool_key=POOL_KEY, bindings=bindings)
    return relay, feed


async def until(cond, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def refused_code(pool: Pool, station: str, where: Discovery, role: str = "agent") -> str:
    with pytest.raises(Refused) as refused:
        await client(pool, station, where, role=role).start(timeout=5)
    return refused.value.code


def test_a_token_impostor_of_a_bound_station_is_refused_counted_and_the_station_gets_every_message(tmp_path):
    write_bindings(tmp_path, bind("S002"))

    async def body(pool: Pool) -> None:
        relay, feed = await fed_relay(pool, tmp_path)
        where = Discovery([Fallbacks([relay.addresses["json"]])])
        # The real station is away: no live session protects it, only the binding.
        for role in ("agent", "commander"):
            assert await refused_code(pool, "S002", where, role) == "bad_auth"
        assert relay.drops["bound_station"] == 2
        refused = relay.snapshot()["stations"]["refused"]["S002"]
        assert refused["count"] == 2 and refused["peer"].startswith("127.0.0.")
        real = client(pool, "S002", where, token="", credential=credential("S002"))
        await real.start(timeout=5)
        commander = client(pool, "C01", where, role="commander")
        await commander.start(timeout=5)
        for n in range(50):
            await commander.send({"n": n}, to="S002")
            if n % 10 == 0:  # impostors keep trying while the commander talks
                assert await refused_code(pool, "S002", where) == "bad_auth"
        got = []
        while len(got) < 50:
            item = await real.receive(timeout=10)
            if isinstance(item, Received):
                got.append(item.data["n"])
        assert got == list(range(50))
        assert relay.drops["bound_station"] == 2 + 5 and real.counters.reconnects == 0
        assert relay.router.counters.replaced == 0

        def watch() -> dict:  # a viewer names the station it watches (with the site token): never refused
            wire = Wire(relay.addresses["passthrough"])
            try:
                nonce = wire.greet()["nonce"]
                auth = auth_digest(TOKEN, nonce, "viewer", KMSN, "S002")
                return wire.register("viewer", "S002", auth=auth)
            finally:
                wire.sock.close()

        assert (await asyncio.to_thread(watch))["type"] == "registered"
        sessions = {(c["station"], c["role"]): c["key"] for c in relay.snapshot()["clients"]}
        assert sessions[("S002", "agent")] == "station" and sessions[("C01", "commander")] == "token"
        feed.stop()

    play(tmp_path, body)


def test_a_credential_registration_holds_the_station_before_the_pool_binds_it(tmp_path):
    async def body(pool: Pool) -> None:
        relay, feed = await fed_relay(pool, tmp_path)  # no stations.json yet
        where = Discovery([Fallbacks([relay.addresses["json"]])])
        first = client(pool, "S003", where, token="", credential=credential("S003"))
        await first.start(timeout=5)
        await first.close()
        await until(lambda: not any(p.station == "S003" for p in relay.peers), 5, "S003 to leave")
        assert relay.snapshot()["stations"]["credential"] == ["S003"]  # what the worker will bind
        assert await refused_code(pool, "S003", where) == "bad_auth"
        token_user = client(pool, "S004", where)
        await token_user.start(timeout=5)
        assert relay.snapshot()["stations"]["token"] == ["S004"]
        write_bindings(tmp_path, bind("S003"))  # the pool's binding arrives: nothing pending any more
        await until(lambda: relay.bindings.bound == {"S003"}, 5, "the feed to hand in the binding")
        assert relay.snapshot()["stations"]["credential"] == []
        assert await refused_code(pool, "S003", where) == "bad_auth"
        feed.stop()

    play(tmp_path, body)


def test_a_reset_in_the_pool_lets_the_site_token_in_again(tmp_path):
    write_bindings(tmp_path, bind("S005"))

    async def body(pool: Pool) -> None:
        relay, feed = await fed_relay(pool, tmp_path)
        where = Discovery([Fallbacks([relay.addresses["json"]])])
        assert await refused_code(pool, "S005", where) == "bad_auth"
        reset = {"kind": UNBIND, "target": "S005", "node": "S002", "seq": 9, "clock": 2}
        write_bindings(tmp_path, bind("S005"), reset)
        await until(lambda: relay.bindings.bound == frozenset(), 5, "the reset to reach the relay")
        again = client(pool, "S005", where)
        await again.start(timeout=5)
        assert again.registered
        feed.stop()

    play(tmp_path, body)


def test_a_damaged_stations_file_keeps_the_bindings_the_relay_had(tmp_path):
    write_bindings(tmp_path, bind("S006"))

    async def body(pool: Pool) -> None:
        relay, feed = await fed_relay(pool, tmp_path)
        where = Discovery([Fallbacks([relay.addresses["json"]])])
        (tmp_path / "stations.json").write_bytes(b"[" * 100_000)  # junk: not a fold, not evidence
        await asyncio.sleep(0.3)  # several reads of the feed (every 0.05 s)
        assert relay.bindings.bound == {"S006"}
        assert await refused_code(pool, "S006", where) == "bad_auth"
        feed.stop()

    play(tmp_path, body)


def test_a_reset_given_before_the_pool_saw_the_binding_is_not_undone_by_the_old_admission(tmp_path):
    async def body(pool: Pool) -> None:
        relay, feed = await fed_relay(pool, tmp_path)
        where = Discovery([Fallbacks([relay.addresses["json"]])])
        holder = client(pool, "S007", where, token="", credential=credential("S007"))
        await holder.start(timeout=5)
        await holder.close()
        assert relay.snapshot()["stations"]["credential"] == ["S007"]
        # The worker bound it and an operator reset it before the relay read the bind: the pool
        # has decided about S007 since the admission, so the relay stops holding and reporting it.
        reset = {"kind": UNBIND, "target": "S007", "node": "S002", "seq": 3, "clock": 2}
        write_bindings(tmp_path, bind("S007", clock=1), reset)
        await until(
            lambda: relay.snapshot()["stations"]["credential"] == [], 5, "the admission to be settled"
        )
        again = client(pool, "S007", where)
        await again.start(timeout=5)
        assert again.registered
        feed.stop()

    play(tmp_path, body)
