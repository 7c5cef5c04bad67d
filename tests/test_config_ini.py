"""The site's stk.ini as its Windows admins write it (issue 36 Build 3, issue 40 finding 11;
stkrelay/config_ini.py, stkrelay/config_file.py).

Must hold: Windows-written files (BOM, CRLF, cp950, inline comments, quoted values,
sections) load to the same config as the clean file, field by field, or stop with an id
naming the line. docs/windows.md's own example loads as it is.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from harness import ROOT

from stkrelay.config import load
from stkrelay.config_ini import parse

TOKEN = "k3y-Of;the#site-2026x"  # a ';' and a '#' with no whitespace before them: part of the secret
POOL_TOKEN = "pool-b-secret-7Hq2#x9"
CLEAN = """\
[stk]
KMSN = 1234-5678-90-12
STATION = S001
NODE_IP = 192.168.1.10
RELAY_TOKEN = {token}
LEASE_DIR = {share}
DATA_DIR = {data}
LEASE_TTL = 12
WEB_ALLOWED_HOSTS = stk1.site.lan, stk2.site.lan
RELAY_HOST = 127.0.0.1
TIME_ZONE = Asia/Taipei
[pool:2222-3333-44-55]
LEASE_DIR = {other}
RELAY_TOKEN = {pool_token}
SHARE_TIMEOUT = 2
"""
# What Notepad on a Traditional Chinese Windows gives: an old program's section, a header in
# capitals, comments after values (';' and '#', tabs), quotes, indentation, a Chinese comment.
WINDOWS = """\
; 站台設定 -- stk.ini of PC S001
[Printer]
PORT = LPT1            ; another program's section: left alone
[STK]
  KMSN = 1234-5678-90-12        ; the site
STATION = S001\t# this PC's station
NODE_IP = 192.168.1.10            ; this PC's LAN address
RELAY_TOKEN = "{token}"   ; rotated 2026-01
LEASE_DIR = '{share}'   # 共用資料夾
DATA_DIR = {data} ;
LEASE_TTL = 12\t\t; seconds
WEB_ALLOWED_HOSTS = stk1.site.lan, stk2.site.lan    ; both panels
RELAY_HOST = 127.0.0.1            ; the stations' one line (issue 36)
TIME_ZONE = Asia/Taipei  ; 台北
[pool:2222-3333-44-55]
LEASE_DIR = {other}        ; or smb://files-b/share/socket
RELAY_TOKEN = {pool_token}    ; POOL_KEY too, if that site sets it apart
SHARE_TIMEOUT = 2                     ; default: this agent's
"""
NOT_COMPARED = {"source", "origins", "warnings"}  # where each key came from differs, by design


def places(tmp_path):
    share, other, data = tmp_path / "share", tmp_path / "other", tmp_path / "data"
    for d in (share, other):
        d.mkdir(exist_ok=True)
    return {"share": share, "other": other, "data": data, "token": TOKEN, "pool_token": POOL_TOKEN}


def written(tmp_path, name: str, text: str, encoding: str = "utf-8", crlf: bool = False, bom: bytes = b""):
    ini = tmp_path / name
    body = text.format(**places(tmp_path))
    ini.write_bytes(bom + (body.replace("\n", "\r\n") if crlf else body).encode(encoding))
    ini.chmod(0o600)
    return ini


def assert_same_config(got, want):
    for f in dataclasses.fields(want):
        if f.name not in NOT_COMPARED:
            assert getattr(got, f.name) == getattr(want, f.name), f.name


@pytest.fixture
def clean(tmp_path):
    cfg = load(str(written(tmp_path, "clean.ini", CLEAN)), env={})
    assert cfg.problems == [] and cfg.warnings == []
    assert (cfg.relay_token, cfg.node_ip, cfg.lease_ttl) == (TOKEN, "192.168.1.10", 12)
    assert [w.relay_token for w in cfg.watched] == [POOL_TOKEN]
    return cfg


@pytest.mark.parametrize(
    "encoding, crlf, bom",
    [
        ("utf-8", False, b""),
        ("utf-8", True, b"\xef\xbb\xbf"),  # Notepad's UTF-8: a BOM, CRLF
        ("cp950", True, b""),  # Notepad's ANSI on a Traditional Chinese Windows
        ("utf-16-le", True, b"\xff\xfe"),  # Notepad's "Unicode"
    ],
    ids=["utf8", "utf8-bom-crlf", "cp950-crlf", "utf16-bom-crlf"],
)
def test_a_windows_written_file_loads_to_the_same_config_as_the_clean_one_field_by_field(
    tmp_path, clean, encoding, crlf, bom
):
    cfg = load(str(written(tmp_path, "windows.ini", WINDOWS, encoding, crlf, bom)), env={})
    assert cfg.problems == [] and cfg.warnings == []
    assert_same_config(cfg, clean)
    assert cfg.origins["RELAY_TOKEN"] == "[STK] line 8"  # which key was read from where


@pytest.mark.parametrize("encoding, crlf", [("utf-8", False), ("cp950", True)])
def test_the_clean_file_itself_reads_alike_in_every_encoding(tmp_path, clean, encoding, crlf):
    assert_same_config(load(str(written(tmp_path, "again.ini", CLEAN, encoding, crlf)), env={}), clean)


@pytest.mark.parametrize(
    "line, value",
    [
        ("RELAY_TOKEN = abc123 ; rotated 2026-01", "abc123"),  # issue 40 finding 11
        ("RELAY_TOKEN = abc123\t# rotated", "abc123"),
        ("SMB_PASSWORD = ab;cd", "ab;cd"),  # no whitespace before: part of the password
        ("SMB_PASSWORD = ab#cd ; the file server's", "ab#cd"),
        ('SMB_PASSWORD = "ab ; cd"   ; quoted to keep it', "ab ; cd"),
        ("SMB_PASSWORD = ' lead and trail '", " lead and trail "),
        ("LEASE_DIR = W:\\socket   ; the share", "W:\\socket"),
        ("LEASE_DIR: W:\\socket", "W:\\socket"),
        ("KMSN = don't ; an apostrophe in a word is no quote", "don't"),
        ("KMSN = ;", ""),
        # a command line keeps its quotes for its own splitter; a ';' inside them is no comment
        ("GATE_CMD = '/opt/gate check' --vip 'a ; b'   ; the gate", "'/opt/gate check' --vip 'a ; b'"),
        ("RELAY_EXEC = 'C:\\Relay\\relay_server.exe'", "'C:\\Relay\\relay_server.exe'"),
    ],
)
def test_a_value_loses_its_inline_comment_and_its_quotes_and_keeps_a_bare_semicolon(line, value):
    ini, problems = parse(line, "stk.ini", secrets={"RELAY_TOKEN", "SMB_PASSWORD"},
                          argv_keys={"GATE_CMD", "RELAY_EXEC"})  # fmt: skip
    assert problems == []
    ((read, number),) = ini.sections["__top__"].values()
    assert (read, number) == (value, 1)


@pytest.mark.parametrize(
    "text, pid, key",
    [
        ("KMSN = 1\nRELAY_TOKEN = abc123 rotated 2026-01\n", "stkrelay.E112", "RELAY_TOKEN (line 2)"),
        ("KMSN = 1\nPOOL_KEY = abc123;rotated 2026-01\n", "stkrelay.E112", "POOL_KEY (line 2)"),
        ('KMSN = 1\n\nSMB_PASSWORD = "abc\n', "stkrelay.E111", "line 3"),
        ("KMSN = 1\n[stk\nSTATION = S1\n", "stkrelay.E111", "line 2"),
        ("[stk] STATION = S1\n", "stkrelay.E111", "line 1"),
        ("KMSN = 1\n = value\n", "stkrelay.E111", "line 2"),
    ],
)
def test_a_line_that_cannot_be_read_stops_with_an_id_naming_it(tmp_path, text, pid, key):
    ini = tmp_path / "stk.ini"
    ini.write_text(text)
    cfg = load(str(ini), env={})
    assert (pid, key) in {(p.id, p.key) for p in cfg.problems}


def test_a_file_neither_utf8_nor_cp950_stops_naming_the_line(tmp_path):
    ini = tmp_path / "stk.ini"
    # line 2: cp950 (not UTF-8); line 4: bytes no cp950 reads (0x80 is no lead byte)
    ini.write_bytes(b"KMSN = 1\r\n; \xaf\xb8\xa5x\r\nSTATION = S1\r\nNODE = \x80\x80\r\n")
    cfg = load(str(ini), env={})
    (bad,) = [p for p in cfg.problems if p.id == "stkrelay.E110"]
    assert bad.key == "line 4" and "line 2" in bad.message and "line 4" in bad.message
    utf16 = tmp_path / "u16.ini"
    utf16.write_bytes(b"\xff\xfe" + "KMSN = 1\n".encode("utf-16-le") + b"\x00\xd8")  # a lone surrogate
    assert ("stkrelay.E110", "line 2") in {(p.id, p.key) for p in load(str(utf16), env={}).problems}


# -- sections ------------------------------------------------------------------------------------
def test_keys_only_in_other_sections_are_named_with_their_lines_never_a_silent_is_not_set(tmp_path):
    ini = tmp_path / "stk.ini"
    ini.write_text(f"[Agent]\nKMSN = 1\nSTATION = S1\n[Printer]\nPORT = LPT1\n[pool:2222-3333-44-55]\n"
                   f"LEASE_DIR = {tmp_path}\nRELAY_TOKEN = {POOL_TOKEN}\n")  # fmt: skip
    (e002,) = [p for p in load(str(ini), env={}).problems if p.id == "stkrelay.E002"]
    assert "[Agent] (line 1: KMSN line 2, STATION line 3)" in e002.message
    assert "[Printer] (line 4: PORT line 5)" in e002.message
    ini.write_text(f"STATION = S1\nNODE_IP = 127.0.0.5\n[Agent]\nKMSN = 1\nRELAY_TOKEN = {TOKEN}\n"
                   f"LEASE_DIR = {tmp_path}\n[Printer]\nPORT = LPT1\nSTATION = P1\n")  # fmt: skip
    ini.chmod(0o600)
    cfg = load(str(ini), env={})
    (w110,) = cfg.warnings
    assert (w110.id, w110.key) == ("stkrelay.W110", "[Agent]")
    assert "KMSN (line 4), RELAY_TOKEN (line 5), LEASE_DIR (line 6)" in w110.message
    assert "(here: 2 keys before the first header)" in w110.message  # which keys it read from where
    said = {p.key: p.message for p in cfg.problems}
    assert "KMSN in [Agent] line 4" in said["KMSN"] and "RELAY_TOKEN in [Agent] line 5" in said["RELAY_TOKEN"]
    assert cfg.station == "S1"  # [Printer]'s STATION is another program's: the headerless one counts


def test_stk_in_any_case_is_the_agents_section(tmp_path):
    ini = tmp_path / "stk.ini"
    ini.write_text(f"[Stk]\nKMSN = 1\nSTATION = S1\nRELAY_TOKEN = {TOKEN}\nLEASE_DIR = {tmp_path}\n"
                   f"DATA_DIR = {tmp_path / 'd'}\n")  # fmt: skip
    ini.chmod(0o600)
    cfg = load(str(ini), env={})
    assert cfg.problems == [] and cfg.warnings == [] and cfg.kmsn == "1"


# -- docs/windows.md's own example ---------------------------------------------------------------
def windows_md_example() -> str:
    text = (ROOT / "docs" / "windows.md").read_text(encoding="utf-8")
    found = re.search(r"`/etc/stkrelay/stk\.ini`.*?```ini\n(.*?)```", text, re.S)
    assert found, "docs/windows.md has no stk.ini example after `/etc/stkrelay/stk.ini`"
    return found[1]


def test_docs_windows_md_example_ini_loads_cleanly_with_no_comment_inside_a_value(tmp_path):
    example = windows_md_example()
    assert "; this PC's LAN address" in example and "; the file mode 0600" in example  # its comments
    password = tmp_path / "smb-password"
    password.write_text("smb-secret\n")
    ini = tmp_path / "stk.ini"
    ini.write_bytes(example.replace("<the site's token>", TOKEN)
                    .replace("/etc/stkrelay/smb-password", str(password))
                    .replace("\n", "\r\n").encode())  # fmt: skip
    ini.chmod(0o600)
    cfg = load(str(ini), env={"STK_DATA_DIR": str(tmp_path / "data")}, check_dirs=False)
    assert cfg.problems == [] and cfg.warnings == []
    assert (cfg.node_ip, cfg.relay_token, cfg.time_zone) == ("192.168.1.10", TOKEN, "Asia/Taipei")
    assert cfg.lease_dir == "smb://stkagent@fileserver/W/socket" and cfg.smb.password_file == str(password)
