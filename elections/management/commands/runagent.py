"""`python manage.py runagent --ini PATH`: one agent in the foreground.

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
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand
from django.utils.translation import gettext as _

from elections.ports.local.webcert import WebCert, made_cert, operator_cert
from relay.server.listen_set import door_hosts
from stkconfig.model import Config
from stkhost.fingerprints import FINGERPRINT, show
from stkrelay.config_tls import plain_on_lan

PRIVATE_UMASK = 0o077  # what the agent and its children create is this user's only (DATA_DIR)


class Command(BaseCommand):
    help = "Run one stkrelay agent (web, lease worker with beat, relay while leader)."
    requires_system_checks: list[str] = []  # config problems: one line each, below

    def add_arguments(self, parser):
        parser.add_argument("--ini", help="the agent's stk.ini (default: $STK_INI)")

    def execute(self, *args, **options):
        # Settings are built from the ini named here: point STK_INI at it and
        # re-exec before Django reads settings, so children inherit the same.
        ini = options.get("ini")
        if ini and os.environ.get("STK_INI") != os.path.abspath(ini):
            os.environ["STK_INI"] = os.path.abspath(ini)
            os.execv(sys.executable, [sys.executable, *sys.argv])
        return super().execute(*args, **options)

    def handle(self, *args, **options):
        from django.conf import settings
        from django.core.management import call_command

        stk = settings.STK
        os.environ["STK_COMPONENT"] = "agent"  # its own log lines (LOG_FORMAT=json); children get theirs
        for warning in stk.warnings:  # before the problems: a W110 says where a missing key stands
            self.stderr.write(f"stkrelay: config {stk.source}: WARNING {warning.line()}")
        if stk.problems:
            for problem in stk.problems:
                self.stderr.write(f"stkrelay: config {stk.source}: {problem.line()}")
            raise SystemExit(2)
        self._keep_private(stk)
        call_command("migrate", verbosity=0, interactive=False)

        from elections.ports.local.redis_link import RedisLink
        from elections.runtime.supervisor import Supervisor

        env = _child_env(Path(settings.BASE_DIR))
        cert = _web_cert(stk, env)
        release, record_release = _releaser(stk)
        if stk.beacon_interval > 0:
            self._hold_liveness_port(stk, env)
        data = Path(stk.data_dir)
        os.chdir(data)
        sup = Supervisor(
            _children(stk, cert), str(data), env, release, log_format=stk.log_format, node=stk.node,
            kmsn=stk.kmsn, record_release=record_release, redis=RedisLink(stk.redis_url),
        )  # fmt: skip
        self._say_started(sup, stk, cert)
        code = sup.run()
        # Every child is gone. A thread of ours may still be blocked on a hung share (the lease
        # hand-over given up on): end at once instead of finalising the interpreter around it,
        # which costs the stop budget (docs/design.md §11) for nothing.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _keep_private(self, stk: Config) -> None:
        """Umask 077 for the agent and its children, and DATA_DIR 0700 (issue 40, finding 10): the
        database (sessions, password hashes), the panel's TLS key and the agent's state are this
        user's only. The share's files keep 0644 (`ports.share.sharefiles.FILE_MODE`): other members
        read them."""
        os.umask(PRIVATE_UMASK)
        try:
            if stat.S_IMODE(os.stat(stk.data_dir).st_mode) & 0o077:
                os.chmod(stk.data_dir, 0o700)
        except OSError as exc:
            said = _("cannot make %(path)s 0700 (%(why)s): other users may read the agent's database and keys"
                     ) % {"path": stk.data_dir, "why": exc.strerror}  # fmt: skip
            hint = _("run the agent as the folder's owner, or chmod 700 it")
            self.stderr.write(
                f"stkrelay: config {stk.source}: WARNING DATA_DIR: {said} (stkrelay.W112) — {hint}"
            )

    def _hold_liveness_port(self, stk: Config, env: dict[str, str]) -> None:
        """The TCP liveness port (docs/design.md §13), before any child starts: none may inherit it."""
        from elections.ports.beacons.liveness_port import LivenessPort

        try:
            LivenessPort(stk.node_ip, stk.beacon_port).start()
        except OSError as exc:
            # Another process holds the port (a squatter): followers could not tell this
            # agent's death from its life there, so it sends no beacons at all and they
            # time its lease out by the TTL, never by a false "the leader is gone".
            self.stderr.write(f"stkrelay: config {stk.source}: BEACON_PORT: cannot listen on "
                              f"{stk.node_ip}:{stk.beacon_port}: {exc.strerror} (stkrelay.E031) — "
                              "beacons are off on this agent: its failover waits for the lease TTL; "
                              "free the port, or set another BEACON_PORT on every member")  # fmt: skip
            self.stderr.flush()
            env["STK_BEACON_INTERVAL"] = "0"

    def _say_started(self, sup: Any, stk: Config, cert: WebCert | None) -> None:
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
            self.stdout.write(banner)
            self.stdout.flush()


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
    celery = [py, "-m", "celery", "-A", "stkrelay.celery"]
    # Every child is `python -m ...`, so an installed package (no manage.py) runs the same.
    specs = [
        # Daphne, with its access log rotated by size (LOG_MAX_BYTES, LOG_BACKUPS).
        ChildSpec("web", [py, "-m", "stkrelay.web", "--access-log", str(data / "access.log"),
                          "--log-max-bytes", str(stk.log_max_bytes),
                          "--log-backups", str(stk.log_backups),
                          *web_endpoint, "stkrelay.asgi:application"]),
        # The lease queue has its own solo worker, prefetch 1 (docs/design.md §12), and the agent's
        # one beat on a thread of it (schedule in memory, no schedule file).
        ChildSpec("worker", [*celery, "worker", "-P", "solo", "-Q", "lease", "-n", f"lease@{stk.node}",
                             "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle",
                             "--without-heartbeat", "--stk-beat", "-l", "WARNING"], needs_redis=True),
        # Warm standby, without Django (relay/runner/): listens within ~0.1 s of the fenced
        # start_relay action of a won epoch, stops itself 0.1-0.2 s after losing; restarted if it dies.
        ChildSpec("relay", [py, "-m", "stkrelay.child", "relay.runner", "--standby"], standby=True),
    ]  # fmt: skip
    if stk.entry:  # the router's port-forward reaches it (relay/server/entry.py, docs/design.md §14.1)
        specs.append(ChildSpec("entry", [py, "-m", "stkrelay.child", "relay.server.entry"]))
    if door_hosts(stk.node_ip, stk.relay_loopback, stk.relay_forward):  # stations' 127.0.0.1 (issue 36)
        specs.append(ChildSpec("door", [py, "-m", "stkrelay.child", "relay.server.station_door"]))
    return specs


def _releaser(stk: Config) -> tuple[Callable[[Any], bool], Callable[[Any], None]]:
    """What the supervisor runs on SIGTERM if this agent leads: the lease released, said in
    beacons; and, once its children are gone, the history row of that release."""
    from elections.ports.beacons.beacons import BeaconConfig
    from elections.ports.beacons.liveness_port import send_resign
    from elections.ports.local.localstate import Leadership
    from elections.ports.store.stores import PoolPlace, open_store
    from elections.runtime.agent import identity
    from elections.runtime.lease_writes import make_record, release_lease
    from elections.runtime.projection import pool_event_sink
    from stkhost.clock import SystemClock

    clock = SystemClock()
    os.environ["STK_AGENT_PID"] = str(os.getpid())
    me = identity(stk)

    def release(state: Leadership) -> bool:
        """On SIGTERM: mark our lease released so a follower takes over at once."""
        store = open_store(PoolPlace.of(stk), stk.node, clock)
        epoch = state.epoch
        assert epoch is not None
        done = release_lease(store, me, epoch, partial(make_record, me, clock))
        if done and stk.beacon_interval > 0:
            send_resign(beacons, epoch, 0)
        return done

    def record(state: Leadership) -> None:
        assert state.epoch is not None
        pool_event_sink(stk).record("released", state.epoch, "agent stopping (SIGTERM): lease released")

    beacons = BeaconConfig(stk.kmsn, stk.node, stk.node_ip, stk.relay_port, stk.pool_key,
                           stk.beacon_interval, stk.beacon_port, stk.beacon_peers)  # fmt: skip
    return release, record


def _web_cert(stk: Config, env: dict[str, str]) -> WebCert | None:
    """The certificate the web child serves (None: WEB_PLAIN); made in DATA_DIR at first start."""
    if stk.web_plain:
        return None
    if stk.tls_cert:
        return operator_cert(stk.data_dir, stk.tls_cert, stk.tls_key)
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
