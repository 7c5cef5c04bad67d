"""The site's own commands (ON_ROLE_CHANGE, GATE_CMD, HEALTH_CMD, RELAY_EXEC) get the agent's
environment without its secrets (`processes.site_environment`): each hook run for real, as a
script that writes its environment to a file, under an environment holding the secrets the
container image passes (`STK_RELAY_TOKEN`, `STK_POOL_KEY`...), cloud credentials and copies of
them. With real agents: tests/test_agents_quoted.py."""

import asyncio
import secrets
import sys
import time
from pathlib import Path

import pytest
from harness import free_pair, wait_until
from test_agents_notify import role_script

from elections.ports.local.gate import CommandGate
from elections.runtime.health import run_checks
from elections.runtime.notify import Notifier
from relay.server.external_relay import ExternalRelay
from stkconfig.parsed import ExecRelay, NotifyConfig
from stkhost.processes import site_environment

STANDIN = str(Path(__file__).resolve().parent / "standin_relay.py")


def agent_secrets() -> dict[str, str]:
    """Secrets as an agent's environment may hold them, each value unique to this run."""
    token = "relay-" + secrets.token_hex(12)
    return {
        "STK_RELAY_TOKEN": token,
        "STK_POOL_KEY": "pool-" + secrets.token_hex(12),
        "STK_SMB_PASSWORD": "smb-" + secrets.token_hex(8),
        "STK_WEBHOOK_SECRET": "hook-" + secrets.token_hex(12),
        "STK_CLOUD_TOKEN": "cloud-" + secrets.token_hex(12),
        "STK_SECRET_KEY": "django-" + secrets.token_hex(16),
        "AWS_SECRET_ACCESS_KEY": "aws-" + secrets.token_hex(12),
        "AWS_SESSION_TOKEN": "awss-" + secrets.token_hex(12),
        "AZURE_CLIENT_SECRET": "az-" + secrets.token_hex(12),
        "PGPASSWORD": "pg-" + secrets.token_hex(8),
        "DATABASE_URL": f"postgres://stk:dbpw-{secrets.token_hex(8)}@db.example/stk",
        "SITE_COPY": f"--token {token}",  # a secret's value under a name that says nothing
    }


def leaked(dump: bytes, env: dict[str, str]) -> list[str]:
    """The secrets whose value is anywhere in `dump` (DATABASE_URL: its password)."""
    values = {k: v.split(":")[2].split("@")[0] if k == "DATABASE_URL" else v for k, v in env.items()}
    return [k for k, v in values.items() if k != "SITE_COPY" and v.encode() in dump]


@pytest.fixture
def agent_env(monkeypatch):
    env = agent_secrets()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SITE_MARKER", "kept")  # an ordinary variable: still given
    return env


def dumper(tmp_path, name):
    out = tmp_path / f"{name}.env"
    return role_script(tmp_path / f"{name}.sh", f"env > {out}\n"), out


def test_on_role_change_gets_its_values_and_none_of_the_agents_secrets(tmp_path, agent_env):
    script, out = dumper(tmp_path, "role")
    n = Notifier(NotifyConfig(role_cmd=(script,), role_timeout=10), "9999-9999-99-99", "S001",
                 audit=lambda *a: None)  # fmt: skip
    assert n.run_role("leader", 7, "expired") == 0
    dump = out.read_bytes()
    assert leaked(dump, agent_env) == []
    names = {line.partition(b"=")[0]: line.partition(b"=")[2] for line in dump.splitlines()}
    assert {k: names.get(k) for k in (b"STK_ROLE", b"STK_EPOCH", b"STK_KMSN", b"STK_NODE", b"STK_CAUSE")} == {
        b"STK_ROLE": b"leader", b"STK_EPOCH": b"7", b"STK_KMSN": b"9999-9999-99-99", b"STK_NODE": b"S001",
        b"STK_CAUSE": b"expired"}  # fmt: skip
    assert names.get(b"SITE_MARKER") == b"kept" and names.get(b"PATH")


def test_gate_cmd_gets_none_of_the_agents_secrets(tmp_path, agent_env):
    script, out = dumper(tmp_path, "gate")
    look = CommandGate((script,), 10).look()
    assert look.word == "MASTER", look
    dump = out.read_bytes()
    assert leaked(dump, agent_env) == [] and b"SITE_MARKER=kept" in dump


def test_health_cmd_gets_none_of_the_agents_secrets(tmp_path, agent_env):
    out = tmp_path / "health.env"
    assert run_checks(f"env > {out}", "", timeout=10) == "ok"
    dump = out.read_bytes()
    assert leaked(dump, agent_env) == [] and b"SITE_MARKER=kept" in dump


def test_relay_exec_gets_none_of_the_agents_secrets(tmp_path, agent_env):
    out = tmp_path / "relay.env"
    script = f"env > {out}; exec {sys.executable} {STANDIN} --host {{host}} --port {{port}} " \
             "--passthrough-port {passthrough_port}"  # fmt: skip
    spec = ExecRelay(("/bin/sh", "-c", script), "127.0.0.1", free_pair())

    async def main() -> None:
        relay = ExternalRelay(spec, epoch=3, kmsn="K", say=lambda line: None)
        relay.start()
        deadline = time.monotonic() + 20
        while not relay.accepting:
            assert time.monotonic() < deadline, "the external relay never accepted"
            await asyncio.sleep(0.02)
        await relay.stop()

    asyncio.run(main())
    dump = wait_until(lambda: out.exists() and out.read_bytes(), 5, "the relay's environment")
    assert leaked(dump, agent_env) == [] and b"SITE_MARKER=kept" in dump


@pytest.mark.parametrize(
    "name, value, given",
    [
        ("PATH", "/usr/bin:/bin", True),
        ("HOME", "/var/lib/stkrelay", True),
        ("PWD", "/var/lib/stkrelay", True),  # the working directory, not a password
        ("LANG", "C.UTF-8", True),
        ("http_proxy", "http://proxy.lan:3128", True),
        ("STK_INI", "/etc/stkrelay/stk.ini", False),  # every STK_*: any key of stk.ini
        ("STK_LEASE_DIR", "/share/socket", False),
        ("AWS_ACCESS_KEY_ID", "AKIA0000", False),
        ("OCI_CLI_PASS_PHRASE", "x", False),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json", False),
        ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1", False),
        ("MYSQL_PWD", "x", False),
        ("github_token", "x", False),  # whatever the case
        ("REDIS_URL", "redis://:hunter2@127.0.0.1:6379/0", False),  # a URL holding a password
    ],
)
def test_which_variables_a_site_command_is_given(name, value, given):
    assert (name in site_environment(environ={name: value})) is given


def test_a_copy_of_a_secret_under_any_name_is_kept_back_and_extra_values_are_added():
    env = {"STK_RELAY_TOKEN": "abcdefgh-secret", "COPY": "x abcdefgh-secret y", "SHORT_TOKEN": "ab",
           "OTHER": "ab"}  # fmt: skip
    assert site_environment({"STK_ROLE": "leader"}, env) == {"OTHER": "ab", "STK_ROLE": "leader"}


def test_a_site_command_gets_the_tz_the_agent_started_with_not_the_one_django_set():
    # Issue 42: Django sets TZ to TIME_ZONE in the agent's environment; ON_ROLE_CHANGE inherited it.
    django_set = {"PATH": "/usr/bin:/bin", "TZ": "Asia/Taipei"}
    assert "TZ" not in site_environment(environ={**django_set, "STK_SITE_TZ": ""})  # none at start
    started = site_environment(environ={**django_set, "STK_SITE_TZ": "Europe/Berlin"})
    assert started["TZ"] == "Europe/Berlin" and "STK_SITE_TZ" not in started
    assert site_environment(environ=django_set)["TZ"] == "Asia/Taipei"  # not an agent: as it is


def test_the_agents_settings_remember_the_tz_it_started_with_or_the_configured_zone(tmp_path):
    import os
    import subprocess

    from harness import KMSN, ROOT, TOKEN

    def site_tz(tz, time_zone):
        data = tmp_path / f"d{len(list(tmp_path.iterdir()))}"
        data.mkdir()
        env = {"PATH": "/usr/bin:/bin", "STK_KMSN": KMSN, "STK_STATION": "S001", "STK_NODE_IP": "127.0.0.1",
               "STK_RELAY_TOKEN": TOKEN, "STK_LEASE_DIR": str(data), "STK_DATA_DIR": str(data),
               "STK_TIME_ZONE": time_zone, "DJANGO_SETTINGS_MODULE": "stkrelay.settings",
               **({"TZ": tz} if tz else {})}  # fmt: skip
        code = "import django, os; django.setup(); print(os.environ.get('STK_SITE_TZ'), os.environ['TZ'])"
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert os.path.exists("/usr/share/zoneinfo/Europe/Berlin")
    assert site_tz("", "Asia/Taipei") == ["Asia/Taipei", "Asia/Taipei"]  # configured: given
    assert site_tz("Europe/Berlin", "") == ["Europe/Berlin", "Europe/Berlin"]  # the server's, as started
    said = site_tz("", "")  # none at start, none configured: Django sets one, the site gets none ("")
    assert len(said) == 1, said
