"""The lease codec: the seed's fields, canonical-JSON HMAC, what a reader makes of bytes."""

import hashlib
import hmac
import json

import pytest

from elections.core.lease import LeaseRecord, canonical_json, parse_lease

TOKEN = "s3cret-token"


def record(**kw):
    base = dict(
        kmsn="9999-9999-99-99",
        station="S001",
        ip="192.168.1.10",
        port=9530,
        pid=12345,
        epoch=7,
        lease_until="20260615203015",
        node="S001",
        renew_seq=4182,
        ttl_s=10,
        handoff_to=None,
    )
    base.update(kw)
    return LeaseRecord(**base)


def test_it_writes_the_seeds_fields_plus_ours_with_a_canonical_hmac():
    doc = json.loads(record().encode(TOKEN))
    assert list(doc)[:7] == ["kmsn", "station", "ip", "port", "pid", "epoch", "lease_until"]
    body = {k: v for k, v in doc.items() if k != "sig"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert canonical_json(body) == canon
    assert doc["sig"] == hmac.new(TOKEN.encode(), canon, hashlib.sha256).hexdigest()
    assert doc["v"] == 1 and doc["handoff_to"] is None and doc["renew_seq"] == 4182


def test_it_reads_back_what_it_wrote():
    read = parse_lease(record().encode(TOKEN), TOKEN)
    assert read.status == "valid" and read.record == record()


def test_it_keeps_unknown_fields_inside_the_signature():
    doc = json.loads(record().encode(TOKEN))
    doc["future"] = {"x": 1}
    doc.pop("sig")
    from elections.core.lease import sign

    doc["sig"] = sign(doc, TOKEN)
    read = parse_lease(json.dumps(doc).encode(), TOKEN)
    assert read.status == "valid" and read.record.extra == {"future": {"x": 1}}


@pytest.mark.parametrize(
    "raw, status, detail",
    [
        (None, "missing", "no lease file"),
        (b"", "corrupt", "empty"),
        (b"   \n", "corrupt", "empty"),
        (b'{"kmsn": "9999', "corrupt", "not JSON"),
        (b"\xff\xfe", "corrupt", "not UTF-8"),
        (b"[1, 2]", "corrupt", "not a JSON object"),
        (b'{"kmsn": "K"}', "corrupt", "has no 'station'"),
    ],
)
def test_damaged_files_are_no_evidence(raw, status, detail):
    read = parse_lease(raw, TOKEN)
    assert read.status == status and detail in read.detail and read.record is None


def test_a_truncated_file_is_corrupt():
    raw = record().encode(TOKEN)
    for cut in (1, len(raw) // 2, len(raw) - 3):
        assert parse_lease(raw[:cut], TOKEN).status == "corrupt"


def test_a_wrong_type_is_corrupt_not_a_crash():
    doc = json.loads(record().encode(TOKEN))
    for field, bad in (("epoch", "7"), ("epoch", True), ("port", None), ("ttl_s", "10"), ("epoch", -1)):
        broken = dict(doc, **{field: bad})
        assert parse_lease(json.dumps(broken).encode(), TOKEN).status == "corrupt", field


def test_forgeries_are_reported_as_such():
    good = json.loads(record().encode(TOKEN))
    tampered = dict(good, ip="10.6.6.6", epoch=99)
    unsigned = {k: v for k, v in good.items() if k != "sig"}
    other_key = json.loads(record().encode("another-token"))
    for doc, why in ((tampered, "bad signature"), (unsigned, "no signature"), (other_key, "bad signature")):
        read = parse_lease(json.dumps(doc).encode(), TOKEN)
        assert read.status == "forged" and why in read.detail and read.record is None


def test_revisions_change_with_any_byte():
    a = parse_lease(record().encode(TOKEN), TOKEN).revision
    b = parse_lease(record(renew_seq=4183).encode(TOKEN), TOKEN).revision
    assert a and b and a != b and parse_lease(None, TOKEN).revision == ""
