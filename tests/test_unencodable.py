"""Text that parses but no UTF-8 can hold (issue 40): a JSON escape `\\ud800` (a lone surrogate)
is valid JSON and `json.loads` takes it; the signature check then encoded the canonical JSON
and raised `UnicodeEncodeError` in every reader that had "never raised". One such lease file
stopped every election. Each record kind and each wire, by its own parser: "no evidence" with
the cause `unencodable` (or the wire's own error), never another exception. Fuzzed with text
that includes surrogates (hypothesis's `st.text()` leaves category Cs out by default);
`make fuzz` runs it longer. The stores (file, SMB, etcd, memory) are held to it in
tests/test_store_conformance.py, real agents in tests/test_agents_surrogate.py."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elections.core.beacons import Beacon, parse_beacon
from elections.core.lease import LeaseRecord, parse_lease, signature_ok
from elections.core.nudge import parse_nudge
from elections.core.untrusted import LEASE, UNENCODABLE, Untrusted, encodable, load_object, may_hold_surrogate
from relay.cloud.directory import read_entry
from relay.wire.framing import ProtocolError, decode_payload

KEY = "pool-key-0123456789abcdef"
KMSN = "K1"
FUZZ = settings(max_examples=int(os.environ.get("STK_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
LONE = "\ud800"


def lease_doc() -> dict:
    return LeaseRecord(kmsn=KMSN, station="S001", ip="127.0.0.1", port=9530, pid=1, epoch=3,
                       lease_until="20260615203015", node="S001", renew_seq=4, ttl_s=10).to_doc()  # fmt: skip


def beacon_doc() -> dict:
    return Beacon(KMSN, "S001", "127.0.0.1", 9530, "leader", 3, 4, "9" * 16, 1).to_doc()


def nudge_doc() -> dict:
    return {"nudge": 1, "kmsn": KMSN, "node": "S001", "seq": 7, "kind": "promote_requested"}


def poisoned(doc: dict, field: str) -> bytes:
    """`doc` with a lone surrogate in `field`'s text, or as a key of its own, and some signature."""
    doc = {**doc, field: f"{doc[field]}{LONE}"} if isinstance(doc.get(field), str) else {**doc, LONE: 1}
    return json.dumps({**doc, "sig": "00" * 32}).encode()  # ensure_ascii: the `\ud800` escape


def test_the_escape_parses_and_is_refused_by_the_reader_but_a_pair_and_an_escaped_backslash_pass():
    with pytest.raises(Untrusted) as exc:
        load_object(b'{"a": "\\ud800"}', LEASE)
    assert exc.value.cause == UNENCODABLE
    with pytest.raises(Untrusted) as exc:
        load_object(b'{"\\udc00": 1}', LEASE)  # a lone low surrogate, as a key
    assert exc.value.cause == UNENCODABLE
    assert load_object(b'{"a": "\\ud83d\\ude00"}', LEASE) == {"a": "\U0001f600"}  # a pair is one character
    assert load_object(b'{"a": "\\\\ud800"}', LEASE) == {"a": "\\ud800"}  # a backslash, then text
    assert load_object(b'{"a": ["x", {"b": "\\u00e9"}]}', LEASE) == {"a": ["x", {"b": "\u00e9"}]}


@pytest.mark.parametrize("field", ["station", "node", "kmsn", "key"])
def test_a_lease_with_a_lone_surrogate_is_corrupt_never_an_exception(field):
    read = parse_lease(poisoned(lease_doc(), field), KEY)
    assert (read.status, read.cause, read.record) == ("corrupt", UNENCODABLE, None)


@pytest.mark.parametrize("field", ["node", "kmsn", "boot", "key"])
def test_a_beacon_with_a_lone_surrogate_is_refused_as_unencodable(field):
    with pytest.raises(Untrusted) as exc:
        parse_beacon(poisoned(beacon_doc(), field), KEY, KMSN)
    assert exc.value.cause == UNENCODABLE


@pytest.mark.parametrize("field", ["node", "kind", "kmsn", "key"])
def test_a_nudge_with_a_lone_surrogate_is_refused_as_unencodable(field):
    with pytest.raises(Untrusted) as exc:
        parse_nudge(poisoned(nudge_doc(), field), KEY, KMSN)
    assert exc.value.cause == UNENCODABLE


def test_a_relay_frame_and_a_cloud_tunnel_entry_with_a_lone_surrogate_are_refused():
    error = decode_payload(b'{"type": "register", "station": "S\\ud800", "role": "station"}')
    assert isinstance(error, ProtocolError) and error.code == "bad_json"
    assert isinstance(decode_payload(b'{"type": "ping", "note": "\\ud83d\\ude00"}'), dict)
    with pytest.raises(Untrusted) as exc:
        read_entry(b'{"node": "N\\udfff", "epoch": 1}')
    assert exc.value.cause == UNENCODABLE


def test_the_signature_check_says_forged_instead_of_raising():
    doc = {**lease_doc(), "station": LONE}
    assert signature_ok({**doc, "sig": "00" * 32}, KEY) is False
    assert signature_ok({**lease_doc(), "sig": "\u00e9" * 64}, KEY) is False  # not ASCII: not a hex digest
    assert signature_ok({**lease_doc(), LONE: 1, "sig": "00" * 32}, KEY) is False


# -- fuzzed: text with surrogates, in keys and values, in every parser ---------------------------------
# Every character category, surrogates (Cs) included: `st.text()` alone never makes one.
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(ANY_TEXT, kids, max_size=3),
    max_leaves=12,
)


@FUZZ
@given(JSON_VALUES)
def test_any_json_with_any_text_is_an_encodable_document_or_refused(value):
    raw = json.dumps({"v": value}).encode()  # ensure_ascii: every surrogate as an escape
    try:
        doc = load_object(raw, LEASE)
    except Untrusted as exc:
        assert exc.cause == UNENCODABLE and may_hold_surrogate(raw)
        return
    assert encodable(doc)
    json.dumps(doc, ensure_ascii=False).encode()  # what the signature check does: never raises now


@FUZZ
@given(
    st.sampled_from(["lease", "beacon", "nudge", "frame"]), st.dictionaries(ANY_TEXT, JSON_VALUES, max_size=4)
)
def test_every_parser_takes_any_text_in_any_field_without_another_exception(kind, extra):
    base = {"lease": lease_doc, "beacon": beacon_doc, "nudge": nudge_doc, "frame": lambda: {"type": "ping"}}[
        kind
    ]()
    raw = json.dumps({**base, **extra, "sig": "00" * 32}).encode()
    if kind == "lease":
        assert parse_lease(raw, KEY).status in ("corrupt", "forged")
    elif kind == "frame":
        decoded = decode_payload(raw)
        assert isinstance(decoded, ProtocolError) or encodable(decoded)
    else:
        with pytest.raises(Untrusted):
            (parse_beacon if kind == "beacon" else parse_nudge)(raw, KEY, KMSN)
