"""The cloud relay's cloud.ini and the agent's CLOUD_URL/CLOUD_TOKEN keys (docs/design.md §14)."""

import hashlib

import pytest

from relay.cloud.config import load
from stkconfig.cloud import parse_cloud_url
from stkconfig.parsed import CloudURL
from stkhost.pool_keys import cloud_key
from stkrelay.config import load as load_agent

KMSN = "9999-9999-99-99"
# Two sites' LEASE_KEYs (hex, either case); strong enough to be a CLOUD_TOKEN too (the C011 case).
KEY_A, KEY_B = hashlib.sha256(b"site A").hexdigest(), hashlib.sha256(b"site B").hexdigest().upper()


def ini(tmp_path, text):
    path = tmp_path / "cloud.ini"
    path.write_text(text)
    return str(path)


def test_a_cloud_ini_with_defaults_and_two_sites(tmp_path):
    (tmp_path / "b.key").write_text(KEY_B + "\n")
    text = (f"[cloud]\nDATA_DIR = {tmp_path}/d\n[site:{KMSN}]\nCLOUD_TOKEN = a-long-cloud-token-1\n"
            f"LEASE_KEY = {KEY_A}\n[site:1111-1111-11-11]\nCLOUD_TOKEN = another-cloud-token\n"
            "LEASE_KEY_FILE = b.key\n")  # fmt: skip
    cfg = load(ini(tmp_path, text))
    assert cfg.problems == []
    ports = (cfg.relay_port, cfg.tunnel_port, cfg.web_port)
    assert (cfg.listen_ip, ports, cfg.park, cfg.park_max) == ("127.0.0.1", (9540, 9542, 9543), 4.0, 256)
    assert cfg.tokens == {KMSN: "a-long-cloud-token-1", "1111-1111-11-11": "another-cloud-token"}
    assert cfg.lease_keys == {KMSN: KEY_A, "1111-1111-11-11": KEY_B.lower()}


SITE = f"[site:K]\nCLOUD_TOKEN = a-long-cloud-token-1\nLEASE_KEY = {KEY_A}\n"


@pytest.mark.parametrize(
    ("text", "pid", "key"),
    [
        ("[other]\n", "stkrelay.C002", "[cloud]"),
        (
            "[cloud]\nRELAY_PORT = x\n[site:K]\nCLOUD_TOKEN = a-long-cloud-token-1\n",
            "stkrelay.C003",
            "RELAY_PORT",
        ),
        ("[cloud]\nPARK = 99\n[site:K]\nCLOUD_TOKEN = a-long-cloud-token-1\n", "stkrelay.C003", "PARK"),
        (
            "[cloud]\nPARK_MAX = 0\n[site:K]\nCLOUD_TOKEN = a-long-cloud-token-1\n",
            "stkrelay.C003",
            "PARK_MAX",
        ),
        (
            "[cloud]\nLISTEN_IP = cloud\n[site:K]\nCLOUD_TOKEN = a-long-cloud-token-1\n",
            "stkrelay.C004",
            "LISTEN_IP",
        ),
        (
            "[cloud]\nTUNNEL_PORT = 9541\n[site:K]\nCLOUD_TOKEN = a-long-cloud-token-1\n",
            "stkrelay.C005",
            "TUNNEL_PORT",
        ),
        ("[cloud]\n[site:K]\nCLOUD_TOKEN = short\n", "stkrelay.C007", "[site:K] CLOUD_TOKEN"),
        (
            "[cloud]\n[site:K]\nCLOUD_TOKEN = aaaaaaaaaaaaaaaaaaaaaaaa\n",
            "stkrelay.C007",
            "[site:K] CLOUD_TOKEN",
        ),
        ("[cloud]\n[site:K]\nCLOUD_TOKEN = abcdefgabcdefgabcdefg\n", "stkrelay.C007", "[site:K] CLOUD_TOKEN"),
        (
            "[cloud]\n[site:K]\nCLOUD_TOKEN = change-me-cloud-secret-42\n",
            "stkrelay.C007",
            "[site:K] CLOUD_TOKEN",
        ),
        ("[cloud]\n", "stkrelay.C008", "[site:<KMSN>]"),
    ],
)
def test_each_problem_of_a_cloud_ini_has_its_id_and_key(tmp_path, text, pid, key):
    text = text.replace("[site:K]\nCLOUD_TOKEN = a-long-cloud-token-1\n", SITE)
    cfg = load(ini(tmp_path, text.replace("[cloud]\n", f"[cloud]\nDATA_DIR = {tmp_path}/d\n")))
    assert [(p.id, p.key) for p in cfg.problems] == [(pid, key)]


@pytest.mark.parametrize(
    ("site", "pid", "key"),
    [
        ("CLOUD_TOKEN = a-long-cloud-token-1\n", "stkrelay.C009", "[site:K] LEASE_KEY"),
        ("CLOUD_TOKEN = a-long-cloud-token-1\nLEASE_KEY =\n", "stkrelay.C009", "[site:K] LEASE_KEY"),
        ("CLOUD_TOKEN = a-long-cloud-token-1\nLEASE_KEY = abc\n", "stkrelay.C010", "[site:K] LEASE_KEY"),
        (
            f"CLOUD_TOKEN = a-long-cloud-token-1\nLEASE_KEY = {'g' * 64}\n",
            "stkrelay.C010",
            "[site:K] LEASE_KEY",
        ),
        (
            f"CLOUD_TOKEN = a-long-cloud-token-1\nLEASE_KEY = {KEY_A}\nLEASE_KEY_FILE = k\n",
            "stkrelay.C010",
            "[site:K] LEASE_KEY",
        ),
        (
            "CLOUD_TOKEN = a-long-cloud-token-1\nLEASE_KEY_FILE = missing.key\n",
            "stkrelay.C010",
            "[site:K] LEASE_KEY_FILE",
        ),
        (
            "CLOUD_TOKEN = a-long-cloud-token-1\nLEASE_KEY_FILE = empty.key\n",
            "stkrelay.C010",
            "[site:K] LEASE_KEY_FILE",
        ),
        (f"CLOUD_TOKEN = {KEY_A.upper()}\nLEASE_KEY = {KEY_A}\n", "stkrelay.C011", "[site:K] LEASE_KEY"),
    ],
)
def test_a_site_without_a_sound_lease_key_is_refused_not_served_unchecked(tmp_path, site, pid, key):
    (tmp_path / "empty.key").write_text("\n")
    cfg = load(ini(tmp_path, f"[cloud]\nDATA_DIR = {tmp_path}/d\n[site:K]\n{site}"))
    assert [(p.id, p.key) for p in cfg.problems] == [(pid, key)]
    assert cfg.tokens == {} and cfg.lease_keys == {}  # the site is not served at all


def test_no_or_an_unreadable_cloud_ini(tmp_path):
    assert [p.id for p in load(None).problems] == ["stkrelay.C001"]
    assert [p.id for p in load(str(tmp_path / "missing.ini")).problems] == ["stkrelay.C001"]


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("tcp://cloud.example:9542", CloudURL("tcp", "cloud.example", 9542)),
        ("wss://cloud.example/tunnel", CloudURL("wss", "cloud.example", 443, "/tunnel")),
        ("tcp://cloud.example", "needs a port"),
        ("http://cloud.example:80", "scheme"),
        ("tcp://:9542", "no host"),
        ("tcp://h:99999", "not a URL"),
    ],
)
def test_cloud_urls(url, parsed):
    got = parse_cloud_url(url)
    assert got == parsed if isinstance(parsed, CloudURL) else parsed in got


BASE = {"STK_KMSN": KMSN, "STK_STATION": "S001", "STK_RELAY_TOKEN": "site-Token-9f8e7d6c5b4a"}


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({}, None),  # no tunnel
        ({"STK_CLOUD_URL": "tcp://127.0.0.90:9542", "STK_CLOUD_TOKEN": "cloud-Token-0123456789"}, None),
        ({"STK_CLOUD_TOKEN": "cloud-Token-0123456789"}, "CLOUD_URL"),
        ({"STK_CLOUD_URL": "tcp://127.0.0.90:9542"}, "CLOUD_TOKEN"),
        ({"STK_CLOUD_URL": "tcp://127.0.0.90:9542", "STK_CLOUD_TOKEN": "0123012301230123"}, "CLOUD_TOKEN"),
        (
            {"STK_CLOUD_URL": "tcp://127.0.0.90:9542", "STK_CLOUD_TOKEN": "zzzzzzzzzzzzzzzzzzzz"},
            "CLOUD_TOKEN",
        ),
        (
            {"STK_CLOUD_URL": "tcp://127.0.0.90:9542", "STK_CLOUD_TOKEN": "change-me-cloud-token"},
            "CLOUD_TOKEN",
        ),
        (
            {"STK_CLOUD_URL": "tcp://127.0.0.90:9542", "STK_CLOUD_TOKEN": BASE["STK_RELAY_TOKEN"]},
            "CLOUD_TOKEN",
        ),
        (
            {"STK_CLOUD_URL": "wss://cloud.example/t", "STK_CLOUD_TOKEN": "cloud-Token-0123456789"},
            "CLOUD_URL",
        ),
        ({"STK_CLOUD_URL": "cloud.example:9542", "STK_CLOUD_TOKEN": "cloud-Token-0123456789"}, "CLOUD_URL"),
    ],
)
def test_the_agents_cloud_keys_are_checked_at_start_up(extra, problem):
    cfg = load_agent(None, env={**BASE, **extra}, check_dirs=False)
    ours = [
        (p.id, p.key) for p in cfg.problems if p.id in ("stkrelay.E028", "stkrelay.E029", "stkrelay.E055")
    ]
    ids = {"CLOUD_URL": "stkrelay.E028", "CLOUD_TOKEN": "stkrelay.E029"}
    assert ours == ([(ids[problem], problem)] if problem else [])
    assert (cfg.cloud is not None) == (problem is None and "STK_CLOUD_URL" in extra)


def test_a_cloud_token_that_is_the_site_s_lease_key_is_refused_at_the_agent():
    lease_key = cloud_key(BASE["STK_RELAY_TOKEN"], KMSN)  # POOL_KEY defaults to RELAY_TOKEN
    env = {**BASE, "STK_CLOUD_URL": "tcp://127.0.0.90:9542", "STK_CLOUD_TOKEN": lease_key.upper()}
    cfg = load_agent(None, env=env, check_dirs=False)
    assert [(p.id, p.key) for p in cfg.problems if p.key == "CLOUD_TOKEN"] == [
        ("stkrelay.E055", "CLOUD_TOKEN")
    ]
    assert cfg.cloud is None


def test_a_comma_separated_cloud_url_names_every_node_and_one_url_reads_as_before():
    token = {"STK_CLOUD_TOKEN": "cloud-Token-0123456789"}
    many = load_agent(None, env={**BASE, **token, "STK_CLOUD_URL": "tcp://127.0.0.90:9542, tcp://127.0.0.93:9542"},
                      check_dirs=False)  # fmt: skip
    assert [(u.host, u.port) for u in many.clouds] == [("127.0.0.90", 9542), ("127.0.0.93", 9542)]
    assert many.cloud == many.clouds[0]
    one = load_agent(None, env={**BASE, **token, "STK_CLOUD_URL": "tcp://127.0.0.90:9542"}, check_dirs=False)
    assert one.clouds == (one.cloud,) and (one.cloud.host, one.cloud.port) == ("127.0.0.90", 9542)
    bad = load_agent(None, env={**BASE, **token, "STK_CLOUD_URL": "tcp://127.0.0.90:9542, nowhere"},
                     check_dirs=False)  # fmt: skip
    assert [p.key for p in bad.problems if p.id == "stkrelay.E028"] == ["CLOUD_URL"] and bad.cloud is None


CLUSTER = ("ETCD_ENDPOINTS = http://127.0.0.1:2379, http://127.0.0.2:2379\nNODE_ID = a\n"
           "NODES = a=10.0.0.1:9544, b=10.0.0.2:9544\nPEER_TOKEN = a-long-peer-token-77\n")  # fmt: skip


def test_a_cloud_node_of_several_reads_its_directory_keys(tmp_path):
    cfg = load(ini(tmp_path, f"[cloud]\nDATA_DIR = {tmp_path}/d\n{CLUSTER}DIRECTORY_TTL = 3\n{SITE}"))
    assert cfg.problems == []
    c = cfg.cluster
    assert c is not None and (c.node, c.peer_port, c.ttl, c.prefix, c.timeout) == (
        "a",
        9544,
        3,
        "/stkrelay-cloud/",
        1.0,
    )
    assert c.endpoints == ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]
    assert c.nodes == {"a": ("10.0.0.1", 9544), "b": ("10.0.0.2", 9544)}
    alone = load(ini(tmp_path, f"[cloud]\nDATA_DIR = {tmp_path}/d\n{SITE}"))
    assert alone.problems == [] and alone.cluster is None  # one node alone, as before


@pytest.mark.parametrize(
    ("change", "pid", "key"),
    [
        (("ETCD_ENDPOINTS = http://127.0.0.1:2379, http://127.0.0.2:2379", "ETCD_ENDPOINTS = 127.0.0.1"),
         "stkrelay.E230", "ETCD_ENDPOINTS"),
        (("NODE_ID = a", "NODE_ID = a/b"), "stkrelay.E231", "NODE_ID"),
        (("NODE_ID = a\n", ""), "stkrelay.E231", "NODE_ID"),
        (("b=10.0.0.2:9544", "b=10.0.0.2"), "stkrelay.E232", "NODES"),
        (("a=10.0.0.1:9544, ", ""), "stkrelay.E232", "NODES"),  # this node not listed
        (("NODES = a=10.0.0.1:9544", "NODES = a=10.0.0.1:9544, a=10.0.0.3:9544"), "stkrelay.E232", "NODES"),
        (("a-long-peer-token-77", "short"), "stkrelay.E233", "PEER_TOKEN"),
        (("PEER_TOKEN", "DIRECTORY_TTL = 0\nPEER_TOKEN"), "stkrelay.E234", "DIRECTORY_TTL"),
        (("PEER_TOKEN", "ETCD_TIMEOUT = x\nPEER_TOKEN"), "stkrelay.E234", "ETCD_TIMEOUT"),
        (("PEER_TOKEN", "PEER_PORT = 9542\nPEER_TOKEN"), "stkrelay.E236", "PEER_PORT"),
        (("ETCD_ENDPOINTS = http://127.0.0.1:2379, http://127.0.0.2:2379\n", ""), "stkrelay.E237", "NODE_ID"),
    ],
)  # fmt: skip
def test_each_problem_of_a_cloud_node_s_directory_keys_has_its_id(tmp_path, change, pid, key):
    text = f"[cloud]\nDATA_DIR = {tmp_path}/d\n{CLUSTER.replace(*change)}{SITE}"
    cfg = load(ini(tmp_path, text))
    assert [(p.id, p.key) for p in cfg.problems] == [(pid, key)]
    assert cfg.cluster is None
