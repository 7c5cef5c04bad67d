"""The key table (stkconfig/keys.py) is what the agent reads, and what its docs say.

docs/configuration.md's table and packaging/stk.ini.example are written from the
table (scripts/config_docs.py); each number's range in the table is the one
`config.load` enforces; every key's raw default is the loaded default; the config
is frozen and holds no value the table does not name."""

from __future__ import annotations

import dataclasses
import importlib.util
import typing
from pathlib import Path

import pytest

from stkconfig.environment import EnvironmentSettings
from stkconfig.keys import BY_NAME, DEFAULTS, KEYS
from stkconfig.model import Config
from stkrelay import config_file
from stkrelay.config import load

ROOT = Path(__file__).resolve().parent.parent
SOUND = {"KMSN": "9999-9999-99-99", "STATION": "S001", "RELAY_TOKEN": "Zq8-unit-test-token-5Kx"}


def _docs():
    spec = importlib.util.spec_from_file_location("config_docs", ROOT / "scripts" / "config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env(**values: str) -> dict[str, str]:
    return {f"STK_{k}": v for k, v in {**SOUND, **values}.items()}


def test_the_docs_table_and_the_example_ini_are_written_from_the_table():
    docs = _docs()
    for path, text in docs.wanted().items():
        assert path.read_text() == text, f"{path.name} is out of date: run python scripts/config_docs.py"
    assert docs.main(["--check"]) == 0


def test_the_check_notices_a_hand_edited_docs_row(tmp_path, monkeypatch):
    docs = _docs()
    page = tmp_path / "configuration.md"
    page.write_text(docs.PAGE.read_text().replace("seconds a lease lives without renewal", "edited"))
    monkeypatch.setattr(docs, "PAGE", page)
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    (tmp_path / "packaging").mkdir()
    monkeypatch.setattr(docs, "EXAMPLE", tmp_path / "packaging" / "stk.ini.example")
    docs.EXAMPLE.write_text(docs.example_ini(KEYS))
    assert docs.main(["--check"]) == 1
    assert docs.main([]) == 0 and docs.main(["--check"]) == 0
    assert "seconds a lease lives without renewal" in page.read_text()


def test_the_example_ini_loads_with_only_its_placeholder_token_refused():
    cfg = load(str(ROOT / "packaging" / "stk.ini.example"), env={}, check_dirs=False)
    assert [(p.id, p.key) for p in cfg.problems] == [("stkrelay.E018", "RELAY_TOKEN")]
    assert cfg.ignored == []  # every key the example names is one the agent reads


def test_every_unset_key_loads_as_its_table_default():
    assert load(None, env=_env(), check_dirs=False).problems == []
    raw = config_file.read(None, _env()).values  # what the checks are given, before any is parsed
    for name, default in DEFAULTS.items():
        if name not in SOUND:
            assert raw[name] == default, name


RANGED = [k for k in KEYS if k.range is not None]


@pytest.mark.parametrize("key", RANGED, ids=[k.name for k in RANGED])
def test_each_numbers_range_in_the_table_is_the_one_load_enforces(key):
    low, high = key.range
    step = 1 if key.kind == "int" else 0.01
    timing = {"LEASE_TTL": "300", "RENEW_DEADLINE": "200", "HEARTBEAT_TTL": "600", "LEASE_POLL": "100"}
    for value, wanted in ((low, False), (high, False), (low - step, True), (high + max(step, high), True)):
        text = str(int(value)) if key.kind == "int" else repr(float(value))
        env = _env(**{**(timing if key.name not in timing else {}), key.name: text})
        got = {(p.id, p.key) for p in load(None, env=env, check_dirs=False).problems}
        assert (("stkrelay.E011", key.name) in got) is wanted, (key.name, text, got)
    got = {(p.id, p.key) for p in load(None, env=_env(**{key.name: "many"}), check_dirs=False).problems}
    assert ("stkrelay.E010", key.name) in got


def test_every_check_id_in_the_table_is_one_the_config_reports():
    files = [*(ROOT / "stkrelay").glob("config*.py"), *(ROOT / "stkconfig").glob("*.py")]
    source = "".join(p.read_text() for p in files)
    for key in KEYS:
        for pid in filter(None, key.check.split("/")):
            assert f"stkrelay.{pid}" in source, (key.name, pid)


def test_the_config_is_frozen_and_has_a_field_for_each_plain_key():
    cfg = load(None, env=_env(), check_dirs=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lease_ttl = 1.0  # type: ignore[misc]
    names = {f.name for f in dataclasses.fields(Config)}
    grouped = (
        "GATE_",
        "ON_ROLE_",
        "WEBHOOK_",
        "SMB_",
        "RELAY_EXEC",
        "ETCD_",
    )  # parsed into gate, notify, ...
    plain = [k.name for k in KEYS if not k.is_family and not k.environment and not k.name.startswith(grouped)]
    assert [n for n in plain if n.lower() not in names] == []
    assert BY_NAME["LEASE_TTL"].range == (0.1, 300)


def test_the_configs_field_defaults_are_the_tables():
    """A Config made without a file (the dataclass's own defaults) says what the table says."""
    made = {f.name: f.default for f in dataclasses.fields(Config)}
    parse = {"int": int, "float": float, "flag": lambda text: text not in ("0", "")}
    checked = []
    for key in KEYS:
        field = key.name.lower()
        if key.kind in parse and key.default and field in made:
            assert made[field] == parse[key.kind](key.default), key.name
            checked.append(key.name)
    assert {"LEASE_TTL", "RELAY_PORT", "RELAY_ATTESTS", "EVENTS_KEEP_DAYS"} <= set(checked)


def test_each_environment_row_is_a_field_of_the_environment_section_at_the_tables_default():
    """`STK_DEBUG` -> `EnvironmentSettings.debug`, its default the table's (STK_INI is the loader's own)."""
    made = {f.name: f.default for f in dataclasses.fields(EnvironmentSettings)}
    parse = {"int": int, "float": float, "flag": lambda text: text == "1", "str": str}
    rows = {k.name.removeprefix("STK_").lower(): k for k in KEYS if k.environment and k.name != "STK_INI"}
    assert sorted(rows) == sorted(made)
    for field, key in rows.items():
        assert made[field] == parse[key.kind](key.default), key.name


def test_the_environment_rows_are_read_from_the_environment_not_from_the_file(tmp_path):
    ini = tmp_path / "stk.ini"
    ini.write_text("[stk]\nSTK_DEBUG = 1\nSESSION_AGE = 5\n")
    ini.chmod(0o600)
    from_file = load(str(ini), env=_env(), check_dirs=False)
    assert (from_file.environment.debug, from_file.environment.session_age) == (False, 8 * 3600)
    extras = {"STK_DEBUG": "1", "STK_SESSION_AGE": "60", "STK_LOGIN_RESERVE_RATE": "0.5"}
    given = load(None, env=_env() | extras, check_dirs=False)
    assert (given.environment.debug, given.environment.session_age) == (True, 60)
    assert given.environment.login_reserve_rate == 0.5 and given.problems == []
    bad = load(None, env=_env() | {"STK_SESSION_AGE": "8h"}, check_dirs=False)
    assert [(p.id, p.key) for p in bad.problems] == [("stkrelay.E010", "STK_SESSION_AGE")]
    assert bad.environment.session_age == 8 * 3600


def test_environment_rows_are_not_in_the_example_ini():
    example = (ROOT / "packaging" / "stk.ini.example").read_text()
    assert [k.name for k in KEYS if k.environment and k.name in example] == []


def _default(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_each_sections_fields_are_the_configs_with_the_same_defaults():
    """A section copies its fields into the Config by name (`stkconfig.model.take`): each is a
    field of Config, and a Config made without a file starts where the section's defaults do."""
    from stkrelay.config import SECTIONS

    config = {f.name: f for f in dataclasses.fields(Config)}
    seen = set()
    for section in SECTIONS:
        made = typing.get_type_hints(section)["return"]
        for f in dataclasses.fields(made):
            assert f.name in config and f.name not in seen, (made.__name__, f.name)
            seen.add(f.name)
            mine = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            theirs = config[f.name]
            there = (
                theirs.default_factory()
                if theirs.default_factory is not dataclasses.MISSING
                else theirs.default
            )
            assert mine == there, (made.__name__, f.name)
    assert len(seen) > 60
