"""RELAY_KIND / RELAY_EXEC / RELAY_EXEC_LISTEN (stkconfig/relay_kind.py): ids E070–E077."""

import shlex
import sys

import pytest
from test_config import problems, write_ini

from stkrelay.config import load

PY = sys.executable
CMD = shlex.join([PY, "relay.py", "--listen", "{host}:{port}", "--pt", "{passthrough_port}",
                  "--epoch={epoch}", "{kmsn}", "{{literal}}"])  # fmt: skip


def test_builtin_is_the_default_and_needs_nothing(tmp_path):
    cfg = load(str(write_ini(tmp_path)), env={})
    assert cfg.problems == [] and cfg.relay_kind == "builtin" and cfg.relay_exec is None


def test_exec_splits_the_command_without_a_shell_and_fills_every_placeholder(tmp_path):
    cfg = load(str(write_ini(tmp_path, RELAY_KIND="exec", RELAY_EXEC=CMD + " '$HOME; rm -rf /'")), env={})
    assert cfg.problems == [], cfg.problems
    spec = cfg.relay_exec
    assert (spec.host, spec.port, spec.passthrough_port) == ("127.0.0.1", 9540, 9541)  # RELAY_PORT + 10
    assert spec.command(epoch=7, kmsn="K-1") == [
        sys.executable, "relay.py", "--listen", "127.0.0.1:9540", "--pt", "9541", "--epoch=7", "K-1",
        "{literal}", "$HOME; rm -rf /",  # one word, never seen by a shell
    ]  # fmt: skip


def test_a_command_that_names_no_epoch_runs_warm_and_one_that_does_only_once_its_member_leads():
    from stkconfig.parsed import ExecRelay

    assert not ExecRelay(tuple(shlex.split(CMD)), "127.0.0.1", 9540).warm  # --epoch={epoch}
    assert not ExecRelay(("relay", "--stats", "s-{epoch!s:>3}.json"), "127.0.0.1", 9540).warm
    assert ExecRelay(("relay", "{host}:{port}", "{kmsn}", "{{epoch}}"), "127.0.0.1", 9540).warm  # a literal


def test_exec_listen_may_be_any_loopback_address(tmp_path):
    ini = write_ini(tmp_path, RELAY_KIND="exec", RELAY_EXEC=CMD, RELAY_EXEC_LISTEN="127.0.0.5:7000")
    cfg = load(str(ini), env={})
    assert cfg.problems == [] and (cfg.relay_exec.host, cfg.relay_exec.port) == ("127.0.0.5", 7000)
    cfg = load(
        str(write_ini(tmp_path, RELAY_KIND="exec", RELAY_EXEC=CMD, RELAY_EXEC_LISTEN="[::1]:7000")), env={}
    )
    assert cfg.problems == [] and cfg.relay_exec.host == "::1"


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"RELAY_KIND": "external"}, ("stkrelay.E070", "RELAY_KIND")),
        ({"RELAY_KIND": "exec"}, ("stkrelay.E071", "RELAY_EXEC")),
        ({"RELAY_EXEC": CMD}, ("stkrelay.E071", "RELAY_EXEC")),  # set, but the kind is builtin
        ({"RELAY_KIND": "exec", "RELAY_EXEC": "relay 'unclosed"}, ("stkrelay.E072", "RELAY_EXEC")),
        ({"RELAY_KIND": "exec", "RELAY_EXEC": "''"}, ("stkrelay.E072", "RELAY_EXEC")),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": f"{PY} --at {{address}}"},
            ("stkrelay.E073", "RELAY_EXEC"),
        ),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": f"{PY} {{port!r}}"},
            ("stkrelay.E073", "RELAY_EXEC"),
        ),
        ({"RELAY_KIND": "exec", "RELAY_EXEC": f"{PY} {{port"}, ("stkrelay.E073", "RELAY_EXEC")),
        ({"RELAY_KIND": "exec", "RELAY_EXEC": "{host}/relay"}, ("stkrelay.E073", "RELAY_EXEC")),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "192.168.1.10:9540"},
            ("stkrelay.E074", "RELAY_EXEC_LISTEN"),
        ),  # not loopback: reachable around the proxy
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "0.0.0.0:9540"},
            ("stkrelay.E074", "RELAY_EXEC_LISTEN"),
        ),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "localhost:9540"},
            ("stkrelay.E074", "RELAY_EXEC_LISTEN"),
        ),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "127.0.0.1:65535"},
            ("stkrelay.E074", "RELAY_EXEC_LISTEN"),
        ),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "127.0.0.1"},
            ("stkrelay.E074", "RELAY_EXEC_LISTEN"),
        ),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "127.0.0.1:9529"},
            ("stkrelay.E075", "RELAY_EXEC_LISTEN"),
        ),  # 9530 is RELAY_PORT
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "127.0.0.1:9531"},
            ("stkrelay.E075", "RELAY_EXEC_LISTEN"),
        ),
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "127.0.0.1:8000"},
            ("stkrelay.E075", "RELAY_EXEC_LISTEN"),
        ),  # WEB_PORT
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "RELAY_EXEC_LISTEN": "127.0.0.1:9532"},
            ("stkrelay.E075", "RELAY_EXEC_LISTEN"),
        ),  # BEACON_PORT (RELAY_PORT + 2)
        (
            {"RELAY_KIND": "exec", "RELAY_EXEC": "/nonexistent/relay_server --port {port}"},
            ("stkrelay.E077", "RELAY_EXEC"),
        ),
    ],
)
def test_bad_external_relay_settings_stop_start_up_with_their_id(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert expected in problems(cfg), cfg.problems
    assert cfg.relay_exec is None


def test_exec_cannot_carry_the_cloud_tunnel(tmp_path):
    over = {"RELAY_KIND": "exec", "RELAY_EXEC": CMD, "CLOUD_URL": "tcp://127.0.0.1:9542",
            "CLOUD_TOKEN": "another-long-random-cloud-secret-0123"}  # fmt: skip
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert ("stkrelay.E076", "RELAY_KIND") in problems(cfg), cfg.problems
