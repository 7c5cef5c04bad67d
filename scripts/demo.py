"""`make run`: a 3-agent demo site on this machine.

Agents S001-S003 on 127.0.0.21-23 share one lease dir (.demo/site/share/socket),
each with its own redis-server. Shows who leads, and every change of leader.
Try: kill -9 the leader's process group from another terminal, or Ctrl-C here.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import DEFAULT, Site  # noqa: E402


def main() -> None:
    base = ROOT / ".demo"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    site = Site(base / "site", n=3, timing=DEFAULT)
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    site.start()
    print(f"stkrelay demo: 3 agents of KMSN 9999-9999-99-99, lease dir {site.lease_dir}")
    for a in site.agents:
        ini = dict(line.split(" = ", 1) for line in a.ini.read_text().splitlines()[1:])
        print(f"  {a.name}: pgid {a.pgid}  web http://{a.ip}:{ini['WEB_PORT']}/healthz  "
              f"relay {a.ip}:{ini['RELAY_PORT']}  log {a.log_path}")  # fmt: skip
    print("watching the lease (Ctrl-C stops the site)...", flush=True)
    last = None
    try:
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
