"""`RELAY_HOST` (issue 36 Build 3): read from the site's stk.ini, checked (E113), and
`relayctl doctor` says where this PC's stations go: this PC's loopback or a member (ok), the
old central relay (WARN: still the single point of failure). The config's problems and the
doctor's lines are said in the reader's language."""

from __future__ import annotations

import pytest
from test_panel_support import django_env

from elections.ports.local.pool_view import MemberView, PoolView
from stkrelay.config import load

TOKEN = "k3y-of-the-site-2026-x9"
POOL = PoolView(kmsn="1", node="S001", members={"S001": MemberView(ip="192.168.1.10"),
                                                "S002": MemberView(ip="192.168.1.11")})  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def django():
    django_env()


def stk(tmp_path, **keys):
    ini = tmp_path / "stk.ini"
    base = {"KMSN": "1", "STATION": "S001", "NODE_IP": "192.168.1.10", "RELAY_TOKEN": TOKEN,
            "LEASE_DIR": str(tmp_path), "DATA_DIR": str(tmp_path / "d"), **keys}  # fmt: skip
    ini.write_text("".join(f"{k} = {v}\n" for k, v in base.items()))
    ini.chmod(0o600)
    return load(str(ini), env={}, check_dirs=False)


def stations(cfg) -> list[tuple[bool, bool, str]]:
    from elections.management.doctor_checks import stations_check

    said: list[tuple[bool, bool, str]] = []
    stations_check(lambda name, ok, detail, warn=False: said.append((ok, warn, detail)), cfg, POOL)
    return said


@pytest.mark.parametrize(
    "host, words",
    [
        ("127.0.0.1   ; the stations' one line", "this PC's station door takes them to whoever leads"),
        ("localhost", "this PC's station door takes them to whoever leads"),
        ("192.168.1.11", "member S002 of this pool"),
        ("192.168.1.10", "member S001 of this pool"),
    ],
)
def test_loopback_or_a_member_is_good(tmp_path, host, words):
    cfg = stk(tmp_path, RELAY_HOST=host)
    assert cfg.problems == []
    ((ok, warn, detail),) = stations(cfg)
    assert ok and not warn and words in detail


def test_any_other_address_is_the_old_central_relay_and_a_warning(tmp_path):
    ((ok, warn, detail),) = stations(stk(tmp_path, RELAY_HOST="10.20.30.40"))
    assert ok and warn and "old central relay" in detail and "single point of failure" in detail


def test_loopback_where_the_agent_does_not_listen_there_is_a_warning(tmp_path):
    ((ok, warn, detail),) = stations(stk(tmp_path, RELAY_HOST="127.0.0.1", RELAY_LOOPBACK="off"))
    assert ok and warn and "RELAY_LOOPBACK" in detail


def test_loopback_without_a_station_door_is_a_warning(tmp_path):
    ((ok, warn, detail),) = stations(stk(tmp_path, RELAY_HOST="127.0.0.1", RELAY_FORWARD="off"))
    assert ok and warn and "RELAY_FORWARD = off" in detail


def test_unset_says_the_stations_fallback(tmp_path):
    ((ok, warn, detail),) = stations(stk(tmp_path))
    assert ok and warn and "127.0.0.1:9530" in detail


@pytest.mark.parametrize("host", ["not a host", "relay_1.site", "-bad.site", "x" * 300])
def test_a_value_that_is_no_address_nor_host_name_is_e113(tmp_path, host):
    cfg = stk(tmp_path, RELAY_HOST=host)
    assert {(p.id, p.key) for p in cfg.problems} == {("stkrelay.E113", "RELAY_HOST")}


def test_the_new_problems_are_said_in_traditional_chinese(tmp_path):
    from django.utils import translation

    ini = tmp_path / "bad.ini"
    ini.write_text('KMSN = 1\nSMB_PASSWORD = "abc\n')
    (e111,) = [p for p in load(str(ini), env={}).problems if p.id == "stkrelay.E111"]
    assert e111.message == 'a quote (") that is never closed'  # English where it is compared
    with translation.override("zh-hant"):
        assert str(e111.message) == '引號（"）沒有結束' and "區段" in f"{e111.hint}"
        ((_, _, detail),) = stations(stk(tmp_path, RELAY_HOST="10.20.30.40"))
        assert "單一故障點" in detail
