"""Watched pools in stk.ini: `[pool:<KMSN>]` sections, checked with one line per problem
(E025 the section, E026 its secrets, E027 its values)."""

import pytest
from test_config import write_ini

from stkrelay.config import load

KEY_A = "pool-a-secret-0123456789"
KEY_B = "pool-b-secret-9876543210"


def with_pools(tmp_path, text):
    ini = write_ini(tmp_path)
    ini.write_text(ini.read_text() + text)
    return str(ini)


def test_each_pool_section_is_a_watched_pool_with_its_own_share_and_key(tmp_path):
    (tmp_path / "b.pw").write_text("smb-password-of-b\n")
    ini = with_pools(
        tmp_path,
        f"[pool:1111-1111-11-11]\nLEASE_DIR = /srv/site-a/socket\nRELAY_TOKEN = {KEY_A}\n"
        f"[pool:2222-2222-22-22]\nLEASE_DIR = smb://files-b/share/socket\nRELAY_TOKEN = {KEY_A}\n"
        f"POOL_KEY = {KEY_B}\nSHARE_TIMEOUT = 1.5\nNODE = OFFICE1\nSMB_PASSWORD_FILE = {tmp_path}/b.pw\n",
    )
    cfg = load(ini, env={})
    assert cfg.problems == []
    a, b = cfg.watched
    assert (a.kmsn, a.lease_dir, a.pool_key, a.share_timeout, a.node) == (
        "1111-1111-11-11", "/srv/site-a/socket", KEY_A, cfg.share_timeout, "S001",
    )  # fmt: skip
    assert (b.kmsn, b.lease_dir, b.pool_key, b.share_timeout, b.node) == (
        "2222-2222-22-22", "smb://files-b/share/socket", KEY_B, 1.5, "OFFICE1",
    )  # fmt: skip
    assert b.smb.password_file == f"{tmp_path}/b.pw"  # the share's backend reads its own login


def test_a_watched_share_that_is_not_there_yet_does_not_stop_the_agent(tmp_path):
    section = f"[pool:1111]\nLEASE_DIR = /nonexistent/x\nRELAY_TOKEN = {KEY_A}\n"
    cfg = load(with_pools(tmp_path, section), env={})
    assert cfg.problems == [] and cfg.watched[0].lease_dir == "/nonexistent/x"


@pytest.mark.parametrize(
    "section, pid, key, words",
    [
        (f"[pool:1111]\nRELAY_TOKEN = {KEY_A}\n", "E027", "[pool:1111] LEASE_DIR", "is not set"),
        ("[pool:1111]\nLEASE_DIR = /srv/a\n", "E026", "[pool:1111] RELAY_TOKEN", "is missing"),
        ("[pool:1111]\nLEASE_DIR = /srv/a\nRELAY_TOKEN = short\n", "E026", "[pool:1111] RELAY_TOKEN",
         "fewer than 16"),
        (f"[pool:1111]\nLEASE_DIR = /srv/a\nRELAY_TOKEN = {KEY_A}\nSHARE_TIMEOUT = soon\n", "E027",
         "[pool:1111] SHARE_TIMEOUT", "is not 0.1..60 seconds"),
        (f"[pool:1111]\nLEASE_DIR = /srv/a\nRELAY_TOKEN = {KEY_A}\nLEASE_TTL = 4\n", "E025",
         "[pool:1111] LEASE_TTL", "is not a key of a watched pool"),
        (f"[pool:9999-9999-99-99]\nLEASE_DIR = /srv/a\nRELAY_TOKEN = {KEY_A}\n", "E025",
         "[pool:9999-9999-99-99]", "this agent's own pool"),
        (f"[pool:]\nLEASE_DIR = /srv/a\nRELAY_TOKEN = {KEY_A}\n", "E025", "[pool:]", "is not a KMSN"),
        (f"[pool:1111]\nLEASE_DIR = /srv/a\nRELAY_TOKEN = {KEY_A}\nNODE = a b\n", "E027", "[pool:1111] NODE",
         "is not a node name"),
    ],
)  # fmt: skip
def test_each_bad_pool_section_is_one_line_naming_the_section_and_key(tmp_path, section, pid, key, words):
    cfg = load(with_pools(tmp_path, section), env={})
    assert [(p.id, p.key) for p in cfg.problems] == [(f"stkrelay.{pid}", key)]
    line = cfg.problems[0].line()
    assert words in line and "\n" not in line
    assert cfg.watched == []


def test_a_pool_on_the_agents_own_share_is_refused(tmp_path):
    cfg = load(with_pools(tmp_path, f"[pool:1111]\nLEASE_DIR = {tmp_path}\nRELAY_TOKEN = {KEY_A}\n"), env={})
    assert [(p.id, p.key) for p in cfg.problems] == [("stkrelay.E027", "[pool:1111] LEASE_DIR")]


def test_a_watched_smb_share_is_checked_without_the_network(tmp_path):
    bad_url = f"[pool:1111]\nLEASE_DIR = smb://\nRELAY_TOKEN = {KEY_A}\n"
    cfg = load(with_pools(tmp_path, bad_url), env={})
    assert [(p.id, p.key) for p in cfg.problems] == [("stkrelay.E027", "[pool:1111] LEASE_DIR")]
    no_password = f"[pool:1111]\nLEASE_DIR = smb://stk@files-a/share/socket\nRELAY_TOKEN = {KEY_A}\n"
    cfg = load(with_pools(tmp_path, no_password), env={})
    assert [(p.id, p.key) for p in cfg.problems] == [("stkrelay.E026", "[pool:1111] SMB_PASSWORD")]
    good = no_password + "SMB_PASSWORD = a-long-smb-password\n"
    assert load(with_pools(tmp_path, good), env={}).problems == []
