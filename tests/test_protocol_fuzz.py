"""Property tests: no input escapes the protocol core, and framing round-trips."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.wire.auth import auth_digest
from relay.wire.client_connection import ClientConnection
from relay.wire.events import MAGIC, PASSTHROUGH_ROLES
from relay.wire.framing import FrameDecoder, ProtocolError, RawData, State, encode_frame
from relay.wire.server_connection import ServerConnection

NONCE = "0123456789abcdef0123456789abcdef"
TOKEN = "secret"
KMSN = "9999-9999-99-99"
MAX_FRAME = 256

fuzz = settings(max_examples=int(os.environ.get("STK_FUZZ_EXAMPLES", "200")), deadline=None, database=None)

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=6)

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
    assert decoded == obj
    assert encode_frame(decoded) == data


@fuzz
@given(st.dictionaries(st.text(st.characters(exclude_categories=())), st.text(), max_size=3))
def test_it_round_trips_strings_that_utf8_cannot_carry(obj):
    data = encode_frame(obj)
    assert decode_all(data) == [obj]
