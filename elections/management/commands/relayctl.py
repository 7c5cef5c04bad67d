"""`python manage.py relayctl`: see and steer the pool from a shell.

    relayctl list [-W | -w N]        members, states, eligibility with reasons, leader and since when
    relayctl history [-n 20] [--all] this agent's projection of the pool's history (--all: with the
                                     action_applied rows); -W / -w N: again every 2 / N s until Ctrl-C
    relayctl ACTION --help           what ACTION does and its options
    relayctl drain NODE [--force]    relayctl undrain NODE
    relayctl promote NODE            relayctl pause | resume
    relayctl plan [NODE]             the dry-run ActionPlan for NODE taking the next epoch
    relayctl doctor                  checks of the share, signatures, clocks, relays, where each address is
    relayctl credential STATION      the station's relay credential (docs/design.md §8), from POOL_KEY
    relayctl cloud-key [KMSN]        the site's LEASE_KEY for the cloud's cloud.ini (docs/design.md §14)
    relayctl credential --all        one credential per known station (members, stations seen registering)
    relayctl unbind STATION          reset a station's binding to its credential (the site token works again)
    relayctl tls                     the SHA-256 of this agent's panel certificate, and the members'
    relayctl forget NODE             retire a member gone for good: its record goes, its history stays
                                     (refused while its heartbeat is fresh or it holds the lease)

`-o json|yaml|tsv` (`--json` is `-o json`) prints for scripts, with wall-clock ISO 8601 times.
Exit codes: 0 ok; 1 a command refused or a doctor check failed (also: no relay answering);
2 usage or configuration; 3 the pool is not reachable (no view yet, share down); 4 stale
epoch (re-read and retry); 5 stale view: this agent's view is older than HEARTBEAT_TTL
(its runagent is not writing it; `--stale-ok` shows it, marked STALE).

Commands go through the steering service like a click in the panel: audited
(user = the OS user, client = `cli@<host>`, via `cli`) and published to the
pool, so every agent's audit page shows them.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from elections.management.doctor_checks import (
    beacon_checks,
    clock_checks,
    config_warnings,
    early_takeover_check,
    lease_checks,
    legacy_check,
    listen_check,
    mark,
    ownership_checks,
    redis_check,
    refusal_checks,
    relay_answers_check,
    relay_kind_check,
    share_split_check,
    stations_check,
    store_checks,
    witness_check,
)
from elections.management.pool_views import (
    FORMATS,
    STALE_EXIT,
    history_header,
    list_view,
    render,
    stale_refusal,
    view_age,
)
from elections.ports.local.terminal import make_safe
from stkrelay.operator_command import OperatorCommand, console_prog

EXIT = {"accepted": 0, "refused": 1, "unknown_member": 1, "unavailable": 3, "audit_unavailable": 3,
        "stale_epoch": 4}  # fmt: skip


PLUMBING = ("action_applied",)  # a leader action done as planned: one row per action and epoch (--all)


def output_options(parser: Any, top: bool) -> None:
    """-o, --json, --stale-ok: defaulted on the command, SUPPRESSed on each action (whose own
    default would otherwise overwrite one given before the action)."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument("--json", action="store_true", default=default(False),
                        help=_("machine-readable output (-o json)"))  # fmt: skip
    parser.add_argument("-o", "--output", choices=FORMATS, default=default("table"), help=_("output format"))
    parser.add_argument("--stale-ok", action="store_true", default=default(False),
                        help=_("show a view older than its TTL (else exit 5)"))  # fmt: skip


POSITIONAL = {  # name: (metavar, required, help)
    "node": ("NODE", True, gettext_lazy("a member of the pool")),
    "node?": ("NODE", False, gettext_lazy("a member of the pool (default: this agent)")),
    "station": ("STATION", True, gettext_lazy("a station's name")),
    "station?": ("STATION", False, gettext_lazy("a station's name")),
    "kmsn?": ("KMSN", False, gettext_lazy("a watched pool's KMSN (default: this agent's)")),
}


def add_option(parser: Any, name: str) -> None:
    """One of an action's arguments (ACTIONS), with its help."""
    if name in POSITIONAL:
        metavar, required, text = POSITIONAL[name]
        parser.add_argument("node", metavar=metavar, nargs=None if required else "?", help=str(text))
    elif name == "force":
        parser.add_argument("--force", action="store_true", help=_("drain even the last eligible member"))
    elif name == "reason":
        parser.add_argument("--reason", default="", help=_("why (kept in the audit trail)"))
    elif name == "epoch":
        parser.add_argument(
            "--epoch", type=int, help=_("the epoch you expect (refused, exit 4, if it changed)")
        )
    elif name == "n":
        parser.add_argument("-n", type=int, default=20, help=_("how many rows (default 20)"))
    elif name == "kind":
        kinds = _("failover: elections, handoffs, commands (the default); audit: the audit trail; all: both")
        parser.add_argument("--kind", choices=["failover", "audit", "all"], default="failover", help=kinds)
    elif name == "all_rows":
        parser.add_argument("--all", action="store_true", help=_("also the action_applied rows"))
    elif name == "all_stations":
        parser.add_argument("--all", action="store_true", help=_("one credential per known station"))
    elif name == "watch":
        every = _("watch: show it again every %(n)s until Ctrl-C")
        parser.add_argument("-W", dest="watch", action="store_const", const=2.0, help=every % {"n": "2 s"})
        parser.add_argument("-w", "--watch", dest="watch", type=float, metavar="N", help=every % {"n": "N s"})


ACTIONS: dict[str, tuple[Any, list[str]]] = {  # name: (what it does, its arguments: add_option)
    "list": (gettext_lazy("the members, their state, the leader and since when, eligibility"), ["watch"]),
    "history": (
        gettext_lazy("the pool's history as this agent recorded it"),
        ["n", "kind", "all_rows", "watch"],
    ),
    "drain": (gettext_lazy("make NODE ineligible; a leader hands off"), ["node", "force", "reason", "epoch"]),
    "undrain": (gettext_lazy("make NODE eligible again"), ["node", "reason", "epoch"]),
    "promote": (gettext_lazy("hand the lease to NODE (a planned switchover)"), ["node", "reason", "epoch"]),
    "pause": (
        gettext_lazy("suspend elections and failover (planned handoffs still work)"),
        ["reason", "epoch"],
    ),
    "resume": (gettext_lazy("resume elections and failover"), ["reason", "epoch"]),
    "plan": (gettext_lazy("the dry-run action plan if NODE took the next epoch"), ["node?"]),
    "doctor": (gettext_lazy("check the share, signatures, clocks, heartbeats, relays, addresses"), []),
    "credential": (gettext_lazy("a station's relay credential, from POOL_KEY"), ["station?", "all_stations"]),
    "unbind": (gettext_lazy("let the site token work for STATION again"), ["station", "reason", "epoch"]),
    "cloud-key": (gettext_lazy("the site's LEASE_KEY for the cloud's cloud.ini"), ["kmsn?"]),
    "tls": (gettext_lazy("the SHA-256 of this agent's panel certificate, and the members'"), []),
    "forget": (
        gettext_lazy("retire a member gone for good (its history stays)"),
        ["node", "reason", "epoch"],
    ),
}


class Command(OperatorCommand):
    help = gettext_lazy(
        "Read, steer and check the pool: list, history, drain, promote, unbind, doctor, tls, ... "
        "Exit codes: 0 ok; 1 refused, or a doctor check failed; 2 usage or configuration; 3 no view of "
        "the pool; 4 stale epoch; 5 stale view (older than HEARTBEAT_TTL; --stale-ok shows it)."
    )

    def add_arguments(self, parser):
        """One sub-command per action, each with its own help (`relayctl list --help`) and only
        its options; the output options are taken before the action too (`relayctl -o json list`)."""
        output_options(parser, top=True)
        parser.set_defaults(node=None, force=False, reason="", epoch=None, n=20, kind="failover", all=False,
                            watch=None)  # fmt: skip
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                        prog=console_prog(parser.prog))  # fmt: skip
        for name, (summary, args) in ACTIONS.items():
            sub = actions.add_parser(name, help=str(summary), description=str(summary))
            ini = _("the agent's stk.ini (else $STK_INI, else the one ini in /etc/stkrelay/)")
            sub.add_argument("--ini", metavar="PATH", default=argparse.SUPPRESS, help=ini)
            output_options(sub, top=False)
            for arg in args:
                add_option(sub, arg)

    def handle(self, *args: Any, **o: Any) -> None:
        from django.conf import settings

        make_safe(self)  # reasons, node names, share details: nothing from outside is printed raw
        stk = settings.STK
        if stk.problems:
            for p in stk.problems:
                self.stderr.write(f"relayctl: config {stk.source}: {p.line()}")
            raise SystemExit(2)
        self.fmt = "json" if o["json"] else o["output"]
        action = o["action"]
        if action == "credential" and not (o["node"] or o["all"]):
            raise CommandError(_("credential needs a STATION (or --all)"), returncode=2)
        do = getattr(self, f"do_{action.replace('-', '_')}", self.do_command)
        if o["watch"] is not None:
            raise SystemExit(self.watch(do, o))
        raise SystemExit(do(o))

    def watch(self, do: Any, o: dict[str, Any]) -> int:
        """`-W` / `-w N`: the view again every N seconds (2 with -W), each one headed by the time it
        was taken, until Ctrl-C (exit 0), as `patronictl list -W` does."""
        from django.utils import timezone

        from elections.web.panel.fmt import local

        every = max(0.5, float(o["watch"]))
        raw = self.stdout.unwrapped  # the one sequence written unescaped: clear the terminal
        clear = "\x1b[H\x1b[2J" if raw.isatty() else ""
        try:
            while True:
                raw.write(clear, ending="")
                head = _("%(at)s, every %(every)g s (Ctrl-C stops)")
                self.stdout.write(head % {"at": local(timezone.now()), "every": every})
                do(o)
                self.stdout.flush()
                time.sleep(every)
        except KeyboardInterrupt:
            return 0

    def emit(self, doc: Any, lines: list[str], rows: list[list[Any]] | None = None) -> None:
        """`doc` as JSON or YAML, `rows` as TSV, else `lines`, one escaped line each
        (`ports.local.terminal`)."""
        if self.fmt == "tsv" and rows is not None:  # each field escaped (a tab in one too), tab-joined
            for row in rows:
                self.stdout.row(*("" if f is None else f for f in row))
            return
        self.stdout.lines(render(self.fmt, doc, lines))

    # -- reading -----------------------------------------------------------------
    def do_list(self, o: dict[str, Any]) -> int:
        from django.conf import settings

        pool = _pool()
        if not pool.exists:
            self.stderr.write(_("relayctl: this agent has no view of the pool yet (is runagent running?)"))
            return 3
        if self.refused_stale(pool, o):
            return STALE_EXIT
        since = _leader_since(pool.kmsn or settings.STK.kmsn, pool.epoch) if pool.leader else None
        self.emit(*list_view(pool, settings.STK.heartbeat_ttl, _source(), view_age(pool), since))
        return 0

    def refused_stale(self, pool: Any, o: dict[str, Any]) -> bool:
        """Say why and refuse (the caller exits STALE_EXIT) a view older than its TTL, unless --stale-ok."""
        from django.conf import settings

        refusal = stale_refusal(view_age(pool), settings.STK.heartbeat_ttl, _source())
        if refusal and not o["stale_ok"]:
            self.stderr.write(_("relayctl: refused: %(why)s") % {"why": refusal})
            return True
        return False

    def do_history(self, o: dict[str, Any]) -> int:
        from django.conf import settings
        from django.utils.timezone import localtime

        from elections.models import ElectionEvent
        from elections.web.panel.fmt import local

        pool = _pool()
        if pool.exists and self.refused_stale(pool, o):  # the worker ingests the events: stale with it
            return STALE_EXIT
        mine = ElectionEvent.objects.filter(kmsn=settings.STK.kmsn)  # not the watched pools'
        if o["kind"] == "audit":
            mine = mine.filter(kind="audit")
        elif o["kind"] == "failover":
            mine = mine.exclude(kind="audit")
        if not o["all"]:  # a leader action done as planned: plumbing, one row per action and epoch
            mine = mine.exclude(kind__in=PLUMBING)
        events = list(mine.order_by("-observed_at", "-id")[: o["n"]])
        doc = [{"at": localtime(r.observed_at).isoformat(), "node": r.node, "kind": r.kind, "epoch": r.epoch,
                "reason": r.reason, **r.detail} for r in events]  # fmt: skip
        lines = history_header(o["kind"], settings.STK.kmsn, view_age(pool), settings.STK.heartbeat_ttl)
        lines += [f"{local(r.observed_at)}  epoch {r.epoch:<5} {r.node:8s} {r.kind:18s} {r.reason}"
                  for r in reversed(events)]  # fmt: skip
        lines += [] if events else [_("(no history yet)")]
        rows = [
            [localtime(r.observed_at).isoformat(), r.epoch, r.node, r.kind, r.reason]
            for r in reversed(events)
        ]
        self.emit(doc, lines, [["at", "epoch", "node", "kind", "reason"], *rows])
        return 0

    def do_plan(self, o: dict[str, Any]) -> int:
        from django.conf import settings

        from elections.core.actions import plan_for

        epoch = (_pool().epoch or 0) + 1
        node = o["node"] or settings.STK.node
        plan = plan_for(epoch, node, settings.STK.actions)  # a bad key: relayctl refused to start
        self.emit(plan.to_dict(), plan.render().splitlines())
        return 0

    def do_credential(self, o: dict[str, Any]) -> int:
        """The key a relay client of STATION authenticates with instead of RELAY_TOKEN."""
        from django.conf import settings

        from stkhost.pool_keys import station_credential

        stk = settings.STK
        if not o["all"]:
            station = o["node"]
            credential = station_credential(stk.pool_key, stk.kmsn, station)
            self.emit({"kmsn": stk.kmsn, "station": station, "credential": credential}, [credential])
            return 0
        from elections.ports.local.localstate import LocalState

        local = LocalState(stk.data_dir)
        known = local.stations()
        stations = sorted({*local.pool().members, *known.known, *known.bound})
        rows = [{"station": s, "credential": station_credential(stk.pool_key, stk.kmsn, s),
                 "bound": s in known.bound, "seen_with": known.known.get(s)} for s in stations]  # fmt: skip
        lines = [f"{r['station']}\t{r['credential']}" for r in rows]
        self.emit({"kmsn": stk.kmsn, "stations": rows}, lines or ["(no known station yet)"])
        return 0

    def do_cloud_key(self, o: dict[str, Any]) -> int:
        """K_cloud of this site (or of a watched pool's KMSN): the cloud checks leases with it.

        It is derived from POOL_KEY one way, so the cloud holding it can sign
        no pool record; it goes in the site's ``[site:<KMSN>]`` as LEASE_KEY.
        """
        from django.conf import settings

        from stkhost.pool_keys import cloud_key

        stk = settings.STK
        keys = {stk.kmsn: stk.pool_key, **{w.kmsn: w.pool_key for w in stk.watched}}
        kmsn = o["node"] or stk.kmsn
        if kmsn not in keys:
            self.stderr.write(f"relayctl: {kmsn} is neither this agent's KMSN nor a watched pool's")
            return 2
        key = cloud_key(keys[kmsn], kmsn)
        self.emit({"kmsn": kmsn, "lease_key": key, "section": f"[site:{kmsn}]"}, [key])
        return 0

    def do_tls(self, o: dict[str, Any]) -> int:
        """This agent's panel certificate fingerprint (to pin, or to compare with a browser's),
        then every member's as its heartbeat gives it. Exit 3 while none is made yet."""
        from django.conf import settings

        from elections.ports.local.webcert import cert_file, served_fingerprint
        from stkconfig.web import host_entry
        from stkhost.fingerprints import show

        stk = settings.STK
        mine = served_fingerprint(stk.data_dir, stk.tls_cert, stk.web_plain)
        where = "" if stk.web_plain else str(cert_file(stk.data_dir, stk.tls_cert))
        members = {node: m.web_tls for node, m in sorted(_pool().members.items())}
        doc = {"node": stk.node, "url": f"{'http' if stk.web_plain else 'https'}://{host_entry(stk.node_ip)}:"
               f"{stk.web_port}/", "plain": stk.web_plain, "sha256": mine, "certificate": where,
               "members": members}  # fmt: skip
        if stk.web_plain:
            head = [f"{stk.node}: plain HTTP (WEB_PLAIN = 1), no certificate"]
        elif not mine:
            self.stderr.write(f"relayctl: no certificate in {where} yet (runagent makes it at first start)")
            return 3
        else:
            head = [f"{stk.node} {doc['url']} SHA-256 {show(mine)}", f"  certificate {where}"]
        lines = head + [f"  member {node:8s} " + (f"SHA-256 {show(fp)}" if fp else "plain HTTP" if fp == ""
                          else "(not in its heartbeat)") for node, fp in members.items()]  # fmt: skip
        self.emit(doc, lines)
        return 0

    # -- steering ----------------------------------------------------------------
    def do_command(self, o: dict[str, Any]) -> int:
        from django.conf import settings

        from elections.steering import Actor, perform

        outcome = perform(Actor.from_shell(), o["action"], settings.STK.kmsn, o["node"], reason=o["reason"],
                          expected_epoch=o["epoch"], force=o["force"])  # fmt: skip
        doc = {"code": outcome.code, **outcome.as_dict()}
        self.emit(doc, [f"{outcome.code}: {outcome.message} (correlation {outcome.correlation})"])
        return EXIT.get(outcome.code, 1)

    # -- doctor --------------------------------------------------------------------
    def do_doctor(self, o: dict[str, Any]) -> int:
        from django.conf import settings

        from elections.ports.store.stores import PoolPlace, open_store
        from stkhost.clock import SystemClock

        stk = settings.STK
        checks: list[dict[str, Any]] = []

        def check(name: str, ok: bool, detail: str, warn: bool = False) -> None:
            checks.append({"check": name, "ok": ok, "detail": detail, **({"warn": True} if warn else {})})

        redis_check(check, stk)  # first: while the agent waits for it, no view below is current
        place = PoolPlace.of(stk)
        store = open_store(place, stk.node, SystemClock())
        share_mtime = store_checks(check, stk, place, store)
        read, members = lease_checks(check, store)
        if share_mtime is not None:  # the file server's clock against ours: informative only
            skew = share_mtime - time.time()
            check("clock vs the file server", abs(skew) < 5, f"ours is {-skew:+.1f} s off the share's")
        pool = _pool()
        age = view_age(pool)
        stale = age is None or age > stk.heartbeat_ttl
        check("this agent's view is fresh", not stale or o["stale_ok"],
              _("%(source)s, %(age)s s old (TTL %(ttl)g s)") % {"source": _source(), "ttl": stk.heartbeat_ttl,
              "age": "-" if age is None else f"{age:.1f}"}, warn=stale)  # fmt: skip
        for node, m in sorted(pool.members.items()):
            age = m.age
            check(f"member {node} heartbeat", age is not None and age < stk.heartbeat_ttl,
                  "never seen" if age is None else f"{age:.1f} s old on this agent's clock")  # fmt: skip
        relay_answers_check(check, stk, pool, members)
        listen_check(check, stk)
        relay_kind_check(check, stk)
        stations_check(check, stk, pool)
        beacon_checks(check, stk.node, pool, members)
        witness_check(check, stk.node, pool)
        share_split_check(check, pool)
        clock_checks(check, stk.node, pool)
        early_takeover_check(check, stk.kmsn)
        legacy_check(check, stk)
        from elections.ports.local.localstate import LocalState
        from elections.web.panel.entry_state import entry_checks

        here = LocalState(stk.data_dir).entry() if stk.entry else None
        for name, ok, detail in entry_checks(pool, here, time.monotonic()):
            check(name, ok, detail)
        from elections.web.panel.door_state import door_check
        from relay.server.listen_set import door_hosts

        if door_hosts(stk.node_ip, stk.relay_loopback, stk.relay_forward):
            check(*door_check(LocalState(stk.data_dir).door(), time.monotonic(), pool.leader))
        ownership_checks(checks, stk, read, members)
        refusal_checks(check, pool)
        config_warnings(check, stk)
        self.emit(checks, [f"{mark(c)} {c['check']}: {c['detail']}" for c in checks])
        if stale and not o["stale_ok"]:
            self.stderr.write(
                _("relayctl: this agent's view is stale: the checks above that read it are not current")
            )
            return STALE_EXIT
        return 0 if all(c["ok"] for c in checks) else 1


def _leader_since(kmsn: str, epoch: int | None) -> Any:
    """When this epoch's leader was elected, as this agent's history has it (the panel's "since")."""
    from django.db.models import Min

    from elections.models import ElectionEvent

    if epoch is None:
        return None
    rows = ElectionEvent.objects.filter(kmsn=kmsn, epoch=epoch, kind="elected")
    return rows.aggregate(at=Min("observed_at"))["at"]


def _pool() -> Any:
    """This agent's pool view (`pool.json`, written by its worker)."""
    from django.conf import settings

    from elections.ports.local.localstate import LocalState

    return LocalState(settings.STK.data_dir).pool()


def _source() -> str:
    """Where the views come from: this agent's `pool.json`, written by its worker."""
    from django.conf import settings

    return os.path.join(settings.STK.data_dir, "pool.json")
