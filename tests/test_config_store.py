"""LEASE_STORE and the ETCD_* keys (stkconfig/store.py): each bad value
stops start-up with one line naming the key and a stable id (E033–E036)."""

import pytest
from test_config import problems, write_ini

from stkrelay.config import load

EPS = "http://127.0.0.1:2379,http://127.0.0.2:2379,http://127.0.0.3:2379"
ETCD = {"LEASE_STORE": "etcd", "ETCD_ENDPOINTS": EPS}


def test_the_default_store_is_the_file_share(tmp_path):
    cfg = load(str(write_ini(tmp_path)), env={})
    assert cfg.lease_store == "file" and cfg.problems == []


def test_an_etcd_pool_needs_no_lease_dir_and_gets_its_own_prefix(tmp_path):
    cfg = load(str(write_ini(tmp_path, LEASE_STORE="etcd", ETCD_ENDPOINTS=EPS, LEASE_DIR="")), env={})
    assert cfg.problems == []
    assert cfg.lease_store == "etcd" and list(cfg.etcd.endpoints) == EPS.split(",")
    assert cfg.etcd.prefix == "/stkrelay/9999-9999-99-99/"


@pytest.mark.parametrize(
    "keys, expected",
    [
        ({"LEASE_STORE": "zookeeper"}, ("stkrelay.E033", "LEASE_STORE")),
        ({"LEASE_STORE": "etcd"}, ("stkrelay.E034", "ETCD_ENDPOINTS")),
        ({"LEASE_STORE": "etcd", "ETCD_ENDPOINTS": "127.0.0.1:2379"}, ("stkrelay.E034", "ETCD_ENDPOINTS")),
        ({"LEASE_STORE": "etcd", "ETCD_ENDPOINTS": "http://h:2379/v3"}, ("stkrelay.E034", "ETCD_ENDPOINTS")),
        ({**ETCD, "ETCD_PREFIX": "stk"}, ("stkrelay.E035", "ETCD_PREFIX")),
        ({**ETCD, "ETCD_PREFIX": "/a b/"}, ("stkrelay.E035", "ETCD_PREFIX")),
        ({**ETCD, "ETCD_CA": "/nonexistent/ca.pem"}, ("stkrelay.E036", "ETCD_CA")),
    ],
)  # fmt: skip
def test_bad_store_settings_name_their_key(tmp_path, keys, expected):
    cfg = load(str(write_ini(tmp_path, **keys)), env={})
    assert expected in problems(cfg), [p.line() for p in cfg.problems]


def test_tls_needs_https_endpoints_and_a_certificate_with_its_key(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    cfg = load(str(write_ini(tmp_path, LEASE_STORE="etcd", ETCD_ENDPOINTS=EPS, ETCD_CA=str(ca),
                             ETCD_CERT=str(cert))), env={})  # fmt: skip
    assert {("stkrelay.E036", "ETCD_ENDPOINTS"), ("stkrelay.E036", "ETCD_KEY")} <= problems(cfg)
    https = EPS.replace("http://", "https://")
    key = tmp_path / "key.pem"
    key.write_text("x")
    cfg = load(str(write_ini(tmp_path, LEASE_STORE="etcd", ETCD_ENDPOINTS=https, ETCD_CA=str(ca),
                             ETCD_CERT=str(cert), ETCD_KEY=str(key))), env={})  # fmt: skip
    assert cfg.problems == []
