"""Telling the operator's pager: `ON_ROLE_CHANGE` and `WEBHOOK_URL` (stkconfig/notify.py).

Both are fed from one place, the history rows of this agent's pool as they reach
its database (`notify_feed.EventFeed`: every event any member recorded, whichever
process wrote it: elections, step-downs, operator commands, security events) and
the refusals this agent counts (`notify_feed.SecurityWatch`), through `Notifier.post`
and `Notifier.role_changed`, which only queue and return. The feed, the POSTs and
the command each have a daemon thread of the worker: nothing here ever runs on
the elector's thread, and the elector never waits for it.

Webhook. Every event of `WEBHOOK_KINDS` that `sends` gives this agent is POSTed
as JSON (`payload`), with `X-Stkrelay-Signature: sha256=<hex HMAC-SHA256(secret,
body)>` and `X-Stkrelay-Delivery: <id>`. The id of a history row,
`<kmsn>/<node>/<seq>` (`node`: the member that recorded it), is the row's own key
in the pool's history, the same whichever agent sends it; a security event's is
`<kmsn>/<node>/security/<ms>`. Delivery is at-least-once (a receiver that answered
200 too late sees the same id again) and a receiver drops repeats on it. A
refused or failed POST is retried with `stkhost.retry.Backoff` (`WEBHOOK_TRIES`),
each event on its own: while one waits out its backoff the queue moves on (at most
`RETRYING` events wait on retries at once, so a receiver that is down is not sent
every event of the queue), and each failed try is logged once with its status and
when the next one is (issue 42: the retries were silent and held every event behind
one for 16 s). So events may arrive out of order: a receiver orders one member's by
`seq` (docs/operator.md "Notifications");
a 3xx is such a refusal, never followed (the body and its signature go to
`WEBHOOK_URL` and nowhere else): retried at the same URL, then given up;
the queue (`notify_outbox.Outbox`, a file in DATA_DIR that survives a restart) is
bounded (`WEBHOOK_QUEUE`): when full the oldest event is dropped and counted. An
event given up or dropped is an audit row, at most one per `AUDIT_EVERY` seconds
(the row counts the ones in between).

Role command. A role change (`Roles`) runs `CMD ROLE EPOCH KMSN NODE CAUSE`
with the same in `STK_ROLE`... of the environment (the agent's own, without its
secrets: `processes.site_environment`), in a process group of its own, killed
after `ON_ROLE_CHANGE_TIMEOUT`. Changes are coalesced: while the
command runs, only the newest pending change is kept (the command always
learns the current role; intermediate ones are logged as skipped). Its exit
status is logged; a failure or a timeout is an audit row.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elections.core.evidence import printable
from elections.runtime.notify_outbox import OUTBOX_FILE, NotifyOutbox
from stkconfig.parsed import NotifyConfig
from stkhost.files import write_atomic
from stkhost.pinned_https import opener
from stkhost.processes import kill_group, site_environment, spawn_options
from stkhost.retry import Backoff

log = logging.getLogger("stkrelay.notify")

SIGNATURE = "X-Stkrelay-Signature"
DELIVERY = "X-Stkrelay-Delivery"
EVENT = "X-Stkrelay-Event"
FAILOVER_KINDS = frozenset({"elected", "stepped_down", "released", "handoff"})
COMMAND_KINDS = frozenset({"drain_requested", "undrain_requested", "promote_requested", "pause_requested",
                           "resume_requested"})  # fmt: skip
SECURITY = "security"  # refusals this agent counted (notify_feed.SecurityWatch), coalesced
# A member's own rows: its failovers, and a station registered with the site token, not its own credential.
OWN_KINDS = FAILOVER_KINDS | {"station_seen"}
WEBHOOK_KINDS = OWN_KINDS | COMMAND_KINDS | {SECURITY}
ROLES = {"elected": "leader", "stepped_down": "follower", "released": "follower", "handoff": "follower"}
AUDIT_EVERY = 60.0
REASONS = {"webhook": "webhook delivery", "on_role_change": "ON_ROLE_CHANGE command"}
SEND_BACKOFF = Backoff(tries=8, first=0.5, factor=2.0, cap=30.0, jitter=0.2)
RETRYING = 4  # events waiting out a retry's backoff at once; the ones behind them wait their turn
LOCATION_CHARS = 120  # of a redirect's Location, quoted in the reason it was not delivered
CAUSE_CHARS = 64  # of ON_ROLE_CHANGE's CAUSE


class Roles:
    """This node's (`me`) role as its pool's history rows tell it, folded one row at a time:
    `leader` from its own election to its own step-down, release or handoff; `draining`
    from a drain of it to its undrain, whichever member either was issued on (a drained
    leader hands off: it stays `draining`); else `follower`. Pure."""

    def __init__(self, me: str, drained: bool = False) -> None:
        self.me, self.leading, self.drained = me, False, drained
        self.role = self._now()

    def _now(self) -> str:
        return "draining" if self.drained else "leader" if self.leading else "follower"

    def fold(self, kind: str, issuer: str, extra: dict[str, Any]) -> str | None:
        """The new role after a row `kind` recorded by `issuer`, or None if the role is the same."""
        if kind in ROLES and issuer == self.me:
            self.leading = ROLES[kind] == "leader"
        elif kind in ("drain_requested", "undrain_requested") and extra.get("target") == self.me:
            self.drained = kind == "drain_requested"
        role = self._now()
        if role == self.role:
            return None
        self.role = role
        return role


def sends(kind: str, issuer: str, me: str, led_epoch: bool, epoch_has_leader: bool) -> bool:
    """Whether this agent POSTs a history row `kind` recorded by `issuer`, so that one agent
    sends each, whatever its arrival order: a member's own failovers and `station_seen`, by
    that member; an operator command (drain, undrain, promote, pause, resume), whichever
    member it was issued on, by the leader of the epoch the command was issued in (the row's
    epoch: `led_epoch`, this agent has its own `elected` row of it), or by its issuer when no
    member is known to have led that epoch (`epoch_has_leader`: an `elected` row of it in this
    agent's history; epoch 0, a pool without a leader, has none)."""
    if kind in OWN_KINDS:
        return issuer == me
    if kind in COMMAND_KINDS:
        return led_epoch or (issuer == me and not epoch_has_leader)
    return False


def webhook_signature(secret: str, body: bytes) -> str:
    """The signature header's value for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def payload(kmsn: str, node: str, seq: int, kind: str, epoch: int, reason: str, at: str,
            extra: dict[str, Any], sender: str = "") -> dict[str, Any]:  # fmt: skip
    """The JSON of one history row (`node` recorded it, `sender` posts it)."""
    return {"id": f"{kmsn}/{node}/{seq}", "kmsn": kmsn, "node": node, "seq": seq, "kind": kind,
            "epoch": epoch, "reason": reason, "at": at, "detail": extra,
            "sender": sender or node}  # fmt: skip


class Undelivered(Exception):
    """One POST that did not get a 2xx answer."""


COUNTERS_FILE = "notify.json"  # in DATA_DIR: the worker writes it, the panel's /metrics reads it
COUNTER_NAMES = ("sent", "failed", "dropped", "role_runs", "role_failed")
QUEUE_NAMES = ("queued", "oldest_queued_at")  # the queue's depth, and when its oldest event was queued


@dataclass
class NotifyCounters:
    sent: int = 0
    failed: int = 0  # events given up after every try
    dropped: int = 0  # events pushed out of a full queue
    role_runs: int = 0
    role_failed: int = 0
    queued: int = 0  # events in the webhook's queue
    oldest_queued_at: float | None = None  # monotonic: when the oldest of them was queued
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    path: Path | None = None

    def add(self, name: str) -> None:
        """One more `name`, then the file (best effort: a metric, never a reason to stop)."""
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)
            self._write()

    def queue(self, depth: int, oldest_at: float | None) -> None:
        """The webhook queue's depth and its oldest event's time, then the file, if they changed."""
        with self.lock:
            if (self.queued, self.oldest_queued_at) == (depth, oldest_at):
                return
            self.queued, self.oldest_queued_at = depth, oldest_at
            self._write()

    def _write(self) -> None:
        doc = {n: getattr(self, n) for n in (*COUNTER_NAMES, *QUEUE_NAMES)}
        if self.path is None:
            return
        try:
            write_atomic(self.path, json.dumps(doc).encode(), tag=str(os.getpid()))
        except OSError as exc:
            log.debug("notify counters not written: %s", exc)


def read_counters(data_dir: str) -> dict[str, int]:
    """The counters the worker wrote in `data_dir` (zeros when none or unreadable)."""
    out = dict.fromkeys(COUNTER_NAMES, 0)
    doc = _counters_doc(data_dir)
    out.update({n: v for n in COUNTER_NAMES if isinstance(v := doc.get(n), int) and v >= 0})
    return out


def read_queue(data_dir: str, now: float) -> tuple[int, float]:
    """The webhook queue as the worker last wrote it: (events waiting, seconds the oldest has
    waited at `now` on this machine's monotonic clock; 0 when none)."""
    doc = _counters_doc(data_dir)
    depth, oldest = doc.get("queued"), doc.get("oldest_queued_at")
    depth = depth if type(depth) is int and depth >= 0 else 0
    age = now - oldest if depth and isinstance(oldest, (int, float)) and not isinstance(oldest, bool) else 0.0
    return depth, max(0.0, age)


def _counters_doc(data_dir: str) -> dict[str, Any]:
    try:
        with open(Path(data_dir) / COUNTERS_FILE, "rb") as fh:
            doc = json.loads(fh.read(4096))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


# (notifier, what, epoch, message) -> one row of the operator audit trail (`_audit_row`)
Audit = Callable[["Notifier", str, int, str], None]


class Notifier:
    """The process's notifier for one agent (`cfg`: its `NotifyConfig`)."""

    def __init__(
        self, cfg: NotifyConfig, kmsn: str, node: str, audit: Audit | None = None,
        backoff: Backoff | None = None, data_dir: str = "",
    ) -> None:  # fmt: skip
        self.cfg, self.kmsn, self.node = cfg, kmsn, node
        self.audit = audit if audit is not None else _audit_row
        self.backoff = backoff or Backoff(cfg.webhook_tries, SEND_BACKOFF.first, SEND_BACKOFF.factor,
                                          SEND_BACKOFF.cap, SEND_BACKOFF.jitter)  # fmt: skip
        self.counters = NotifyCounters(path=Path(data_dir) / COUNTERS_FILE if data_dir else None)
        self.outbox = NotifyOutbox(Path(data_dir) / OUTBOX_FILE if data_dir else None, cfg.webhook_queue,
                             self._dropped)  # fmt: skip
        self._role: tuple[str, int, str] | None = None  # the newest change not yet run
        self._role_wake = threading.Condition()
        self._audit_lock = threading.Lock()  # the feed (drops) and the sender (give-ups) both audit
        self._last_audit = -AUDIT_EVERY
        self._unaudited = 0
        self._tries: dict[str, int] = {}  # id -> failed tries of an event waiting out its backoff
        self._not_before: dict[str, float] = {}  # id -> when it may be tried again (monotonic)
        self._open = opener(cfg.webhook_pins, redirects=False)  # the signed body goes to WEBHOOK_URL only
        if cfg.webhook_url:
            threading.Thread(target=self._send_loop, name="notify-webhook", daemon=True).start()
        if cfg.role_cmd:
            threading.Thread(target=self._role_loop, name="notify-role", daemon=True).start()

    # -- the entries (the feed's thread): never block --------------------------------------
    def post(self, docs: list[dict[str, Any]], cursor: int | None = None) -> None:
        """Queue events for the webhook (`payload` documents), moving the feed's cursor with them."""
        if self.cfg.webhook_url:
            self.outbox.extend(docs, cursor)

    def role_changed(self, role: str, epoch: int, cause: str) -> None:
        if not self.cfg.role_cmd:
            return
        with self._role_wake:
            if self._role is not None:
                log.info("role change to %s skipped: %s came before the command ran", self._role[0], role)
            self._role = (role, epoch, cause)
            self._role_wake.notify()

    def _dropped(self, doc: dict[str, Any]) -> None:
        self.counters.add("dropped")
        why = f"event {doc['id']} ({doc['kind']}) dropped: {self.cfg.webhook_queue} events wait already"
        log.warning("webhook: %s", why)
        self._audit_limited("webhook", doc["epoch"], why)

    # -- webhook -----------------------------------------------------------------------
    def _send_loop(self) -> None:
        while True:
            self.counters.queue(*self.outbox.depth())
            doc, wait = self.outbox.due(self._not_before, time.monotonic(), RETRYING)
            if doc is None:
                self.outbox.wait(min(wait, 1.0) if wait is not None else 1.0)  # until one is due or queued
                continue
            self.send_one(doc)

    def send_one(self, doc: dict[str, Any]) -> bool:
        """One try of one event: delivered (out of the queue), given up after its last try, or
        left to wait out its backoff while the events behind it go (True: delivered)."""
        body = json.dumps(doc, ensure_ascii=False, sort_keys=True).encode()
        doc_id = doc["id"]
        try:
            self._post(body, doc)
        except Undelivered as exc:
            tries = self._tries.get(doc_id, 0) + 1
            if tries >= self.backoff.tries:
                self._forget(doc_id)
                self.outbox.done(doc_id)
                self.counters.add("failed")
                why = f"event {doc_id} ({doc['kind']}) not delivered, {tries} tries: {exc}"
                log.error("webhook: %s", why)
                self._audit_limited("webhook", doc["epoch"], why)
                return False
            delay = self.backoff.delay(tries - 1, _rng)
            self._tries[doc_id] = tries
            self._not_before[doc_id] = time.monotonic() + delay
            log.warning("webhook: event %s (%s) not delivered (%s), try %d of %d; next try in %.1f s",
                        doc_id, doc["kind"], exc, tries, self.backoff.tries, delay)  # fmt: skip
            return False
        self._forget(doc_id)
        self.outbox.done(doc_id)  # after the 2xx: killed before this line, it is sent again
        self.counters.add("sent")
        return True

    def _forget(self, doc_id: str) -> None:
        self._tries.pop(doc_id, None)
        self._not_before.pop(doc_id, None)

    def _post(self, body: bytes, doc: dict[str, Any]) -> None:
        req = urllib.request.Request(self.cfg.webhook_url, data=body, method="POST", headers={
            "Content-Type": "application/json", SIGNATURE: webhook_signature(self.cfg.webhook_secret, body),
            DELIVERY: doc["id"], EVENT: doc["kind"], "User-Agent": "stkrelay-webhook",
        })  # fmt: skip
        try:
            with self._open.open(req, timeout=self.cfg.webhook_timeout) as resp:
                resp.read(4096)
                status = resp.status
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:  # never followed (`opener(redirects=False)`): not delivered
                where = printable(exc.headers.get("Location") or "", LOCATION_CHARS) or "nowhere"
                raise Undelivered(f"HTTP {exc.code}, a redirect to {where}: not followed") from None
            raise Undelivered(f"HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, TLS, a pin refused
            raise Undelivered(str(getattr(exc, "reason", None) or exc)) from None
        if not 200 <= status < 300:
            raise Undelivered(f"HTTP {status}")
        log.info("webhook: event %s (%s) delivered", doc["id"], doc["kind"])

    def _audit_limited(self, what: str, epoch: int, message: str) -> None:
        """An audit row, at most one per AUDIT_EVERY; the next one counts those in between."""
        with self._audit_lock:
            now = time.monotonic()
            if now - self._last_audit < AUDIT_EVERY:
                self._unaudited += 1
                return
            if self._unaudited:
                message += f" ({self._unaudited} more failures since the last row)"
            self._last_audit, self._unaudited = now, 0
        self.audit(self, what, epoch, message)

    # -- role command ------------------------------------------------------------------
    def _role_loop(self) -> None:
        while True:
            with self._role_wake:
                while self._role is None:
                    self._role_wake.wait()
                role, epoch, cause = self._role
                self._role = None
            self.run_role(role, epoch, cause)

    def run_role(self, role: str, epoch: int, cause: str) -> int | None:
        """Run the command for one change; its exit status, None if it timed out or did not start."""
        cause = printable(cause, CAUSE_CHARS)  # a row's word, but quoted to a site's script all the same
        args = [role, str(epoch), self.kmsn, self.node, cause]
        env = site_environment({"STK_ROLE": role, "STK_EPOCH": str(epoch), "STK_KMSN": self.kmsn,
                                "STK_NODE": self.node, "STK_CAUSE": cause})  # fmt: skip
        self.counters.add("role_runs")
        try:
            proc = subprocess.Popen(
                [*self.cfg.role_cmd, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=env, close_fds=True, **spawn_options(own_group=True),
            )  # fmt: skip
        except OSError as exc:
            self._role_failed(epoch, f"ON_ROLE_CHANGE ({role}) cannot start: {exc.strerror or exc}")
            return None
        try:
            code = proc.wait(self.cfg.role_timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
            self._role_failed(
                epoch, f"ON_ROLE_CHANGE ({role}) timed out after {self.cfg.role_timeout:g} s: killed"
            )
            return None
        if code:
            self._role_failed(epoch, f"ON_ROLE_CHANGE ({role}) exited {code}")
        else:
            log.info("ON_ROLE_CHANGE (%s, epoch %s) exited 0", role, epoch)
        return code

    def _role_failed(self, epoch: int, message: str) -> None:
        self.counters.add("role_failed")
        log.error("%s", message)
        self.audit(self, "on_role_change", epoch, message)


_rng = random.Random()


def _audit_row(notifier: Notifier, what: str, epoch: int, message: str) -> None:
    """One outcome row of the operator audit trail (this agent's own words)."""
    from django.db import close_old_connections

    from elections.audit import AuditTrail, AuditUnavailable

    trail, correlation = AuditTrail(None), uuid.uuid4().hex
    common = {"user": "stkrelay", "via": "agent", "action": what[:16], "kmsn": notifier.kmsn,
              "target": notifier.node, "epoch": epoch, "correlation": correlation}  # fmt: skip
    try:  # an intent and its outcome, as every row of the trail: the audit page lists intents
        trail.append(phase="intent", reason=REASONS.get(what, what), **common)
        trail.append(phase="outcome", result="error", message=message, **common)
    except AuditUnavailable as exc:
        log.error("notification failure not audited: %s", exc)
    finally:
        close_old_connections()
