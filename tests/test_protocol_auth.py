"""Protocol 1.1 (docs/design.md §8): cnonce/sauth, station credentials, keys-only; bytes in, bytes out.

Also the pure rules that decide whom the relay and its clients believe: the
replacement rule's table, the bounded epoch claim, and the connection caps.
"""

from __future__ import annotations

import hashlib
import hmac

import pytest
from test_protocol import KMSN, NONCE, TOKEN, frames, imported_modules, make_client, make_server, register
from test_protocol import RELAY as RELAY_DIR

from relay.client.follow import MAX_EPOCH_JUMP, claimed_epoch
from relay.server.limits import Admission, Caps
from relay.server.routing import HELD, Router
from relay.wire.auth import auth_digest, server_proof
from relay.wire.client_connection import ClientConnection
from relay.wire.events import Hello, LeaderChanged, Registered
from relay.wire.framing import BAD_AUTH, BAD_REQUEST, ProtocolError, State, encode_frame
from stkhost.pool_keys import station_credential

CNONCE = "fedcba9876543210fedcba9876543210"
POOL_KEY = "pool-secret"


def hexmac(key: str, text: str) -> str:
    """The spec's formula written out again, independently of relay.wire.auth."""
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def registered_body(server) -> dict:
    (frame,) = [f for f in frames(server.data_to_send()) if f["type"] == "registered"]
    return frame


def credential_register(station: str = "S002", role: str = "agent", key_station: str | None = None, **fields):
    key = station_credential(POOL_KEY, KMSN, key_station or station)
    obj = register(role, station, **fields)
    obj["auth"] = auth_digest(key, NONCE, role, KMSN, station)
    return obj


# -- server side ------------------------------------------------------------------------
def test_it_proves_the_site_token_with_sauth_over_cnonce_session_and_epoch_byte_for_byte():
    server = make_server()
    server.data_to_send()
    server.receive_data(encode_frame(register(cnonce=CNONCE)))
    sauth = hexmac(TOKEN, f"{CNONCE}|sess-1|7")
    body = b'{"type":"registered","epoch":7,"session":"sess-1","sauth":"' + sauth.encode() + b'"}'
    assert server.data_to_send() == len(body).to_bytes(4, "big") + body
    assert server.events_received() == [Registered("agent", KMSN, "S002", 7, "sess-1")]


def test_it_answers_a_register_without_cnonce_exactly_as_protocol_1():
    server = make_server()
    server.data_to_send()
    server.receive_data(encode_frame(register()))
    body = b'{"type":"registered","epoch":7,"session":"sess-1"}'
    assert server.data_to_send() == len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("cnonce", ["", "abc", "g" * 32, 12, "0" * 31, "0" * 33])
def test_it_refuses_a_cnonce_that_is_not_32_hex_characters(cnonce):
    server = make_server()
    server.data_to_send()
    server.receive_data(encode_frame(register(cnonce=cnonce)))
    (error,) = frames(server.data_to_send())
    assert error["code"] == BAD_REQUEST and "cnonce" in error["message"]
    assert server.closed


def test_it_derives_a_station_credential_from_the_pool_key():
    assert station_credential(POOL_KEY, KMSN, "S002") == hexmac(POOL_KEY, f"station|{KMSN}|S002")
    assert station_credential(POOL_KEY, KMSN, "S002") != station_credential(POOL_KEY, KMSN, "S003")
    with pytest.raises(ValueError):
        station_credential("", KMSN, "S002")


def test_it_registers_a_station_with_its_credential_and_proves_that_key():
    server = make_server(pool_key=POOL_KEY)
    server.data_to_send()
    server.receive_data(encode_frame(credential_register(cnonce=CNONCE)))
    frame = registered_body(server)
    assert frame["sauth"] == hexmac(station_credential(POOL_KEY, KMSN, "S002"), f"{CNONCE}|sess-1|7")
    assert server.events_received() == [Registered("agent", KMSN, "S002", 7, "sess-1", station_key=True)]


def test_it_refuses_a_credential_used_for_another_station():
    server = make_server(pool_key=POOL_KEY)
    server.data_to_send()
    server.receive_data(encode_frame(credential_register("S003", key_station="S002")))
    (error,) = frames(server.data_to_send())
    assert (error["code"], error["message"]) == (BAD_AUTH, "authentication failed")
    assert server.closed


def test_it_uses_the_site_token_as_pool_key_when_none_is_given():
    server = make_server()
    server.data_to_send()
    obj = register()
    obj["auth"] = auth_digest(station_credential(TOKEN, KMSN, "S002"), NONCE, "agent", KMSN, "S002")
    server.receive_data(encode_frame(obj))
    assert server.events_received()[0].station_key is True


def test_it_refuses_the_site_token_with_a_clear_bad_auth_when_station_keys_only():
    server = make_server(pool_key=POOL_KEY, station_keys_only=True)
    server.data_to_send()
    server.receive_data(encode_frame(register()))
    (error,) = frames(server.data_to_send())
    assert error["code"] == BAD_AUTH
    assert "RELAY_STATION_KEYS_ONLY" in error["message"] and "relayctl credential S002" in error["message"]
    assert server.closed
    again = make_server(pool_key=POOL_KEY, station_keys_only=True)
    again.data_to_send()
    again.receive_data(encode_frame(credential_register()))
    assert again.state is State.OPEN


def test_it_refuses_what_admit_refuses_and_fails_closed_when_admit_raises():
    def boom(registration: Registered) -> str | None:
        raise RuntimeError("boom")

    for admit, says in ((lambda r: f"{r.station} is taken", "S002 is taken"), (boom, "could not check")):
        server = make_server(admit=admit)
        server.data_to_send()
        server.receive_data(encode_frame(register()))
        (error,) = frames(server.data_to_send())
        assert error["code"] == BAD_AUTH and says in error["message"]
        assert server.registration is None and server.closed


# -- client side --------------------------------------------------------------------------
def client_after_hello(**kw) -> ClientConnection:
    client = make_client(cnonce=CNONCE, **kw)
    client.receive_data(make_server().data_to_send())
    return client


def proven_client() -> ClientConnection:
    client = client_after_hello()
    client.data_to_send()  # the register frame
    client.events_received()
    return client


def test_it_sends_cnonce_last_in_register_when_built_with_one():
    client = client_after_hello()
    (frame,) = frames(client.data_to_send())
    assert list(frame) == ["type", "magic", "role", "kmsn", "station", "auth", "cnonce"]
    assert frame["cnonce"] == CNONCE
    with pytest.raises(ValueError):
        make_client(cnonce="not-hex")


@pytest.mark.parametrize(
    "sauth",
    [None, "", "00" * 32, hexmac("another-key", f"{CNONCE}|sess-1|7"), hexmac(TOKEN, f"{CNONCE}|s2|7")],
)
def test_it_believes_no_registered_frame_without_a_valid_sauth(sauth):
    client = proven_client()
    frame = {"type": "registered", "epoch": 7, "session": "sess-1"}
    if sauth is not None:
        frame["sauth"] = sauth
    client.receive_data(encode_frame(frame))
    (event,) = client.events_received()
    assert isinstance(event, ProtocolError) and event.code == BAD_AUTH
    assert client.unproven and not client.proven and client.closed
    assert client.data_to_send() == b""  # nothing more is said to such a server


def test_it_accepts_the_proof_of_a_server_with_the_same_key_even_in_upper_case():
    client = proven_client()
    sauth = hexmac(TOKEN, f"{CNONCE}|sess-1|9").upper()
    client.receive_data(encode_frame({"type": "registered", "epoch": 9, "session": "sess-1", "sauth": sauth}))
    assert client.events_received() == [Registered("agent", KMSN, "S002", 9, "sess-1")]
    assert client.proven and client.state is State.OPEN


def test_it_marks_leader_changed_proven_only_after_the_proof():
    early = client_after_hello()
    early.receive_data(encode_frame({"type": "leader_changed", "epoch": 10**15, "ip": "10.6.6.6", "port": 1}))
    assert early.events_received()[-1] == LeaderChanged(10**15, "10.6.6.6", 1, proven=False)
    server, client = make_server(), make_client(cnonce=CNONCE)
    for _ in range(3):
        client.receive_data(server.data_to_send())
        server.receive_data(client.data_to_send())
    assert client.proven
    server.leader_changed(8, "192.168.1.11", 9530)
    client.receive_data(server.data_to_send())
    assert client.events_received()[-1] == LeaderChanged(8, "192.168.1.11", 9530, proven=True)


def test_it_registers_a_credential_client_against_a_keys_only_server_end_to_end():
    server = make_server(pool_key=POOL_KEY, station_keys_only=True)
    key = station_credential(POOL_KEY, KMSN, "S002")
    client = make_client(token=key, cnonce=CNONCE)
    for _ in range(3):
        client.receive_data(server.data_to_send())
        server.receive_data(client.data_to_send())
    assert client.events_received() == [
        Hello("S001", 7, NONCE),
        Registered("agent", KMSN, "S002", 7, "sess-1"),
    ]
    assert client.proven and server.registration is not None and server.registration.station_key
    assert server_proof(key, CNONCE, "sess-1", 7) == hexmac(key, f"{CNONCE}|sess-1|7")


# -- who may replace whom -------------------------------------------------------------------
class Holder:
    def __init__(self, station: str, role: str, station_key: bool) -> None:
        self.kmsn, self.station, self.role, self.station_key = KMSN, station, role, station_key

    def close(self, code: str, message: str) -> None:
        pass


@pytest.mark.parametrize(
    ("holder_key", "newcomer_key", "allowed"),
    [
        (None, False, True),  # nobody holds it
        (False, False, True),  # site token over site token: protocol 1 behaviour
        (False, True, True),  # the credential takes its station back
        (True, True, True),  # the credential holder over its own ghost
        (True, False, False),  # the attack: the site token over a credential holder
    ],
)
@pytest.mark.parametrize("role", ["agent", "commander", "publisher"])
def test_it_lets_only_the_credential_replace_a_credential_holder(holder_key, newcomer_key, allowed, role):
    router = Router()
    if holder_key is not None:
        router.register(Holder("S002", role, holder_key))
    refusal = router.refusal(role, KMSN, "S002", newcomer_key)
    assert (refusal is None) is allowed
    if not allowed:
        assert refusal == HELD.format(station="S002")
    assert router.refusal("viewer", KMSN, "S002", False) is None  # viewers replace nobody


# -- the epoch a server's word may move -------------------------------------------------------
def test_it_bounds_a_leader_changed_claim_above_the_confirmed_epoch():
    assert claimed_epoch(7, 8) == 8
    assert claimed_epoch(7, 10**15) == 7 + MAX_EPOCH_JUMP
    assert claimed_epoch(7, 7) is None and claimed_epoch(7, 3) is None
    assert claimed_epoch(None, 10**15) is None  # nothing proven to measure from: hearsay


# -- connection caps ---------------------------------------------------------------------------
def test_it_sizes_the_caps_from_the_file_limit():
    assert Caps.sized(20000) == Caps(16000, 4000, 2000)
    assert Caps.sized(1024) == Caps(819, 204, 102)
    assert Caps.sized(1024, per_address=10).per_address == 10
    assert Caps.sized(1).total >= 16


def test_it_refuses_over_per_address_evicts_the_oldest_waiting_and_never_a_registered_one():
    admission = Admission(lambda: Caps(total=4, preauth=2, per_address=3))
    assert admission.admit("a1", "10.0.0.1") == (True, None)
    assert admission.admit("a2", "10.0.0.1") == (True, None)
    assert admission.admit("b1", "10.0.0.2") == (True, "a1")  # pre-auth full: the oldest waiting goes
    admission.registered("a2")
    admission.registered("b1")
    assert admission.admit("a3", "10.0.0.1") == (True, None)
    assert admission.admit("a4", "10.0.0.1") == (True, None)
    assert admission.admit("a5", "10.0.0.1") == (False, None)  # a2, a3, a4: 3 from one address
    assert admission.admit("c1", "10.0.0.3") == (True, "a3")  # total full: again the oldest waiting
    admission.registered("a4")
    admission.registered("c1")
    assert admission.admit("c2", "10.0.0.3") == (False, None)  # full of registered ones: refused
    assert admission.refused == {"total": 1, "per_address": 1, "evicted": 2}
    admission.release("a2")
    admission.release("a2")  # twice is harmless
    assert admission.admit("c2", "10.0.0.3") == (True, None)
    assert admission.snapshot()["limits"] == {"total": 4, "preauth": 2, "per_address": 3}


# -- layering ------------------------------------------------------------------------------------
def test_the_new_core_modules_import_no_io_no_clock_and_no_django():
    banned = {"asyncio", "socket", "selectors", "subprocess", "time", "datetime", "django", "channels"}
    for name in ("wire/auth.py", "wire/events.py", "wire/client_connection.py", "server/limits.py"):
        roots = {module.split(".")[0] for module in imported_modules(RELAY_DIR / name)}
        assert roots & banned == set(), name
