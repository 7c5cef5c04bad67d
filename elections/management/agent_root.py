"""`manage.py runagent --ini PATH` (and `stkrelay agent`): one agent in the foreground, without Django.

Web (Daphne: HTTPS with this agent's certificate, `elections.ports.local.webcert`, unless
WEB_PLAIN = 1), the lease worker (Celery, solo, queue `lease`) with its beat on
a thread, and the standby relay (no Django), supervised as one process group. SIGTERM stops it
within 5 s, releasing the lease first if this agent leads (and saying so with
three `resign` beacons). With beacons on (`BEACON_INTERVAL` > 0) it holds the
TCP liveness port `NODE_IP:BEACON_PORT` (docs/design.md §13): its death, which
kills every child (`runtime.supervisor`), is what followers may act on early.

It does not wait for its Redis (`REDIS_URL`, local to the agent): every child starts at
once, the worker waiting inside until Redis answers, and killed and started again when
its Redis goes away (`runtime.redis_wait`): after a reboot where Redis comes late, the
agent waits for it with no end, saying why (its log, `/healthz`, `relayctl doctor`).

The supervisor carries only its job (issue 41): it starts, watches and signals its
children, and loads no Django. The database's migrations are checked without it
(`migrations_due`) and run by a short child only when one is missing; the history
row of a release on shutdown is written by a child started as the shutdown begins
(`release_record`). `manage.py runagent` and `stkrelay agent` come here before Django
is loaded; the `runagent` management command, for any other way in, execs here.

    python -m elections.management.agent_root --ini PATH
"""

from __future__ import annotations

import gettext
import logging
import logging.config
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from elections.management.migrations_due import MIGRATING, due, migrating_lock
from elections.management.release_record import ReleaseRecorder
from elections.ports.local.webcert import WebCert, made_as_is, made_cert, operator_cert
from relay.server.listen_set import door_hosts
from stkconfig.model import Config
from stkhost.fingerprints import FINGERPRINT, show
from stkrelay.config_tls import plain_on_lan
from stkrelay.ini_arg import take_ini

PRIVATE_UMASK = 0o077  # what the agent and its children create is this user's only (DATA_DIR)


def main(argv: list[str]) -> int:
    if any(arg in ("-h", "--help") for arg in argv):
        print("usage: runagent [--ini PATH]   (default: $STK_INI)")
        return 0
    take_ini(argv)
    if os.environ.get("STK_INI"):  # relative to where it was given, not to DATA_DIR (our cwd)
        os.environ["STK_INI"] = os.path.abspath(os.environ["STK_INI"])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")
    from stkrelay import settings  # the project's settings, read without Django: STK, apps, database

    stk = settings.STK
    logging.config.dictConfig(settings.LOGGING)
    os.environ["STK_COMPONENT"] = "agent"  # its own log lines (LOG_FORMAT=json); children get theirs
    for warning in stk.warnings:  # before the problems: a W110 says where a missing key stands
        _err(f"stkrelay: config {stk.source}: WARNING {warning.line()}")
    if stk.problems:
        for problem in stk.problems:
            _err(f"stkrelay: config {stk.source}: {problem.line()}")
        return 2
    _keep_private(stk, _translator(settings.LOCALE_PATHS, stk.language_code))
    env = _child_env(Path(settings.BASE_DIR))
    # A first start (or an upgrade) migrates in a child of its own while another makes the
    # certificate and every child starts: web and the worker wait for it (`wait_migrated`).
    migrating = None
    if due(Path(str(settings.DATABASES["default"]["NAME"])), settings.INSTALLED_APPS):
        migrating = _migrate(env, stk.data_dir)
        env[MIGRATING] = "1"
    cert = _web_cert(stk, env)

    from elections.ports.local.redis_link import RedisLink
    from elections.runtime.supervisor import Supervisor

    release, record_release = _releaser(stk, env)
    if stk.beacon_interval > 0:
        _hold_liveness_port(stk, env)
    data = Path(stk.data_dir)
    os.chdir(data)
    sup = Supervisor(
        _children(stk, cert), str(data), env, release, log_format=stk.log_format, node=stk.node,
        kmsn=stk.kmsn, record_release=record_release, redis=RedisLink(stk.redis_url),
    )  # fmt: skip
    _say_started(sup, stk, cert)
    failed = threading.Event()
    if migrating is not None:
        threading.Thread(target=_migrated, args=(migrating, sup, failed), name="migrate", daemon=True).start()
    code = sup.run()
    if failed.is_set():
        code = 1
    # Every child is gone. A thread of ours may still be blocked on a hung share (the lease
    # hand-over given up on): end at once instead of finalising the interpreter around it,
    # which costs the stop budget (docs/design.md §11) for nothing.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _translator(locale_paths: list[Any], language_code: str) -> Callable[[str], str]:
    """The panel's catalogue (locale/, compiled) for the agent's LANGUAGE_CODE, without Django."""
    lang, _sep, script = language_code.partition("-")
    name = f"{lang}_{script.title() if len(script) > 2 else script.upper()}" if script else lang
    for folder in locale_paths:
        found = gettext.translation("django", str(folder), languages=[name], fallback=True)
        if isinstance(found, gettext.GNUTranslations):
            return found.gettext
    return lambda text: text


def _keep_private(stk: Config, _: Callable[[str], str]) -> None:
    """Umask 077 for the agent and its children, and DATA_DIR 0700 (issue 40, finding 10): the
    database (sessions, password hashes), the panel's TLS key and the agent's state are this
    user's only. The share's files keep 0644 (`ports.sharefiles.FILE_MODE`): other members read them."""
    os.umask(PRIVATE_UMASK)
    try:
        if stat.S_IMODE(os.stat(stk.data_dir).st_mode) & 0o077:
            os.chmod(stk.data_dir, 0o700)
    except OSError as exc:
        said = _("cannot make %(path)s 0700 (%(why)s): other users may read the agent's database and keys"
                 ) % {"path": stk.data_dir, "why": exc.strerror}  # fmt: skip
        hint = _("run the agent as the folder's owner, or chmod 700 it")
        _err(f"stkrelay: config {stk.source}: WARNING DATA_DIR: {said} (stkrelay.W112) — {hint}")


def _migrate(env: dict[str, str], data_dir: str) -> subprocess.Popen[str]:
    """A migration is missing (a first start, an upgrade): Django's `migrate`, in a child of its
    own, holding DATA_DIR's lock (`migrating_lock`) until it ends."""
    lock = migrating_lock(data_dir)
    try:
        return subprocess.Popen([sys.executable, "-m", "django", "migrate", "--verbosity", "0", "--no-input",
                                 "--skip-checks"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, pass_fds=(lock,))  # fmt: skip
    finally:
        os.close(lock)  # the child's copy holds it now


def _migrated(migrating: subprocess.Popen[str], sup: Any, failed: threading.Event) -> None:
    """On a thread: the migrate child's end; a failure is said, and stops the agent (exit 1)."""
    said, _ = migrating.communicate()
    if migrating.returncode != 0:
        failed.set()
        sys.stderr.write(said)
        _err(f"stkrelay: the database's migrations failed (exit {migrating.returncode})")
        sup.stop()


def _hold_liveness_port(stk: Config, env: dict[str, str]) -> None:
    """The TCP liveness port (docs/design.md §13), before any child starts: none may inherit it."""
    from elections.ports.beacons.liveness_port import LivenessPort

    try:
        LivenessPort(stk.node_ip, stk.beacon_port).start()
    except OSError as exc:
        # Another process holds the port (a squatter): followers could not tell this
        # agent's death from its life there, so it sends no beacons at all and they
        # time its lease out by the TTL, never by a false "the leader is gone".
        _err(f"stkrelay: config {stk.source}: BEACON_PORT: cannot listen on "
             f"{stk.node_ip}:{stk.beacon_port}: {exc.strerror} (stkrelay.E031) — "
             "beacons are off on this agent: its failover waits for the lease TTL; "
             "free the port, or set another BEACON_PORT on every member")  # fmt: skip
        env["STK_BEACON_INTERVAL"] = "0"


def _say_started(sup: Any, stk: Config, cert: WebCert | None) -> None:
    """The banner, the WEB_PLAIN warning and the legacy stk.ini's lines."""
    from stkrelay.config_legacy import startup_lines

    web = f"plain http :{stk.web_port}"
    if cert is not None:
        web = f"https :{stk.web_port} SHA-256 {show(cert.fingerprint)}"
    banner = (f"stkrelay agent {stk.node} of {stk.kmsn} on {stk.node_ip} "
              f"(web {web}, relay :{stk.relay_port}, lease dir {stk.lease_dir})")  # fmt: skip
    if plain_on_lan(stk.node_ip, stk.web_plain):
        sup.say("agent", f"WARNING: WEB_PLAIN = 1 on {stk.node_ip}: passwords, tokens and session "
                         "cookies cross the LAN in clear")  # fmt: skip
    for line in startup_lines(stk.source, stk.ignored, stk.relay_legacy, stk.relay_legacy_magic):
        sup.say("agent", line)  # the site's own stk.ini: one line, never one per key
    if stk.log_format == "json":
        sup.say("agent", banner)
    else:
        sys.stdout.write(banner + "\n")
        sys.stdout.flush()


def _child_env(base: Path) -> dict[str, str]:
    """The children's environment: this agent's pid, and the source checkout on the path."""
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="stkrelay.settings",
        STK_AGENT_PID=str(os.getpid()),
    )
    if (base / "manage.py").is_file():  # a source checkout: the children run from DATA_DIR
        env["PYTHONPATH"] = str(base) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _children(stk: Config, cert: WebCert | None) -> list[Any]:
    """The supervised children: web, the lease worker, the standby relay (and the entry)."""
    from elections.runtime.supervisor import ChildSpec

    py = sys.executable
    if cert is None:
        web_endpoint = ["-b", stk.node_ip, "-p", str(stk.web_port)]
    else:  # HTTPS (docs/design.md §10): Daphne's Twisted TLS endpoint
        web_endpoint = ["-e", cert.endpoint(stk.node_ip, stk.web_port)]
    data = Path(stk.data_dir)
    # Every child is `python -m ...`, so an installed package (no manage.py) runs the same.
    specs = [
        # Daphne, with its access log rotated by size (LOG_MAX_BYTES, LOG_BACKUPS).
        ChildSpec("web", [py, "-m", "stkrelay.web", "--access-log", str(data / "access.log"),
                          "--log-max-bytes", str(stk.log_max_bytes),
                          "--log-backups", str(stk.log_backups),
                          *web_endpoint, "stkrelay.asgi:application"]),
        # The lease queue has its own solo worker, prefetch 1 (docs/design.md §12), and the agent's
        # one beat on a thread of it (schedule in memory, no schedule file); built without
        # Celery's command line (stkrelay/worker.py).
        ChildSpec("worker", [py, "-m", "stkrelay.worker", "--stk-beat", stk.node], needs_redis=True),
        # Warm standby, without Django (relay/runner/): listens within ~0.1 s of the fenced
        # start_relay action of a won epoch, stops itself 0.1-0.2 s after losing; restarted if it dies.
        ChildSpec("relay", [py, "-m", "stkrelay.child", "relay.runner", "--standby"], standby=True),
    ]  # fmt: skip
    if stk.entry:  # the router's port-forward reaches this member (docs/design.md §14.1)
        specs.append(ChildSpec("entry", [py, "-m", "stkrelay.child", "relay.server.entry"]))
    if door_hosts(stk.node_ip, stk.relay_loopback, stk.relay_forward):  # stations' 127.0.0.1 (issue 36)
        specs.append(ChildSpec("door", [py, "-m", "stkrelay.child", "relay.server.station_door"]))
    return specs


def _releaser(stk: Config, env: dict[str, str]) -> tuple[Callable[[Any], bool], Callable[[Any], None]]:
    """What the supervisor runs on SIGTERM if this agent leads: the lease released, said in
    beacons; and, once its children are gone, the history row of that release."""
    from elections.ports.beacons.beacon_config import BeaconConfig
    from elections.ports.beacons.liveness_port import send_resign
    from elections.ports.local.localstate import Leadership
    from elections.ports.store.stores import PoolPlace, open_store
    from elections.runtime.lease_writes import identity, make_record, release_lease
    from stkhost.clock import SystemClock

    clock = SystemClock()
    os.environ["STK_AGENT_PID"] = str(os.getpid())
    me = identity(stk)

    recorder = ReleaseRecorder(env)

    def release(state: Leadership) -> bool:
        """On SIGTERM: mark our lease released so a follower takes over at once."""
        recorder.prepare()  # loading Django while the lease is handed over and the children stop
        store = open_store(PoolPlace.of(stk), stk.node, clock)
        epoch = state.epoch
        assert epoch is not None
        done = release_lease(store, me, epoch, partial(make_record, me, clock))
        if done and stk.beacon_interval > 0:
            send_resign(beacons, epoch, 0)
        return done

    def record(state: Leadership) -> None:
        assert state.epoch is not None
        recorder.record(state.epoch)

    beacons = BeaconConfig(stk.kmsn, stk.node, stk.node_ip, stk.relay_port, stk.pool_key,
                           stk.beacon_interval, stk.beacon_port, stk.beacon_peers)  # fmt: skip
    return release, record


def _web_cert(stk: Config, env: dict[str, str]) -> WebCert | None:
    """The certificate the web child serves (None: WEB_PLAIN); made in DATA_DIR at first start."""
    if stk.web_plain:
        return None
    if stk.tls_cert:
        return operator_cert(stk.data_dir, stk.tls_cert, stk.tls_key)
    kept = made_as_is(stk.data_dir, stk.node_ip, datetime.now(UTC))
    if kept is not None:  # nothing to make: no child
        return kept
    # A short child: `cryptography` (~13 MiB) stays out of the supervisor (elections.ports.local.webcert).
    made = subprocess.run([sys.executable, "-m", "elections.ports.local.webcert", stk.data_dir, stk.node_ip,
                           *stk.web_allowed_hosts], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    fingerprint = made.stdout.strip()
    if made.returncode != 0 or not FINGERPRINT.fullmatch(fingerprint):
        why = (made.stdout + made.stderr).strip().splitlines()[-1:] or ["no answer"]
        sys.stderr.write(f"stkrelay: config {stk.source}: DATA_DIR: cannot write this agent's web "
                         f"certificate: {why[0]} (stkrelay.E061) — make DATA_DIR writable, or set "
                         "TLS_CERT and TLS_KEY\n")  # fmt: skip
        raise SystemExit(2)
    return made_cert(stk.data_dir, fingerprint)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
