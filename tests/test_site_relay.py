"""The site's own relay from its own source (issue 36 item 2, relay/server/site_relay.py): a
`relay_server.py` written the way a site's is (it binds its ports 9530 and 9531 on every address,
and reads a file beside itself) runs unchanged under ``RELAY_KIND = exec``; its ports are moved
to `RELAY_EXEC_LISTEN`, behind the fencing proxy. The program here is a stand-in, not the site's
(which this project cannot have): what the recipe relies on is only that it is Python and binds
its ports, which the seed says (seed 000 §2)."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from harness import ROOT, free_pair, wait_until

from relay.server.site_relay import launcher_parser, moved
from stkconfig.site_relay_recipe import VALUED, source_of
from stkrelay import config

LAUNCHER = ROOT / "relay" / "server" / "site_relay.py"
SITE_RELAY = '''
    """A site's relay, as such programs are written: fixed ports on every address, a file beside it."""
    import socket, sys, threading
    GREETING = open("relay.ini").read().strip().encode()  # beside the program, as its .exe reads it

    def serve(port):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", port))
        listener.listen(16)
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=echo, args=(conn, port), daemon=True).start()

    def echo(conn, port):
        conn.sendall(GREETING + b" " + str(port).encode() + b"\\n")
        while data := conn.recv(4096):
            conn.sendall(data)

    threading.Thread(target=serve, args=(9531,), daemon=True).start()
    print("relay_server: up", flush=True)
    serve(9530)
'''


def site_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "site" / "Relay"
    folder.mkdir(parents=True)
    (folder / "relay_server.py").write_text(textwrap.dedent(SITE_RELAY))
    (folder / "relay.ini").write_text("SITE-RELAY\n")
    return folder / "relay_server.py"


def test_the_configuration_skips_the_launchers_own_options_that_take_a_value():
    """The launcher imports nothing of the project, so `stkconfig.site_relay_recipe` writes its
    valued options again: they are its parser's, and a value is never taken for the source."""
    parser = launcher_parser()
    valued = {o for a in parser._actions if a.nargs != 0 for o in a.option_strings}
    assert set(VALUED) == valued
    for option in VALUED:
        assert source_of(["stkrelay-site-relay", option, "9540", "/s/r.py"]) == "/s/r.py"


def test_the_launcher_names_its_source_and_moves_only_the_site_ports():
    assert source_of(["stkrelay-site-relay", "/site/Relay/relay_server.py", "--port", "{port}"]) == (
        "/site/Relay/relay_server.py"
    )
    assert (
        source_of(["/usr/bin/python3", "-m", "relay.server.site_relay", "--host", "{host}", "/s/r.py"])
        == "/s/r.py"
    )
    assert source_of(["python3", str(LAUNCHER), "--port", "{port}"]) == ""  # no source named: refused
    assert source_of(["/opt/stk/relay_server", "--port", "{port}"]) is None  # a binary: not the launcher
    ports = {9530: 9540, 9531: 9541}
    assert moved(("0.0.0.0", 9530), ports, "127.0.0.1") == ("127.0.0.1", 9540)
    assert moved(("", 9531), ports, "127.0.0.1") == ("127.0.0.1", 9541)
    assert moved(("0.0.0.0", 8080), ports, "127.0.0.1") == ("0.0.0.0", 8080)


def test_a_recipe_whose_source_is_not_there_is_refused_before_the_first_election(tmp_path: Path):
    source = site_folder(tmp_path)
    base = {"STK_KMSN": "k", "STK_STATION": "S001", "STK_RELAY_TOKEN": "site-relay-test-token-7f3a9c21d4e8b6",
            "STK_NODE_IP": "10.0.0.1", "STK_RELAY_KIND": "exec"}  # fmt: skip

    def ids(line: str) -> list[str]:
        cfg = config.load(env={**base, "STK_RELAY_EXEC": line}, check_dirs=True)
        return [p.id for p in cfg.problems if p.key == "RELAY_EXEC"]

    def recipe(where: str) -> str:
        return shlex.join([sys.executable, str(LAUNCHER), where, "--host", "{host}", "--port", "{port}",
                           "--passthrough-port", "{passthrough_port}"])  # fmt: skip

    assert ids(recipe(str(source))) == []
    assert ids(recipe("/site/Relay/relay_server.py")) == ["stkrelay.E078"]  # the folder is not mounted
    assert ids(f"{sys.executable} {LAUNCHER} --port {{port}}") == ["stkrelay.E078"]


def test_the_site_relay_runs_unchanged_on_the_ports_the_proxy_expects(tmp_path: Path):
    source = site_folder(tmp_path)
    host, port = "127.0.0.1", free_pair("127.0.0.1")
    argv = [sys.executable, str(LAUNCHER), str(source), "--host", host, "--port", str(port),
            "--passthrough-port", str(port + 1)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "its :9530 on 127.0.0.1:" in proc.stdout.readline()
        for where, said in ((port, b"SITE-RELAY 9530\n"), (port + 1, b"SITE-RELAY 9531\n")):
            sock = wait_until(lambda w=where: _dial(host, w), 10, f"the site relay on :{where}")
            with sock:
                assert sock.recv(64) == said  # it read relay.ini beside itself, and bound what it asked for
                sock.sendall(b"ping")
                assert sock.recv(64) == b"ping"
    finally:
        proc.terminate()
        proc.wait(5)


def _dial(host: str, port: int) -> socket.socket | None:
    try:
        sock = socket.create_connection((host, port), timeout=1)
    except OSError:
        return None
    sock.settimeout(5)
    return sock


@pytest.mark.agents
def test_the_recipe_under_relay_kind_exec_serves_through_the_leaders_proxy(site_factory, tmp_path: Path):
    source = site_folder(tmp_path)
    recipe = shlex.join([sys.executable, str(LAUNCHER), str(source), "--host", "{host}", "--port", "{port}",
                         "--passthrough-port", "{passthrough_port}"])  # fmt: skip
    site = site_factory(2, extra={"RELAY_KIND": "exec", "RELAY_EXEC": recipe})
    port = free_pair(*(a.ip for a in site.agents))
    for agent in site.agents:
        with open(agent.ini, "a") as fh:
            fh.write(f"RELAY_EXEC_LISTEN = {agent.ip}:{port}\n")
    site.start()
    lease = site.wait_settled(timeout=60)
    leader = site.by_name(lease.node)
    relay_port = int(leader.setting("RELAY_PORT"))
    deadline = time.monotonic() + 20
    while True:  # the proxy refuses until the site's relay accepts
        sock = _dial(leader.ip, relay_port)
        greeting = sock.recv(64) if sock is not None else b""
        if greeting == b"SITE-RELAY 9530\n":
            break
        assert time.monotonic() < deadline, f"the leader's proxy never led to the site relay ({greeting!r})"
        time.sleep(0.1)
    with sock:
        sock.sendall(b"hello")
        assert sock.recv(64) == b"hello"
    assert "site relay: " in leader.log()
