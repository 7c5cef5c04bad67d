"""Issue 40 on the relay's wires, over real loopback sockets: a lone surrogate anywhere in a frame
(`"\\ud800"`, valid JSON that no UTF-8 can carry) is a protocol error that changes nothing, on
protocol v1, the legacy framing and the cloud; every name is bounded at registration; and a flood
of refused frames at a real `runrelay` is a few log lines, each refusal counted."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from cloudrig import CLOUD_IP, Rig, json_client, until
from harness import wait_until
from test_relay_runrelay import HOST as PROC_HOST
from test_relay_runrelay import RelayProc
from test_relay_server import KMSN, TOKEN, Relay, Wire
from websockets.asyncio.client import connect

from relay.wire.auth import auth_digest
from relay.wire.events import MAGIC, MAX_NAME
from relay.wire.framing import FrameDecoder
from relay.wire.legacy import LegacySettings

LONE = "\\ud800"  # as it stands in the JSON text: an escape that parses to a lone surrogate
CNONCE = "0123456789abcdef" * 2
OLD_MAGIC = "HARBOUR-RELAY-1"
EMOJI_NAME = "\U0001f600" * MAX_NAME  # 64 printable characters: the longest name there is


def framed(text: str) -> bytes:
    payload = text.encode()
    return len(payload).to_bytes(4, "big") + payload


def with_lone_surrogate(doc: dict, where: str) -> str:
    """`doc` as JSON text with a lone surrogate escape at the start of the string value `where`,
    or (where = "key") in a key of its own."""
    text = json.dumps(doc)
    if where == "key":
        return text[:-1] + ', "x' + LONE + '": 1}'
    marked = text.replace(f'"{where}": "', f'"{where}": "{LONE}', 1)
    assert marked != text, where
    return marked


def refusal_of(wire: Wire) -> dict:
    frame = wire.frame()
    assert frame["type"] == "error", frame
    assert wire.eof()
    return frame


@pytest.fixture
def relays():
    made: list[Relay] = []

    def make(**kw) -> Relay:  # type: ignore[no-untyped-def]
        made.append(Relay(**kw))
        return made[-1]

    yield make
    for relay in made:
        relay.stop()


# -- protocol v1 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["type", "magic", "role", "kmsn", "station", "auth", "cnonce", "key"])
def test_a_lone_surrogate_anywhere_in_a_v1_register_is_bad_json_and_changes_nothing(relays, where):
    relay = relays()
    wire = Wire(relay.json)
    doc = wire.register_frame("agent", "S002", cnonce=CNONCE)  # with the right key: only the escape is wrong
    wire.sock.sendall(framed(with_lone_surrogate(doc, where)))
    error = refusal_of(wire)
    assert error["code"] == "bad_json" and "surrogate" in error["message"]
    snap = relay.snapshot()
    assert snap["refusals"] == {"bad_json": 1} and snap["drops"] == {"protocol_error": 1}
    assert snap["counts"] == {} and snap["stations"]["token"] == []
    assert relay.client("agent", "S002")  # the relay serves on


def test_a_lone_surrogate_in_a_registered_clients_frame_closes_that_client_only(relays):
    relay = relays()
    agent, commander = relay.client("agent", "S002"), relay.client("commander", "C01")
    commander.sock.sendall(framed('{"type": "send", "to": "S002", "data": {"t": "' + LONE + '"}}'))
    assert refusal_of(commander)["code"] == "bad_json"
    agent.assert_nothing_pending()  # nothing was routed, and the agent stays
    assert relay.snapshot()["counts"] == {KMSN: {"S002": {"agent": 1}}}


def test_a_valid_surrogate_pair_is_one_character_and_registers(relays):
    relay = relays()
    wire = Wire(relay.json)
    doc = wire.register_frame("agent", "\U0001f600")
    wire.sock.sendall(framed(json.dumps(doc)))  # ensure_ascii: the emoji is written as a \\ud83d\\ude00 pair
    assert wire.frame()["type"] == "registered"


# -- the legacy framing (RELAY_LEGACY = 1) ---------------------------------------------------------
@pytest.mark.parametrize("where", ["magic", "kmsn", "station", "token", "key"])
def test_a_lone_surrogate_in_an_old_stations_register_is_bad_json_and_counted_as_legacy(relays, where):
    relay = relays(legacy=LegacySettings(OLD_MAGIC, 0.3))
    wire = Wire(relay.json)  # an old station speaks first: no hello
    doc = {"type": "register", "magic": OLD_MAGIC, "role": "agent", "kmsn": KMSN, "station": "S002",
           "token": TOKEN}  # fmt: skip
    wire.sock.sendall(framed(with_lone_surrogate(doc, where)))
    error = refusal_of(wire)
    assert error["code"] == "bad_json" and "surrogate" in error["message"]
    snap = relay.snapshot()
    assert snap["counts"] == {} and snap["refusals"]["bad_json"] == 1
    if where != "magic":  # a frame that never parsed shows no magic: it is old-looking since it spoke first
        assert snap["legacy"]["refused"] == {"bad_json": 1}


# -- names bounded at registration -----------------------------------------------------------------
BAD_NAMES = {
    "65 characters": "S" * (MAX_NAME + 1),
    "15,000 emoji": "\U0001f600" * 15_000,
    "empty": "",
    "an escape sequence": "S002\x1b[2J",
    "a zero-width space": "S\u200b002",
    "a newline": "S002\nforged log line",
}


@pytest.mark.parametrize("name", list(BAD_NAMES))
@pytest.mark.parametrize("field", ["station", "kmsn"])
def test_a_name_that_is_not_1_to_64_printable_characters_is_bad_request_on_v1_and_legacy(relays, field,
                                                                                          name):  # fmt: skip
    relay = relays(legacy=LegacySettings(OLD_MAGIC, 0.0))
    bad = BAD_NAMES[name]
    v1 = Wire(relay.json)
    v1.greet()
    reg = {**v1.register_frame("agent", "S002"), field: bad}
    reg["auth"] = auth_digest(
        TOKEN, v1.hello["nonce"], "agent", reg["kmsn"], reg["station"]
    )  # a token holder
    v1.send_frame(reg)
    error = refusal_of(v1)
    assert error["code"] == "bad_request" and f"1..{MAX_NAME} printable characters" in error["message"]
    old = Wire(relay.json)
    old.send_frame({"type": "register", "magic": OLD_MAGIC, "role": "agent", "kmsn": KMSN, "station": "S002",
                    "token": TOKEN, field: bad})  # fmt: skip
    frame = old.frame()
    if frame["type"] == "hello":  # RELAY_LEGACY_WAIT = 0: greeted at once, skipped by an old station
        frame = old.frame()
    assert frame["code"] == "bad_request", frame
    snap = relay.snapshot()
    assert snap["counts"] == {} and snap["stations"]["token"] == [] and snap["refusals"]["bad_request"] == 2


def test_a_name_of_64_emoji_registers_on_v1_and_legacy(relays):
    relay = relays(legacy=LegacySettings(OLD_MAGIC, 0.3))
    assert relay.client("agent", EMOJI_NAME)
    old = Wire(relay.json)
    old.send_frame({"type": "register", "magic": OLD_MAGIC, "role": "commander", "kmsn": KMSN,
                    "station": EMOJI_NAME, "token": TOKEN})  # fmt: skip
    assert old.frame()["type"] == "registered"


# -- the cloud: a remote client's register, a tunnel's handshake ------------------------------------
def test_the_cloud_refuses_a_lone_surrogate_and_an_unbounded_name_before_any_tunnel(tmp_path):
    async def scenario():  # type: ignore[no-untyped-def]
        rig = Rig(tmp_path)
        await rig.start()
        _, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the leader's tunnel")

        async def refused(port: int, text_of) -> dict:  # type: ignore[no-untyped-def]
            reader, writer = await asyncio.open_connection(CLOUD_IP, port)
            decoder = FrameDecoder()
            frames: list = []
            while not frames:
                decoder.feed(await asyncio.wait_for(reader.read(65536), 5))
                frames += decoder.events()
            hello = frames.pop(0)
            writer.write(framed(text_of(hello["nonce"])))
            while not frames:
                data = await asyncio.wait_for(reader.read(65536), 5)
                assert data, "closed without an error frame"
                decoder.feed(data)
                frames += decoder.events()
            writer.close()
            return frames[0]

        def remote(station: str, where: str | None):  # type: ignore[no-untyped-def]
            def text(nonce: str) -> str:
                doc = {"type": "register", "magic": MAGIC, "role": "commander", "kmsn": KMSN,
                       "station": station}  # fmt: skip
                doc["auth"] = auth_digest(TOKEN, nonce, "commander", KMSN, station)
                return json.dumps(doc) if where is None else with_lone_surrogate(doc, where)

            return text

        for where in ("kmsn", "station", "auth", "key"):
            error = await refused(rig.cfg.relay_port, remote("C01", where))
            assert error["code"] == "bad_json" and "surrogate" in error["message"], error
        error = await refused(rig.cfg.relay_port, remote("C" * (MAX_NAME + 1), None))
        assert error["code"] == "bad_request" and "printable" in error["message"], error

        def tunnel_register(nonce: str) -> str:
            doc = {"type": "register", "magic": MAGIC, "role": "tunnel", "kmsn": KMSN, "station": "S009",
                   "epoch": 8, "auth": "00" * 32, "cnonce": CNONCE, "lease": {}}  # fmt: skip
            return with_lone_surrogate(doc, "station")

        error = await refused(rig.cfg.tunnel_port, tunnel_register)
        assert error["code"] == "bad_json", error
        async with connect(f"ws://{CLOUD_IP}:{rig.cfg.web_port}/ws/relay/", open_timeout=5) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 5))
            await ws.send(remote("C01", "station")(hello["nonce"]))  # the cloud's WebSocket: the same
            error = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert error["code"] == "bad_json", error
        status = rig.cloud.status()
        assert status["refused"] == {"bad_json": 6, "bad_request": 1}
        assert tunnel.state == "connected" and tunnel.accepted == 1  # nothing changed for the site
        _, writer, _ = await json_client(CLOUD_IP, rig.cfg.relay_port, "commander", EMOJI_NAME)
        writer.close()
        await rig.stop()

    asyncio.run(scenario())


# -- a flood at a real relay process ----------------------------------------------------------------
@pytest.fixture
def relay_proc(tmp_path):
    proc = RelayProc(tmp_path)
    yield proc
    proc.kill()


def test_a_thousand_keyless_registers_with_lone_surrogates_are_a_few_log_lines_and_counted(relay_proc):
    relay_proc.write_state()
    relay_proc.start()
    wait_until(relay_proc.serving, 20, "runrelay to serve")
    before = [len(text.splitlines()) for text in relay_proc.output()]
    started, n = time.monotonic(), 1000
    for i in range(n):
        with socket.create_connection((PROC_HOST, relay_proc.port), timeout=5) as sock:
            where = ("station", "kmsn", "auth", "key")[i % 4]
            doc = {"type": "register", "magic": MAGIC, "role": "agent", "kmsn": KMSN, "station": "S002",
                   "auth": "00" * 32}  # fmt: skip
            sock.sendall(framed(with_lone_surrogate(doc, where)))
            decoder, answers = FrameDecoder(), []
            while len(answers) < 2:  # the hello, then the refusal
                data = sock.recv(65536)
                assert data, f"register {i}: closed without an error frame"
                decoder.feed(data)
                answers += decoder.events()
            assert answers[1]["code"] == "bad_json", answers
    took = time.monotonic() - started

    def counted() -> dict:
        return relay_proc.status().get("snapshot", {}).get("refusals", {})

    wait_until(lambda: counted().get("bad_json") == n, 10, "relay.json to count every refusal")
    assert relay_proc.status()["snapshot"]["drops"]["protocol_error"] == n
    out, err = relay_proc.output()
    lines = out.splitlines()[before[0] :] + err.splitlines()[before[1] :]
    assert "Traceback" not in out + err
    assert len(lines) <= 10, f"{len(lines)} log lines for {n} refusals in {took:.1f} s:\n" + "\n".join(lines)
    assert any("bad_json" in line for line in lines)  # the first ones are told, not hidden
    assert relay_proc.client("agent", "S002")  # and it serves on
