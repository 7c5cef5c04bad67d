#!/usr/bin/env python3
"""Write docs/protocol-vectors.json: exact bytes of the wire and the share, for other languages.

    python scripts/protocol_vectors.py            # rewrite docs/protocol-vectors.json
    python scripts/protocol_vectors.py --check    # exit 1 if the file differs from what this makes
    python scripts/protocol_vectors.py --stdout   # print it

Everything comes from our own implementation with fixed inputs (keys, nonces,
session ids, records), so the output is the same on every run and machine.
tests/test_protocol_vectors.py checks the implementation against the
committed file, and this script's output against the file. How each number and
string is written is in the file's ``encoding`` section and in docs/relay.md
("Protocol test vectors").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from elections.core.beacons import Beacon  # noqa: E402
from elections.core.lease import LeaseRecord, canonical_json, sign  # noqa: E402
from relay.wire.auth import auth_digest, server_proof  # noqa: E402
from relay.wire.client_connection import ClientConnection  # noqa: E402
from relay.wire.events import MAX_NAME  # noqa: E402
from relay.wire.framing import FrameDecoder, ProtocolError, encode_frame  # noqa: E402
from relay.wire.legacy import LegacyServerConnection, LegacySettings  # noqa: E402
from relay.wire.server_connection import ServerConnection  # noqa: E402
from stkhost.pool_keys import station_credential  # noqa: E402

OUT = ROOT / "docs" / "protocol-vectors.json"
KMSN = "9999-9999-99-99"
TOKEN = "site-token-for-the-vectors-7f3a"
POOL_KEY = "pool-key-for-the-vectors-91c2e"
NONCE = "00112233445566778899aabbccddeeff"
CNONCE = "ffeeddccbbaa99887766554433221100"
SESSION = "5e55105e55105e55"
EPOCH = 7
LEGACY_MAGIC = "STK-OLD-MAGIC-7"  # a stand-in: the site's own is RELAY_LEGACY_MAGIC

ENCODING = {
    "frame": "4-byte unsigned big-endian length N, then N bytes of UTF-8 JSON whose top level is an "
    "object; 1 <= N <= RELAY_MAX_FRAME (default 1048576). N = 0 is bad_request; N over the limit is "
    "frame_too_large, decided from the 4 header bytes alone.",
    "frame_json": "What we send: no whitespace (separators ',' and ':'), keys in the order the message "
    "is built (shown in each vector), non-ASCII characters as raw UTF-8 (never \\u escapes), the "
    'escapes JSON requires (\\" \\\\ \\b \\f \\n \\r \\t, other controls as \\u00XX lowercase). What we '
    "accept: any valid JSON text, any whitespace and key order; NaN, Infinity and numbers that "
    "overflow a double are bad_json.",
    "canonical_json": "What every pool signature (lease, beacon, member, event...) covers: the record "
    "without its 'sig', keys sorted by Unicode code point (not UTF-16 units: all our keys are ASCII), "
    "separators ',' and ':', no whitespace, non-ASCII as raw UTF-8, the same escapes as frame_json. A "
    "verifier re-encodes the fields it parsed, unknown ones included, with these rules.",
    "numbers": "Integers (epoch, renew_seq, port, pid, seq, v) are decimal digits with no sign, "
    "leading zero, fraction or exponent, 0 <= n <= 2^53 - 1. The lease's ttl_s is the one number that "
    "may be a float: a live lease carries the configured LEASE_TTL as a float, written as Python's "
    "repr(): the shortest digits that round-trip, always with a '.' or exponent ('10.0', '2.5', "
    "'0.25'; exponent form 'e-05' / 'e+16' only outside 1e-4 <= x < 1e16, never for a TTL); a "
    "released lease carries the integer 0. A verifier must re-encode a number the way it was written: "
    "a literal with '.' or an exponent as a float in that repr form ('10.00' becomes '10.0'), one "
    "without as an integer. JavaScript's JSON.stringify(10.0) writes '10' and would break the "
    "signature: keep the literal's kind (e.g. parse ttl_s as text) or format floats as repr().",
    "strings": "UTF-8; a lone surrogate escape (\\ud800 not followed by a low surrogate) is bad_json. "
    f"Names (kmsn, station): 1..{MAX_NAME} printable characters (Unicode code points, none of category "
    "C or Z but the space), else bad_request. Nonces and cnonces: 32 lowercase hex. Session ids: 16 "
    "lowercase hex. Beacon boot: 16 lowercase hex. HMACs are sent as 64 lowercase hex (compared "
    "case-insensitively).",
    "hmac": "HMAC-SHA256, key = the UTF-8 bytes of the key text as configured (not hex-decoded), "
    "message = UTF-8 bytes; result as 64 lowercase hex. auth = HMAC(key, nonce|role|kmsn|station); "
    "sauth = HMAC(key, cnonce|session|epoch) with epoch in decimal; a station credential = "
    "HMAC(POOL_KEY, 'station|' + kmsn + '|' + station), and used as a key it is its 64-hex text.",
    "lease_file": "relay_leader.json: the record's fields in the seed's order then ours then unknown "
    "ones, then sig, written with separators ', ' and ': ' and a final newline (the signature covers "
    "the canonical_json form, not these bytes).",
    "beacon": "One UDP datagram <= 1200 bytes: the fields in the order shown, optional 'store' only "
    "when the sender names its store, then sig; separators ',' and ':'.",
}


def hexed(data: bytes) -> str:
    return data.hex()


def frame_vector(direction: str, raw: bytes) -> dict[str, Any]:
    return {"from": direction, "hex": hexed(raw), "json": json.loads(raw[4:])}


def server(**kw: Any) -> ServerConnection:
    args = {
        "node": "S001",
        "epoch": EPOCH,
        "kmsn": KMSN,
        "token": TOKEN,
        "nonce": NONCE,
        "session": SESSION,
        "pool_key": POOL_KEY,
    }
    return ServerConnection(**{**args, **kw})


def handshake(name: str, role: str, station: str, key_name: str, cnonce: str | None) -> dict[str, Any]:
    key = TOKEN if key_name == "token" else station_credential(POOL_KEY, KMSN, station)
    srv = server()
    hello = srv.data_to_send()
    cli = ClientConnection(role=role, kmsn=KMSN, station=station, token=key, epoch=EPOCH, cnonce=cnonce)
    cli.receive_data(hello)
    register = cli.data_to_send()
    srv.receive_data(register)
    registered = srv.data_to_send()
    cli.receive_data(registered)
    assert srv.registration is not None and (cnonce is None or cli.proven), name
    vector: dict[str, Any] = {
        "name": name,
        "inputs": {
            "key": key_name,
            "key_text": key,
            "node": "S001",
            "epoch": EPOCH,
            "kmsn": KMSN,
            "nonce": NONCE,
            "cnonce": cnonce,
            "session": SESSION,
            "role": role,
            "station": station,
        },
        "auth_message": f"{NONCE}|{role}|{KMSN}|{station}",
        "auth": auth_digest(key, NONCE, role, KMSN, station),
        "exchange": [
            frame_vector("server", hello),
            frame_vector("client", register),
            frame_vector("server", registered),
        ],
    }
    if cnonce is not None:
        vector["sauth_message"] = f"{cnonce}|{SESSION}|{EPOCH}"
        vector["sauth"] = server_proof(key, cnonce, SESSION, EPOCH)
    return vector


def refused_handshake(
    name: str = "register with a wrong key: bad_auth, then the server closes",
    key_text: str = "not-the-token",
    station: str = "S002",
) -> dict[str, Any]:
    srv = server()
    hello = srv.data_to_send()
    register = {
        "type": "register",
        "magic": "STKRELAY/1",
        "role": "agent",
        "kmsn": KMSN,
        "station": station,
        "auth": auth_digest(key_text, NONCE, "agent", KMSN, station),
    }
    raw = encode_frame(register)
    srv.receive_data(raw)
    return {
        "name": name,
        "inputs": {"key_text": key_text, "nonce": NONCE, "session": SESSION},
        "exchange": [
            frame_vector("server", hello),
            frame_vector("client", raw),
            frame_vector("server", srv.data_to_send()),
        ],
        "closes": srv.close_expected(),
    }


def decode(raw: bytes, max_frame: int) -> dict[str, Any]:
    decoder = FrameDecoder(max_frame)
    decoder.feed(raw)
    events = decoder.events()
    if not events:
        return {"incomplete": True}
    (item,) = events
    return {"error": item.code} if isinstance(item, ProtocolError) else {"json": item}


def frames() -> list[dict[str, Any]]:
    out = []

    def add(name: str, raw: bytes, max_frame: int) -> None:
        out.append(
            {"name": name, "max_frame": max_frame, "hex": hexed(raw), "result": decode(raw, max_frame)}
        )

    add("empty frame (length 0)", b"\x00\x00\x00\x00", 1 << 20)
    add("the smallest frame: {}", encode_frame({}), 1 << 20)
    small = 64
    base = encode_frame({"type": "send", "data": ""})
    pad = small - (len(base) - 4)
    exact = encode_frame({"type": "send", "data": "x" * pad})
    assert len(exact) - 4 == small
    add(f"exactly max_frame ({small} bytes of payload)", exact, small)
    over = encode_frame({"type": "send", "data": "x" * (pad + 1)})
    add(f"one byte over max_frame ({small + 1}): refused from the header alone", over[:4], small)
    add(
        "the default limit, 1048576, announced: accepted (waits for the payload)",
        (1 << 20).to_bytes(4, "big"),
        1 << 20,
    )
    add("the default limit plus one, 1048577: frame_too_large", ((1 << 20) + 1).to_bytes(4, "big"), 1 << 20)
    add("non-ASCII is raw UTF-8, never escaped", encode_frame({"type": "send", "data": "站台 S002"}), 1 << 20)
    add(
        "a control character is escaped \\u00XX", encode_frame({"type": "send", "data": "a\x01b\nc"}), 1 << 20
    )
    add("valid JSON that is not an object", b"\x00\x00\x00\x02[]", 1 << 20)
    add("NaN is not JSON", b"\x00\x00\x00\x03NaN", 1 << 20)
    add("invalid UTF-8", b"\x00\x00\x00\x02\xff\xfe", 1 << 20)
    lone = b'{"type":"send","data":"\\ud800"}'  # valid JSON; no UTF-8 can hold what it parses to
    add("a lone surrogate escape is bad_json", len(lone).to_bytes(4, "big") + lone, 1 << 20)
    return out


def lease_vector(name: str, record: LeaseRecord) -> dict[str, Any]:
    raw = record.encode(POOL_KEY)
    doc = json.loads(raw)
    body = {k: v for k, v in doc.items() if k != "sig"}
    fields = {name: getattr(record, name) for name in record.to_doc() if name not in record.extra}
    return {
        "name": name,
        "key": "pool_key",
        "record": fields,
        "extra": record.extra,
        "canonical": canonical_json(body).decode(),
        "sig": sign(body, POOL_KEY),
        "file_hex": hexed(raw),
        "file_text": raw.decode(),
    }


def leases() -> list[dict[str, Any]]:
    live = LeaseRecord(
        kmsn=KMSN,
        station="S001",
        ip="192.168.1.10",
        port=9530,
        pid=12345,
        epoch=EPOCH,
        lease_until="20260615203015",
        node="S001",
        renew_seq=4182,
        ttl_s=10.0,
    )
    released = LeaseRecord(
        kmsn=KMSN,
        station="S001",
        ip="192.168.1.10",
        port=9530,
        pid=12345,
        epoch=EPOCH,
        lease_until="20260615203015",
        node="S001",
        renew_seq=4183,
        ttl_s=0,
        handoff_to="S002",
    )
    extra = LeaseRecord(
        kmsn=KMSN,
        station="S003",
        ip="192.168.1.12",
        port=9530,
        pid=7,
        epoch=12,
        lease_until="20260615203015",
        node="S003",
        renew_seq=1,
        ttl_s=2.5,
        extra={"note": "台北 site"},
    )
    return [
        lease_vector("a live lease (ttl_s a float: 10.0)", live),
        lease_vector("a released lease handed off (ttl_s the integer 0)", released),
        lease_vector("an unknown field is signed too, non-ASCII raw (ttl_s 2.5)", extra),
    ]


def beacon_vector(name: str, beacon: Beacon) -> dict[str, Any]:
    raw = beacon.encode(POOL_KEY)
    doc = json.loads(raw)
    body = {k: v for k, v in doc.items() if k != "sig"}
    return {
        "name": name,
        "key": "pool_key",
        "fields": beacon.to_doc(),
        "canonical": canonical_json(body).decode(),
        "sig": sign(body, POOL_KEY),
        "hex": hexed(raw),
        "text": raw.decode(),
    }


def beacons() -> list[dict[str, Any]]:
    leader = Beacon(KMSN, "S001", "192.168.1.10", 9530, "leader", EPOCH, 4182, "0123456789abcdef", 991)
    follower = Beacon(
        KMSN,
        "S002",
        "192.168.1.11",
        9530,
        "follower",
        EPOCH,
        4182,
        "fedcba9876543210",
        17,
        store="file:W:\\socket",
    )
    return [
        beacon_vector("a leader beacon", leader),
        beacon_vector("a follower naming its store (optional 'store')", follower),
    ]


def legacy() -> list[dict[str, Any]]:
    out = []
    settings = LegacySettings(LEGACY_MAGIC, 0.3)
    cases = [
        ("an old agent registers with the site token", {"token": TOKEN}),
        (
            "an old commander registers with its station credential",
            {"role": "commander", "station": "C01", "token": station_credential(POOL_KEY, KMSN, "C01")},
        ),
        ("a wrong token: bad_auth, then close", {"token": "guessed"}),
        ("the right token, another KMSN: wrong_kmsn, then close", {"kmsn": "1111-1111-11-11"}),
        (
            f"a station name of {MAX_NAME + 1} characters: bad_request, then close",
            {"station": "S" * (MAX_NAME + 1)},
        ),
    ]
    for name, over in cases:
        conn = LegacyServerConnection(
            legacy=settings,
            node="S001",
            epoch=EPOCH,
            kmsn=KMSN,
            token=TOKEN,
            nonce=NONCE,
            session=SESSION,
            pool_key=POOL_KEY,
        )
        conn.heard()  # the station spoke first: it is never greeted
        register = {
            "type": "register",
            "magic": LEGACY_MAGIC,
            "role": "agent",
            "kmsn": KMSN,
            "station": "S002",
            "token": TOKEN,
            **over,
        }
        raw = encode_frame(register)
        conn.receive_data(raw)
        answer = conn.data_to_send()
        out.append(
            {
                "name": name,
                "magic": LEGACY_MAGIC,
                "inputs": {"session": SESSION, "epoch": EPOCH},
                "exchange": [frame_vector("client", raw), frame_vector("server", answer)],
                "closes": conn.close_expected(),
            }
        )
    return out


def vectors() -> dict[str, Any]:
    return {
        "about": "Exact bytes of stkrelay's relay protocol v1/1.1, the legacy exchange, lease records and "
        "beacons, made by scripts/protocol_vectors.py from the implementation, which "
        "tests/test_protocol_vectors.py checks against this file. Bytes are hex; 'json' and "
        "'text' fields are there to read, the hex is the truth.",
        "version": 1,
        "encoding": ENCODING,
        "keys": {"kmsn": KMSN, "token": TOKEN, "pool_key": POOL_KEY},
        "credentials": [
            {
                "station": s,
                "message": f"station|{KMSN}|{s}",
                "credential": station_credential(POOL_KEY, KMSN, s),
            }
            for s in ("S002", "C01")
        ],
        "handshakes": [
            handshake(
                "protocol 1.1: an agent with the site token proves the server (cnonce, sauth)",
                "agent",
                "S002",
                "token",
                CNONCE,
            ),
            handshake(
                "protocol 1: a commander with its station credential, no cnonce",
                "commander",
                "C01",
                "credential",
                None,
            ),
            refused_handshake(),
            refused_handshake(
                f"a station name of {MAX_NAME + 1} characters, with the right key: bad_request, then close",
                TOKEN,
                "S" * (MAX_NAME + 1),
            ),
        ],
        "frames": frames(),
        "leases": leases(),
        "beacons": beacons(),
        "legacy": legacy(),
    }


def render() -> str:
    return json.dumps(vectors(), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    parser.add_argument("--stdout", action="store_true", help="print instead of writing")
    args = parser.parse_args(argv)
    text = render()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(
            f"{OUT.relative_to(ROOT)}: {'up to date' if same else 'DIFFERS: run scripts/protocol_vectors.py'}"
        )
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
