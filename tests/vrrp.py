"""The real keepalived (Debian's) on hosts of a `netns.Lan`: VRRP between the
agents' namespaces, and a `notify` script that writes each host's gate file,
as a site would configure it for `GATE_FILE` (docs/operator.md, "The gate").

Each instance speaks unicast VRRP to the others over its ``eth0`` (multicast
works on the bridge too, but unicast is what routed or Wi-Fi sites need), holds
one VIP, and runs two track scripts every second: ``fresh`` touches the gate
file (its mtime moves while keepalived lives, so with `GATE_MAX_AGE` a killed
keepalived's last ``MASTER`` goes stale), and ``up`` fails while the host's
``down`` file exists, which puts the instance in FAULT (`fault()`).
keepalived runs in the foreground, in a session of its own; `stop()` is SIGTERM
(it then notifies ``STOP``), `kill()` is SIGKILL of its whole group (no notify).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from netns import LanHost

KEEPALIVED = shutil.which("keepalived") or "/usr/sbin/keepalived"
VIP = "10.77.0.100"

CONF = """global_defs {{
  script_user root
  router_id {name}
}}
vrrp_script fresh {{
  script "/usr/bin/touch {gate}"
  interval 1
}}
vrrp_script up {{
  script "/bin/sh -c '! test -e {down}'"
  interval 1
  fall 1
  rise 1
}}
vrrp_instance STK {{
  state BACKUP
  interface eth0
  virtual_router_id 77
  priority {priority}
  advert_int 1
  unicast_src_ip {ip}
  unicast_peer {{
{peers}
  }}
  virtual_ipaddress {{
    {vip}/24 dev eth0
  }}
  track_script {{
    fresh
    up
  }}
  notify {notify}
}}
"""

# keepalived calls it with: INSTANCE|GROUP, the name, MASTER|BACKUP|FAULT|STOP, the priority.
NOTIFY = """#!/bin/sh
echo "$3" > {gate}.tmp && mv -f {gate}.tmp {gate}
echo "$3 $4" >> {log}
"""


class Keepalived:
    def __init__(self, host: LanHost, peers: list[LanHost], workdir: Path, priority: int, gate: Path) -> None:
        self.host, self.gate, self.workdir = host, gate, workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.down = workdir / "down"
        self.transitions = workdir / "transitions.log"
        notify = workdir / "notify.sh"
        notify.write_text(NOTIFY.format(gate=gate, log=self.transitions))
        notify.chmod(0o755)
        self.conf = workdir / "keepalived.conf"
        self.conf.write_text(CONF.format(
            name=host.label, gate=gate, down=self.down, priority=priority, ip=host.ip, vip=VIP, notify=notify,
            peers="\n".join(f"    {p.ip}" for p in peers),
        ))  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Keepalived:
        w = self.workdir
        with open(w / "keepalived.log", "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [*self.host.wrapper, KEEPALIVED, "--dont-fork", "--log-console", "--vrrp",
                 "-f", str(self.conf), "-p", str(w / "keepalived.pid"), "-r", str(w / "vrrp.pid")],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return self

    def state(self) -> str:
        """What the notify script last wrote ("" before the first transition)."""
        try:
            return self.gate.read_text().strip()
        except OSError:
            return ""

    def fault(self, on: bool = True) -> None:
        if on:
            self.down.touch()
        else:
            self.down.unlink(missing_ok=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def log(self) -> str:
        try:
            return (self.workdir / "keepalived.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""
