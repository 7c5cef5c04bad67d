"""`make run`: a 3-agent demo site on this machine.

Agents S001-S003 on 127.0.0.21-23 share one lease dir (.demo/site/share/socket),
each with its own redis-server. Shows who leads, and every change of leader.
Try: kill -9 the leader's process group from another terminal, or Ctrl-C here.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, Site, free_port, wait_until  # noqa: E402

from stkhost.fingerprints import show  # noqa: E402

# Every agent listens on its own loopback address only (127.0.0.21-23; each Redis on 127.0.0.1):
# the demo opens nothing to the outside. The panels are on these ports unless one is taken.
FIRST_IP, WEB_PORTS = 21, (8001, 8002, 8003)


def port_free(ip: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True


def web_ports(first_ip: int = FIRST_IP, wanted: tuple[int, ...] = WEB_PORTS) -> list[int]:
    """The fixed panel ports, each replaced by a free one only if it is busy on its agent's address."""
    out = []
    for i, port in enumerate(wanted):
        ip = f"127.0.0.{first_ip + i}"
        out.append(port if port_free(ip, port) else free_port(ip))
    return out


def main() -> None:
    base = Path(os.environ.get("STK_DEMO_DIR") or ROOT / ".demo")  # a test runs it elsewhere
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    ports = web_ports()
    for want, got in zip(WEB_PORTS, ports, strict=True):
        if want != got:
            print(f"port {want} is busy: using {got} instead", flush=True)
    # The share where the README says it is (a test site would put it on tmpfs).
    site = Site(base / "site", n=3, timing=DEFAULT, first_ip=FIRST_IP, web_ports=ports,
                lease_dir=base / "site" / "share" / "socket")  # fmt: skip
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        for a in site.agents:  # progress: a line as each agent starts, and as each is up
            a.start()
            print(f"{a.name}: starting (pid {a.pgid}, log {a.log_path})", flush=True)
        password = secrets.token_urlsafe(9)
        for a in site.agents:  # one operator account on every agent's panel
            # Up: its worker has decided once, which it does only after its database is migrated (a first
            # start migrates beside the other children).
            db = a.data_dir / "stkrelay.sqlite3"
            wait_until(lambda a=a, db=db: db.exists() and a.state().get("decision"), 90, f"{a.name} up")
            print(
                f"{a.name}: up after {time.monotonic() - started:.1f} s ({a.state().get('decision', '?')})",
                flush=True,
            )
            argv = [sys.executable, str(ROOT / "manage.py"), "stkuser", "add", "demo", "--role", "operator"]
            env = {"PATH": "/usr/bin:/bin", "STK_INI": str(a.ini)}
            added = subprocess.run([*argv, "--password-file", "-"], input=password + "\n", cwd=ROOT, env=env,
                                   capture_output=True, text=True)  # fmt: skip
            if added.returncode != 0:
                sys.exit(f"{a.name}: stkuser add demo failed: {added.stderr.strip() or added.stdout.strip()}")
        print(f"stkrelay demo: 3 agents of KMSN 9999-9999-99-99, lease dir {site.lease_dir}")
        print(f"panel login on any agent: user demo, password {password}")
        for a in site.agents:
            print(f"  {a.name}: pgid {a.pgid}  panel {a.web_url}/  "
                  f"relay {a.ip}:{a.setting('RELAY_PORT')}  log {a.log_path}")  # fmt: skip
            print(
                f"        certificate SHA-256 {show(a.fingerprint())} (self-signed: accept it in the browser)"
            )
        print("watching the lease (Ctrl-C stops the site)...", flush=True)
        last = None
        while not stop:
            rec = site.lease()
            now = (rec.node, rec.epoch) if rec else None
            if now != last:
                when = time.strftime("%H:%M:%S")
                print(f"{when}  leader: {rec.node} epoch {rec.epoch} at {rec.ip}:{rec.port}" if rec
                      else f"{when}  no leader", flush=True)  # fmt: skip
                last = now
            time.sleep(0.2)
    finally:
        print("stopping agents...", flush=True)
        for a in site.agents:
            if a.alive():
                a.terminate()
        site.stop()


if __name__ == "__main__":
    main()
