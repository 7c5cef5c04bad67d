"""A backend whose library is not installed (a clean install without the `smb` or
`etcd` extra) is a config error with an id, E170 / E171, never a traceback: checked
in-process and by real `check` and `relayctl doctor` processes whose interpreter
cannot import the library (a meta-path finder planted by sitecustomize, the way the
module is absent from a venv without the extra)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from harness import ROOT
from test_config import problems, write_ini

from stkconfig import libraries
from stkrelay.config import load

EPS = "http://127.0.0.1:2379"
HIDE = """
import sys
class _Absent:
    names = {NAMES}
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""


def hidden_env(tmp_path, names):
    site = tmp_path / "absent"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE.format(NAMES=set(names)))
    return dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}", STK_SKIP_DIR_CHECKS="1")


def test_an_installed_library_is_not_missing_and_an_absent_one_is():
    assert libraries.missing(("json",)) == []
    assert libraries.missing(("stkrelay_no_such_module_here",)) == ["stkrelay_no_such_module_here"]


def test_with_the_libraries_installed_smb_and_etcd_load_with_no_library_problem(tmp_path):
    smb = load(str(write_ini(tmp_path, LEASE_DIR="smb://127.0.0.1/share/socket")), env={})
    etcd = load(str(write_ini(tmp_path, LEASE_STORE="etcd", ETCD_ENDPOINTS=EPS, LEASE_DIR="")), env={})
    assert not {i for i, _ in problems(smb) | problems(etcd)} & {"stkrelay.E170", "stkrelay.E171"}


@pytest.mark.parametrize(
    "over, hidden, expected",
    [
        ({"LEASE_DIR": "smb://127.0.0.1/share/socket"}, ("smbprotocol", "spnego"), "stkrelay.E170"),
        ({"LEASE_STORE": "etcd", "ETCD_ENDPOINTS": EPS, "LEASE_DIR": ""}, ("etcd3gw",), "stkrelay.E171"),
    ],
)
@pytest.mark.parametrize("command", [["check"], ["relayctl", "doctor"]])
def test_a_backend_without_its_library_is_an_error_with_an_id_not_a_traceback(
    tmp_path, over, hidden, expected, command
):
    ini = write_ini(tmp_path, **over)
    env = dict(hidden_env(tmp_path, hidden), STK_INI=str(ini))
    probe = subprocess.run(
        [sys.executable, "-c", f"import {hidden[0]}"], env=env, capture_output=True, text=True
    )
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr  # the library is really absent
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *command], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert expected in out and "install the" in out, out
    assert "Traceback" not in out, out
