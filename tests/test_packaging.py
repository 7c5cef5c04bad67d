"""What a site installs: the systemd units (`systemd-analyze verify`, sandbox and
capabilities), the compose demo (`docker-compose config`, and the agents' settings
checked like runagent checks them), the Docker image's and the wheel's contents,
and the split of runtime pins from test tooling.

No Docker daemon exists here: the image is never built and the compose site never
started (README "Install on a site" says what is and is not verified)."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

PY = sys.executable

ROOT = Path(__file__).resolve().parent.parent
UNITS = ("stkrelay@.service", "stkrelay-redis@.service")
# websockets is a runtime pin (the cloud relay's WEB_PORT), no longer a test tool
DEV_TOOLS = {"pytest", "pytest-timeout", "hypothesis", "ruff", "import-linter", "moto", "playwright",
             "mfusepy", "schemathesis"}  # fmt: skip


def verify(unit_dir: Path, *units: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze is missing: run `make test` (bootstrap installs Debian's systemd)"
    argv = [exe, "verify", *(str(unit_dir / u) for u in units)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def clean(done: subprocess.CompletedProcess[str]) -> bool:
    """systemd-analyze exits 0 on an unknown key or a bad value (it only warns): both count."""
    return done.returncode == 0 and not done.stderr.strip() and not done.stdout.strip()


def units_in(tmp_path: Path, stkrelay: Path, edit=lambda text: text) -> Path:  # type: ignore[no-untyped-def]
    """The units as installed, with ExecStart pointing at a real `stkrelay` script."""
    for name in UNITS:
        text = (ROOT / "packaging" / name).read_text().replace("/opt/stkrelay/bin/stkrelay", str(stkrelay))
        (tmp_path / name).write_text(edit(text) if name == UNITS[0] else text)
    return tmp_path


@pytest.mark.long
def test_systemd_analyze_verify_passes_on_both_units(tmp_path, installed):
    d = units_in(tmp_path, installed.bin("stkrelay"))
    done = verify(d, "stkrelay@site1.service", "stkrelay-redis@site1.service")
    assert clean(done), done.stdout + done.stderr


@pytest.mark.parametrize(
    "breakage",
    [
        ("KillMode=control-group", "KillMod=control-group"),  # unknown key: only a warning
        ("Restart=on-failure", "Restart=sometimes"),  # bad value: only a warning
        ("ExecStart=", "ExecStart=/nonexistent"),  # a binary that does not exist: an error
    ],
)
@pytest.mark.long
def test_the_verify_check_fails_on_a_broken_unit(tmp_path, installed, breakage):
    old, new = breakage
    d = units_in(tmp_path, installed.bin("stkrelay"), lambda text: text.replace(old, new, 1))
    assert not clean(verify(d, "stkrelay@site1.service"))


def _service(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment, method-assign]
    unit.read_string((ROOT / "packaging" / name).read_text())
    return unit


def test_the_agent_unit_runs_one_agent_per_instance_ini_in_a_sandbox():
    svc = _service("stkrelay@.service")["Service"]
    assert svc["ExecStart"].split()[1:] == ["agent", "--ini", "/etc/stkrelay/%i.ini"]
    assert (svc["KillMode"], svc["Restart"]) == ("control-group", "on-failure")
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert svc[key] == "yes", key
    assert svc["ProtectSystem"] == "strict"
    assert svc["StateDirectory"] == "stkrelay/%i" and "ReadWritePaths" in svc
    caps = {"CAP_NET_ADMIN", "CAP_NET_RAW"}  # the VIP executor's `ip addr` and arping, nothing more
    assert set(svc["CapabilityBoundingSet"].split()) == caps == set(svc["AmbientCapabilities"].split())
    unit = _service("stkrelay@.service")["Unit"]
    # Its Redis is wanted, not required: a Redis late or failed at boot must not keep the agent from
    # starting (it waits for it, tests/test_agents_redis.py).
    assert "stkrelay-redis@%i.service" in unit["Wants"].split() and "Requires" not in unit


def test_the_redis_unit_is_per_instance_on_loopback_without_capabilities():
    svc = _service("stkrelay-redis@.service")["Service"]
    assert "/etc/stkrelay/%i.redis.conf" in svc["ExecStart"] and "--bind 127.0.0.1" in svc["ExecStart"]
    assert svc["CapabilityBoundingSet"] == "" and svc["NoNewPrivileges"] == "yes"


def compose_config() -> dict:  # type: ignore[type-arg]
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is missing: run `make test` (bootstrap installs Debian's docker-compose)"
    done = subprocess.run([exe, "-f", str(ROOT / "docker" / "compose.yaml"), "config"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_docker_compose_config_accepts_the_three_agent_demo_site():
    services = compose_config()["services"]
    agents = sorted(n for n in services if n.startswith("s0"))
    assert agents == ["s001", "s002", "s003"]
    redis = {services[a]["environment"]["STK_REDIS_URL"] for a in agents}
    assert len(redis) == 3, "every agent has its own Redis (docs/design.md §4)"
    for a in agents:
        svc = services[a]
        assert [v.split(":")[0] for v in _volumes(svc)] == ["share"], "one shared volume as the share"
        host = re.match(r"redis://([^:/]+)", svc["environment"]["STK_REDIS_URL"]).group(1)  # type: ignore[union-attr]
        assert host in services and services[host]["image"] == "localhost/stkrelay-redis:bookworm"
        assert all(str(p.get("host_ip", p) if isinstance(p, dict) else p).startswith("127.0.0.1")
                   for p in svc.get("ports", [])), "published on the host's loopback only"  # fmt: skip


def _volumes(svc: dict) -> list[str]:  # type: ignore[type-arg]
    return [v if isinstance(v, str) else f"{v['source']}:{v['target']}" for v in svc["volumes"]]


def test_the_compose_agents_settings_pass_the_agents_own_checks():
    from stkrelay import config

    for name, svc in compose_config()["services"].items():
        if name.startswith("s0"):
            env = {k: str(v) for k, v in svc["environment"].items()}
            cfg = config.load(env=env, check_dirs=False)
            assert cfg.problems == [], (name, [p.line() for p in cfg.problems])
            assert cfg.node_ip == svc["networks"]["site"]["ipv4_address"]


def _names(lock: str) -> set[str]:
    names = set()
    for line in (ROOT / lock).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[=<>\[ ]", line)[0].lower().replace("_", "-"))
    return names


def test_runtime_pins_carry_no_test_tooling_and_the_dev_lock_adds_it():
    runtime, dev = _names("requirements.lock"), _names("requirements-dev.lock")
    assert runtime & DEV_TOOLS == set()
    assert dev >= DEV_TOOLS and runtime & dev == set()
    assert "-r requirements.lock" in (ROOT / "requirements-dev.lock").read_text()
    assert "requirements-dev.lock" in (ROOT / "scripts" / "bootstrap.sh").read_text()


def test_the_image_installs_the_package_with_runtime_pins_only():
    """docker/Dockerfile installs, with no index, the wheels scripts/image.sh made of
    requirements.lock and of the package itself: nothing else reaches the image."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    installs = re.findall(r"pip install[^\n]*\n[^\n]*", dockerfile)
    assert installs and all("--no-index" in i and "requirements-dev" not in i for i in installs)
    assert any("-r /tmp/wheels/requirements.lock" in i for i in installs)
    assert any("--no-deps" in i and "stkrelay-*.whl" in i for i in installs)
    assert re.findall(r"^COPY (\S+)", dockerfile, re.M) == ["wheels/", "--from=build"]
    script = (ROOT / "scripts" / "image.sh").read_text()
    wheels = re.findall(r"pip wheel[^\n]*", script)
    assert any("-r requirements.lock" in w for w in wheels) and "requirements-dev" not in script
    assert 'cp requirements.lock "$work/context/wheels/"' in script


@pytest.mark.long
def test_the_wheel_carries_every_module_template_and_static_file(installed):
    from installed import source_files

    names = set(zipfile.ZipFile(installed.wheel).namelist())
    files = source_files()
    modules = [
        f
        for f in files
        if f.endswith(".py") and f.split("/")[0] in ("stkrelay", "stkconfig", "elections", "relay")
    ]
    assert modules and [m for m in modules if m not in names] == []
    shipped = ("templates", "static", "locale")
    assets = [f for f in files if f.split("/")[0] in shipped and not f.endswith(".gitkeep")]
    assert assets and [a for a in assets if f"stkrelay/{a}" not in names] == []
    assert not any(n.startswith(("tests/", "bench/", "scripts/")) for n in names)
    from stkrelay.site_files import FILES  # the units, dashboard, alert rules and example ini

    assert [f for f in FILES.values() if f"stkrelay/site_files/{f}" not in names] == []
    entry_points = zipfile.ZipFile(installed.wheel).read("stkrelay-0.1.0.dist-info/entry_points.txt").decode()
    for script in ("stkrelay", "relayctl", "relayclient", "stkuser"):
        assert f"{script} = stkrelay.cli:" in entry_points


def test_every_python_package_of_the_tree_is_listed_for_the_wheel():
    """pyproject.toml lists the packages by name: a new package left out of it would be
    missing from the wheel (and the image) while every test run from the tree passes."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tracked = subprocess.run(["git", "ls-files", "*__init__.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    packages = {
        str(Path(f).parent).replace("/", ".")
        for f in tracked
        if Path(f).parts[0] not in ("tests", "bench", "scripts", "docs")
    }
    assert packages and sorted(packages - listed) == []


def test_the_entry_points_take_ini_anywhere_and_make_it_absolute(monkeypatch, tmp_path):
    from stkrelay.cli import take_ini

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STK_INI", raising=False)
    assert take_ini(["list", "--ini", "site.ini", "--json"]) == ["list", "--json"]
    assert os.environ["STK_INI"] == str(tmp_path / "site.ini")
    assert take_ini(["--ini=/etc/stkrelay/a.ini", "ping"]) == ["ping"]
    assert os.environ["STK_INI"] == "/etc/stkrelay/a.ini"
    assert take_ini(["send", "--", "--ini", "x"]) == ["send", "--", "--ini", "x"]  # after --: not ours
    with pytest.raises(SystemExit):
        take_ini(["list", "--ini"])


def _readme_install_block() -> list[str]:
    """The shell lines of README "Install on a site"'s first block, continuations joined."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Install on a site", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [ln.split("  #", 1)[0].strip() for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]


def test_the_readmes_ini_and_documentation_lines_fit_the_units_sandbox(tmp_path):
    """The README's own lines, run with /etc and /opt moved under tmp: the ini they write
    loads with its LEASE_DIR inside the unit's ReadWritePaths and its data under the
    StateDirectory, and the units' Documentation= is the file they install."""
    lines = _readme_install_block()
    wanted = [ln for ln in lines if ln.startswith(("sed ", "install -D"))]
    assert len(wanted) == 2, lines
    etc, opt = tmp_path / "etc", tmp_path / "opt"
    (etc / "stkrelay").mkdir(parents=True)
    for line in wanted:
        line = line.replace("/etc/", f"{etc}/").replace("/opt/", f"{opt}/")
        line = line.replace(" -o stkrelay -g stkrelay ", " ")  # the agent's user is made by the lines before
        subprocess.run(["sh", "-ec", line], cwd=ROOT, check=True)
    assert (etc / "stkrelay" / "site1.ini").stat().st_mode & 0o777 == 0o600  # it holds the site's token
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(etc / "stkrelay" / "site1.ini")
    lease_dir = ini["stk"]["LEASE_DIR"]
    svc = _service("stkrelay@.service")
    writable = [p.lstrip("-") for p in svc["Service"]["ReadWritePaths"].split()]
    assert any(lease_dir == w or lease_dir.startswith(w.rstrip("/") + "/") for w in writable), (
        lease_dir,
        writable,
    )
    # One data folder: the ini's DATA_DIR is the unit's state directory, and the unit sets no other.
    assert "STK_DATA_DIR" not in svc["Service"]["Environment"]
    assert ini["stk"]["DATA_DIR"] == "/var/lib/" + svc["Service"]["StateDirectory"].replace("%i", "site1")
    for unit in UNITS:
        doc = _service(unit)["Unit"]["Documentation"]
        assert doc.startswith("file:///opt/"), (unit, doc)
        assert (opt / doc.removeprefix("file:///opt/")).is_file(), (unit, doc)


def test_stkrelay_files_names_every_site_file_and_install_units_writes_both_units(tmp_path):
    from stkrelay.cli import main

    assert main(["files"]) == 0
    assert main(["install-units", "--dest", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(UNITS)
    for unit in UNITS:
        assert (tmp_path / unit).read_bytes() == (ROOT / "packaging" / unit).read_bytes()
    assert main(["install-units", "--dest", str(tmp_path / "nowhere")]) == 1
    assert main(["install-units", "--bogus"]) == 2


def _moved(text: str, root: Path) -> str:
    """A line or a file of the site with /etc, /opt, /srv and /var/lib moved under `root`."""
    for top in ("/etc/", "/opt/", "/srv/", "/var/lib/"):
        text = text.replace(top, f"{root}{top}")
    return text


@pytest.mark.long
def test_the_readmes_install_block_ends_with_relayctl_list_showing_the_pool(tmp_path, installed):
    """README "Install on a site", line by line on the installed wheel (its venv is the pip line's),
    with / moved under tmp and the systemd lines aside: `systemctl enable --now` is played by
    starting the agent as the unit would (its ExecStart and Environment, `$STATE_DIRECTORY` as
    systemd passes it) beside a Redis; the block's last line then shows the pool."""
    from harness import KMSN, TOKEN, Redis, free_port, wait_until

    root = tmp_path / "site"
    lines = _readme_install_block()
    assert lines[-1] == "/opt/stkrelay/bin/relayctl list --ini /etc/stkrelay/site1.ini", lines
    env = installed.env()
    (root / "opt").mkdir(parents=True)
    (root / "opt" / "stkrelay").symlink_to(installed.venv)  # the venv the README's first line makes
    (root / "srv" / "stkrelay" / "share" / "socket").mkdir(parents=True)  # the mounted share
    state = root / "var" / "lib" / "stkrelay" / "site1"  # StateDirectory=stkrelay/%i, made by systemd
    redis = Redis(tmp_path)
    agent = None
    try:
        for line in lines[:-1]:
            if line.startswith(("python3.11 -m venv", "useradd ", "systemctl ")):
                continue  # the venv is `installed`; the user and systemd are the host's
            line = _moved(line.replace(" -o stkrelay -g stkrelay", ""), root)
            done = subprocess.run(["sh", "-ec", line], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=60)  # fmt: skip
            assert done.returncode == 0, (line, done.stdout, done.stderr)
        ini = root / "etc" / "stkrelay" / "site1.ini"
        # "then KMSN, STATION, NODE_IP, token", and the ports this machine has free
        text = ini.read_text()  # its LEASE_DIR and DATA_DIR moved already: the README's sed set them
        for key, value in {"KMSN": KMSN, "STATION": "S001", "NODE_IP": "127.0.0.1", "RELAY_TOKEN": TOKEN,
                           "RELAY_PORT": str(free_port()), "WEB_PORT": str(free_port()),
                           "REDIS_URL": redis.url}.items():  # fmt: skip
            text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        ini.write_text(text)
        # Before the agent ever ran: the last line says where it looked, with an id, and leaves nothing.
        last = _moved(lines[-1], root).split()
        early = subprocess.run(last, env=env, capture_output=True, text=True, timeout=60)
        assert early.returncode == 3 and "stkrelay.E240" in early.stderr, early
        assert "Traceback" not in early.stderr and "/var/lib/stkrelay/<instance>" in early.stderr
        assert not state.exists(), "relayctl created the agent's folder"
        state.mkdir(parents=True, mode=0o700)
        svc = _service("stkrelay@.service")["Service"]
        unit_env = dict(kv.split("=", 1) for kv in svc["Environment"].replace("%i", "site1").split())
        unit_env = {k: _moved(v, root) for k, v in unit_env.items()}
        argv = _moved(svc["ExecStart"].replace("%i", "site1"), root).split()
        log = (tmp_path / "agent.log").open("wb")
        agent = subprocess.Popen(argv, env={**env, **unit_env, "STATE_DIRECTORY": str(state)}, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

        def shows_the_pool() -> subprocess.CompletedProcess[str] | None:
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()[-3000:]
            done = subprocess.run(last, env=env, capture_output=True, text=True, timeout=60)
            return (
                done if done.returncode == 0 and "S001" in done.stdout and "leader" in done.stdout else None
            )

        done = wait_until(shows_the_pool, 90, "relayctl list showing the pool", every=1)
        assert "Traceback" not in done.stderr
        assert (state / "stkrelay.sqlite3").is_file()
        assert not (root / "var" / "lib" / "stkrelay" / "stkrelay.sqlite3").exists()
    finally:
        if agent is not None and agent.poll() is None:
            os.killpg(agent.pid, 15)
            try:
                agent.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(agent.pid, 9)
        redis.stop()


def test_the_agent_refuses_a_data_dir_that_is_not_the_units_state_directory(tmp_path):
    from stkrelay import config

    ini = tmp_path / "stk.ini"
    ini.write_text(f"[stk]\nKMSN = 1234-5678-90-12\nSTATION = S001\nRELAY_TOKEN = Xq7-pL2-mZ9-rT4-wK8\n"
                   f"LEASE_DIR = {tmp_path}\nDATA_DIR = {tmp_path / 'other'}\n")  # fmt: skip
    state = tmp_path / "state"
    state.mkdir()
    got = config.load(str(ini), {"STATE_DIRECTORY": str(state)}, check_dirs=False)
    assert [p.id for p in got.problems] == ["stkrelay.E241"], got.problems
    got = config.load(str(ini), {"STATE_DIRECTORY": str(tmp_path / "other")}, check_dirs=False)
    assert not got.problems and not config.load(str(ini), {}, check_dirs=False).problems


def test_stkuser_and_relayctl_without_the_agents_database_say_where_and_create_nothing(tmp_path):
    """stkuser add (once a Django traceback, `no such table: auth_group`) and relayctl list, on an ini
    whose DATA_DIR holds no agent database: one line naming the file, the unit's folder and the id;
    the folder stays as it was."""
    data = tmp_path / "data"
    ini = tmp_path / "stk.ini"
    ini.write_text(f"[stk]\nKMSN = 1234-5678-90-12\nSTATION = S001\nRELAY_TOKEN = Xq7-pL2-mZ9-rT4-wK8\n"
                   f"LEASE_DIR = {tmp_path}\nDATA_DIR = {data}\n")  # fmt: skip
    ini.chmod(0o600)
    for argv in (["stkuser", "add", "admin", "--role", "operator"], ["relayctl", "list"]):
        done = subprocess.run([PY, "-c", f"import sys; from stkrelay.cli import run; "
                               f"sys.exit(run({argv[0]!r}, {argv[1:]!r} + ['--ini', {str(ini)!r}]))"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 3, (argv, done.stdout, done.stderr)
        assert f"{data / 'stkrelay.sqlite3'}" in done.stderr and "stkrelay.E240" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "/var/lib/stkrelay/<instance>" in done.stderr
        assert not data.exists(), list(data.iterdir())
