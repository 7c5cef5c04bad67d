"""Configuration in one place (issue 39, item 4): below the loader, nothing reads raw values.

The loader is `stkconfig/` and `stkrelay/config.py`, `stkrelay/config_*.py`: it reads `stk.ini`
and the `STK_*` environment, checks them, and hands on the typed, frozen `Config`. Everywhere
else in the product packages an AST scan fails on:

- the process environment (`os.environ`, `os.getenv`, `from os import environ`) or
  `stkhost.secret_source.from_environment`, but in the modules of `ENVIRONMENT` (each says why);
- a raw-values mapping (`something.values` that is not a call, e.g. `stk.values`);
- a `[stk]` key's name (`"ETCD_CA"`, `"VIP_ADDRESS"`) as a subscript or as what `get`/`pop`/
  `setdefault` looks up, but in the modules of `KEY_NAMES` (each says why).

A new reader fails here: give it a typed field of `Config` (a row of `stkconfig/keys.py`, marked
`environment=True` for an `STK_*` variable) instead, or add it below with its reason.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from elections.core.action_config import ACTION_DEFAULTS
from stkconfig.keys import DEFAULTS
from stkconfig.model import Config
from stkconfig.parsed import WatchedPool

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("elections", "relay", "stkrelay", "stkhost", "stkconfig")
KEYS = frozenset(DEFAULTS) | frozenset(ACTION_DEFAULTS)

# Who may touch the process environment, and why: none of them reads a setting of the agent.
ENVIRONMENT = {
    # entry points: they name the ini and the settings module for what they start
    "stkrelay/cli.py": "the stkrelay command: makes STK_INI absolute, sets DJANGO_SETTINGS_MODULE, CLOUD_INI",
    "stkrelay/ini_arg.py": "--ini PATH sets STK_INI before the settings are read",
    "stkrelay/operator_command.py": "refuses an --ini that is not the STK_INI the settings were read from",
    "stkrelay/asgi.py": "DJANGO_SETTINGS_MODULE for Daphne",
    "stkrelay/celery.py": "DJANGO_SETTINGS_MODULE for Celery",
    "stkrelay/worker.py": "DJANGO_SETTINGS_MODULE for the lease worker",
    "stkrelay/settings.py": "writes STK_SITE_TZ (from Config.site_time_zone) for the children to inherit",
    "elections/management/agent_root.py": "runagent: STK_INI absolute, STK_COMPONENT, STK_AGENT_PID and "
    "the children's environment",
    "relay/management/commands/runcloud.py": "CLOUD_INI: the cloud relay's own file, not an agent's stk.ini",
    # process plumbing: what a parent hands its children, not configuration
    "elections/runtime/lease_writes.py": "STK_AGENT_PID: the supervisor's pid, written into its member's "
    "records by the worker it started",
    "elections/management/migrations_due.py": "STK_MIGRATING: set by the agent around its own migrations",
    "stkhost/processes.py": "site_environment: the environment a site's own command gets, minus secrets",
    # a command-line tool's secret (never argv), not the agent's configuration
    "stkhost/secret_source.py": "from_environment: a command-line tool's secret",
    "elections/management/commands/stkuser.py": "STK_USER_PASSWORD: the new user's password, never argv",
    "elections/runtime/contend.py": "the contender test tool's STK_RELAY_TOKEN (from_environment)",
    "relay/management/client_options.py": "relayclient's STK_RELAY_CREDENTIAL, STK_API_TOKEN (secrets)",
}

# Who may name a [stk] key as a lookup in a mapping, and why.
KEY_NAMES = {
    "elections/core/action_config.py": "the leader-action keys' parser: called by the loader alone "
    "(stkrelay.config.load, E014–E017); the executors get Config.actions",
    "relay/cloud/config.py": "the cloud relay's loader of cloud.ini: its own keys (DATA_DIR), not stk.ini",
    "relay/cloud/config_cluster.py": "the cloud relay's loader of cloud.ini: its own ETCD_* keys",
}


def _loader(rel: str) -> bool:
    return rel.startswith("stkconfig/") or rel == "stkrelay/config.py" or rel.startswith("stkrelay/config_")


def product_modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts)


ENVIRON = ("environ", "environb", "getenv", "putenv", "unsetenv")


def _environment(node: ast.AST, up: ast.AST | None) -> str:
    """What of the process environment `node` touches ('' for nothing)."""
    if isinstance(node, ast.Attribute) and node.attr in ENVIRON:  # os.environ, and os under another name
        return ast.unparse(node)
    if isinstance(node, ast.ImportFrom) and node.module == "os":
        return ", ".join(f"from os import {a.name}" for a in node.names if a.name in ENVIRON)
    called = isinstance(up, ast.Call) and up.func is node
    named = (isinstance(node, ast.Name) and node.id == "from_environment") or (
        isinstance(node, ast.Attribute) and node.attr == "from_environment"
    )
    return "from_environment(...)" if called and named else ""


def _raw_values(node: ast.AST, up: ast.AST | None) -> str:
    """`stk.values` (a mapping of raw text), not `queryset.values(...)` nor `d.values()`."""
    if isinstance(node, ast.Attribute) and node.attr == "values":
        return "" if isinstance(up, ast.Call) and up.func is node else ast.unparse(node)
    return ""


def _key_name(node: ast.AST, up: ast.AST | None) -> str:
    """A [stk] key's name looked up in a mapping: `values["VIP_ADDRESS"]`, `opts.get("ETCD_CA")`."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in KEYS):
        return ""
    if isinstance(up, ast.Subscript) and up.slice is node:
        return repr(node.value)
    getter = isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute)
    if getter and up.func.attr in ("get", "pop", "setdefault") and up.args and up.args[0] is node:
        return repr(node.value)
    return ""


RULES = (("environment", _environment), ("raw values", _raw_values), ("key name", _key_name))


def raw_reads(source: str) -> list[tuple[str, int, str]]:
    """(rule, line, what) for each way `source` reads configuration around the loader."""
    tree = ast.parse(source)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        for rule, find in RULES:
            what = find(node, parent.get(node))
            if what:
                found.append((rule, getattr(node, "lineno", 0), what))
    return found


def test_nothing_below_the_loader_reads_raw_values_or_the_environment():
    wrong = []
    for path in product_modules():
        rel = path.relative_to(ROOT).as_posix()
        if _loader(rel):
            continue
        for rule, line, what in raw_reads(path.read_text()):
            allowed = ENVIRONMENT if rule == "environment" else KEY_NAMES if rule == "key name" else {}
            if rel not in allowed:
                wrong.append(f"{rel}:{line}: {what} ({rule})")
    assert wrong == [], "read the typed Config instead (or allow-list with a reason):\n" + "\n".join(wrong)


def test_every_allowed_module_exists_and_still_needs_its_place():
    """A stale allow-list hides nothing: each module named still does what it is allowed to."""
    for allowed, rule in ((ENVIRONMENT, "environment"), (KEY_NAMES, "key name")):
        for rel, reason in allowed.items():
            assert reason and (ROOT / rel).is_file(), rel
            assert any(r == rule for r, _, _ in raw_reads((ROOT / rel).read_text())), f"{rel} needs no {rule}"


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("import os\nx = os.environ.get('STK_DEBUG')\n", "environment"),
        ("from os import getenv\n", "environment"),
        ("x = os.getenv('STK_X')\n", "environment"),
        ("x = __import__('os').environ['STK_X']\n", "environment"),
        ("token = from_environment('STK_API_TOKEN')\n", "environment"),
        ("config = action_config(stk.values)\n", "raw values"),
        ("opts = dict(place.options)\nca = opts.get('ETCD_CA', '')\n", "key name"),
        ("vip = values['VIP_ADDRESS']\n", "key name"),
    ],
)
def test_the_scan_finds_each_kind_of_raw_read(source, rule):
    assert rule in {r for r, _, _ in raw_reads(source)}


def test_the_scan_lets_typed_reads_and_querysets_pass():
    source = "ttl = stk.lease_ttl\nrows = Entry.objects.values('kmsn')\nfor v in d.values():\n    pass\n"
    assert raw_reads(source) == []


def test_the_typed_config_carries_no_raw_mapping():
    for made in (Config, WatchedPool):
        assert "values" not in {f.name for f in dataclasses.fields(made)}, made.__name__
