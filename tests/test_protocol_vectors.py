"""Our implementation against docs/protocol-vectors.json (issue 19 item 4).

The committed file is the source here: every byte string is read from it and
our code must produce it (encoders) and accept it (decoders), so a change of
the wire or of a signature's canonical form fails here before it reaches a
Harbour, C# or JavaScript client built from the file. The last test checks
that scripts/protocol_vectors.py still makes exactly the committed file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elections.core.beacons import Beacon, parse_beacon
from elections.core.lease import LeaseRecord, canonical_json, parse_lease, sign
from relay.wire.auth import auth_digest, server_proof
from relay.wire.client_connection import ClientConnection
from relay.wire.events import Registered
from relay.wire.framing import FrameDecoder, ProtocolError, encode_frame
from relay.wire.legacy import LegacyServerConnection, LegacySettings
from relay.wire.server_connection import ServerConnection
from stkhost.pool_keys import station_credential

ROOT = Path(__file__).resolve().parent.parent
VECTORS = json.loads((ROOT / "docs" / "protocol-vectors.json").read_text(encoding="utf-8"))
KEYS = VECTORS["keys"]


def named(section: str, only: str | None = None) -> Any:
    chosen = [v for v in VECTORS[section] if only is None or only in v]
    return pytest.mark.parametrize("v", chosen, ids=[v.get("name") or v.get("station") for v in chosen])


def exchange(v: dict) -> list[bytes]:
    return [bytes.fromhex(step["hex"]) for step in v["exchange"]]


def raw_hmac(key: str, message: str) -> str:
    """HMAC-SHA256 as the file's encoding section says, without our helpers."""
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def test_the_file_says_how_every_number_and_string_is_written():
    assert set(VECTORS["encoding"]) >= {"frame", "frame_json", "canonical_json", "numbers", "hmac", "strings"}
    assert "repr()" in VECTORS["encoding"]["numbers"] and "'10.0'" in VECTORS["encoding"]["numbers"]


@named("credentials")
def test_station_credentials(v):
    assert v["message"] == f"station|{KEYS['kmsn']}|{v['station']}"
    assert station_credential(KEYS["pool_key"], KEYS["kmsn"], v["station"]) == v["credential"]
    assert raw_hmac(KEYS["pool_key"], v["message"]) == v["credential"]


@named("handshakes")
def test_the_server_side_of_each_handshake_byte_for_byte(v):
    hello, register, answer = exchange(v)
    i = v["inputs"]
    srv = ServerConnection(node=i.get("node", "S001"), epoch=i.get("epoch", 7), kmsn=KEYS["kmsn"],
                           token=KEYS["token"], nonce=i["nonce"], session=i["session"],
                           pool_key=KEYS["pool_key"])  # fmt: skip
    assert srv.data_to_send() == hello
    srv.receive_data(register)
    assert srv.data_to_send() == answer
    if "auth" in v:
        assert isinstance(srv.events_received()[-1], Registered)
    else:
        assert srv.close_expected() is v["closes"] is True


@named("handshakes", only="auth")  # a refused one has no client of ours: its register is made by hand
def test_the_client_side_of_each_handshake_byte_for_byte(v):
    hello, register, answer = exchange(v)
    i = v["inputs"]
    cli = ClientConnection(role=i["role"], kmsn=i["kmsn"], station=i["station"], token=i["key_text"],
                           epoch=i["epoch"], cnonce=i["cnonce"])  # fmt: skip
    cli.receive_data(hello)
    assert cli.data_to_send() == register
    assert v["auth_message"] == f"{i['nonce']}|{i['role']}|{i['kmsn']}|{i['station']}"
    assert auth_digest(i["key_text"], i["nonce"], i["role"], i["kmsn"], i["station"]) == v["auth"]
    assert raw_hmac(i["key_text"], v["auth_message"]) == v["auth"] == json.loads(register[4:])["auth"]
    cli.receive_data(answer)
    assert any(isinstance(e, Registered) for e in cli.events_received())
    if i["cnonce"] is not None:
        assert cli.proven and server_proof(i["key_text"], i["cnonce"], i["session"], i["epoch"]) == v["sauth"]
        assert raw_hmac(i["key_text"], v["sauth_message"]) == v["sauth"] == json.loads(answer[4:])["sauth"]


@named("frames")
def test_frames_at_the_limits(v):
    raw = bytes.fromhex(v["hex"])
    decoder = FrameDecoder(v["max_frame"])
    decoder.feed(raw)
    events = decoder.events()
    result = v["result"]
    if "incomplete" in result:
        assert events == [] and not decoder.failed
    elif "error" in result:
        assert len(events) == 1 and isinstance(events[0], ProtocolError) and events[0].code == result["error"]
    else:
        assert events == [result["json"]]
        assert encode_frame(result["json"], max_frame=v["max_frame"]) == raw  # and we write it so


@named("leases")
def test_lease_records_and_their_signatures(v):
    raw = bytes.fromhex(v["file_hex"])
    assert raw.decode() == v["file_text"]
    record = LeaseRecord(**v["record"], extra=v["extra"])
    assert record.encode(KEYS["pool_key"]) == raw
    read = parse_lease(raw, KEYS["pool_key"])
    assert read.status == "valid" and read.record == record
    body = {k: val for k, val in json.loads(raw).items() if k != "sig"}
    assert canonical_json(body).decode() == v["canonical"]
    assert sign(body, KEYS["pool_key"]) == v["sig"] == raw_hmac(KEYS["pool_key"], v["canonical"])
    assert parse_lease(raw, "another-pool-key-entirely").status == "forged"


@named("beacons")
def test_beacons_and_their_signatures(v):
    raw = bytes.fromhex(v["hex"])
    fields = dict(v["fields"])
    beacon = Beacon(**fields)
    assert beacon.encode(KEYS["pool_key"]) == raw and raw.decode() == v["text"]
    assert parse_beacon(raw, KEYS["pool_key"], KEYS["kmsn"]) == beacon
    body = {k: val for k, val in json.loads(raw).items() if k != "sig"}
    assert canonical_json(body).decode() == v["canonical"]
    assert raw_hmac(KEYS["pool_key"], v["canonical"]) == v["sig"]


@named("legacy")
def test_the_legacy_exchange(v):
    register, answer = exchange(v)
    conn = LegacyServerConnection(legacy=LegacySettings(v["magic"]), node="S001", epoch=v["inputs"]["epoch"],
                                  kmsn=KEYS["kmsn"], token=KEYS["token"], session=v["inputs"]["session"],
                                  pool_key=KEYS["pool_key"])  # fmt: skip
    conn.heard()
    conn.receive_data(register)
    assert conn.data_to_send() == answer
    assert conn.close_expected() is v["closes"]


def test_the_generator_makes_exactly_the_committed_file():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "protocol_vectors.py"), "--stdout"],
                         capture_output=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == (ROOT / "docs" / "protocol-vectors.json").read_bytes()
