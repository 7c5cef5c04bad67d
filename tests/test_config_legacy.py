"""The site's stk.ini as it is, and the legacy relay keys (issue 19; stkrelay/config_legacy.py).

The old agent's file has its keys before any section header, in the Traditional
Chinese code page, with keys of its own (RELAY_HOST, INI_EDITOR's...); the seed
adds ours to it. The agent reads it whole, `[stk]` wins where both have a key,
and the old agent's keys are summed up in one line, never one warning each.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from harness import ROOT

from stkrelay.config import load
from stkrelay.config_legacy import startup_lines

OLD_AGENT = """\
; stk.ini of StkAgent (INI_EDITOR template) -- 站台設定
KMSN=9999-9999-99-99
STATION=S003
RELAY_HOST=192.168.1.10
RELAY_PORT=9530
MIRROR_SRC=W:\\socket
MIRROR_DST=C:\\STK\\socket
SHUTDOWN_FLAG=W:\\socket\\SHUTDOWN.FLG
UPLOADER_GROUP=A
DEBUG
; the floating relay's keys, added by the seed
RELAY_TOKEN=a-long-shared-site-secret
LEASE_TTL=10
LEASE_RENEW=3
LEASE_POLL=2
NODE_IP=127.0.0.43
WEB_PORT=8000
"""
OLD_KEYS = ["MIRROR_DST", "MIRROR_SRC", "SHUTDOWN_FLAG", "UPLOADER_GROUP"]  # RELAY_HOST is read (issue 36)


def old_ini(tmp_path, text: str = OLD_AGENT, encoding: str = "cp950", tail: str = ""):
    ini = tmp_path / "stk.ini"
    body = text + f"LEASE_DIR={tmp_path}\nDATA_DIR={tmp_path / 'data'}\n" + tail
    ini.write_bytes(body.replace("\n", "\r\n").encode(encoding))
    return ini


def test_the_old_agents_headerless_file_in_cp950_loads_as_is(tmp_path):
    cfg = load(str(old_ini(tmp_path)), env={})
    assert cfg.problems == []
    assert (cfg.kmsn, cfg.station, cfg.relay_port, cfg.relay_token) == (
        "9999-9999-99-99", "S003", 9530, "a-long-shared-site-secret")  # fmt: skip
    assert (cfg.lease_ttl, cfg.lease_renew, cfg.lease_poll, cfg.node_ip) == (10, 3, 2, "127.0.0.43")
    assert cfg.ignored == OLD_KEYS  # DEBUG (a bare word) is no key at all
    assert cfg.relay_host == "192.168.1.10"  # where this PC's stations dial: relayctl doctor says so


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_utf8_with_or_without_bom_too(tmp_path, encoding):
    cfg = load(str(old_ini(tmp_path, encoding=encoding)), env={})
    assert cfg.problems == [] and cfg.station == "S003"


def test_stk_section_wins_over_the_headerless_keys_and_other_sections_are_left_alone(tmp_path):
    tail = "[stk]\nSTATION=S009\nLEASE_TTL=12\n[Printer]\nPORT=LPT1\nSTATION=P1\n"
    cfg = load(str(old_ini(tmp_path, tail=tail)), env={})
    assert cfg.problems == []
    assert (cfg.station, cfg.lease_ttl, cfg.lease_renew) == ("S009", 12, 3)
    assert cfg.ignored == OLD_KEYS  # [Printer] is another program's: not ours to judge


def test_environment_still_overrides_and_a_bad_value_still_stops_start_up(tmp_path):
    ini = old_ini(tmp_path, tail="LEASE_RENEW=30\n")  # duplicate key: the last one counts
    cfg = load(str(ini), env={"STK_STATION": "S042"})
    assert cfg.station == "S042"
    # LEASE_RENEW = 30 against the defaults: TTL and deadline (E007, E008), and the heartbeat's
    # TTL (LEASE_TTL) under two renewals (E100, stkconfig.timing)
    assert {(p.id, p.key) for p in cfg.problems} == {("stkrelay.E007", "LEASE_TTL"),
                                                     ("stkrelay.E008", "RENEW_DEADLINE"),
                                                     ("stkrelay.E100", "HEARTBEAT_TTL")}  # fmt: skip


def test_the_ignored_keys_make_one_line(tmp_path):
    many = "".join(f"OLD_KEY_{i:02d}=x\n" for i in range(40))
    cfg = load(str(old_ini(tmp_path, tail=many)), env={})
    lines = startup_lines(cfg.source, cfg.ignored, cfg.relay_legacy, cfg.relay_legacy_magic)
    assert len(lines) == 1 and "44 keys of the old agent ignored" in lines[0] and lines[0].endswith(", ...)")


def test_check_prints_no_warning_per_unknown_key(tmp_path):
    """`manage.py check` on the old agent's file: no line about any of its own keys."""
    ini = old_ini(tmp_path)
    env = {"STK_INI": str(ini), "DJANGO_SETTINGS_MODULE": "stkrelay.settings", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert not any(key in out.stdout + out.stderr for key in OLD_KEYS)


# -- RELAY_LEGACY ------------------------------------------------------------------
def legacy_problems(tmp_path, **keys):
    tail = "".join(f"{k}={v}\n" for k, v in keys.items())
    cfg = load(str(old_ini(tmp_path, tail=tail)), env={})
    return cfg, {(p.id, p.key) for p in cfg.problems}


def test_legacy_is_off_by_default(tmp_path):
    cfg, found = legacy_problems(tmp_path)
    assert found == set() and cfg.relay_legacy is False


def test_legacy_on_needs_the_old_magic(tmp_path):
    assert legacy_problems(tmp_path, RELAY_LEGACY=1)[1] == {("stkrelay.E080", "RELAY_LEGACY_MAGIC")}
    cfg, found = legacy_problems(tmp_path, RELAY_LEGACY=1, RELAY_LEGACY_MAGIC="STK-OLD-7")
    assert found == set() and (cfg.relay_legacy, cfg.relay_legacy_magic, cfg.relay_legacy_wait) == (
        True, "STK-OLD-7", 0.3)  # fmt: skip
    (warning,) = startup_lines(cfg.source, [], cfg.relay_legacy, cfg.relay_legacy_magic)
    assert "in clear" in warning


@pytest.mark.parametrize("magic", ["STKRELAY/1", "x" * 65, "魔術"])
def test_a_magic_that_cannot_be_the_old_one_is_refused(tmp_path, magic):
    assert legacy_problems(tmp_path, RELAY_LEGACY=1, RELAY_LEGACY_MAGIC=magic)[1] == {
        ("stkrelay.E081", "RELAY_LEGACY_MAGIC")}  # fmt: skip


@pytest.mark.parametrize("wait", ["-1", "2.5", "soon"])
def test_a_bad_wait_is_refused(tmp_path, wait):
    found = legacy_problems(tmp_path, RELAY_LEGACY=1, RELAY_LEGACY_MAGIC="M1", RELAY_LEGACY_WAIT=wait)[1]
    assert found == {("stkrelay.E082", "RELAY_LEGACY_WAIT")}
