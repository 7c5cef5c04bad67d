"""The agent's web certificate (elections/ports/local/webcert.py), its keys' checks
(stkconfig/panel_transport.py, E057–E060), and clients that pin it (stkhost/pinned_https.py,
relay/client/discovery.py) against a real HTTPS server on loopback."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from harness import Redis
from test_config import problems, run_agent, write_ini

from elections.ports.local import webcert
from relay.client.discovery import AgentApi, in_clear_on_lan
from stkconfig.panel_transport import plain_on_lan
from stkhost import fingerprints
from stkhost.fingerprints import parse_pins
from stkrelay.config import load

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


def _names(path) -> tuple[set[str], set[str]]:  # type: ignore[no-untyped-def]
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}, set(
        san.get_values_for_type(x509.DNSName)
    )


# -- the certificate made in DATA_DIR --------------------------------------------------------------
def test_the_certificate_made_at_first_start_names_the_agent_and_is_kept_at_the_next(tmp_path):
    made = webcert.ensure_made(
        str(tmp_path), "192.168.1.10", ["panel.site.lan", ".site.lan", "10.0.0.7"], NOW
    )
    assert made.made and fingerprints.FINGERPRINT.fullmatch(made.fingerprint)
    assert stat.S_IMODE((tmp_path / webcert.MADE_NAME).stat().st_mode) == 0o600  # it holds the key
    crt = tmp_path / webcert.CERT_NAME
    assert b"PRIVATE KEY" not in crt.read_bytes()
    assert webcert.served_fingerprint(str(tmp_path), "", web_plain=False) == made.fingerprint
    assert webcert.served_fingerprint(str(tmp_path), "", web_plain=True) == ""
    ips, dns = _names(crt)
    assert ips == {"192.168.1.10", "127.0.0.1", "::1", "10.0.0.7"} and dns == {"localhost", "panel.site.lan"}
    again = webcert.ensure_made(str(tmp_path), "192.168.1.10", [], NOW + datetime.timedelta(days=365))
    assert again.fingerprint == made.fingerprint  # pinned clients keep working across restarts


@pytest.mark.parametrize(
    "ip, later",
    [("192.168.1.11", 0), ("192.168.1.10", webcert.MADE_DAYS - webcert.RENEW_DAYS + 1)],
    ids=["NODE_IP changed", "about to expire"],
)
def test_it_is_made_again_when_it_no_longer_names_node_ip_or_nears_its_end(tmp_path, ip, later):
    first = webcert.ensure_made(str(tmp_path), "192.168.1.10", [], NOW)
    second = webcert.ensure_made(str(tmp_path), ip, [], NOW + datetime.timedelta(days=later))
    assert second.fingerprint != first.fingerprint
    assert webcert.served_fingerprint(str(tmp_path), "", False) == second.fingerprint


def test_a_certificate_with_nothing_to_make_is_told_without_cryptography_and_a_child(tmp_path):
    """`made_as_is` (the supervisor's, every start) agrees with `ensure_made`: the same one kept,
    and None for each case `ensure_made` would make again, or cannot be sure of."""
    made = webcert.ensure_made(str(tmp_path), "192.168.1.10", ["10.0.0.7"], NOW)
    kept = webcert.made_as_is(str(tmp_path), "192.168.1.10", NOW + datetime.timedelta(days=365))
    assert kept == made and webcert.made_as_is(str(tmp_path), "10.0.0.7", NOW) == made
    assert webcert.made_as_is(str(tmp_path), "192.168.1.11", NOW) is None  # NODE_IP changed
    later = NOW + datetime.timedelta(days=webcert.MADE_DAYS - webcert.RENEW_DAYS + 1)
    assert webcert.made_as_is(str(tmp_path), "192.168.1.10", later) is None  # about to expire
    crt = tmp_path / webcert.CERT_NAME
    crt.write_bytes(crt.read_bytes().replace(b"\n", b"\r\n"))  # not the copy ensure_made writes
    assert webcert.made_as_is(str(tmp_path), "192.168.1.10", NOW) is None
    crt.unlink()
    assert webcert.made_as_is(str(tmp_path), "192.168.1.10", NOW) is None
    assert webcert.ensure_made(str(tmp_path), "192.168.1.10", [], NOW) == made  # which puts it back
    assert webcert.made_as_is(str(tmp_path), "192.168.1.10", NOW) == made
    (tmp_path / webcert.MADE_NAME).write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n")
    assert webcert.made_as_is(str(tmp_path), "192.168.1.10", NOW) is None
    assert webcert.made_as_is(str(tmp_path / "absent"), "192.168.1.10", NOW) is None


def test_a_damaged_certificate_file_is_replaced_not_served(tmp_path):
    (tmp_path / webcert.MADE_NAME).write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n")
    made = webcert.ensure_made(str(tmp_path), "127.0.0.1", [], NOW)
    assert fingerprints.fingerprint_of_pem((tmp_path / webcert.MADE_NAME).read_bytes()) == made.fingerprint


def test_runagent_stops_with_e061_when_the_certificate_cannot_be_written(tmp_path):
    redis = Redis(tmp_path)
    try:
        ini = write_ini(tmp_path, REDIS_URL=redis.url)
        (tmp_path / "data" / webcert.MADE_NAME).mkdir(parents=True)  # where the key file belongs
        out = run_agent(ini, timeout=120)
    finally:
        redis.stop()
    assert out.returncode == 2
    assert (
        f"DATA_DIR: cannot write this agent's web certificate: {tmp_path / 'data' / webcert.MADE_NAME}: "
        in out.stderr
    )
    assert "(stkrelay.E061)" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_daphne_endpoint_string_survives_colons_in_paths_and_ipv6(tmp_path):
    from twisted.internet import endpoints, reactor

    odd = tmp_path / "a:b=c"
    odd.mkdir()
    made = webcert.ensure_made(str(odd), "::1", [], NOW)
    endpoint = endpoints.serverFromString(reactor, made.endpoint("::1", 8443))
    assert (endpoint._port, endpoint._interface) == (8443, "::1")


def test_fingerprints_are_read_as_people_copy_them():
    fp = "ab" * 32
    assert fingerprints.normalise(fingerprints.show(fp)) == fp
    assert fingerprints.normalise(f"SHA256:{fp.upper()}") == fp
    assert fingerprints.normalise(fp[:-2]) == "" and fingerprints.normalise(fp + "\n") == fp
    with pytest.raises(ValueError, match="not a SHA-256"):
        parse_pins(["AB:CD"])


# -- the operator's pair: TLS_CERT / TLS_KEY, and WEB_PLAIN -------------------------------------
@pytest.fixture
def pair(tmp_path):
    """An operator's certificate with an intermediate after it, its key, and a stranger's key."""
    begin = b"-----BEGIN CERTIFICATE-----"
    key_a, cert_a = webcert._make("127.0.0.41", [], NOW).split(begin)  # each: key PEM, then certificate
    key_b, cert_b = webcert._make("127.0.0.41", [], NOW).split(begin)
    (tmp_path / "site.crt").write_bytes(begin + cert_a + begin + cert_b)  # leaf, then "intermediate"
    (tmp_path / "site.key").write_bytes(key_a)
    (tmp_path / "other.key").write_bytes(key_b)
    (tmp_path / "junk.pem").write_bytes(b"hello")
    return tmp_path


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"TLS_CERT": "site.crt"}, ("stkrelay.E057", "TLS_KEY")),
        ({"TLS_KEY": "site.key"}, ("stkrelay.E057", "TLS_CERT")),
        ({"TLS_CERT": "junk.pem", "TLS_KEY": "site.key"}, ("stkrelay.E058", "TLS_CERT")),
        ({"TLS_CERT": "missing.crt", "TLS_KEY": "site.key"}, ("stkrelay.E058", "TLS_CERT")),
        ({"TLS_CERT": "site.crt", "TLS_KEY": "junk.pem"}, ("stkrelay.E059", "TLS_KEY")),
        ({"TLS_CERT": "site.crt", "TLS_KEY": "other.key"}, ("stkrelay.E059", "TLS_KEY")),
        ({"TLS_CERT": "site.crt", "TLS_KEY": "site.key", "WEB_PLAIN": "1"}, ("stkrelay.E060", "WEB_PLAIN")),
    ],
)
def test_each_bad_tls_setting_names_its_key(pair, over, expected):
    over = {k: (str(pair / v) if k.startswith("TLS_") else v) for k, v in over.items()}
    assert problems(load(str(write_ini(pair, **over)), env={})) == {expected}


def test_the_operators_pair_serves_with_its_intermediates_and_is_what_the_members_see(pair):
    cfg = load(str(write_ini(pair, TLS_CERT=str(pair / "site.crt"), TLS_KEY=str(pair / "site.key"))), env={})
    assert cfg.problems == [] and not cfg.web_plain
    served = webcert.operator_cert(str(pair), cfg.tls_cert, cfg.tls_key)
    assert not served.made and served.chain_file is not None
    assert (pair / webcert.CHAIN_NAME).read_bytes().count(b"BEGIN CERTIFICATE") == 1
    assert webcert.served_fingerprint(str(pair), cfg.tls_cert, False) == served.fingerprint


def test_plain_http_warns_only_off_loopback():
    assert plain_on_lan("192.168.1.10", True) and plain_on_lan("fd00::10", True)
    assert not plain_on_lan("127.0.0.21", True) and not plain_on_lan("::1", True)
    assert not plain_on_lan("192.168.1.10", False)


# -- clients that pin: the relay client's leader lookup -------------------------------------------
class Leader(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self):  # type: ignore[no-untyped-def]
        Leader.seen.append(self.headers.get("Authorization"))
        body = json.dumps({"kmsn": "K1", "leader": "S002", "ip": "127.0.0.22", "port": 9530, "epoch": 4,
                           "status": "valid"}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # type: ignore[no-untyped-def]
        pass


@pytest.fixture
def https_agent(tmp_path):
    made = webcert.ensure_made(str(tmp_path), "127.0.0.53", [], NOW)
    server = ThreadingHTTPServer(("127.0.0.53", 0), Leader)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(made.cert_file)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Leader.seen = []
    try:
        yield f"https://127.0.0.53:{server.server_address[1]}", made, tmp_path / webcert.CERT_NAME
    finally:
        server.shutdown()


def test_the_leader_lookup_speaks_only_to_a_pinned_certificate(https_agent):
    url, made, _ = https_agent
    pinned = AgentApi([url], "K1", api_token="stk_secret", pins=[made.fingerprint])
    found = asyncio.run(pinned.find())
    assert found is not None and (found.ip, found.epoch) == ("127.0.0.22", 4)
    assert Leader.seen == ["Bearer stk_secret"]
    stranger = AgentApi([url], "K1", api_token="stk_secret", pins=["00" * 32])
    assert asyncio.run(stranger.find()) is None
    assert "is not pinned" in stranger.last
    assert Leader.seen == ["Bearer stk_secret"]  # refused before the request: the token never left


def test_the_leader_lookup_verifies_by_ca_file_and_refuses_an_unknown_certificate(https_agent):
    url, _, crt = https_agent
    assert asyncio.run(AgentApi([url], "K1", ca_file=str(crt)).find()) is not None
    system_cas = AgentApi([url], "K1", api_token="stk_secret")
    assert asyncio.run(system_cas.find()) is None and "CERTIFICATE_VERIFY_FAILED" in system_cas.last
    assert Leader.seen == [None]  # only the CA-file lookup got through, and it had no token


def test_the_api_token_never_goes_to_a_plain_http_url_off_loopback():
    assert in_clear_on_lan("http://192.168.1.10:8000") and in_clear_on_lan("http://panel.site.lan:8000")
    assert not in_clear_on_lan("http://127.0.0.21:8000") and not in_clear_on_lan("http://localhost:8000")
    assert not in_clear_on_lan("https://192.168.1.10:8000")
