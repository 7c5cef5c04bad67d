"""`python manage.py runcloud --ini cloud.ini`: the cloud rendezvous relay (docs/design.md §14).

Remote clients on ``LISTEN_IP:RELAY_PORT`` (JSON) and ``RELAY_PORT+1``
(passthrough), the sites' leaders' tunnels on ``TUNNEL_PORT``, and on
``WEB_PORT`` WebSocket clients (``/ws/relay/``), ``/status`` and ``/metrics``
(`relay.cloud.web`). Needs no agent settings, no Redis and no database: the
config is `relay.cloud.config` (``--ini``, else ``CLOUD_INI``). With
``ETCD_ENDPOINTS`` it is one node of several: the tunnel directory in etcd
(`relay.cloud.cluster`) and clients forwarded from the other nodes on
``PEER_PORT`` (`relay.cloud.forward`).

Every 0.5 s the status is also written to ``DATA_DIR/status.json`` (tmp +
rename), for a shell on the VM. SIGTERM/SIGINT: every connection is closed,
exit 0. Exit status 1 if a port cannot be bound, 2 on a configuration problem
(one line each).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from relay.cloud.config import load
from relay.cloud.server import CloudServer

log = logging.getLogger("stkrelay.cloud")

STATUS_EVERY = 0.5


class Command(BaseCommand):
    help = "Run the cloud rendezvous relay: remote clients and the sites' leaders' tunnels."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--ini", default=os.environ.get("CLOUD_INI"), help="cloud.ini (default $CLOUD_INI)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cfg = load(options["ini"])
        if cfg.problems:
            for problem in cfg.problems:
                self.stderr.write(f"runcloud: config {cfg.source}: {problem.line()}")
            raise SystemExit(2)
        logging.getLogger("stkrelay").setLevel(logging.INFO)
        code = asyncio.run(self._run(cfg))
        if code:
            raise SystemExit(code)

    async def _run(self, cfg: Any) -> int:
        from relay.cloud.web import serve_web

        server = CloudServer(cfg)
        try:
            await server.start()
            web = await serve_web(server)
        except OSError as exc:
            server.close()
            self.stderr.write(f"runcloud: cannot listen on {cfg.listen_ip}: {exc.strerror or exc}")
            return 1
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        cluster = cfg.cluster
        self.stdout.write(
            f"runcloud: serving {len(cfg.tokens)} site(s) on {cfg.listen_ip}: clients :{cfg.relay_port} "
            f"(json) :{cfg.relay_port + 1} (passthrough), tunnels :{cfg.tunnel_port}, web :{cfg.web_port}"
            + (f"; node {cluster.node} of {', '.join(sorted(cluster.nodes))}, peers :{cluster.peer_port}, "
               f"directory {cluster.prefix} on {len(cluster.endpoints)} etcd member(s)" if cluster else "")
        )  # fmt: skip
        self.stdout.flush()
        path = Path(cfg.data_dir) / "status.json"
        while not stopping.is_set():
            _write(path, server.status())
            try:
                async with asyncio.timeout(STATUS_EVERY):
                    await stopping.wait()
            except TimeoutError:
                pass
        server.close()
        web.close()
        await asyncio.sleep(0.1)
        _write(path, server.status())
        self.stdout.write("runcloud: stopped")
        return 0


def _write(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot write %s: %s", path, exc)
