"""`python manage.py relayctl`: see and steer the pool from a shell.

    relayctl list                    members, roles, eligibility with reasons, leader, epoch
    relayctl history [-n 20]         this agent's projection of the pool's history
    relayctl drain NODE [--force]    relayctl undrain NODE
    relayctl promote NODE            relayctl pause | resume
    relayctl plan [NODE]             the dry-run ActionPlan for NODE taking the next epoch
    relayctl doctor                  checks of the share, signatures, clocks, relays

`--json` prints one JSON document for scripts. Exit codes: 0 ok; 1 a command
refused or a doctor check failed; 2 usage or configuration; 3 the pool is not
reachable (no view yet, share down); 4 stale epoch (re-read and retry).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

EXIT = {"accepted": 0, "refused": 1, "unknown_member": 1, "unavailable": 3, "stale_epoch": 4}


class Command(BaseCommand):
    help = "List, steer and check the pool (drain, undrain, promote, pause, resume, plan, doctor)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("action", choices=["list", "history", "drain", "undrain", "promote", "pause",
                                               "resume", "plan", "doctor"])  # fmt: skip
        parser.add_argument("node", nargs="?")
        parser.add_argument("--force", action="store_true", help="drain even the last eligible member")
        parser.add_argument("--reason", default="", help="why (kept in the audit trail)")
        parser.add_argument("--epoch", type=int, help="the epoch you expect (refused if it changed)")
        parser.add_argument("-n", type=int, default=20, help="history rows")
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args: Any, **o: Any) -> None:
        from django.conf import settings

        stk = settings.STK
        if stk.problems:
            for p in stk.problems:
                self.stderr.write(f"relayctl: config {stk.source}: {p.line()}")
            raise SystemExit(2)
        self.as_json = o["json"]
        action = o["action"]
        if action in ("drain", "undrain", "promote") and not o["node"]:
            raise CommandError(f"{action} needs a NODE")
        code = getattr(self, f"do_{action}", self.do_command)(o)
        raise SystemExit(code)

    def emit(self, doc: Any, text: str) -> None:
        self.stdout.write(json.dumps(doc, indent=2, default=str) if self.as_json else text)

    # -- reading -----------------------------------------------------------------
    def do_list(self, o: dict[str, Any]) -> int:
        from elections.agent import read_pool

        pool = read_pool()
        if not pool:
            self.stderr.write("relayctl: this agent has no view of the pool yet (is runagent running?)")
            return 3
        lease = pool.get("lease") or {}
        head = f"KMSN {pool.get('kmsn')}  leader {lease.get('node', '-')}  epoch {lease.get('epoch', '-')}"
        lines = [f"{head}  lease {pool.get('lease_status')}  (seen by {pool.get('node')})"]
        for node, m in sorted((pool.get("members") or {}).items()):
            role = "leader" if node == lease.get("node") and not lease.get("released") else "follower"
            elig = "eligible" if m.get("eligible") else "NOT eligible: " + "; ".join(m.get("reasons") or [])
            age = m.get("age")
            lines.append(f"  {node:8s} {role:8s} {m.get('ip') or '-':15s} prio {m.get('priority'):>3}  "
                         f"heartbeat {'-' if age is None else f'{age:.1f} s'}  {elig}")  # fmt: skip
        self.emit(pool, "\n".join(lines))
        return 0

    def do_history(self, o: dict[str, Any]) -> int:
        from elections.models import ElectionEvent

        rows = list(ElectionEvent.objects.order_by("-observed_at", "-id")[: o["n"]])
        doc = [{"at": r.observed_at.isoformat(), "node": r.node, "kind": r.kind, "epoch": r.epoch,
                "reason": r.reason, **r.detail} for r in rows]  # fmt: skip
        text = "\n".join(f"{r.observed_at:%Y-%m-%d %H:%M:%S}  epoch {r.epoch:<5} {r.node:8s} {r.kind:18s} "
                         f"{r.reason}" for r in reversed(rows))  # fmt: skip
        self.emit(doc, text or "(no history yet)")
        return 0

    def do_plan(self, o: dict[str, Any]) -> int:
        from django.conf import settings

        from elections.actions import action_config, plan_for
        from elections.agent import read_pool

        pool = read_pool()
        epoch = ((pool.get("lease") or {}).get("epoch") or 0) + 1
        node = o["node"] or settings.STK.node
        config, problems = action_config(settings.STK.values)
        for problem in problems:
            self.stderr.write(f"relayctl: {problem}")
        plan = plan_for(epoch, node, config)
        self.emit(plan.to_dict(), plan.render())
        return 0

    # -- steering ----------------------------------------------------------------
    def do_command(self, o: dict[str, Any]) -> int:
        from elections.commands import submit

        actor = f"{getpass.getuser()}@{socket.gethostname()} (relayctl)"
        result = submit(o["action"], o["node"], actor=actor, client="local shell", reason=o["reason"],
                        expected_epoch=o["epoch"], force=o["force"])  # fmt: skip
        doc = {"code": result.code, "message": result.message, "correlation": result.correlation,
               "epoch": result.epoch}  # fmt: skip
        self.emit(doc, f"{result.code}: {result.message} (correlation {result.correlation})")
        return EXIT.get(result.code, 1)

    # -- doctor --------------------------------------------------------------------
    def do_doctor(self, o: dict[str, Any]) -> int:
        from django.conf import settings

        from elections.agent import read_pool
        from elections.clock import SystemClock
        from elections.errors import StoreUnavailable
        from elections.store import FileLeaseStore

        stk = settings.STK
        checks: list[dict[str, Any]] = []

        def check(name: str, ok: bool, detail: str) -> None:
            checks.append({"check": name, "ok": ok, "detail": detail})

        store = FileLeaseStore(stk.lease_dir, stk.relay_token, stk.node, SystemClock())
        try:
            probe = Path(stk.lease_dir) / f".doctor-{stk.node}-{os.getpid()}"
            probe.write_text("x")
            share_mtime = probe.stat().st_mtime
            probe.unlink()
            check("lease dir reachable and writable", True, stk.lease_dir)
        except OSError as exc:
            check("lease dir reachable and writable", False, f"{stk.lease_dir}: {exc}")
            share_mtime = None
        try:
            read = store.read()
            check("lease signature", read.status == "valid", f"{read.status}: {read.detail}")
            members = store.read_members()
        except StoreUnavailable as exc:
            check("lease signature", False, str(exc))
            members = {}
        if share_mtime is not None:  # the file server's clock against ours: informative only
            skew = share_mtime - time.time()
            check("clock vs the file server", abs(skew) < 5, f"ours is {-skew:+.1f} s off the share's")
        pool = read_pool()
        for node, m in sorted((pool.get("members") or {}).items()):
            age = m.get("age")
            check(f"member {node} heartbeat", age is not None and age < stk.heartbeat_ttl,
                  "never seen" if age is None else f"{age:.1f} s old on this agent's clock")  # fmt: skip
        answering = []
        for node, doc in members.items():
            ip = doc.get("ip")
            try:
                with socket.create_connection((ip, stk.relay_port), timeout=0.5):
                    answering.append(node)
            except (OSError, TypeError):
                pass
        lease = (pool.get("lease") or {}).get("node")
        check("exactly one relay answering", len(answering) <= 1 and (not answering or answering == [lease]),
              f"answering: {', '.join(answering) or 'none'}; lease names {lease}")  # fmt: skip
        text = "\n".join(f"{'ok  ' if c['ok'] else 'FAIL'} {c['check']}: {c['detail']}" for c in checks)
        self.emit(checks, text)
        return 0 if all(c["ok"] for c in checks) else 1
