"""stkrelay as a site installs it: `pip install` into a fresh venv (tests/installed.py),
then an agent run with the venv's `stkrelay agent --ini` (web, worker, beat and the relay
child all from the installed package, templates and static files included), and the
venv's `relayctl list --ini`, `stkuser` and `relayclient` from another directory.
It also checks that the agent listens on its loopback address only, as the demo does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
from harness import ROOT, wait_until

pytestmark = pytest.mark.agents


def _cli(installed, name: str, *args: str, cwd: Path, stdin: str | None = None, **env: str):  # type: ignore[no-untyped-def]
    """Run the venv's `name` the way an operator's shell would: from `cwd`, no checkout anywhere."""
    return subprocess.run([str(installed.bin(name)), *args], cwd=cwd, env={**installed.env(), **env},
                          input=stdin, capture_output=True, text=True, timeout=60)  # fmt: skip


def _get(agent, path: str, token: str | None = None) -> tuple[int, str, bytes]:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(agent.web_url + path, headers=auth)
    with agent.urlopen(req, timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def _listening(pgid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process group listens on (/proc/net/tcp*)."""
    inodes = set()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                addr, port = f[1].split(":")
                raw = bytes.fromhex(addr)
                ip = ".".join(str(b) for b in raw[::-1]) if width == 8 else raw.hex()
                out.add((ip, int(port, 16)))
    return out


@pytest.mark.long
def test_the_installed_agent_runs_and_relayctl_lists_the_pool_from_another_directory(
    installed, site_factory, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    site = site_factory(n=1)
    (agent,) = site.agents
    agent.command, agent.cwd = [str(installed.bin("stkrelay")), "agent"], elsewhere
    agent.env = {"PYTHONPATH": ""}  # nothing from the checkout
    site.start()
    rec = site.wait_leader(60)
    assert rec.node == "S001"
    # The relay child (`python -m django runrelay`) serves from the installed package too.
    wait_until(lambda: json.loads((agent.data_dir / "relay.json").read_text() or "{}").get("listening")
               if (agent.data_dir / "relay.json").exists() else None, 30, "the relay listening")  # fmt: skip

    def listed() -> subprocess.CompletedProcess[str] | None:
        done = _cli(installed, "relayctl", "list", "--ini", str(agent.ini), cwd=elsewhere)
        return done if done.returncode == 0 and "leader S001" in done.stdout else None

    done = wait_until(listed, 30, "relayctl list from the venv")
    first, second = done.stdout.splitlines()[:2]  # the view's source and age, then the pool
    assert first.startswith("view of ") and "pool.json" in first, done.stdout
    assert second.startswith("KMSN 9999-9999-99-99  leader S001  epoch "), done.stdout
    assert re.search(r"^\s*S001\s+leader\s", done.stdout, re.M), done.stdout  # its row under the header
    as_json = json.loads(
        _cli(installed, "relayctl", "list", "--json", "--ini", str(agent.ini), cwd=elsewhere).stdout
    )
    assert as_json["kmsn"] == "9999-9999-99-99"

    # Templates and static files come from the wheel: the login page and the panel's CSS.
    status, ctype, body = _get(agent, "/login/")
    assert status == 200 and ctype.startswith("text/html") and b'name="password"' in body
    status, _, css = _get(agent, "/static/panel.css")
    assert status == 200 and css == (ROOT / "static" / "panel.css").read_bytes()

    # stkuser from the venv (STK_INI this time), then its token on the API.
    add = _cli(installed, "stkuser", "add", "bot", "--role", "viewer", cwd=elsewhere,
               stdin="a-long-pass-phrase-9\n", STK_INI=str(agent.ini))  # fmt: skip
    assert add.returncode == 0, add.stderr
    token = _cli(installed, "stkuser", "token", "bot", "--ini", str(agent.ini), cwd=elsewhere).stdout.strip()
    status, _, body = _get(agent, "/api/v1/sites", token)
    assert status == 200 and json.loads(body)["sites"][0]["leader"] == "S001"

    # relayclient from the venv registers with the relay of the installed agent.
    ping = _cli(installed, "relayclient", "ping", "--ini", str(agent.ini), cwd=elsewhere)
    assert ping.returncode == 0, ping.stdout + ping.stderr

    # The modules that ran are the venv's, not the checkout's.
    where = _cli(installed, "python", "-c", "import stkrelay; print(stkrelay.__file__)", cwd=elsewhere)
    assert where.stdout.startswith(str(installed.venv))
    # Everything it listens on is its own loopback address (web, relay, passthrough).
    sockets = _listening(agent.pgid)
    assert sockets and {ip for ip, _ in sockets} == {agent.ip}, sockets


@pytest.mark.long
def test_the_stkrelay_command_says_how_to_use_it(installed, tmp_path):
    done = _cli(installed, "stkrelay", "--help", cwd=tmp_path)
    assert done.returncode == 0 and "stkrelay agent [--ini PATH]" in done.stdout
    cloud = _cli(installed, "stkrelay", "cloud", cwd=tmp_path)
    assert cloud.returncode == 2 and "stkrelay.C001" in cloud.stderr  # no cloud.ini given
    bad = _cli(installed, "relayctl", "list", "--ini", str(tmp_path / "missing.ini"), cwd=tmp_path)
    assert bad.returncode == 2 and "stkrelay.E001" in bad.stderr


@pytest.mark.long
@pytest.mark.parametrize(
    "store",
    [
        {"LEASE_DIR": "{tmp}/share"},
        {"LEASE_DIR": "smb://stk@127.0.0.1:1/share/socket", "SMB_PASSWORD": "x"},  # nothing answers there
        {"LEASE_STORE": "etcd", "ETCD_ENDPOINTS": "http://127.0.0.1:1", "LEASE_DIR": ""},
    ],
    ids=["file", "smb", "etcd"],
)
def test_the_readmes_install_runs_doctor_on_a_file_an_smb_and_an_etcd_ini_without_a_traceback(
    installed, tmp_path, store
):
    """The venv of the README's install line (its extras included) has every backend's
    library: doctor answers in its own words, whatever it finds, never with a traceback."""
    from test_config import write_ini

    (tmp_path / "share").mkdir()
    ini = write_ini(tmp_path, **{k: v.format(tmp=tmp_path) for k, v in store.items()})
    done = _cli(installed, "relayctl", "doctor", "--ini", str(ini), cwd=tmp_path)
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "ModuleNotFoundError" not in out, out
    assert "stkrelay.E170" not in out and "stkrelay.E171" not in out, out  # the extras are installed
    assert done.returncode in (0, 1, 5) and out.strip(), out  # a verdict: ok, failing checks, a stale view
