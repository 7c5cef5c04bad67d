"""Relay wire protocol v1 (docs/design.md §8): bytes in, bytes out."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from relay.wire.auth import auth_digest, new_nonce, verify_auth
from relay.wire.client_connection import ClientConnection
from relay.wire.events import (
    MAGIC,
    PASSTHROUGH_ROLES,
    ErrorReceived,
    Hello,
    LeaderChanged,
    Message,
    Registered,
)
from relay.wire.framing import (
    BAD_AUTH,
    BAD_JSON,
    BAD_MAGIC,
    BAD_REQUEST,
    DEFAULT_MAX_FRAME,
    ERROR_CODES,
    FRAME_TOO_LARGE,
    NO_ROUTE,
    NOT_LEADER,
    STALE_EPOCH,
    TIMEOUT,
    WRONG_KMSN,
    FrameDecoder,
    InvalidState,
    PayloadError,
    ProtocolError,
    RawData,
    RelayError,
    State,
    encode_frame,
)
from relay.wire.server_connection import ServerConnection
from stkhost.pool_keys import station_credential

NONCE = "0123456789abcdef0123456789abcdef"
TOKEN = "secret"
KMSN = "9999-9999-99-99"
# openssl: printf '%s' "$NONCE|agent|$KMSN|S002" | openssl dgst -sha256 -hmac secret
AGENT_AUTH = "6068a962a6e5263401db9a26c63b84115115d9fee7e2359e2777bae12efb6bb0"


def make_server(**overrides) -> ServerConnection:
    args = {
        "node": "S001",
        "epoch": 7,
        "kmsn": KMSN,
        "token": TOKEN,
        "nonce": NONCE,
        "session": "sess-1",
    }
    args.update(overrides)
    return ServerConnection(**args)


def register(role: str = "agent", station: str = "S002", **fields) -> dict:
    obj = {"type": "register", "magic": MAGIC, "role": role, "kmsn": KMSN, "station": station}
    obj["auth"] = auth_digest(TOKEN, NONCE, role, fields.get("kmsn", KMSN), station)
    obj.update(fields)
    return obj


def frames(data: bytes) -> list[dict]:
    """Decode everything a connection wrote; it must be whole, valid frames."""
    decoder = FrameDecoder()
    assert decoder.feed(data) == len(data)
    objs = decoder.events()
    assert all(isinstance(obj, dict) for obj in objs)
    assert decoder.buffered == 0
    return objs


def sized_payload(size: int) -> bytes:
    """A JSON object of exactly `size` bytes."""
    payload = b'{"p":"' + b"x" * (size - 8) + b'"}'
    assert len(payload) == size
    return payload


def opened(role: str = "agent", station: str = "S002", **overrides) -> ServerConnection:
    """A server connection that has said hello and registered a client."""
    server = make_server(**overrides)
    server.data_to_send()
    server.receive_data(encode_frame(register(role, station)))
    assert server.state is State.OPEN
    server.data_to_send()
    server.events_received()
    return server


def the_error(server: ServerConnection) -> dict:
    (obj,) = frames(server.data_to_send())
    assert obj["type"] == "error"
    return obj


def pump(client: ClientConnection, server: ServerConnection) -> None:
    """Carry bytes both ways until both ends are quiet."""
    while True:
        down, up = server.data_to_send(), client.data_to_send()
        if not down and not up:
            return
        client.receive_data(down)
        server.receive_data(up)


# --- framing -------------------------------------------------------------------------


def test_it_names_every_error_code_of_the_contract():
    assert sorted(ERROR_CODES) == [
        "bad_auth",
        "bad_json",
        "bad_magic",
        "bad_request",
        "frame_too_large",
        "no_route",
        "not_leader",
        "stale_epoch",
        "timeout",
        "wrong_kmsn",
    ]
    assert MAGIC == "STKRELAY/1"
    assert DEFAULT_MAX_FRAME == 1048576


def test_it_encodes_a_frame_as_big_endian_length_then_compact_json():
    assert encode_frame({"type": "keepalive"}) == b'\x00\x00\x00\x14{"type":"keepalive"}'
    assert encode_frame({"a": [1, {"b": None}]}) == b'\x00\x00\x00\x14{"a":[1,{"b":null}]}'


def test_it_encodes_text_as_utf8_not_escapes():
    assert encode_frame({"s": "é"}) == b'\x00\x00\x00\x0a{"s":"\xc3\xa9"}'


def test_it_escapes_lone_surrogates_that_utf8_cannot_carry():
    assert encode_frame({"s": "\ud800"}) == b'\x00\x00\x00\x0e{"s":"\\ud800"}'


@pytest.mark.parametrize("obj", [[1], "s", None, {"x": float("nan")}, {"x": float("inf")}, {"x": object()}])
def test_it_refuses_to_encode_what_is_not_a_json_object(obj):
    with pytest.raises(PayloadError):
        encode_frame(obj)


def test_it_refuses_to_encode_a_frame_over_the_limit():
    assert len(encode_frame({"p": "x" * 92}, max_frame=100)) == 104
    with pytest.raises(PayloadError):
        encode_frame({"p": "x" * 93}, max_frame=100)
    assert issubclass(PayloadError, RelayError)
    assert issubclass(PayloadError, ValueError)


def test_it_decodes_a_frame_fed_one_byte_at_a_time():
    data = encode_frame({"type": "send", "data": {"k": "ü"}})
    decoder = FrameDecoder()
    for i in range(len(data)):
        assert decoder.feed(data[i : i + 1]) == 1
        if i < len(data) - 1:
            assert decoder.events() == []
    assert decoder.events() == [{"type": "send", "data": {"k": "ü"}}]
    assert decoder.buffered == 0


def test_it_decodes_several_frames_from_one_chunk():
    data = encode_frame({"n": 1}) + encode_frame({"n": 2}) + encode_frame({"n": 3})[:5]
    decoder = FrameDecoder()
    assert decoder.feed(data) == len(data)
    assert decoder.events() == [{"n": 1}, {"n": 2}]
    assert decoder.buffered == 1
    decoder.feed(encode_frame({"n": 3})[5:])
    assert decoder.events() == [{"n": 3}]


def test_it_stops_after_max_frames_and_says_how_much_it_took():
    first = encode_frame({"n": 1})
    decoder = FrameDecoder()
    assert decoder.feed(first + b"rest", max_frames=1) == len(first)
    assert decoder.events() == [{"n": 1}]
    assert decoder.buffered == 0


def test_it_rejects_a_huge_length_as_soon_as_the_header_is_in():
    decoder = FrameDecoder()
    assert decoder.feed(b"\xff\xff\xff") == 3
    assert decoder.events() == []
    assert decoder.feed(b"\xf0" + b"{" * 100) == 1
    assert decoder.events() == [
        ProtocolError(FRAME_TOO_LARGE, "frame of 4294967280 bytes exceeds the limit of 1048576")
    ]
    assert decoder.buffered == 0
    assert decoder.failed


def test_it_accepts_a_frame_of_exactly_max_frame_bytes():
    decoder = FrameDecoder(max_frame=64)
    decoder.feed(b"\x00\x00\x00\x40" + sized_payload(64))
    assert decoder.events() == [{"p": "x" * 56}]


def test_it_rejects_a_frame_of_max_frame_plus_one_bytes():
    decoder = FrameDecoder(max_frame=64)
    assert decoder.feed(b"\x00\x00\x00\x41" + sized_payload(65)) == 4
    assert [e.code for e in decoder.events()] == [FRAME_TOO_LARGE]
    assert decoder.buffered == 0


def test_it_holds_the_default_limit_of_one_mebibyte():
    decoder = FrameDecoder()
    decoder.feed((1 << 20).to_bytes(4, "big") + sized_payload(1 << 20))
    assert decoder.events() == [{"p": "x" * ((1 << 20) - 8)}]
    decoder.feed(((1 << 20) + 1).to_bytes(4, "big"))
    assert [e.code for e in decoder.events()] == [FRAME_TOO_LARGE]


def test_it_rejects_a_zero_length_frame_as_bad_request():
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00\x00\x00")
    assert decoder.events() == [ProtocolError(BAD_REQUEST, "empty frame (length 0)")]


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xfe",  # not UTF-8
        b'{"s":"\xed\xa0\x80"}',  # an encoded surrogate is not UTF-8 either
        b'{"a":1',
        b"{'a':1}",
        b'\xef\xbb\xbf{"a":1}',  # BOM
        b'{"a":NaN}',
        b'{"a":-Infinity}',
        b'{"a":1e400}',  # overflows a double
        b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"a":1}{"b":2}',
    ],
)
def test_it_maps_invalid_utf8_or_json_to_bad_json(payload):
    decoder = FrameDecoder()
    decoder.feed(len(payload).to_bytes(4, "big") + payload)
    (error,) = decoder.events()
    assert error.code == BAD_JSON
    assert error.fatal


@pytest.mark.parametrize("payload", [b"[]", b"1", b'"s"', b"null", b"true"])
def test_it_maps_json_that_is_not_an_object_to_bad_request(payload):
    decoder = FrameDecoder()
    decoder.feed(len(payload).to_bytes(4, "big") + payload)
    (error,) = decoder.events()
    assert error.code == BAD_REQUEST
    assert error.fatal


def test_it_refuses_input_after_a_fatal_error():
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00\x00\x01[")
    assert decoder.feed(encode_frame({"n": 1})) == 0
    assert [e.code for e in decoder.events()] == [BAD_JSON]
    assert decoder.events() == []


# --- auth ----------------------------------------------------------------------------


def test_it_computes_auth_as_hex_hmac_sha256_of_nonce_role_kmsn_station():
    assert auth_digest(TOKEN, NONCE, "agent", KMSN, "S002") == AGENT_AUTH
    assert auth_digest("secret", "0" * 32, "commander", KMSN, "C01") == (
        "08f0bb4e5a8a682b2fb4eeb8e85501b12eaf54dabe03c2102f7c9b1421a9d661"
    )


def test_it_verifies_auth_in_either_case_and_nothing_else():
    assert verify_auth(TOKEN, NONCE, "agent", KMSN, "S002", AGENT_AUTH)
    assert verify_auth(TOKEN, NONCE, "agent", KMSN, "S002", AGENT_AUTH.upper())
    assert not verify_auth(TOKEN, NONCE, "agent", KMSN, "S003", AGENT_AUTH)
    assert not verify_auth("other", NONCE, "agent", KMSN, "S002", AGENT_AUTH)
    assert not verify_auth(TOKEN, NONCE, "agent", KMSN, "S002", AGENT_AUTH[:-1])
    assert not verify_auth(TOKEN, NONCE, "agent", KMSN, "S002", "ü\ud800" * 32)


def test_it_makes_nonces_from_the_injected_source():
    assert new_nonce(lambda n: bytes(range(n))) == "000102030405060708090a0b0c0d0e0f"
    assert len(new_nonce()) == 32
    assert new_nonce() != new_nonce()


def test_it_refuses_a_malformed_nonce_or_an_empty_token():
    with pytest.raises(ValueError):
        make_server(nonce="xyz")
    with pytest.raises(ValueError):
        make_server(nonce=NONCE.upper())
    with pytest.raises(ValueError):
        make_server(token="")


# --- server handshake ----------------------------------------------------------------


def test_it_says_hello_first():
    server = make_server()
    body = b'{"type":"hello","magic":"STKRELAY/1","epoch":7,"node":"S001","nonce":"' + (
        NONCE.encode() + b'"}'
    )
    assert server.data_to_send() == len(body).to_bytes(4, "big") + body
    assert server.state is State.AWAIT_REGISTER
    assert server.data_to_send() == b""


def test_it_draws_a_fresh_nonce_and_session_when_none_is_injected():
    server = ServerConnection(node="S001", epoch=7, kmsn=KMSN, token=TOKEN)
    (hello,) = frames(server.data_to_send())
    assert len(hello["nonce"]) == 32
    assert hello["nonce"] == server.nonce
    assert len(server.session) == 16


def test_it_registers_a_client_that_proves_the_token():
    server = make_server()
    server.data_to_send()
    server.receive_data(encode_frame(register()))
    assert server.data_to_send() == b'\x00\x00\x00\x32{"type":"registered","epoch":7,"session":"sess-1"}'
    assert server.events_received() == [Registered("agent", KMSN, "S002", 7, "sess-1")]
    assert server.state is State.OPEN
    assert not server.close_expected()


def test_it_registers_a_commander_and_a_register_fed_one_byte_at_a_time():
    server = make_server()
    data = encode_frame(register("commander", "C01"))
    for i in range(len(data)):
        server.receive_data(data[i : i + 1])
    assert server.events_received() == [Registered("commander", KMSN, "C01", 7, "sess-1")]


@pytest.mark.parametrize("epoch", [7, 6, 0, None])
def test_it_registers_a_client_whose_epoch_is_not_ahead(epoch):
    server = make_server()
    server.receive_data(encode_frame(register(epoch=epoch)))
    assert server.state is State.OPEN


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"type": "keepalive"}, BAD_REQUEST),
        ({k: v for k, v in register().items() if k != "type"}, BAD_REQUEST),
        (register(type="registered"), BAD_REQUEST),
        (register(magic="STKRELAY/2"), BAD_MAGIC),
        ({k: v for k, v in register().items() if k != "magic"}, BAD_MAGIC),
        (register("viewer"), BAD_REQUEST),
        (register(role=None), BAD_REQUEST),
        (register(role=["agent"]), BAD_REQUEST),
        (register(kmsn=""), BAD_REQUEST),
        (register(station=5), BAD_REQUEST),
        ({k: v for k, v in register().items() if k != "station"}, BAD_REQUEST),
        ({k: v for k, v in register().items() if k != "auth"}, BAD_REQUEST),
        (register(auth=None), BAD_REQUEST),
        (register(epoch="7"), BAD_REQUEST),
        (register(epoch=True), BAD_REQUEST),
        (register(epoch=7.0), BAD_REQUEST),
        (register(kmsn="1111-1111-11-11"), WRONG_KMSN),
        (register(auth="0" * 64), BAD_AUTH),
        (register(auth=AGENT_AUTH, station="S003"), BAD_AUTH),
        (register(auth=""), BAD_AUTH),
        (register(epoch=8), STALE_EPOCH),
    ],
)
def test_it_refuses_a_bad_register_with_the_matching_code_then_closes(frame, code):
    server = make_server()
    server.data_to_send()
    server.receive_data(encode_frame(frame) + encode_frame(register()))
    error = the_error(server)
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert list(error) == ["type", "code", "message"]
    assert server.events_received() == [ProtocolError(code, error["message"], True)]
    assert server.closed
    assert server.close_expected()


def test_it_writes_an_error_frame_byte_for_byte():
    server = make_server()
    server.data_to_send()
    server.receive_data(encode_frame(register(magic="x")))
    body = b'{"type":"error","code":"bad_magic","message":"magic must be STKRELAY/1"}'
    assert server.data_to_send() == len(body).to_bytes(4, "big") + body


def test_it_checks_auth_before_kmsn_and_kmsn_before_epoch_and_gate():
    server = make_server(gate=False)
    server.receive_data(encode_frame(register(kmsn="other", auth="0" * 64, epoch=99)))
    assert server.events_received()[0].code == BAD_AUTH
    server = make_server(gate=False)
    server.receive_data(encode_frame(register(kmsn="other", epoch=99)))  # this site's key, another KMSN
    assert server.events_received()[0].code == WRONG_KMSN
    server = make_server(gate=False)
    server.receive_data(encode_frame(register(auth="0" * 64, epoch=99)))
    assert server.events_received()[0].code == BAD_AUTH
    server = make_server(gate=False)
    server.receive_data(encode_frame(register(epoch=99)))
    assert server.events_received()[0].code == STALE_EPOCH


@pytest.mark.parametrize(
    "key",
    [
        "another-site-token-0123456789",
        station_credential("another-pool-key-0123456789", "1111-1111-11-11", "S002"),
    ],
    ids=["another-sites-token", "another-pools-credential"],
)
def test_a_stranger_naming_another_kmsn_gets_bad_auth_and_never_learns_this_relays_kmsn(key):
    server = make_server()
    server.data_to_send()
    stranger = auth_digest(key, NONCE, "agent", "1111-1111-11-11", "S002")
    server.receive_data(encode_frame(register(kmsn="1111-1111-11-11", auth=stranger)))
    error = the_error(server)
    assert error["code"] == BAD_AUTH and KMSN not in json.dumps(error)
    assert server.closed


@pytest.mark.parametrize("gate", [False, lambda: False, lambda: 1 / 0])
def test_it_refuses_registration_when_the_gate_is_shut(gate):
    server = make_server(gate=gate)
    server.data_to_send()
    server.receive_data(encode_frame(register()))
    assert the_error(server)["code"] == NOT_LEADER
    assert server.closed


def test_it_asks_the_gate_at_registration_time_not_at_hello():
    leader = {"now": True}
    server = make_server(gate=lambda: leader["now"])
    leader["now"] = False
    server.data_to_send()
    server.receive_data(encode_frame(register()))
    assert the_error(server)["code"] == NOT_LEADER


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\xff\xff\xff\xf0", FRAME_TOO_LARGE),
        (b"\x00\x00\x00\x00", BAD_REQUEST),
        (b"\x00\x00\x00\x03{]}", BAD_JSON),
        (b"\x00\x00\x00\x02[]", BAD_REQUEST),
    ],
)
def test_it_closes_on_a_frame_level_error_before_registration(data, code):
    server = make_server()
    server.data_to_send()
    server.receive_data(data)
    assert the_error(server)["code"] == code
    assert server.closed


def test_it_rejects_the_huge_prefix_before_any_payload_arrives():
    server = make_server(max_frame=1024)
    server.data_to_send()
    server.receive_data(b"\xff\xff")
    assert server.data_to_send() == b""
    server.receive_data(b"\xff\xf0")
    assert the_error(server)["code"] == FRAME_TOO_LARGE
    assert server._decoder.buffered == 0


def test_it_registers_with_a_frame_of_exactly_max_frame_but_not_one_byte_more():
    data = encode_frame(register())
    server = make_server(max_frame=len(data) - 4)
    server.receive_data(data)
    assert server.state is State.OPEN
    server = make_server(max_frame=len(data) - 5)
    server.data_to_send()
    server.receive_data(data)
    assert the_error(server)["code"] == FRAME_TOO_LARGE
    assert server.closed


def test_it_times_out_a_client_that_never_registers():
    server = make_server()
    server.data_to_send()
    server.receive_data(encode_frame(register())[:10])
    server.timeout()
    error = the_error(server)
    assert (error["code"], error["message"]) == (TIMEOUT, "no register within 5 s")
    assert server.closed
    server.timeout()
    assert server.data_to_send() == b""


def test_it_ignores_everything_once_closed():
    server = make_server()
    server.data_to_send()
    server.receive_eof()
    server.receive_data(encode_frame(register()))
    assert server.data_to_send() == b""
    assert server.events_received() == []
    assert server.close_expected()


# --- server after registration -------------------------------------------------------


def test_it_answers_keepalive_inside_the_core():
    server = opened()
    server.receive_data(b'\x00\x00\x00\x14{"type":"keepalive"}')
    assert server.data_to_send() == b'\x00\x00\x00\x18{"type":"keepalive_ack"}'
    assert server.events_received() == []
    assert server.state is State.OPEN


def test_it_handles_register_keepalive_and_send_in_one_chunk():
    server = make_server()
    server.data_to_send()
    send = {"type": "send", "data": {"cmd": "x"}}
    server.receive_data(encode_frame(register()) + encode_frame({"type": "keepalive"}) + encode_frame(send))
    assert frames(server.data_to_send()) == [
        {"type": "registered", "epoch": 7, "session": "sess-1"},
        {"type": "keepalive_ack"},
    ]
    assert server.events_received() == [
        Registered("agent", KMSN, "S002", 7, "sess-1"),
        Message(send),
    ]


@pytest.mark.parametrize(
    ("role", "station", "send"),
    [
        ("agent", "S002", {"type": "send", "data": {"k": 1}}),
        ("agent", "S002", {"type": "send", "to": "C01", "data": 5, "id": "m1"}),
        ("commander", "C01", {"type": "send", "to": "S002", "data": {}, "id": "m2"}),
        ("commander", "C01", {"type": "send", "to": "*", "data": None}),
    ],
)
def test_it_surfaces_a_valid_send_as_a_message(role, station, send):
    server = opened(role, station)
    server.receive_data(encode_frame(send))
    assert server.events_received() == [Message(send)]
    assert server.data_to_send() == b""


@pytest.mark.parametrize(
    ("role", "station", "send"),
    [
        ("agent", "S002", {"type": "send", "id": "m1"}),
        ("agent", "S002", {"type": "send", "to": 3, "data": {}, "id": "m1"}),
        ("agent", "S002", {"type": "send", "to": "", "data": {}, "id": "m1"}),
        ("commander", "C01", {"type": "send", "data": {}, "id": "m1"}),
        ("agent", "S002", {"data": {}, "id": "m1"}),
        ("agent", "S002", {"type": 1, "id": "m1"}),
    ],
)
def test_it_closes_on_a_send_that_lacks_a_required_field(role, station, send):
    server = opened(role, station)
    server.receive_data(encode_frame(send))
    error = the_error(server)
    assert (error["code"], error["id"]) == (BAD_REQUEST, "m1")
    assert server.events_received()[0].fatal
    assert server.closed


@pytest.mark.parametrize("kind", ["subscribe", "register", "hello", "keepalive_ack", ""])
def test_it_answers_an_unknown_type_with_bad_request_and_stays_open(kind):
    server = opened()
    server.receive_data(encode_frame({"type": kind, "id": 42}) + encode_frame({"type": "keepalive"}))
    error, ack = frames(server.data_to_send())
    assert (error["code"], error["id"]) == (BAD_REQUEST, 42)
    assert ack == {"type": "keepalive_ack"}
    (event,) = server.events_received()
    assert (event.code, event.fatal) == (BAD_REQUEST, False)
    assert server.state is State.OPEN


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x00\x10\x00\x01", FRAME_TOO_LARGE),
        (b"\x00\x00\x00\x01}", BAD_JSON),
        (b"\x00\x00\x00\x01\x80", BAD_JSON),
        (b"\x00\x00\x00\x04null", BAD_REQUEST),
    ],
)
def test_it_closes_on_a_frame_level_error_after_registration(data, code):
    server = opened()
    server.receive_data(data + encode_frame({"type": "keepalive"}))
    assert the_error(server)["code"] == code
    assert server.closed


def test_it_reports_no_route_and_stays_open():
    server = opened()
    server.no_route("m7")
    body = b'{"type":"error","code":"no_route","message":"no recipient","id":"m7"}'
    assert server.data_to_send() == len(body).to_bytes(4, "big") + body
    server.no_route(None)
    assert frames(server.data_to_send())[0]["id"] is None
    assert server.state is State.OPEN
    assert NO_ROUTE == "no_route"


def test_it_sends_messages_only_while_open():
    server = make_server()
    with pytest.raises(InvalidState):
        server.send({"type": "message", "data": {}})
    server = opened()
    message = {"type": "message", "from": {"role": "commander", "station": "C01"}, "data": {}}
    server.send(message)
    assert frames(server.data_to_send()) == [message]
    server.send_error(NO_ROUTE, "no recipient")
    assert frames(server.data_to_send())[0]["code"] == NO_ROUTE
    server.receive_eof()
    with pytest.raises(InvalidState):
        server.send(message)


def test_it_refuses_to_send_a_frame_the_peer_would_reject():
    server = opened(max_frame=200)
    server.send({"type": "message", "data": "x" * 172})
    assert len(server.data_to_send()) == 204
    with pytest.raises(PayloadError):
        server.send({"type": "message", "data": "x" * 173})


def test_it_times_out_a_silent_open_connection():
    server = opened()
    server.timeout()
    assert the_error(server)["code"] == TIMEOUT
    assert server.closed


def test_it_announces_a_new_leader_then_closes():
    server = opened()
    server.leader_changed(8, "192.168.1.11", 9530)
    body = b'{"type":"leader_changed","epoch":8,"ip":"192.168.1.11","port":9530}'
    assert server.data_to_send() == len(body).to_bytes(4, "big") + body
    assert server.closed
    server = make_server()
    server.data_to_send()
    server.leader_changed()
    assert frames(server.data_to_send()) == [
        {"type": "leader_changed", "epoch": None, "ip": None, "port": None}
    ]
    server.leader_changed(9)
    assert server.data_to_send() == b""


def test_it_fails_with_an_error_frame_once():
    server = opened()
    server.fail(NOT_LEADER, "stepping down")
    assert the_error(server) == {"type": "error", "code": NOT_LEADER, "message": "stepping down"}
    server.fail(TIMEOUT, "again")
    assert server.data_to_send() == b""
    assert server.events_received() == []


# --- passthrough (raw mode) ----------------------------------------------------------


def passthrough(**overrides) -> ServerConnection:
    return make_server(roles=PASSTHROUGH_ROLES, raw_mode=True, **overrides)


def test_it_hands_over_bytes_that_follow_register_in_the_same_chunk():
    server = passthrough()
    server.data_to_send()
    trailing = b"\x00\x00\x00\x01H.264" + encode_frame({"looks": "like a frame"})
    server.receive_data(encode_frame(register("publisher", "S002")) + trailing)
    assert frames(server.data_to_send()) == [{"type": "registered", "epoch": 7, "session": "sess-1"}]
    assert server.events_received() == [
        Registered("publisher", KMSN, "S002", 7, "sess-1"),
        RawData(trailing),
    ]
    server.receive_data(b"\xff\xff\xff\xff")
    server.receive_data(b"")
    assert server.events_received() == [RawData(b"\xff\xff\xff\xff")]
    assert server.state is State.OPEN


def test_it_hands_over_raw_bytes_when_everything_arrives_one_byte_at_a_time():
    server = passthrough()
    data = encode_frame(register("viewer", "S002")) + b"\x00\x00\x00\x00raw"
    for i in range(len(data)):
        server.receive_data(data[i : i + 1])
    events = server.events_received()
    assert events[0] == Registered("viewer", KMSN, "S002", 7, "sess-1")
    assert b"".join(e.data for e in events[1:]) == b"\x00\x00\x00\x00raw"


def test_it_refuses_json_roles_on_the_passthrough_port():
    server = passthrough()
    server.data_to_send()
    server.receive_data(encode_frame(register("agent")) + b"raw")
    assert the_error(server)["code"] == BAD_REQUEST
    assert [type(e) for e in server.events_received()] == [ProtocolError]


def test_it_carries_only_raw_bytes_after_passthrough_registration():
    server = passthrough()
    server.receive_data(encode_frame(register("viewer")))
    server.data_to_send()
    server.send_raw(b"\x00\x00\x01\x67")
    assert server.data_to_send() == b"\x00\x00\x01\x67"
    with pytest.raises(InvalidState):
        server.send({"type": "message"})
    with pytest.raises(InvalidState):
        opened().send_raw(b"x")
    server.leader_changed(8, None, None)
    assert server.data_to_send() == b""
    assert server.closed


def test_it_only_closes_when_failing_a_raw_connection():
    server = passthrough()
    server.receive_data(encode_frame(register("publisher")))
    server.data_to_send()
    server.timeout()
    assert server.data_to_send() == b""
    assert server.closed


def test_it_still_frames_errors_before_passthrough_registration():
    server = passthrough()
    server.data_to_send()
    server.timeout()
    assert the_error(server)["code"] == TIMEOUT


# --- client --------------------------------------------------------------------------


def make_client(**overrides) -> ClientConnection:
    args = {"role": "agent", "kmsn": KMSN, "station": "S002", "token": TOKEN}
    args.update(overrides)
    return ClientConnection(**args)


def test_it_answers_hello_with_a_register_byte_for_byte():
    client = make_client()
    client.receive_data(make_server().data_to_send())
    body = (
        b'{"type":"register","magic":"STKRELAY/1","role":"agent","kmsn":"9999-9999-99-99",'
        b'"station":"S002","auth":"' + AGENT_AUTH.encode() + b'"}'
    )
    assert client.data_to_send() == len(body).to_bytes(4, "big") + body
    assert client.events_received() == [Hello("S001", 7, NONCE)]
    assert client.state is State.AWAIT_REGISTER


def test_it_tells_the_server_which_epoch_the_client_believes_in():
    client = make_client(epoch=7)
    client.receive_data(make_server().data_to_send())
    (register_frame,) = frames(client.data_to_send())
    assert list(register_frame) == ["type", "magic", "role", "kmsn", "station", "epoch", "auth"]
    assert register_frame["epoch"] == 7


def test_it_registers_a_client_against_a_server_end_to_end():
    server, client = make_server(), make_client(role="commander", station="C01")
    pump(client, server)
    assert client.events_received() == [
        Hello("S001", 7, NONCE),
        Registered("commander", KMSN, "C01", 7, "sess-1"),
    ]
    assert server.events_received() == [Registered("commander", KMSN, "C01", 7, "sess-1")]
    client.send_message({"cmd": "reboot"}, to="S002", id="m1")
    client.keepalive()
    pump(client, server)
    assert server.events_received() == [
        Message({"type": "send", "to": "S002", "data": {"cmd": "reboot"}, "id": "m1"})
    ]
    assert client.events_received() == []
    server.no_route("m1")
    server.send({"type": "message", "from": {"role": "agent", "station": "S002"}, "data": 1})
    pump(client, server)
    assert client.events_received() == [
        ErrorReceived(NO_ROUTE, "no recipient", "m1"),
        Message({"type": "message", "from": {"role": "agent", "station": "S002"}, "data": 1}),
    ]
    assert client.state is State.OPEN


def test_it_surfaces_a_refusal_and_closes_the_client():
    server, client = make_server(), make_client(token="wrong")
    pump(client, server)
    assert client.events_received()[-1] == ErrorReceived(BAD_AUTH, "authentication failed")
    assert client.closed
    assert server.closed


def test_it_surfaces_leader_changed_and_closes_the_client():
    server, client = make_server(), make_client()
    pump(client, server)
    client.events_received()
    server.leader_changed(8, "192.168.1.11", 9530)
    pump(client, server)
    assert client.events_received() == [LeaderChanged(8, "192.168.1.11", 9530)]
    assert client.close_expected()


@pytest.mark.parametrize(
    "hello",
    [
        {"type": "hello", "magic": "STKRELAY/2", "epoch": 7, "node": "S001", "nonce": NONCE},
        {"type": "hello", "magic": MAGIC, "epoch": "7", "node": "S001", "nonce": NONCE},
        {"type": "hello", "magic": MAGIC, "epoch": 7, "node": "S001"},
        {"type": "registered", "epoch": 7, "session": "s"},
    ],
)
def test_it_closes_the_client_on_a_bad_hello_without_answering(hello):
    client = make_client()
    client.receive_data(encode_frame(hello))
    (event,) = client.events_received()
    assert event.code in {BAD_MAGIC, BAD_REQUEST}
    assert client.data_to_send() == b""
    assert client.closed


def test_it_closes_the_client_on_a_frame_level_error():
    client = make_client()
    client.receive_data(b"\xff\xff\xff\xf0")
    assert [e.code for e in client.events_received()] == [FRAME_TOO_LARGE]
    assert client.closed
    with pytest.raises(InvalidState):
        client.keepalive()


def test_it_hands_over_raw_bytes_to_a_passthrough_client():
    server = passthrough()
    client = make_client(role="viewer", raw_mode=True)
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    server.send_raw(b"\x00\x00\x00\x01frame")
    client.receive_data(server.data_to_send())
    assert client.events_received()[1:] == [
        Registered("viewer", KMSN, "S002", 7, "sess-1"),
        RawData(b"\x00\x00\x00\x01frame"),
    ]
    client.send_raw(b"up")
    assert client.data_to_send() == b"up"


def test_it_keeps_error_frames_readable_as_json():
    server = make_server()
    server.data_to_send()
    server.receive_data(b"\x00\x00\x00\x01x")
    raw = server.data_to_send()
    assert json.loads(raw[4:])["code"] == BAD_JSON


# --- layering ------------------------------------------------------------------------

RELAY = Path(__file__).resolve().parent.parent / "relay"


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement of `path` names, wherever it sits (functions, TYPE_CHECKING)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_core_imports_no_io_no_clock_and_no_django():
    banned = {"asyncio", "socket", "selectors", "subprocess", "time", "datetime", "django", "channels"}
    for path in (RELAY / "wire").glob("*.py"):  # the whole wire package
        roots = {module.split(".")[0] for module in imported_modules(path)}
        assert roots & banned == set(), path.name


def test_the_relay_modules_import_each_other_without_a_cycle():
    modules = {
        "relay." + ".".join(p.relative_to(RELAY).with_suffix("").parts): p
        for p in RELAY.rglob("*.py")
        if p.stem != "__init__" and "migrations" not in p.parts
    }
    graph = {name: imported_modules(path) & set(modules) - {name} for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name not in done:
            for dep in graph[name]:
                visit(dep, (*path, name))
            done.add(name)

    for name in graph:
        visit(name, ())
