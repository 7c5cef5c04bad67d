"""Configuration: stk.ini [stk], STK_<KEY> overrides, one clear line per bad key."""

import subprocess
import sys

import pytest
from harness import ROOT

from elections.core.actions import ACTION_DEFAULTS
from stkrelay.config import ACTION_IDS, load

GOOD = {
    "KMSN": "9999-9999-99-99", "STATION": "S001", "NODE_IP": "127.0.0.41", "RELAY_PORT": "9530",
    "RELAY_TOKEN": "a-long-shared-secret", "LEASE_TTL": "10", "LEASE_RENEW": "3", "LEASE_POLL": "2",
    "RENEW_DEADLINE": "7", "WEB_PORT": "8000", "REDIS_URL": "redis://127.0.0.1:6379/0",
}  # fmt: skip


def write_ini(tmp_path, **over):
    values = dict(GOOD, LEASE_DIR=str(tmp_path), DATA_DIR=str(tmp_path / "data"))
    values.update(over)
    ini = tmp_path / "stk.ini"
    ini.write_text("[stk]\n" + "".join(f"{k} = {v}\n" for k, v in values.items() if v is not None))
    return ini


def problems(cfg):
    return {(p.id, p.key) for p in cfg.problems}


def test_a_complete_ini_loads_with_no_problem(tmp_path):
    cfg = load(str(write_ini(tmp_path)), env={})
    assert cfg.problems == []
    assert (cfg.kmsn, cfg.station, cfg.node, cfg.node_ip) == ("9999-9999-99-99", "S001", "S001", "127.0.0.41")
    assert (cfg.lease_ttl, cfg.lease_renew, cfg.lease_poll, cfg.renew_deadline) == (10, 3, 2, 7)


def test_environment_variables_override_the_ini(tmp_path):
    ini = write_ini(tmp_path)
    cfg = load(env={"STK_INI": str(ini), "STK_STATION": "S042", "STK_LEASE_TTL": "12"})
    assert cfg.station == "S042" and cfg.lease_ttl == 12 and cfg.problems == []


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"LEASE_TTL": "3"}, ("stkrelay.E007", "LEASE_TTL")),
        ({"RENEW_DEADLINE": "10"}, ("stkrelay.E008", "RENEW_DEADLINE")),
        ({"RENEW_DEADLINE": "2"}, ("stkrelay.E008", "RENEW_DEADLINE")),
        ({"RELAY_TOKEN": None}, ("stkrelay.E004", "RELAY_TOKEN")),
        ({"NODE_IP": "192.168.1.300"}, ("stkrelay.E005", "NODE_IP")),
        ({"RELAY_PORT": "70000"}, ("stkrelay.E011", "RELAY_PORT")),
        ({"RELAY_PORT": "ninety"}, ("stkrelay.E010", "RELAY_PORT")),
        ({"WEB_PORT": "9531"}, ("stkrelay.E006", "WEB_PORT")),
        ({"KMSN": ""}, ("stkrelay.E003", "KMSN")),
        ({"REDIS_URL": "localhost:6379"}, ("stkrelay.E009", "REDIS_URL")),
        ({"LEASE_DIR": "/nonexistent/share"}, ("stkrelay.E012", "LEASE_DIR")),
        ({"BEACON_INTERVAL": "fast"}, ("stkrelay.E030", "BEACON_INTERVAL")),
        ({"BEACON_INTERVAL": "2"}, ("stkrelay.E030", "BEACON_INTERVAL")),  # > LEASE_RENEW / 2
        ({"BEACON_INTERVAL": "0.01"}, ("stkrelay.E030", "BEACON_INTERVAL")),
        # TTL 3, renew 1: 0.5 s passes E030 but makes S 4.6 s ≥ TTL (the serving right, docs/design.md §15)
        (
            {
                "LEASE_TTL": "3",
                "LEASE_RENEW": "1",
                "RENEW_DEADLINE": "2",
                "LEASE_POLL": "0.5",
                "BEACON_INTERVAL": "0.5",
            },
            ("stkrelay.E130", "BEACON_INTERVAL"),
        ),
        ({"BEACON_PORT": "9531"}, ("stkrelay.E031", "BEACON_PORT")),
        ({"BEACON_PORT": "8000"}, ("stkrelay.E031", "BEACON_PORT")),
        ({"BEACON_PORT": "0"}, ("stkrelay.E031", "BEACON_PORT")),
        ({"BEACON_PEERS": "192.168.1.11,printer"}, ("stkrelay.E032", "BEACON_PEERS")),
        ({"BEACON_PEERS": "::1"}, ("stkrelay.E032", "BEACON_PEERS")),
    ],
)
def test_each_bad_value_names_its_key(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert expected in problems(cfg), cfg.problems
    line = next(p.line() for p in cfg.problems if (p.id, p.key) == expected)
    assert line.startswith(expected[1] + ":") and expected[0] in line and " — " in line


def test_beacons_default_to_every_0_2_s_on_relay_port_plus_2_and_0_switches_them_off(tmp_path):
    cfg = load(str(write_ini(tmp_path)), env={})
    assert (cfg.beacon_interval, cfg.beacon_port, cfg.beacon_peers, cfg.problems) == (0.2, 9532, [], [])
    ini = write_ini(tmp_path, BEACON_INTERVAL="0", BEACON_PEERS="192.168.1.11, 192.168.1.12")
    cfg = load(str(ini), env={})
    assert (cfg.beacon_interval, cfg.beacon_peers, cfg.problems) == (
        0.0,
        ["192.168.1.11", "192.168.1.12"],
        [],
    )


VIP_OK = {"VIP_ADDRESS": "192.0.2.250/24", "VIP_INTERFACE": "eth0"}
AWS_OK = {"AWS_ENI_ID": "eni-0b0b0b0b0b0b0b0b0", "AWS_PRIVATE_IP": "192.0.2.5", "AWS_REGION": "eu-west-1"}
OCI_OK = {"OCI_VNIC_ID": "ocid1.vnic.oc1.eu-frankfurt-1.abc", "OCI_PRIVATE_IP": "192.0.2.6"}
AZURE_NIC = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic-a"
AZURE_OK = {"AZURE_NIC_ID": AZURE_NIC, "AZURE_PRIVATE_IP": "192.0.2.7"}


def test_good_leader_action_settings_load_with_no_problem(tmp_path):
    cfg = load(str(write_ini(tmp_path, **VIP_OK, **AWS_OK, **OCI_OK, **AZURE_OK)), env={})
    assert cfg.problems == []


@pytest.mark.parametrize(
    "over, expected",
    [
        ({**VIP_OK, "VIP_ADDRESS": "192.0.2.300"}, ("stkrelay.E014", "VIP_ADDRESS")),
        ({**VIP_OK, "VIP_INTERFACE": ""}, ("stkrelay.E014", "VIP_INTERFACE")),
        ({**VIP_OK, "VIP_GARP_COUNT": "99"}, ("stkrelay.E014", "VIP_GARP_COUNT")),
        ({**AWS_OK, "AWS_ENI_ID": "nic-1"}, ("stkrelay.E015", "AWS_ENI_ID")),
        ({**AWS_OK, "AWS_REGION": ""}, ("stkrelay.E015", "AWS_REGION")),
        ({**OCI_OK, "OCI_PRIVATE_IP": "not-an-ip"}, ("stkrelay.E016", "OCI_PRIVATE_IP")),
        ({**AZURE_OK, "AZURE_NIC_ID": "nic-b"}, ("stkrelay.E017", "AZURE_NIC_ID")),
        ({**AZURE_OK, "AZURE_IP_CONFIG": "-bad name"}, ("stkrelay.E017", "AZURE_IP_CONFIG")),
    ],
)
def test_a_bad_leader_action_setting_is_a_startup_problem_with_its_familys_id(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert problems(cfg) == {expected}, cfg.problems
    line = cfg.problems[0].line()
    assert line.startswith(expected[1] + ":") and f"({expected[0]}) — " in line


def test_a_leader_action_override_from_the_environment_is_checked_too(tmp_path):
    cfg = load(
        str(write_ini(tmp_path, **VIP_OK)), env={"STK_VIP_PREFIX": "40", "STK_VIP_ADDRESS": "192.0.2.9"}
    )
    assert problems(cfg) == {("stkrelay.E014", "VIP_PREFIX")}


def test_every_leader_action_key_has_an_id():
    assert {key.partition("_")[0] for key in ACTION_DEFAULTS} == set(ACTION_IDS)
    assert len(set(ACTION_IDS.values())) == len(ACTION_IDS)


def test_a_missing_or_broken_ini_is_reported_not_raised(tmp_path):
    cfg = load(str(tmp_path / "absent.ini"), env={})
    assert ("stkrelay.E001", "STK_INI") in problems(cfg)
    bad = tmp_path / "bad.ini"
    bad.write_text("KMSN = x\n= a value without a key\n")  # keys before a header count (test_config_legacy)
    assert ("stkrelay.E111", "line 2") in problems(load(str(bad), env={}))  # the line named (test_config_ini)
    nosection = tmp_path / "nosec.ini"
    nosection.write_text("[other]\nKMSN = x\n")
    assert ("stkrelay.E002", "[stk]") in problems(load(str(nosection), env={}))


def run_agent(ini, timeout=60):
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runagent", "--ini", str(ini)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip


def test_runagent_refuses_bad_settings_with_one_line_per_key(tmp_path):
    out = run_agent(write_ini(tmp_path, NODE_IP="10.0.0.300", RELAY_TOKEN=None))
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2, out.stderr
    assert any("NODE_IP: '10.0.0.300' is not an IP address (stkrelay.E005)" in ln for ln in lines)
    assert any("RELAY_TOKEN: is missing (stkrelay.E004)" in ln for ln in lines)
    assert "Traceback" not in out.stderr


def test_runagent_refuses_a_bad_leader_action_instead_of_running_without_it(tmp_path):
    out = run_agent(write_ini(tmp_path, AWS_ENI_ID="eni-0b0b0b0b0b0b0b0b0", AWS_PRIVATE_IP="192.0.2.5"))
    assert out.returncode == 2
    assert "AWS_REGION: is required with AWS_ENI_ID (stkrelay.E015) — " in out.stderr
    assert "Traceback" not in out.stderr


def test_manage_py_check_shows_the_same_problems_with_stable_ids(tmp_path):
    ini = write_ini(tmp_path, RENEW_DEADLINE="11")
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"], capture_output=True, text=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "STK_INI": str(ini)}, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert "(stkrelay.E008) RENEW_DEADLINE: 11 must be less than LEASE_TTL=10" in out.stderr


def test_manage_py_check_shows_a_bad_leader_action_with_its_id(tmp_path):
    ini = write_ini(tmp_path, VIP_ADDRESS="192.0.2.250", VIP_INTERFACE="eth0", VIP_GARP="loud")
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"], capture_output=True, text=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "STK_INI": str(ini)}, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert "(stkrelay.E014) VIP_GARP: 'loud' is not a mode" in out.stderr


# -- the panel's keys and the secrets' strength (stkconfig/web.py) ----------------------
@pytest.mark.parametrize(
    "over, expected",
    [
        ({"RELAY_TOKEN": "short-secret"}, ("stkrelay.E018", "RELAY_TOKEN")),
        ({"RELAY_TOKEN": "aaaaaaaaaaaaaaaaaaaaaaaa"}, ("stkrelay.E018", "RELAY_TOKEN")),
        ({"RELAY_TOKEN": "abcabcabcabcabcabcabc"}, ("stkrelay.E018", "RELAY_TOKEN")),
        ({"RELAY_TOKEN": "abcdefgabcdefgabcdefg"}, ("stkrelay.E018", "RELAY_TOKEN")),
        ({"RELAY_TOKEN": "change-me-to-a-long-random-secret"}, ("stkrelay.E018", "RELAY_TOKEN")),
        ({"POOL_KEY": "0123012301230123"}, ("stkrelay.E018", "POOL_KEY")),
        ({"WEB_ALLOWED_HOSTS": "panel.site.lan, http://evil/"}, ("stkrelay.E019", "WEB_ALLOWED_HOSTS")),
        ({"WEB_ALLOWED_HOSTS": "*"}, ("stkrelay.E019", "WEB_ALLOWED_HOSTS")),
        ({"WEB_TRUSTED_PROXIES": "10.0.0.5, proxy.lan"}, ("stkrelay.E020", "WEB_TRUSTED_PROXIES")),
        ({"WEB_TRUSTED_PROXIES": "10.0.0.0/33"}, ("stkrelay.E020", "WEB_TRUSTED_PROXIES")),
        ({"WEB_LOGIN_FAILURES_PER_S": "fast"}, ("stkrelay.E010", "WEB_LOGIN_FAILURES_PER_S")),
        ({"WEB_LOGIN_BURST": "0"}, ("stkrelay.E011", "WEB_LOGIN_BURST")),
        ({"WEB_WS_MAX_BUFFER": "65536"}, ("stkrelay.E066", "WEB_WS_MAX_BUFFER")),  # < RELAY_MAX_FRAME
        ({"WEB_WS_MAX_BUFFER": "4M"}, ("stkrelay.E066", "WEB_WS_MAX_BUFFER")),
        ({"WEB_WS_MAX_MESSAGES": "2"}, ("stkrelay.E067", "WEB_WS_MAX_MESSAGES")),
    ],
)
def test_each_bad_panel_key_or_weak_secret_names_its_key(tmp_path, over, expected):
    assert problems(load(str(write_ini(tmp_path, **over)), env={})) == {expected}


def test_the_panel_keys_load_normalised_and_the_agents_own_names_are_allowed(tmp_path):
    from stkconfig.web import allowed_hosts

    hosts = "Panel.Site.LAN, .site.lan, 192.168.1.10, ::1"
    proxies = "10.0.0.5, 10.0.1.0/28"
    ini = write_ini(tmp_path, NODE_IP="fd00::10", WEB_ALLOWED_HOSTS=hosts, WEB_TRUSTED_PROXIES=proxies)
    cfg = load(str(ini), env={"STK_WEB_LOGIN_BURST": "3"})
    assert cfg.problems == []
    assert cfg.web_allowed_hosts == ["panel.site.lan", ".site.lan", "192.168.1.10", "[::1]"]
    assert allowed_hosts(cfg.node_ip, cfg.web_allowed_hosts) == [
        "[fd00::10]", "localhost", "127.0.0.1", "[::1]", "panel.site.lan", ".site.lan", "192.168.1.10",
    ]  # fmt: skip
    assert cfg.web_trusted_proxies == ["10.0.0.5/32", "10.0.1.0/28"]
    assert (cfg.web_login_address_failures, cfg.web_login_failures_per_s, cfg.web_login_burst) == (20, 0.5, 3)


def test_the_retired_forwarded_for_count_is_refused_not_silently_ignored(tmp_path):
    cfg = load(str(write_ini(tmp_path)), env={"STK_TRUST_FORWARDED_FOR": "1"})
    assert problems(cfg) == {("stkrelay.E020", "STK_TRUST_FORWARDED_FOR")}
    assert load(str(write_ini(tmp_path)), env={"STK_TRUST_FORWARDED_FOR": "0"}).problems == []


def test_manage_py_check_shows_a_weak_token_and_a_bad_proxy_with_their_ids(tmp_path):
    ini = write_ini(tmp_path, RELAY_TOKEN="secret", WEB_TRUSTED_PROXIES="nginx", WEB_ALLOWED_HOSTS="a b")
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"], capture_output=True, text=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "STK_INI": str(ini)}, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert "(stkrelay.E018) RELAY_TOKEN: is 6 characters, fewer than 16" in out.stderr
    assert "(stkrelay.E019) WEB_ALLOWED_HOSTS: 'a b' is not a host name or an address" in out.stderr
    assert "(stkrelay.E020) WEB_TRUSTED_PROXIES: 'nginx' is not an address or a network" in out.stderr
