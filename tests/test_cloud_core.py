"""The cloud relay's pure core (docs/design.md §14): the epoch fence, the tunnel handshake,
the stream multiplexer and its credit windows, what the cloud reads of a remote client."""

import json

import pytest

from relay.cloud.fence import EpochFence, TunnelBook, overlaps
from relay.cloud.handshake import TunnelAcceptor, TunnelRegistered, lease_problem
from relay.cloud.remote import FrameCursor, Greeting
from relay.wire.auth import auth_digest
from relay.wire.client_connection import ClientConnection
from relay.wire.events import ErrorReceived, Registered
from relay.wire.framing import FrameDecoder, encode_frame
from relay.wire.lease_mac import CLOUD_SIG, lease_mac, mac_verdict, presented, stored_record
from relay.wire.mux import (
    CREDIT,
    DATA,
    INITIAL_WINDOW,
    MAX_CHUNK,
    OPEN,
    Control,
    Mux,
    MuxError,
    StreamClosed,
    StreamData,
    StreamOpened,
    Writable,
    frame,
)
from stkhost.pool_keys import cloud_key, station_credential

KMSN, TOKEN, NONCE, CNONCE = "9999-9999-99-99", "cloud-token-0123456789", "ab" * 16, "cd" * 16
POOL_KEY = "pool-key-0123456789abcdef"
LEASE_KEY = cloud_key(POOL_KEY, KMSN)


# -- the fence -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("held", "epoch", "node", "verdict"),
    [
        (None, 1, "S001", "accept"),  # the first tunnel of a KMSN
        ((7, "S001"), 8, "S002", "accept"),  # a higher epoch: the new leader
        ((7, "S001"), 6, "S003", "stale"),  # a lower one: a stale leader
        ((7, "S001"), 7, "S001", "accept"),  # the same leader reconnecting
        ((7, "S001"), 7, "S002", "stale"),  # the same epoch from another node: one of them lies
    ],
)
def test_the_fence_accepts_only_the_highest_epoch(held, epoch, node, verdict):
    fence = EpochFence()
    if held:
        fence.accept(KMSN, *held)
    assert fence.judge(KMSN, epoch, node)[0] == verdict


def test_the_fence_never_goes_back_and_survives_a_restart_but_not_garbage():
    fence = EpochFence()
    fence.accept(KMSN, 5, "S001")
    with pytest.raises(ValueError):
        fence.accept(KMSN, 4, "S002")
    again = EpochFence.from_doc(json.loads(json.dumps(fence.to_doc())))
    assert again.judge(KMSN, 4, "S002")[0] == "stale"
    assert EpochFence.from_doc({"k": {"epoch": "9"}, "j": {"epoch": True}, "x": [1]}).epochs == {}
    assert EpochFence.from_doc("nonsense").epochs == {}


def test_the_book_closes_the_old_tunnel_at_the_instant_it_opens_the_new_one():
    book = TunnelBook()
    first, _ = book.open(KMSN, 1, "S001", now=10.0)
    second, old = book.open(KMSN, 2, "S002", now=12.5)
    assert old is first and first.closed == 12.5 and "replaced by epoch 2" in first.reason
    assert book.is_current(second) and not book.is_current(first)
    book.close(second, 20.0, "connection lost")
    _, old = book.open(KMSN, 3, "S003", now=21.0)
    assert old is None
    records = book.records(now=30.0)
    assert [r["epoch"] for r in records] == [1, 2, 3] and overlaps(records) == []
    assert overlaps([{**records[0], "closed": None}, records[1]]) == [(1, 2)]


# -- the tunnel handshake --------------------------------------------------------------
def lease(epoch=7, node="S002", **change):
    doc = {"kmsn": KMSN, "station": node, "ip": "192.168.1.12", "port": 9530, "pid": 1, "epoch": epoch,
           "lease_until": "20261201120000", "v": 1, "node": node, "renew_seq": 3, "ttl_s": 10,
           "handoff_to": None, "sig": "0" * 64}  # fmt: skip
    doc.update(change)
    return doc


def handshake(fence, *, token=TOKEN, epoch=7, node="S002", doc=None, kmsn=KMSN, key=LEASE_KEY, keys=None):
    """A tunnel's handshake, bytes in and out: the acceptor and the dialler's events.

    The dialler signs `doc` with `key` over the acceptor's nonce (`key` None: it
    presents `doc` as it is); the acceptor holds `keys` (default: the site's)."""
    keys = {KMSN: LEASE_KEY} if keys is None else keys
    acceptor = TunnelAcceptor(tokens={KMSN: TOKEN}, lease_keys=keys, judge=fence.judge, nonce=NONCE,
                              session="5e55")  # fmt: skip
    doc = lease(epoch, node) if doc is None else doc
    extra = {"lease": doc} if key is None else (lambda nonce: {"lease": presented(doc, key, nonce)})
    dialler = ClientConnection(role="tunnel", kmsn=kmsn, station=node, token=token, epoch=epoch,
                               raw_mode=True, cnonce=CNONCE, extra=extra)  # fmt: skip
    dialler.receive_data(acceptor.data_to_send())
    acceptor.receive_data(dialler.data_to_send() + b"\x04mux bytes")
    dialler.receive_data(acceptor.data_to_send())
    return acceptor, acceptor.events_received(), dialler.events_received()


def test_a_tunnel_with_the_token_and_a_matching_lease_is_accepted_and_the_cloud_proves_itself():
    _, events, theirs = handshake(EpochFence())
    reg = next(e for e in events if isinstance(e, TunnelRegistered))
    assert (reg.kmsn, reg.node, reg.epoch) == (KMSN, "S002", 7)
    assert any(isinstance(e, Registered) for e in theirs)  # with a cnonce: only once sauth checked out
    assert events[-1].data == b"\x04mux bytes"  # what followed register is the mux's, raw


@pytest.mark.parametrize(
    ("kw", "code"),
    [
        ({"token": "not-the-cloud-token"}, "bad_auth"),
        ({"kmsn": "0000-0000-00-00"}, "bad_auth"),  # a KMSN this cloud has no site for: as a bad token
        ({"key": None}, "bad_auth"),  # a lease without cloud_sig (an agent older than the lease MAC)
        ({"key": cloud_key("not-the-pool-key-at-all", KMSN)}, "bad_auth"),  # forged without the pool key
        ({"key": TOKEN}, "bad_auth"),  # what a holder of CLOUD_TOKEN alone can sign with
        ({"keys": {}}, "bad_auth"),  # a site this cloud has no LEASE_KEY for: nothing is unchecked
        ({"doc": lease(8)}, "bad_auth"),  # the lease names another epoch
        ({"doc": lease(7, "S003")}, "bad_auth"),  # ...or another node
        ({"doc": lease(ttl_s=0)}, "bad_auth"),  # a released lease
        ({"doc": lease(sig="not hex")}, "bad_auth"),
        ({"doc": {k: v for k, v in lease().items() if k != "sig"}}, "bad_auth"),
        ({"doc": "a lease", "key": None}, "bad_auth"),
        ({"epoch": 6, "doc": lease(6)}, "stale_epoch"),
    ],
)
def test_a_tunnel_is_refused_without_the_token_with_a_forged_lease_or_a_stale_epoch(kw, code):
    fence = EpochFence()
    fence.accept(KMSN, 7, "S002")
    acceptor, events, theirs = handshake(fence, **kw)
    assert not any(isinstance(e, TunnelRegistered) for e in events)
    assert [e.code for e in theirs if isinstance(e, ErrorReceived)] == [code]
    assert acceptor.close_expected() and acceptor.refusal == code
    assert fence.epochs == {KMSN: 7} and fence.holders == {KMSN: "S002"}  # the fence is untouched


def test_an_unknown_kmsn_is_answered_byte_for_byte_as_a_bad_token_and_told_apart_only_by_its_cause():
    """A stranger without CLOUD_TOKEN cannot probe which KMSNs this cloud serves."""
    answers, causes = [], []
    unserved = {"kmsn": "0000-0000-00-00", "token": "a-strangers-guess-0123456789"}
    probes = (unserved, {"token": "not-the-cloud-token"})
    for kw in probes:
        acceptor = TunnelAcceptor(tokens={KMSN: TOKEN}, lease_keys={KMSN: LEASE_KEY},
                                  judge=EpochFence().judge, nonce=NONCE, session="5e55")  # fmt: skip
        hello = acceptor.data_to_send()
        dialler = ClientConnection(role="tunnel", station="S002", epoch=7, raw_mode=True, cnonce=CNONCE,
                                   extra={"lease": lease()}, **{"kmsn": KMSN, **kw})  # fmt: skip
        dialler.receive_data(hello)
        acceptor.receive_data(dialler.data_to_send())
        answers.append(acceptor.data_to_send())
        causes.append((acceptor.refusal, acceptor.cause, acceptor.claim))
    assert answers[0] == answers[1] and b"bad_auth" in answers[0] and b"0000-0000-00-00" not in answers[0]
    assert causes == [("bad_auth", "unknown_kmsn", None), ("bad_auth", "bad_token", None)]


@pytest.mark.parametrize(
    ("kw", "cause"),
    [
        ({"token": "not-the-cloud-token"}, "bad_token"),
        ({"key": None}, "lease_unsigned"),
        ({"key": TOKEN, "epoch": 99, "doc": lease(99)}, "lease_forged"),
        ({"keys": {}}, "lease_unverifiable"),
        ({"doc": lease(8)}, "bad_lease"),
        ({"epoch": 6, "doc": lease(6)}, "stale_epoch"),
    ],
)
def test_each_refusal_names_its_cause_and_what_was_claimed(kw, cause):
    fence = EpochFence()
    fence.accept(KMSN, 7, "S002")
    acceptor, _, _ = handshake(fence, **kw)
    assert acceptor.cause == cause
    assert acceptor.claim == (None if cause == "bad_token" else (KMSN, "S002", kw.get("epoch", 7)))


def test_a_lease_mac_binds_the_nonce_the_whole_stored_record_and_nothing_else():
    doc = lease()
    shown = presented(doc, LEASE_KEY, NONCE)
    assert stored_record(shown) == doc and mac_verdict(shown, LEASE_KEY, NONCE) is None
    assert shown[CLOUD_SIG] == lease_mac(LEASE_KEY, NONCE, doc)
    assert mac_verdict(shown, LEASE_KEY, "ef" * 16) == "forged"  # sniffed off another handshake
    for change in ({"epoch": 8}, {"sig": "1" * 64}, {"renew_seq": 4}, {"extra": 1}):
        assert mac_verdict({**shown, **change}, LEASE_KEY, NONCE) == "forged"
    assert mac_verdict({**shown, CLOUD_SIG: shown[CLOUD_SIG].upper()}, LEASE_KEY, NONCE) is None
    assert mac_verdict(doc, LEASE_KEY, NONCE) == "unsigned"
    assert mac_verdict({**shown, CLOUD_SIG: 5}, LEASE_KEY, NONCE) == "unsigned"
    assert mac_verdict(shown, None, NONCE) == "unverifiable"
    assert (
        mac_verdict({**shown, "node": "\ud800"}, LEASE_KEY, NONCE) == "forged"
    )  # no canonical JSON: never raises


def test_the_cloud_key_is_derived_one_way_and_is_no_other_key_of_the_pool():
    assert cloud_key(POOL_KEY, KMSN) == hexmac(POOL_KEY, f"cloud|{KMSN}")
    assert cloud_key(POOL_KEY, KMSN) != cloud_key(POOL_KEY, "1111-1111-11-11")
    assert cloud_key(POOL_KEY, KMSN) not in {POOL_KEY, station_credential(POOL_KEY, KMSN, "cloud")}
    with pytest.raises(ValueError):
        cloud_key("", KMSN)


def test_the_stored_record_of_a_presented_lease_verifies_with_the_pool_key_as_the_share_s_does():
    from elections.core.lease import LeaseRecord, parse_lease

    record = LeaseRecord(kmsn=KMSN, station="S002", ip="192.168.1.12", port=9530, pid=1, epoch=7,
                         lease_until="20261201120000", node="S002", renew_seq=3, ttl_s=10)  # fmt: skip
    stored = json.loads(record.encode(POOL_KEY))
    shown = presented(stored, LEASE_KEY, NONCE)
    assert parse_lease(json.dumps(stored_record(shown)).encode(), POOL_KEY).status == "valid"
    # cloud_sig is outside sig's coverage: kept in, the pool's own check calls the record forged.
    assert parse_lease(json.dumps(shown).encode(), POOL_KEY).status == "forged"


def hexmac(key, text):
    import hashlib
    import hmac

    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def test_the_lease_check_names_what_is_wrong():
    assert lease_problem(lease(), KMSN, "S002", 7) is None
    assert "port" in lease_problem(lease(port="9530"), KMSN, "S002", 7)
    assert "released" in lease_problem(lease(ttl_s=0), KMSN, "S002", 7)


def fresh_acceptor():
    return TunnelAcceptor(
        tokens={KMSN: TOKEN}, lease_keys={KMSN: LEASE_KEY}, judge=EpochFence().judge, nonce=NONCE
    )


def test_hostile_bytes_on_the_tunnel_port_end_the_handshake_without_raising():
    for junk in (b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x00\x00\x02[]", b"\x00\x00\x00\x01{"):
        acceptor = fresh_acceptor()
        acceptor.data_to_send()
        acceptor.receive_data(junk)
        assert acceptor.close_expected() and acceptor.registration is None
    acceptor = fresh_acceptor()
    acceptor.receive_data((70_000).to_bytes(4, "big"))  # over the handshake's frame limit, before any payload
    assert acceptor.refusal == "frame_too_large"


# -- the mux -----------------------------------------------------------------------------
def pair():
    cloud, site = Mux(opener=True), Mux(opener=False)

    def to_site():
        site.receive_data(cloud.data_to_send())
        return site.events_received()

    def to_cloud():
        cloud.receive_data(site.data_to_send())
        return cloud.events_received()

    return cloud, site, to_site, to_cloud


def test_streams_carry_bytes_both_ways_and_close():
    cloud, site, to_site, to_cloud = pair()
    a, b = cloud.open({"kind": "json", "nonce": NONCE}), cloud.open({"kind": "raw", "nonce": NONCE})
    cloud.write(a, b"hello")
    events = to_site()
    assert events == [StreamOpened(a, {"kind": "json", "nonce": NONCE}),
                      StreamOpened(b, {"kind": "raw", "nonce": NONCE}), StreamData(a, b"hello")]  # fmt: skip
    site.write(b, b"x" * 10)
    site.close(a, "bye")
    assert to_cloud() == [StreamData(b, b"x" * 10), StreamClosed(a, "bye")]
    cloud.write(a, b"late")  # a closed stream swallows what is written to it
    assert to_site() == []


def test_a_slow_reader_fills_only_its_own_window_and_the_writer_never_blocks():
    cloud, site, to_site, to_cloud = pair()
    slow, fast = cloud.open({"kind": "raw", "nonce": NONCE}), cloud.open({"kind": "raw", "nonce": NONCE})
    to_site()
    blob = b"v" * (3 * INITIAL_WINDOW)
    site.write(slow, blob)  # never raises, never blocks: the rest waits in the stream's queue
    site.write(fast, b"f" * 1000)
    got = to_cloud()
    slow_bytes = sum(len(e.data) for e in got if isinstance(e, StreamData) and e.stream == slow)
    assert slow_bytes == INITIAL_WINDOW and site.buffered(slow) == 2 * INITIAL_WINDOW
    assert any(isinstance(e, StreamData) and e.stream == fast for e in got)  # the other stream flows
    assert all(len(e.data) <= MAX_CHUNK for e in got if isinstance(e, StreamData))
    cloud.consumed(slow, INITIAL_WINDOW)  # the slow viewer finally read it all
    assert Writable(slow) in to_site()
    more = to_cloud()
    assert sum(len(e.data) for e in more if isinstance(e, StreamData)) == INITIAL_WINDOW


def test_credit_is_sent_in_batches_of_a_quarter_window():
    cloud, site, to_site, _ = pair()
    s = cloud.open({"kind": "json", "nonce": NONCE})
    to_site()
    site.consumed(s, 100)
    assert site.data_to_send() == b""
    site.consumed(s, INITIAL_WINDOW // 4)
    out = site.data_to_send()
    assert out[0] == CREDIT and int.from_bytes(out[9:13], "big") == INITIAL_WINDOW // 4 + 100


@pytest.mark.parametrize(
    ("junk", "why"),
    [
        (frame(99, 0), "unknown frame kind"),
        (bytes([DATA]) + (1).to_bytes(4, "big") + (1 << 30).to_bytes(4, "big"), "exceeds"),
        (frame(DATA, 5, b"x"), "never opened"),
        (frame(OPEN, 1, b'{"kind":"json"}'), "does not accept OPEN"),  # only the cloud opens
        (frame(CREDIT, 1, b"\x00\x00"), "4 bytes"),
    ],
)
def test_hostile_mux_frames_fail_the_tunnel_without_raising(junk, why):
    cloud = Mux(opener=True)
    cloud.open({"kind": "json", "nonce": NONCE})
    cloud.receive_data(junk)
    events = cloud.events_received()
    assert isinstance(events[-1], MuxError) and why in events[-1].message
    cloud.receive_data(frame(DATA, 1, b"more"))  # a failed mux takes nothing more
    assert cloud.events_received() == []


def test_data_beyond_the_window_and_credit_overflow_fail_the_tunnel():
    site = Mux(opener=False)
    site.receive_data(frame(OPEN, 1, b'{"kind":"raw","nonce":"x"}'))
    for _ in range(INITIAL_WINDOW // MAX_CHUNK):
        site.receive_data(frame(DATA, 1, b"z" * MAX_CHUNK))
    site.receive_data(frame(DATA, 1, b"z"))
    assert isinstance(site.events_received()[-1], MuxError)
    cloud = Mux(opener=True)
    s = cloud.open({"kind": "raw"})
    cloud.receive_data(frame(CREDIT, s, (0xFFFFFFFF).to_bytes(4, "big")))
    assert isinstance(cloud.events_received()[-1], MuxError)


@pytest.mark.parametrize("credit", [1, INITIAL_WINDOW, 1 << 30, (1 << 31) - 1, 0xFFFFFFFF, 0])
def test_credit_for_bytes_never_sent_fails_the_tunnel_before_it_raises_any_window(credit):
    cloud, _, to_site, _ = pair()
    s = cloud.open({"kind": "raw", "nonce": NONCE})
    to_site()
    cloud.receive_data(frame(CREDIT, s, credit.to_bytes(4, "big")))  # nothing was sent: nothing to credit
    assert isinstance(cloud.events_received()[-1], MuxError)
    cloud.write(s, b"x" * (2 * INITIAL_WINDOW))
    stats = cloud.stats(s)  # the window never grew: one window went out, the rest waits
    assert (stats["sent"], stats["queued"], stats["window"]) == (INITIAL_WINDOW, INITIAL_WINDOW, 0)
    # The honest peer's credit, for bytes it was sent, is never beyond the window.
    cloud2, site2, to_site2, to_cloud2 = pair()
    s2 = cloud2.open({"kind": "raw", "nonce": NONCE})
    cloud2.write(s2, b"y" * INITIAL_WINDOW)
    site2.consumed(s2, sum(len(e.data) for e in to_site2() if isinstance(e, StreamData)))
    assert Writable(s2) in to_cloud2() and cloud2.failed is None


def test_frames_split_anywhere_decode_the_same_and_a_crossing_close_is_only_counted():
    cloud, site, _, _ = pair()
    s = cloud.open({"kind": "json", "nonce": NONCE})
    cloud.write(s, b"abc" * 1000)
    cloud.control({"type": "leader_changed", "epoch": 9})
    wire = cloud.data_to_send()
    for byte in wire:
        site.receive_data(bytes([byte]))
    events = site.events_received()
    assert b"".join(e.data for e in events if isinstance(e, StreamData)) == b"abc" * 1000
    assert events[-1] == Control({"type": "leader_changed", "epoch": 9})
    site.close(s)
    cloud.write(s, b"crossing")  # written before the cloud learnt of the close
    site.receive_data(cloud.data_to_send())
    assert site.events_received() == [] and site.stale_frames == 1 and site.failed is None


# -- what the cloud reads of a remote client ----------------------------------------------
def test_the_greeting_learns_the_kmsn_and_keeps_every_byte_to_forward():
    greeting = Greeting(nonce=NONCE)
    hello = FrameDecoder().feed(greeting.hello)
    assert hello == len(greeting.hello)
    auth = auth_digest("t", NONCE, "commander", KMSN, "C01")
    register = encode_frame({"type": "register", "magic": "STKRELAY/1", "role": "commander", "kmsn": KMSN,
                             "station": "C01", "auth": auth})  # fmt: skip
    greeting.receive_data(register[:7])
    assert not greeting.done
    greeting.receive_data(register[7:] + b"\x00\x00")
    assert greeting.kmsn == KMSN and greeting.station == "C01"
    assert bytes(greeting.buffer) == register + b"\x00\x00"  # forwarded verbatim, nonce and all


NOT_REGISTERS = [encode_frame({"type": "send"}), encode_frame({"type": "register", "kmsn": 5}),
                 b"\xff\xff\xff\xff", b"\x00\x00\x00\x03[1]"]  # fmt: skip


@pytest.mark.parametrize("junk", NOT_REGISTERS)
def test_a_first_frame_that_is_not_a_register_is_refused(junk):
    greeting = Greeting()
    greeting.receive_data(junk)
    assert greeting.refusal is not None and greeting.kmsn is None


def test_the_cursor_knows_frame_boundaries_and_the_first_answer():
    cursor = FrameCursor()
    first, second = (
        encode_frame({"type": "registered", "epoch": 3}),
        encode_frame({"type": "message", "data": "x" * 50}),
    )
    cursor.feed(first[:2])
    assert not cursor.at_boundary and cursor.first is None
    cursor.feed(first[2:] + second[:30])
    assert not cursor.at_boundary and json.loads(cursor.first) == {"type": "registered", "epoch": 3}
    cursor.feed(second[30:])
    assert cursor.at_boundary
    cursor.feed(b"\x00\x00\x00\x00")  # no frame is empty: stop following, never at a boundary again
    assert cursor.broken and not cursor.at_boundary
