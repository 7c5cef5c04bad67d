"""The four console scripts as an operator meets them: `--version` is stkrelay's, the help
shows `--ini` and the command's own options, not Django's, and reads `relayctl ...`, not
`relayctl relayctl ...` (issue 23, part 1)."""

import os
import subprocess
import sys
import tomllib

import pytest
from harness import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
DJANGO_OPTIONS = ("--settings", "--pythonpath", "--traceback", "--no-color", "--force-color", "--verbosity",
                  "--skip-checks")  # fmt: skip


def script(name, *args):
    """The console script `name` (pyproject.toml [project.scripts]) run with `args`."""
    call = "main()" if name == "stkrelay" else f"{name}()"
    code = f"import sys; from stkrelay.cli import *; sys.argv[0] = {name!r}; sys.exit({call})"
    env = {k: v for k, v in os.environ.items() if k not in ("STK_INI", "DJANGO_SETTINGS_MODULE")}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env=env)  # fmt: skip


@pytest.mark.parametrize("name", ["stkrelay", "relayctl", "relayclient", "stkuser"])
def test_version_is_stkrelays_on_every_command(name):
    out = script(name, "--version")
    assert (out.returncode, out.stdout.strip()) == (0, f"stkrelay {VERSION}"), out.stderr


@pytest.mark.parametrize("name", ["relayctl", "relayclient", "stkuser"])
def test_help_shows_ini_and_no_django_option_and_reads_the_command_once(name):
    out = script(name, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {name} [-h]"), out.stdout
    assert "--ini PATH" in out.stdout and "--version" in out.stdout
    assert not [o for o in DJANGO_OPTIONS if o in out.stdout], out.stdout


def test_relayctl_help_names_the_stale_view_exit_code_and_the_formats():
    out = script("relayctl", "--help").stdout
    assert "5 stale view" in " ".join(out.split()) and "--stale-ok" in out and "{table,json,yaml,tsv}" in out


def test_each_relayctl_action_has_its_own_help_with_only_its_options():
    """`relayctl list --help` once printed the global help (issue 42 finding 4)."""
    out = script("relayctl", "list", "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: relayctl list"), out.stdout + out.stderr
    assert "-W" in out.stdout and "--watch N" in out.stdout and "--force" not in out.stdout
    out = script("relayctl", "drain", "--help")
    assert out.stdout.startswith("usage: relayctl drain") and "NODE" in out.stdout and "--force" in out.stdout
    assert "--kind" not in out.stdout and "-W" not in out.stdout
    out = script("relayctl", "history", "--help")
    assert "--all" in out.stdout and "action_applied" in out.stdout, out.stdout


@pytest.mark.parametrize("args", [[], ["bogus"], ["drain"], ["unbind"], ["credential"], ["list", "-o", "xml"],
                                  ["promote", "S001", "--epoch", "seven"]])  # fmt: skip
def test_relayctl_usage_errors_exit_2_as_the_readme_says_without_a_traceback(args):
    out = script("relayctl", *args)
    assert out.returncode == 2, (args, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and out.stderr.strip(), out.stderr


def test_relayctl_on_a_closed_pipe_ends_quietly(tmp_path):
    """`relayctl plan -o yaml | head -0`: the reader has gone before relayctl writes; no BrokenPipe
    traceback, the exit a shell shows for a command ended by SIGPIPE."""
    ini = tmp_path / "stk.ini"
    ini.write_text(f"[stk]\nKMSN = 1234-5678-90-12\nSTATION = S001\nRELAY_TOKEN = Xq7-pL2-mZ9-rT4-wK8\n"
                   f"LEASE_DIR = {tmp_path}\nDATA_DIR = {tmp_path / 'data'}\n")  # fmt: skip
    ini.chmod(0o600)
    read, write = os.pipe()
    os.close(read)  # `head` has read its lines and gone
    code = "import sys; from stkrelay.cli import relayctl; sys.argv[0] = 'relayctl'; sys.exit(relayctl())"
    env = {k: v for k, v in os.environ.items() if k not in ("STK_INI", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run([sys.executable, "-c", code, "plan", "-o", "yaml", "--ini", str(ini)], stdout=write,
                          stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_the_one_ini_in_etc_stkrelay_is_the_default(tmp_path):
    from stkrelay.cli import default_ini

    assert default_ini(str(tmp_path / "missing")) is None
    (tmp_path / "site1.redis.conf").write_text("port 6379\n")
    assert default_ini(str(tmp_path)) is None
    (tmp_path / "site1.ini").write_text("[stk]\n")
    assert default_ini(str(tmp_path)) == str(tmp_path / "site1.ini")
    (tmp_path / "site2.ini").write_text("[stk]\n")
    assert default_ini(str(tmp_path)) is None  # which one is the operator's to say
