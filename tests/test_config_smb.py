"""smb:// lease dirs in the configuration (docs/design.md §5.3, §11): the URL is
parsed, never probed as a local folder; its password comes from
SMB_PASSWORD or SMB_PASSWORD_FILE and is never part of what is shown."""

import pytest
from test_config import problems, write_ini

from stkconfig.smburl import SmbUrlError, parse_smb_url
from stkrelay.config import load

SECRET = "pa55-w0rd-never-shown"


def test_an_smb_lease_dir_with_a_password_loads_without_a_local_folder(tmp_path):
    ini = write_ini(tmp_path, LEASE_DIR="smb://stk@fileserver.site:4450/W/socket", SMB_PASSWORD=SECRET)
    cfg = load(str(ini), env={})
    assert cfg.problems == []
    assert cfg.lease_dir == "smb://stk@fileserver.site:4450/W/socket"


def test_the_password_may_come_from_a_file(tmp_path):
    (tmp_path / "smb.pw").write_text(SECRET + "\n")
    pw = str(tmp_path / "smb.pw")
    ini = write_ini(tmp_path, LEASE_DIR="smb://stk@fileserver/W/socket", SMB_PASSWORD_FILE=pw)
    assert load(str(ini), env={}).problems == []


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"LEASE_DIR": "smb://fileserver"}, ("stkrelay.E012", "LEASE_DIR")),
        ({"LEASE_DIR": "smb://stk:secret@fileserver/W"}, ("stkrelay.E012", "LEASE_DIR")),
        ({"LEASE_DIR": "smb://fileserver:99999/W"}, ("stkrelay.E012", "LEASE_DIR")),
        ({"LEASE_DIR": "smb://file server/W"}, ("stkrelay.E012", "LEASE_DIR")),
        ({"LEASE_DIR": "smb://fileserver/W/../etc"}, ("stkrelay.E012", "LEASE_DIR")),
        ({"LEASE_DIR": "smb://stk@fileserver/W/socket"}, ("stkrelay.E022", "SMB_PASSWORD")),
        ({"LEASE_DIR": "smb://stk@fileserver/W", "SMB_PASSWORD_FILE": "/nonexistent/pw"},
         ("stkrelay.E022", "SMB_PASSWORD_FILE")),
    ],
)  # fmt: skip
def test_a_bad_smb_lease_dir_is_one_line_naming_its_key(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert problems(cfg) == {expected}
    (line,) = [p.line() for p in cfg.problems]
    assert "\n" not in line and line.startswith(expected[1])
    assert "secret" not in line  # a password put in the URL is refused, never echoed


def test_the_password_is_never_in_a_problem_line_or_in_the_url_shown(tmp_path):
    ini = write_ini(tmp_path, LEASE_DIR="smb://stk@fileserver/W/socket", SMB_PASSWORD=SECRET, LEASE_TTL="1")
    cfg = load(str(ini), env={})
    assert cfg.problems and all(SECRET not in p.line() for p in cfg.problems)
    url = parse_smb_url(cfg.lease_dir)
    assert SECRET not in url.where and url.where == "smb://stk@fileserver/W/socket"


def test_the_url_is_read_into_its_parts():
    url = parse_smb_url("smb://SITE;stk@[fe80::1]:1445/W/socket/pool")
    assert (url.domain, url.user, url.host, url.port) == ("SITE", "stk", "[fe80::1]", 1445)
    assert (url.share, url.path, url.unc) == ("W", ("socket", "pool"), "\\\\fe80::1\\W")
    assert parse_smb_url("SMB://fs/W").port == 445
    with pytest.raises(SmbUrlError, match="no password"):
        parse_smb_url("smb://stk:pw@fs/W")
