"""The checks `relayctl doctor` makes, each adding its lines through `check`.

The store and the lease, where the relay listens and which relay answers, which
relay runs, beacons and one-way paths, one store, clocks, early takeovers,
legacy stations, refused records, where each address is.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext as _

from elections.core.evidence import SHOWN_FOR
from elections.core.untrusted import REPLAYED, TOO_MANY, as_object
from stkconfig.model import Config


def listen_check(check: Any, stk: Config) -> None:
    """Where this agent's relay listens (relay.server.listen_set): NODE_IP, loopback, the addresses
    the executors hold; an address it cannot bind (not arrived yet, taken) fails the check."""
    from elections.ports.local.localstate import LocalState

    status = LocalState(stk.data_dir).relay()
    entries = status.snapshot.get("listen") if isinstance(status.snapshot.get("listen"), list) else []
    if not status.serving() or not entries:
        check("relay listens on", True, "nowhere: the relay does not serve on this agent (ask the leader)")
        return
    up, down = [], []
    for e in entries[:32]:
        if not isinstance(e, dict):
            continue
        where = f"{str(e.get('address'))[:64]}:{stk.relay_port} ({str(e.get('why'))[:16]})"
        if e.get("state") == "listening":
            up.append(where)
        else:
            down.append(f"{where} {str(e.get('state'))[:16]}: {str(e.get('error'))[:120]}")
    detail = ", ".join(up) or "no address"
    detail += f"; passthrough on :{stk.relay_port + 1} of each" if up else ""
    detail += f"; NOT listening on {', '.join(down)}" if down else ""
    check("relay listens on", bool(up) and not down, detail)


def clock_checks(check: Any, me: str, pool: Any) -> None:
    """Each member's wall clock against the store's, and against this agent's, as the members
    measure and publish them (core.skew). Shown only: no election or freshness reads a clock."""
    from elections.core.skew import SHOWN_LIMIT, describe, versus

    mine = pool.members[me].clock if me in pool.members else None
    for node, m in sorted(pool.members.items()):
        detail = describe(m.clock)
        vs = versus(m.clock, mine) if node != me else None
        if vs is not None:
            detail += f"; {vs[0]:+.2f} s (±{vs[1]:.2f}) vs {me}"
        off = m.clock is not None and abs(m.clock.offset_s) - m.clock.error_s > SHOWN_LIMIT
        if off:
            detail += f" (more than {SHOWN_LIMIT:g} s: fix its NTP; shown only, never used for a decision)"
        check(f"clock of {node}", not off, detail)


def relay_kind_check(check: Any, stk: Config) -> None:
    """Which relay this agent runs when it leads (RELAY_KIND, docs/design.md §16) and, while it
    leads with an external relay, whether that relay accepts behind the fencing proxy."""
    from elections.ports.local.localstate import LocalState
    from elections.web.panel.proxy_state import ProxyState

    ports = f"{stk.node_ip}:{stk.relay_port} and :{stk.relay_port + 1}"
    spec = stk.relay_exec
    if stk.relay_kind != "exec" or spec is None:
        check("relay kind", True, f"builtin: stkrelay's relay on {ports} while this agent leads")
        return
    detail = (f"exec: {spec.argv[0]} on loopback {spec.host}:{spec.port} and :{spec.passthrough_port}, "
              f"behind the fencing proxy on {ports} while this agent leads")  # fmt: skip
    local = LocalState(stk.data_dir)
    if not local.leads_now(time.monotonic()):
        check("relay kind", True, detail)
        return
    proxy = ProxyState.of(local.relay().snapshot)
    if proxy is None or not proxy.accepting:
        why = proxy.last_error if proxy is not None and proxy.last_error else "no relay status"
        check("relay kind", False, f"{detail}; leading, but the external relay does not accept: {why}")
        return
    check("relay kind", True, f"{detail}; accepting (pid {proxy.pid}), {proxy.connections} connections "
                              f"forwarded now, {proxy.restarts} restarts")  # fmt: skip


def ownership_checks(checks: list[dict[str, Any]], stk: Config, read: Any, members: dict[str, Any]) -> None:
    """Where each address really is, looked at now (ADR 0011 phase 4): one check per address,
    against the lease read above; the members' own reports come from their heartbeats."""
    from elections.executors import build_executors
    from elections.runtime.ownership import doctor_map

    if stk.ownership_check <= 0:
        return
    config = stk.actions
    rec = read.record if read is not None and read.status == "valid" else None
    leader = rec.node if rec is not None and not rec.released else None
    entries, refused = doctor_map(stk.node, config, build_executors(config, stk.data_dir), leader,
                                  rec.epoch if rec is not None else None, members)  # fmt: skip
    for e in entries:
        checks.append({"check": f"address {e.address} ({e.executor})", "ok": e.ok, "detail": e.describe(),
                       "verdict": e.verdict, "expected": e.expected, "epoch": e.epoch,
                       "holders": list(e.holders), "foreign": list(e.foreign)})  # fmt: skip
    for node, why in sorted(refused.items()):
        checks.append({"check": f"address reports of {node}", "ok": False, "detail": f"refused: {why}"})


def early_takeover_check(check: Any, kmsn: str) -> None:
    """Elections on liveness evidence (docs/design.md §13) that repeat: agents that keep dying, or
    someone on the path who drops beacons and resets connections to force takeovers."""
    from django.db import DatabaseError
    from django.utils import timezone

    from elections.web.panel.site import EARLY_TAKEOVERS_ALARM
    from elections.web.panel.state import early_takeover_counts

    try:
        ever, day = early_takeover_counts([kmsn], timezone.now())
    except DatabaseError:  # DATA_DIR's database not made yet: the agent never ran on this host
        why = "no history here yet: the agent has not run on this host (its first start makes the database)"
        check("early takeovers on liveness evidence", False, why)
        return
    n = day.get(kmsn, 0)
    detail = f"{n} in 24 h, {ever.get(kmsn, 0)} in all (alarm from {EARLY_TAKEOVERS_ALARM} in 24 h)"
    if n >= EARLY_TAKEOVERS_ALARM:
        detail += "; agents keep dying, or someone drops beacons and resets connections: see the history"
    check("early takeovers on liveness evidence", n < EARLY_TAKEOVERS_ALARM, detail)


def mark(c: dict[str, Any]) -> str:
    """A doctor line's mark: FAIL, WARN (ok, but worth saying: it fails nothing) or ok."""
    return "FAIL" if not c["ok"] else "WARN" if c.get("warn") else "ok  "


def share_split_check(check: Any, pool: Any) -> None:
    """Members of this KMSN on another store (core.share_split), each naming both stores."""
    found = [f for f in pool.share_split if isinstance(f, dict)]
    if pool.detection != "beacons":
        check("one store for the whole pool", True, "not judged: beacons are off (BEACON_INTERVAL = 0)")
    elif not found:
        check("one store for the whole pool", True, "every member that beacons here is in this agent's store")
    for f in found:
        check(f"one store for the whole pool ({f.get('node')})", False,
              f"{f.get('detail')} (for {f.get('since_s')} s)")  # fmt: skip


def legacy_check(check: Any, stk: Config) -> None:
    """``RELAY_LEGACY = 1`` (relay.wire.legacy): say so, with this relay's legacy sessions, and warn:
    old stations send the site token in clear on the LAN. A warning, not a failure."""
    from elections.ports.local.localstate import LocalState

    if not stk.relay_legacy:
        check("legacy stations", True, "off (RELAY_LEGACY = 0): only protocol v1 clients")
        return
    doc = LocalState(stk.data_dir).relay().snapshot.get("legacy")
    if isinstance(doc, dict) and doc.get("enabled") is True:
        refused = as_object(doc.get("refused"))
        n = sum(v for v in refused.values() if isinstance(v, int))
        here = (f"{doc.get('sessions')} legacy sessions on this agent's relay now, "
                f"{doc.get('registered')} registered and {n} refused since it started")  # fmt: skip
    else:
        here = "this agent's relay is not serving (its legacy sessions show on the leader)"
    check("legacy stations", True, f"on (RELAY_LEGACY = 1, magic {stk.relay_legacy_magic!r}): {here}; "
          "the site token crosses the LAN in clear: give each station its credential "
          "(relayctl credential --all)", warn=True)  # fmt: skip


def witness_check(check: Any, me: str, pool: Any) -> None:
    """The share's witness (issue 38): in a pool of two with beacons, its leader FAILs when the
    witness record does not name its epoch or its last refresh failed (a silent leader would then
    be replaced after the TTL, not within seconds)."""
    serving = pool.beacons.get("serving") if isinstance(pool.beacons.get("serving"), dict) else {}
    if pool.detection != "beacons" or serving.get("members") != 2:
        return
    name = _("the share's witness (fast takeover of a pool of two)")
    if pool.leader != me:
        check(name, True, _("judged by the leader (%(leader)s), which refreshes it")
              % {"leader": pool.leader or _("none")})  # fmt: skip
        return
    store = as_object(serving.get("witness_store"))
    vote = as_object(serving.get("witness"))
    why = store.get("why") or _("not written yet")
    if vote.get("ready") is not True:
        check(name, False, _("no witness record names this epoch (%(why)s): a silent leader waits out "
                             "the TTL") % {"why": why})  # fmt: skip
    elif store.get("ok") is False:
        check(name, False, _("cannot be refreshed (%(why)s, %(age)s s ago): a silent leader waits out "
                             "the TTL") % {"why": why, "age": store.get("age_s")})  # fmt: skip
    else:
        check(name, True, _("fast takeover: 2 members + the share's witness (%(why)s)") % {"why": why})


def beacon_checks(check: Any, me: str, pool: Any, members: dict[str, dict[str, Any]]) -> None:
    """Beacons from every member, and paths that work one way only (docs/design.md §13): this
    agent hears X but X's heartbeat says it does not hear this agent, or the reverse."""
    check("detection", True, pool.detection)
    if pool.detection != "beacons":
        return
    heard = pool.beacons.get("members") if isinstance(pool.beacons.get("members"), dict) else {}
    for node in sorted(set(members) | set(pool.members)):
        if node == me:
            continue
        b = heard.get(node) if isinstance(heard.get(node), dict) else None
        hears_me = me in (members.get(node, {}).get("hears") or [])
        reports = isinstance(members.get(node, {}).get("hears"), list)  # it beacons and says whom it hears
        if b is None or not isinstance(b.get("age_s"), (int, float)) or b["age_s"] > 2.0:
            why = "none heard" if b is None else f"last one {b.get('age_s')} s ago"
            one_way = f"; one-way: {node} hears {me}, {me} does not hear {node}" if hears_me else ""
            check(f"beacons from {node}", False, why + one_way)
            continue
        detail = f"{b.get('age_s')} s ago, {float(b.get('loss') or 0):.0%} lost, from {b.get('source')}"
        if reports and not hears_me:
            one_way = f"one-way: {me} hears {node}, {node} does not hear {me}"
            check(f"beacons from {node}", False, f"{detail}; {one_way}")
        else:
            check(f"beacons from {node}", True, detail)


def store_checks(check: Callable[..., None], stk: Any, place: Any, store: Any) -> float | None:
    """The store reachable: etcd's cluster and TTLs, or a probe written on the share; the
    probe's mtime on a local share (for the clock check), else None."""
    from elections.errors import StoreUnavailable
    from elections.ports.share.share import LocalShare
    from elections.ports.store.stores import open_share

    share_mtime = None
    if stk.lease_store == "etcd":  # the cluster, and TTLs as etcd counts them
        from elections.ports.etcd.health import doctor_checks

        for name, ok, detail in doctor_checks(store.backend.pool, stk.lease_ttl):
            check(name, ok, detail)
    else:
        share = open_share(place)
        probe = f".doctor-{stk.node}-{os.getpid()}"

        def probe_share() -> float | None:
            """Write, (locally: stat) and remove a probe file, the way the store writes."""
            share.create_exclusive(probe, b"x")
            try:
                return (share.root / probe).stat().st_mtime if isinstance(share, LocalShare) else None
            finally:
                share.unlink(probe)

        try:
            share_mtime = share.deadline.run(probe_share)
            check("lease dir reachable and writable", True, share.where)
        except (OSError, StoreUnavailable) as exc:
            check("lease dir reachable and writable", False, f"{share.where}: {exc}")
    return share_mtime


def lease_checks(check: Callable[..., None], store: Any) -> tuple[Any, dict[str, Any]]:
    """The lease's signature; the lease read (or None) and the member records (or none)."""
    from elections.errors import StoreUnavailable

    read = None
    try:
        read = store.read()
        check("lease signature", read.status == "valid", f"{read.status}: {read.detail}")
        members = store.read_members()
    except StoreUnavailable as exc:
        check("lease signature", False, str(exc))
        members = {}
    return read, members


def relay_answers_check(check: Callable[..., None], stk: Any, pool: Any, members: dict[str, Any]) -> None:
    """Exactly one member's relay port answers: the one the lease names."""
    answering = []
    for node, doc in members.items():
        ip = doc.get("ip")
        try:
            with socket.create_connection((ip, stk.relay_port), timeout=0.5):
                answering.append(node)
        except (OSError, TypeError):
            pass
    lease = (pool.lease or {}).get("node")
    check("exactly one relay answering", answering == [lease] if lease else len(answering) == 1,
          _("answering: %(who)s; lease names %(lease)s") % {"who": ", ".join(answering) or _("none"),
                                                            "lease": lease})  # fmt: skip


# Refused datagrams that cost nothing and change nothing, and that a busy LAN can cause: a copy of a
# beacon or nudge seen already, a burst past the budget. Shown as WARN; forged, oversized, split-brain
# datagrams and every refused share record FAIL (issue 42: routine drains made doctor FAIL).
DATAGRAMS = ("beacon from ", "nudge from ")
ROUTINE = (REPLAYED, TOO_MANY)


def routine(refusal: dict[str, Any]) -> bool:
    source = refusal.get("source")
    return refusal.get("cause") in ROUTINE and isinstance(source, str) and source.startswith(DATAGRAMS)


def refusal_checks(check: Callable[..., None], pool: Any) -> None:
    """Records refused on the share recently: one check, and one line for each (WARN for `routine`)."""
    recent = pool.refusals.get("recent") if isinstance(pool.refusals.get("recent"), list) else []
    recent = [r for r in recent if isinstance(r, dict)]
    hostile = [r for r in recent if not routine(r)]
    check("no forged, replayed or oversized records on the share", not hostile,
          f"{len(recent)} refused recently" if recent else "none refused recently",
          warn=bool(recent) and not hostile)  # fmt: skip
    for r in recent:
        last = r.get("last_at") or _("within %(n)d min") % {"n": SHOWN_FOR // 60}
        seen = f"x{r.get('count')}, last {last}"
        check(f"refused {r.get('source')}", routine(r), f"{r.get('cause')}: {r.get('detail')} ({seen})",
              warn=routine(r))  # fmt: skip


STATIONS_PORT = 9530  # the site's stations dial RELAY_HOST:9530, then 127.0.0.1:9530 (seed 000 §2)


def stations_check(check: Any, stk: Config, pool: Any) -> None:
    """Where this PC's stations go (`RELAY_HOST`, issue 36): this PC's loopback or a member's
    address reach the elected relay (ok); any other address is the old central relay, still the
    single point of failure (WARN); a name that does not resolve here fails."""
    host = stk.relay_host

    def say(detail: str, ok: bool = True, warn: bool = False) -> None:
        check(_("this PC's stations"), ok, detail, warn=warn)

    if not host:
        say(_("RELAY_HOST is not set: the stations use their fallback, 127.0.0.1:%(port)d (check it on the "
              "site's station build)") % {"port": STATIONS_PORT}, warn=True)  # fmt: skip
        return
    try:
        addresses = {ipaddress.ip_address(str(a[4][0]).split("%")[0]) for a in socket.getaddrinfo(host, None)}
    except (OSError, ValueError) as exc:
        say(_("RELAY_HOST = %(host)s does not resolve here: %(why)s") % {"host": host, "why": exc}, ok=False)
        return
    if stk.relay_port != STATIONS_PORT:
        say(_("the stations dial port %(port)d; this pool's relay is on %(ours)d")
            % {"port": STATIONS_PORT, "ours": stk.relay_port}, warn=True)  # fmt: skip
    said = {"host": host}
    if any(a.is_loopback for a in addresses):
        auto_off = stk.relay_loopback == "auto" and ipaddress.ip_address(stk.node_ip).is_loopback
        if stk.relay_loopback == "off" or auto_off:
            say(_("RELAY_HOST = %(host)s, but this agent does not listen on loopback (RELAY_LOOPBACK): the "
                  "stations reach no relay there") % said, warn=True)  # fmt: skip
        elif stk.relay_forward == "off":
            say(_("RELAY_HOST = %(host)s, but RELAY_FORWARD = off: the stations reach a relay there only "
                  "while this agent leads") % said, warn=True)  # fmt: skip
        else:
            say(_("RELAY_HOST = %(host)s: this PC's station door takes them to whoever leads") % said)
        return
    members = {stk.node: stk.node_ip, **{n: m.ip for n, m in pool.members.items() if m.ip}}
    for node, ip in sorted(members.items()):
        if _same(ip, addresses):
            say(_("RELAY_HOST = %(host)s: member %(node)s of this pool (its relay while it leads, else its "
                  "station door with RELAY_FORWARD = lan there)") % {**said, "node": node})  # fmt: skip
            return
    if _same(stk.actions.vip_address, addresses):
        say(_("RELAY_HOST = %(host)s: the pool's VIP, which moves with the leader") % said)
        return
    say(_("RELAY_HOST = %(host)s is no member of this pool: the stations dial the old central relay, still "
          "the single point of failure; set RELAY_HOST = 127.0.0.1") % said, warn=True)  # fmt: skip


def _same(text: str, addresses: set[Any]) -> bool:
    try:
        return ipaddress.ip_address(text) in addresses
    except ValueError:
        return False


def config_warnings(check: Any, stk: Config) -> None:
    """The configuration's warnings (W1xx: an ini others may read, keys in a section not read)."""
    for w in stk.warnings:
        check(_("configuration"), True, f"{w.key}: {w.message} ({w.id}) — {w.hint}", warn=True)


def redis_check(check: Callable[..., None], stk: Config) -> None:
    """This agent's own Redis, as its supervisor last found it (`redis.json`, runtime.redis_wait);
    when no running agent wrote it, one ping here. Waiting for it is a failure: no worker runs."""
    from elections.errors import RedisUnavailable
    from elections.ports.local.localstate import LocalState
    from elections.ports.local.redis_link import RedisLink

    name = "this agent's Redis"
    status = LocalState(stk.data_dir).redis()
    shown = {"url": status.url, "since": status.since_iso(), "tries": status.tries, "why": status.why}
    if status.waiting:
        detail = _("waiting for Redis at %(url)s since %(since)s (%(tries)d tries, the last: %(why)s): "
                   "the worker and its elections wait for it; start this agent's redis-server")  # fmt: skip
        check(name, False, detail % shown)
        return
    if status.known:
        check(name, True, _("Redis at %(url)s answers since %(since)s") % shown)
        return
    link = RedisLink(stk.redis_url)
    try:
        link.ping()
    except RedisUnavailable as exc:
        detail = _("Redis at %(url)s does not answer: %(why)s (no agent runs here: one would wait for it)")
        check(name, False, detail % {"url": link.shown, "why": exc})
        return
    check(name, True, _("Redis at %(url)s answers (the agent is not running)") % {"url": link.shown})
