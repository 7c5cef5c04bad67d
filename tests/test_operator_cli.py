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
