"""The keyed PROXY protocol v2 header (relay/wire/proxy_header.py): bytes in, a decision out."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.wire import proxy_header as ph
from relay.wire.framing import encode_frame

fuzz = settings(max_examples=int(os.environ.get("STK_FUZZ_EXAMPLES", "300")), deadline=None, database=None)

KEY = "pool-key-3c1e9a77d0b24f6e"
SRC, DST, VIA = ("203.0.113.9", 50123), ("10.0.0.5", 9540), ("10.0.0.5", 41000)


def header(src=SRC, dst=DST, via=VIA, key=KEY) -> bytes:
    return ph.encode(src, dst, via, key)


def test_it_is_a_proxy_v2_header_by_the_spec_with_the_mac_in_a_custom_tlv():
    h = header()
    assert h[:12] == b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a"
    assert h[12] == 0x21 and h[13] == 0x11  # version 2, PROXY; TCP over IPv4
    assert struct.unpack("!H", h[14:16])[0] == len(h) - 16
    assert h[16:20] == bytes([203, 0, 113, 9]) and h[20:24] == bytes([10, 0, 0, 5])
    assert struct.unpack("!HH", h[24:28]) == (50123, 9540)
    assert h[28] == 0xE0 and struct.unpack("!H", h[29:31])[0] == 18 + 32 == len(h) - 31
    assert len(h) <= ph.MAX_HEADER


def test_a_header_verifies_on_its_own_socket_and_says_the_client_and_its_size():
    rest = encode_frame({"type": "register"})
    assert ph.header_reading(header() + rest, KEY, VIA) == ph.Verified(SRC, DST, len(header()))


def test_ipv6_and_mixed_families_round_trip():
    src, dst, via = ("2001:db8::7", 1), ("fd00::1", 9530), ("fd00::2", 2)
    assert ph.header_reading(header(src, dst, via), KEY, via) == ph.Verified(
        src, dst, len(header(src, dst, via))
    )
    h = header(("192.0.2.1", 5), ("fd00::1", 9530), ("::ffff:10.0.0.5", 41000))
    assert h[13] == 0x21
    assert ph.header_reading(h, KEY, ("10.0.0.5", 41000)) == ph.Verified(
        ("192.0.2.1", 5), ("fd00::1", 9530), len(h)
    )


@pytest.mark.parametrize(
    "first",
    [
        encode_frame({"type": "register", "magic": "STKRELAY/1"}),  # a v1 (or legacy) client's first frame
        b"\x00\x00\x00\x10",
        b"GET / HTTP/1.1\r\n",
        b"\r\n\r\n\x00\r\nQUIX\n",  # one byte off the signature
        b"\n",
    ],
)
def test_a_clients_own_first_bytes_are_not_a_header(first: bytes):
    assert ph.header_reading(first, KEY, VIA) is ph.NOT_A_HEADER


def test_no_v1_frame_can_start_like_a_header():
    assert int.from_bytes(ph.SIGNATURE[:4], "big") > 64 << 20  # RELAY_MAX_FRAME's upper bound


def test_every_prefix_of_a_header_needs_more():
    h = header()
    for n in range(len(h)):
        assert ph.header_reading(h[:n], KEY, VIA) is ph.NEED_MORE, n


def test_a_header_made_without_the_key_is_forged():
    reading = ph.header_reading(header(key="guess"), KEY, VIA)
    assert isinstance(reading, ph.HeaderRefused) and reading.cause == ph.FORGED


def test_a_header_without_its_mac_tlv_is_forged():
    h = header()
    bare = h[:12] + bytes([0x21, 0x11]) + struct.pack("!H", 12) + h[16:28]
    assert ph.header_reading(bare, KEY, VIA).cause == ph.FORGED  # type: ignore[union-attr]


def test_a_header_replayed_on_another_socket_is_refused_as_replayed():
    reading = ph.header_reading(header(), KEY, ("10.0.0.5", 41001))
    assert isinstance(reading, ph.HeaderRefused) and reading.cause == ph.REPLAYED
    reading = ph.header_reading(header(), KEY, ("10.0.0.6", 41000))
    assert isinstance(reading, ph.HeaderRefused) and reading.cause == ph.REPLAYED


def test_a_changed_address_breaks_the_mac():
    h = bytearray(header())
    h[19] ^= 1  # the source address's last byte
    assert ph.header_reading(bytes(h), KEY, VIA).cause == ph.FORGED  # type: ignore[union-attr]
    h = bytearray(header())
    h[30 + 18] ^= 1  # a byte of the MAC's via
    assert ph.header_reading(bytes(h), KEY, VIA).cause == ph.FORGED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "ver_cmd, family",
    [(0x11, 0x11), (0x31, 0x11), (0x20, 0x11), (0x22, 0x11), (0x21, 0x31), (0x21, 0x12), (0x21, 0x00)],
)
def test_other_versions_commands_and_families_are_malformed(ver_cmd: int, family: int):
    h = bytearray(header())
    h[12], h[13] = ver_cmd, family
    assert ph.header_reading(bytes(h), KEY, VIA).cause == ph.MALFORMED  # type: ignore[union-attr]


def test_a_header_longer_than_the_bound_is_refused_before_it_is_read():
    h = ph.SIGNATURE + bytes([0x21, 0x11]) + struct.pack("!H", ph.MAX_HEADER)
    assert ph.header_reading(h, KEY, VIA).cause == ph.TOO_LONG  # type: ignore[union-attr]


def test_cut_and_doubled_tlvs_are_malformed():
    h = header()
    cut = h[:14] + struct.pack("!H", len(h) - 16 + 2) + h[16:] + b"\xe1\x00"
    assert ph.header_reading(cut, KEY, VIA).cause == ph.MALFORMED  # type: ignore[union-attr]
    tlv = h[28:]
    doubled = h[:14] + struct.pack("!H", len(h) - 16 + len(tlv)) + h[16:] + tlv
    assert ph.header_reading(doubled, KEY, VIA).cause == ph.MALFORMED  # type: ignore[union-attr]


def test_other_tlvs_are_skipped():
    h = header()
    noop = b"\x04\x00\x03abc"
    padded = h[:14] + struct.pack("!H", len(h) - 16 + len(noop)) + h[16:28] + noop + h[28:]
    assert ph.header_reading(padded, KEY, VIA) == ph.Verified(SRC, DST, len(padded))


def test_the_reader_keeps_the_clients_bytes_after_the_header_whatever_the_chunks():
    rest = encode_frame({"type": "register", "x": "y" * 300})
    data = header() + rest
    for cut in range(len(data) + 1):
        reader = ph.HeaderReader(KEY, VIA)
        reading = reader.feed(data[:cut])
        if reading is ph.NEED_MORE:
            reading = reader.feed(data[cut:])
            assert reader.rest == rest, cut
        else:  # decided on the first chunk: the rest of that chunk is the client's; later chunks go on
            assert reader.rest == data[len(header()) : cut], cut
        assert reading == ph.Verified(SRC, DST, len(header())), cut


def test_the_reader_gives_back_every_byte_of_a_client_that_sent_no_header():
    reader = ph.HeaderReader(KEY, VIA)
    assert reader.feed(b"\r\n") is ph.NEED_MORE
    assert reader.feed(b"GET") is ph.NOT_A_HEADER and reader.rest == b"\r\nGET"


def test_the_senders_bug_raises():
    with pytest.raises(ValueError):
        ph.encode(("not an address", 1), DST, VIA, KEY)
    with pytest.raises(ValueError):
        ph.encode(SRC, ("10.0.0.1", 70000), VIA, KEY)
    with pytest.raises(ValueError):
        ph.encode(SRC, DST, VIA, "")


ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
endpoints = st.tuples(ipv4 | ipv6, st.integers(0, 0xFFFF))


@fuzz
@given(st.binary(max_size=400), endpoints)
def test_random_bytes_never_raise_and_never_verify(data: bytes, peer):
    reading = ph.header_reading(data, KEY, peer)
    assert reading is ph.NOT_A_HEADER or reading is ph.NEED_MORE or isinstance(reading, ph.HeaderRefused)


@fuzz
@given(st.binary(max_size=300), endpoints)
def test_random_bytes_after_the_signature_never_raise_and_never_verify(tail: bytes, peer):
    data = ph.SIGNATURE + tail
    reading = ph.header_reading(data, KEY, peer)
    assert reading is ph.NEED_MORE or isinstance(reading, ph.HeaderRefused)
    reader = ph.HeaderReader(KEY, peer)
    for i in range(0, len(data), 7):
        reading = reader.feed(data[i : i + 7])
    assert len(reader.held) <= ph.MAX_HEADER


@fuzz
@given(endpoints, endpoints, endpoints, st.integers(0, 200), st.integers(0, 255))
def test_a_flipped_byte_never_verifies(src, dst, via, where: int, bit: int):
    h = bytearray(ph.encode(src, dst, via, KEY))
    where %= len(h)
    if bit == 0:
        bit = 1
    h[where] ^= bit
    reading = ph.header_reading(bytes(h), KEY, via)
    if isinstance(reading, ph.Verified):  # only a byte outside the MAC's reach: none exists
        raise AssertionError(f"a flipped byte at {where} verified: {reading}")


@fuzz
@given(endpoints, endpoints, endpoints)
def test_every_header_round_trips_on_its_socket(src, dst, via):
    h = ph.encode(src, dst, via, KEY)
    assert len(h) <= ph.MAX_HEADER
    expected = ph.Verified(ph.canonical(src), ph.canonical(dst), len(h))
    assert ph.header_reading(h + b"\x00\x00\x00\x05", KEY, via) == expected
