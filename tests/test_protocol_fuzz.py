"""Property tests: no input escapes the protocol core, and framing round-trips."""

from __future__ import annotations

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from elections.core.untrusted import encodable
from relay.cloud.fence import EpochFence
from relay.cloud.handshake import TunnelAcceptor
from relay.cloud.remote import Greeting
from relay.wire.auth import auth_digest
from relay.wire.client_connection import ClientConnection
from relay.wire.events import MAGIC, MAX_NAME, PASSTHROUGH_ROLES
from relay.wire.framing import (
    BAD_JSON,
    BAD_REQUEST,
    FrameDecoder,
    ProtocolError,
    RawData,
    State,
    encode_frame,
)
from relay.wire.legacy import LegacyServerConnection, LegacySettings
from relay.wire.mux import OPEN, Mux, MuxError, frame
from relay.wire.server_connection import ServerConnection

NONCE = "0123456789abcdef0123456789abcdef"
TOKEN = "secret"
KMSN = "9999-9999-99-99"
MAX_FRAME = 256

fuzz = settings(max_examples=int(os.environ.get("STK_FUZZ_EXAMPLES", "200")), deadline=None, database=None)

# Text of every category: hypothesis's st.text() leaves lone surrogates (category Cs) out by
# default, and a lone surrogate is what stopped every reader once (issue 40).
any_text = st.text(st.characters(codec=None, categories=None, exclude_categories=()), max_size=24)
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(any_text, json_values, max_size=6)
# Raw JSON text carrying `\udXXX` escapes: a lone high or low surrogate, or a valid pair.
lone_escape = st.integers(0xD800, 0xDFFF).map(lambda c: f"\\u{c:04x}")
pair_escape = st.tuples(st.integers(0xD800, 0xDBFF), st.integers(0xDC00, 0xDFFF)).map(
    lambda p: f"\\u{p[0]:04x}\\u{p[1]:04X}"
)

# Chunks that are either junk or well-formed frames, so fuzzing also reaches the
# states behind a successful decode.
message_frames = st.builds(
    lambda kind, extra: encode_frame({"type": kind, **extra}),
    st.sampled_from(["keepalive", "send", "register", "hello", "nope", "registered", "error"]),
    st.dictionaries(st.sampled_from(["to", "data", "id", "magic", "epoch"]), json_values),
)
chunks = st.lists(st.binary(max_size=300) | message_frames, max_size=12)


def register_frame(role: str) -> bytes:
    auth = auth_digest(TOKEN, NONCE, role, KMSN, "S002")
    return encode_frame(
        {"type": "register", "magic": MAGIC, "role": role, "kmsn": KMSN, "station": "S002"} | {"auth": auth}
    )


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def decode_all(data: bytes) -> list[dict]:
    decoder = FrameDecoder(max_frame=1 << 24)
    decoder.feed(data)
    objs = decoder.events()
    assert all(isinstance(obj, dict) for obj in objs)
    assert decoder.buffered == 0
    return objs


@fuzz
@given(chunks)
def test_it_never_raises_from_feed_nor_buffers_more_than_a_frame(parts):
    decoder = FrameDecoder(max_frame=MAX_FRAME)
    for part in parts:
        was_failed = decoder.failed
        used = decoder.feed(part)
        assert 0 <= used <= len(part)
        assert decoder.buffered <= MAX_FRAME + 4
        if was_failed:
            assert used == 0
        elif not decoder.failed:
            assert used == len(part)
    events = decoder.events()
    errors = [e for e in events if isinstance(e, ProtocolError)]
    assert len(errors) <= 1
    assert not errors or events[-1] is errors[0]


@fuzz
@given(st.sampled_from([b"", register_frame("agent"), register_frame("commander")]), chunks)
def test_it_never_raises_from_the_server_and_always_writes_whole_frames(prefix, parts):
    server = ServerConnection(node="S001", epoch=7, kmsn=KMSN, token=TOKEN, nonce=NONCE, max_frame=MAX_FRAME)
    server.receive_data(prefix)
    assert server.state is (State.OPEN if prefix else State.AWAIT_REGISTER)
    out = server.data_to_send()
    for part in parts:
        server.receive_data(part)
        assert server._decoder.buffered <= MAX_FRAME + 4
        out += server.data_to_send()
        for event in server.events_received():
            if isinstance(event, ProtocolError) and event.fatal:
                assert server.closed
    server.timeout()
    out += server.data_to_send()
    assert server.closed
    replies = decode_all(out)
    assert replies[0]["type"] == "hello"
    assert all(r["type"] in {"registered", "error", "keepalive_ack"} for r in replies[1:])


@fuzz
@given(st.sampled_from([b"", register_frame("publisher")]), chunks)
def test_it_never_loses_or_parses_a_passthrough_byte(prefix, parts):
    server = ServerConnection(
        node="S001",
        epoch=7,
        kmsn=KMSN,
        token=TOKEN,
        nonce=NONCE,
        roles=PASSTHROUGH_ROLES,
        raw_mode=True,
        max_frame=MAX_FRAME,
    )
    tail = b"".join(parts)
    server.receive_data(prefix + tail[:7])
    server.receive_data(tail[7:])
    events = server.events_received()
    if prefix:
        assert b"".join(e.data for e in events if isinstance(e, RawData)) == tail
        assert server.state is State.OPEN
    else:
        assert not any(isinstance(e, RawData) for e in events)


@fuzz
@given(chunks, st.booleans())
def test_it_never_raises_from_the_client(parts, raw_mode):
    client = ClientConnection(
        role="agent", kmsn=KMSN, station="S002", token=TOKEN, raw_mode=raw_mode, max_frame=64
    )
    hello = {"type": "hello", "magic": MAGIC, "epoch": 7, "node": "S001", "nonce": NONCE}
    client.receive_data(encode_frame(hello))
    for part in parts:
        client.receive_data(part)
        client.events_received()
    decode_all(client.data_to_send())


@fuzz
@given(json_objects, st.lists(st.integers(min_value=0), max_size=5))
def test_it_round_trips_any_json_object_however_it_is_split(obj, cuts):
    data = encode_frame(obj)
    decoder = FrameDecoder(max_frame=len(data))
    for part in split(data, cuts):
        decoder.feed(part)
    (decoded,) = decoder.events()
    if not encodable(obj):  # a lone surrogate: written as an escape, refused when read
        assert isinstance(decoded, ProtocolError) and decoded.code == BAD_JSON
        return
    assert decoded == obj
    assert encode_frame(decoded) == data


@fuzz
@given(st.dictionaries(any_text, any_text, min_size=1, max_size=3), st.integers(0xD800, 0xDFFF))
def test_it_refuses_strings_that_utf8_cannot_carry_as_bad_json(obj, lone):
    key = next(iter(obj))
    obj[key] = obj[key] + chr(lone)
    decoder = FrameDecoder(max_frame=1 << 16)
    decoder.feed(encode_frame(obj))
    (error,) = decoder.events()
    assert isinstance(error, ProtocolError) and error.code == BAD_JSON and "surrogate" in error.message


# -- a lone surrogate anywhere in a register, on every wire (issue 40) ---------------------------
REGISTER_FIELDS = ("type", "magic", "role", "kmsn", "station", "auth", "token", "cnonce", "data")


@st.composite
def register_text_with_an_escape(draw, magic: str = MAGIC, role: str = "agent") -> tuple[bytes, bool]:
    """A register as raw JSON text with a `\\udXXX` escape in one string (a value or a key):
    the payload, and whether the escape is a lone surrogate (else a valid pair)."""
    lone = draw(st.booleans())
    escape = draw(lone_escape if lone else pair_escape)
    doc = {"type": "register", "magic": magic, "role": role, "kmsn": KMSN, "station": "S002",
           "auth": "00" * 32, "token": "not-the-token", "epoch": 7}  # fmt: skip
    fields = [json.dumps(k) + ":" + json.dumps(v) for k, v in doc.items()]
    where = draw(st.sampled_from(REGISTER_FIELDS))
    at = draw(st.integers(0, 4))
    if where in doc and isinstance(doc[where], str) and draw(st.booleans()):
        value = doc[where]
        at = min(at, len(value))
        fields[list(doc).index(where)] = json.dumps(where) + ':"' + value[:at] + escape + value[at:] + '"'
    else:
        fields.append('"' + where[:at] + escape + where[at:] + '":"x"')
    return ("{" + ",".join(fields) + "}").encode(), lone


def old_station_heard(conn: LegacyServerConnection) -> LegacyServerConnection:
    conn.heard()  # an old station speaks first: it is never greeted
    return conn


def refused_register(core: ServerConnection | TunnelAcceptor, payload: bytes) -> list[dict]:
    core.data_to_send()
    core.receive_data(len(payload).to_bytes(4, "big") + payload)
    assert core.close_expected() and core.registration is None
    return decode_all(core.data_to_send())


WIRES = {
    "v1": lambda: ServerConnection(node="S001", epoch=7, kmsn=KMSN, token=TOKEN, nonce=NONCE),
    "legacy": lambda: old_station_heard(
        LegacyServerConnection(
            legacy=LegacySettings("OLDRELAY"), node="S001", epoch=7, kmsn=KMSN, token=TOKEN, nonce=NONCE
        )
    ),
    "tunnel": lambda: TunnelAcceptor(
        tokens={KMSN: TOKEN}, lease_keys={}, judge=EpochFence().judge, nonce=NONCE
    ),
}


@fuzz
@given(st.sampled_from(sorted(WIRES)), st.data())
def test_a_lone_surrogate_anywhere_in_a_register_is_bad_json_on_every_wire(wire, data):
    magic, role = {"v1": (MAGIC, "agent"), "legacy": ("OLDRELAY", "agent"), "tunnel": (MAGIC, "tunnel")}[wire]
    payload, lone = data.draw(register_text_with_an_escape(magic, role))
    (error,) = refused_register(WIRES[wire](), payload)  # refused either way: the key is all zeros
    assert error["type"] == "error"
    if lone:
        assert error["code"] == BAD_JSON and "surrogate" in error["message"]
    else:  # a valid pair is one character again: judged on its merits, never as unencodable
        assert "surrogate" not in error["message"]


@fuzz
@given(st.data())
def test_a_lone_surrogate_in_the_clouds_greeting_is_refused_before_any_tunnel(data):
    payload, lone = data.draw(register_text_with_an_escape())
    greeting = Greeting(nonce=NONCE)
    greeting.receive_data(len(payload).to_bytes(4, "big") + payload)
    if lone:
        assert greeting.refusal is not None and greeting.refusal[0] == BAD_JSON and greeting.kmsn is None
    else:
        assert greeting.refusal is None or "surrogate" not in greeting.refusal[1]


@fuzz
@given(st.sampled_from(["kind", "nonce", "peer", "key"]), lone_escape)
def test_a_lone_surrogate_in_a_mux_open_fails_the_mux_without_raising(where, escape):
    meta = {"kind": "json", "nonce": NONCE, "peer": "203.0.113.9:4000"}
    if where == "key":
        text = '{"k' + escape + '":1,' + json.dumps(meta)[1:]
    else:
        text = json.dumps(meta).replace(f'"{where}": "', f'"{where}": "{escape}', 1)
    mux = Mux(opener=False)
    mux.receive_data(frame(OPEN, 1, text.encode()))
    (event,) = mux.events_received()
    assert isinstance(event, MuxError) and "surrogate" in event.message and mux.failed


# -- names are bounded at registration (issue 40) ------------------------------------------------
printable_names = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S")), min_size=1,
                          max_size=MAX_NAME)  # fmt: skip
bad_names = (
    st.text(st.characters(codec="utf-8", categories=("L", "N", "S")), min_size=MAX_NAME + 1, max_size=400)
    | st.just("")
    | st.builds(
        lambda a, c, b: a + c + b,
        printable_names,
        st.sampled_from(["\n", "\x00", "\u200b", "\x1b"]),
        st.text(max_size=3),
    )
)


@fuzz
@given(st.sampled_from(["v1", "legacy"]), st.sampled_from(["kmsn", "station"]), bad_names)
def test_a_name_that_is_not_1_to_64_printable_characters_is_bad_request(wire, field, name):
    conn = WIRES[wire]()
    magic = MAGIC if wire == "v1" else "OLDRELAY"
    doc = {"type": "register", "magic": magic, "role": "agent", "kmsn": KMSN, "station": "S002",
           "auth": auth_digest(TOKEN, NONCE, "agent", KMSN, "S002"), "token": TOKEN, field: name}  # fmt: skip
    conn.data_to_send()
    conn.receive_data(encode_frame(doc))
    (error,) = decode_all(conn.data_to_send())
    assert error["code"] == BAD_REQUEST and f"1..{MAX_NAME} printable" in error["message"]
    assert conn.registration is None and conn.closed


@fuzz
@given(st.sampled_from(["v1", "legacy"]), printable_names)
def test_a_name_of_1_to_64_printable_characters_registers(wire, station):
    conn = WIRES[wire]()
    magic = MAGIC if wire == "v1" else "OLDRELAY"
    doc = {"type": "register", "magic": magic, "role": "agent", "kmsn": KMSN, "station": station,
           "auth": auth_digest(TOKEN, NONCE, "agent", KMSN, station), "token": TOKEN}  # fmt: skip
    conn.data_to_send()
    conn.receive_data(encode_frame(doc))
    assert conn.registration is not None and conn.registration.station == station
