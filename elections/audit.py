"""The operator audit trail, login throttling and API tokens (models and behaviour).

Every operator action (drain, undrain, promote, pause, resume), refused and
failed ones included, is two append-only `AuditEntry` rows sharing one
correlation id: the *intent*, written before `commands.submit` is called (if it
cannot be written the action is refused), and the *outcome*. Rows are
hash-chained and keyed: each stores `prev_hash` (the previous row's `hash`)
and `hash = HMAC-SHA256(POOL_KEY, prev_hash + canonical JSON of its own
content)`, so editing or deleting a row breaks the chain from that row on, and
a row forged without the pool key never verifies; `verify_chain()` names the
first broken row. Rows written before the chain was keyed (`alg` "sha256")
verify as they were, but only at the chain's beginning.

The models live here (imported at the end of `elections/models.py` so that
Django discovers them); the permissions checked by the panel and the API,
`elections.drain_member` and `elections.promote_member`, are defined on
`AuditEntry`.

The trail is local to the agent that received the command, and `AuditTrail`
also publishes each row to the pool (best effort, after the row is written)
through the event sink it is given, as an event of kind "audit" whose `audit`
field carries the row (`pool_doc`), so every agent's audit page shows the
pool's history; `verify_published` checks another agent's published chain
from those rows. The steering service (`elections.steering`) is the one
writer of operator rows.

Exceptions: `AuditUnavailable` (the trail cannot be written: the action must
not run).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import IntegrityError, OperationalError, models, transaction
from django.utils import timezone

from elections.core.lease import canonical_json
from stkhost.retry import Backoff, retry

log = logging.getLogger("stkrelay.audit")

GENESIS = "0" * 64
KEYED = "hmac-sha256"  # hash = HMAC(POOL_KEY, prev_hash + canonical JSON incl. alg)
LEGACY = "sha256"  # rows written before the chain was keyed: sha256(prev_hash + canonical JSON)
_append_lock = threading.Lock()


def _key(key: str | None) -> str:
    """The chain's key: the pool key (every agent of the pool verifies every agent's rows)."""
    return key if key is not None else settings.STK.pool_key


class AuditUnavailable(Exception):
    """The audit trail could not be written; the action it describes must not run."""


class AuditEntry(models.Model):
    """One row of the hash-chained operator audit trail (intent or outcome)."""

    INTENT, OUTCOME = "intent", "outcome"
    PHASES = [(INTENT, "intent"), (OUTCOME, "outcome")]

    seq = models.PositiveBigIntegerField(unique=True)  # position in the chain, 1..N
    at = models.DateTimeField(db_index=True)
    phase = models.CharField(max_length=8, choices=PHASES)
    user = models.CharField(max_length=150)  # a name, not a key: history outlives accounts
    client = models.CharField(max_length=200, blank=True)
    via = models.CharField(max_length=16, blank=True)  # panel, api
    action = models.CharField(max_length=16)  # drain, undrain, promote, pause, resume
    kmsn = models.CharField(max_length=64, blank=True)
    target = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    expected_epoch = models.BigIntegerField(null=True, blank=True)
    force = models.BooleanField(default=False)
    result = models.CharField(max_length=32, blank=True)  # outcome only: accepted, stale_epoch, ...
    message = models.TextField(blank=True)
    epoch = models.BigIntegerField(null=True, blank=True)  # the pool's epoch at submit
    correlation = models.CharField(max_length=64, db_index=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    alg = models.CharField(max_length=16, default=KEYED)  # KEYED, or LEGACY for rows from before keying

    CHAINED = (
        "seq",
        "at",
        "phase",
        "user",
        "client",
        "via",
        "action",
        "kmsn",
        "target",
        "reason",
        "expected_epoch",
        "force",
        "result",
        "message",
        "epoch",
        "correlation",
    )

    class Meta:
        ordering = ["-seq"]
        permissions = [
            ("drain_member", "Can drain and undrain pool members"),
            ("promote_member", "Can promote a member and pause or resume failover"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.phase} {self.action} {self.target} by {self.user}"

    def canonical(self) -> str:
        """The chained content as canonical JSON (keys sorted, no whitespace, UTF-8)."""
        doc: dict[str, Any] = {name: getattr(self, name) for name in self.CHAINED}
        doc["at"] = self.at.astimezone(UTC).isoformat(timespec="microseconds")
        if self.alg != LEGACY:
            doc["alg"] = self.alg
        return canonical_json(doc).decode()

    def compute_hash(self, key: str | None = None) -> str:
        """The row's hash: keyed with the pool key (a forger without it cannot
        make a row that verifies); legacy rows keep their unkeyed sha256."""
        message = (self.prev_hash + self.canonical()).encode()
        if self.alg == LEGACY:
            return hashlib.sha256(message).hexdigest()
        return hmac.new(_key(key).encode(), message, hashlib.sha256).hexdigest()


class Sink(Protocol):
    """Where the trail publishes its rows (`runtime.projection.DbEventSink`)."""

    def record(self, kind: str, epoch: int, reason: str, required: bool = False, **extra: Any) -> object: ...

    @property
    def last_seq(self) -> int | None: ...  # the seq of the last line it put in the pool's log


class AuditTrail:
    """This agent's trail, publishing every row it appends to the pool's log via `sink`."""

    def __init__(self, sink: Sink | None) -> None:
        self.sink = sink

    def append(self, **fields: Any) -> AuditEntry:
        """Append one entry at the head of the chain, then publish it. Raises
        `AuditUnavailable` when the row cannot be written (publishing is best effort).

        The chain head is read and the row inserted in one transaction; `seq` is
        unique, so two writers that read the same head cannot both insert: the
        loser retries on the new head."""
        fields.setdefault("at", timezone.now())
        entry = _insert(fields)
        if self.sink is not None:
            publish(entry, self.sink)
        return entry


# Another process took this seq (IntegrityError), or the database is locked (OperationalError).
INSERT_BACKOFF = Backoff(tries=30, first=0.01, factor=1.5, cap=0.2)


def _insert(fields: dict[str, Any]) -> AuditEntry:
    def attempt() -> AuditEntry:
        with transaction.atomic():
            head = AuditEntry.objects.order_by("-seq").values_list("seq", "hash").first()
            seq, prev = (head[0] + 1, head[1]) if head else (1, GENESIS)
            entry = AuditEntry(seq=seq, prev_hash=prev, **fields)
            entry.hash = entry.compute_hash()
            entry.save(force_insert=True)
            return entry

    with _append_lock:
        try:
            return retry(attempt, on=(IntegrityError, OperationalError), backoff=INSERT_BACKOFF)
        except Exception as exc:
            log.error("audit trail not written: %s", exc)
            raise AuditUnavailable(f"audit trail not written: {exc}") from exc


# -- the pool's copy ---------------------------------------------------------------------
POOL_FIELDS = (*AuditEntry.CHAINED, "prev_hash", "hash", "alg")


def pool_doc(entry: AuditEntry) -> dict[str, Any]:
    """The row as published in the pool's event line (its `audit` field)."""
    doc = {name: getattr(entry, name) for name in POOL_FIELDS}
    doc["at"] = entry.at.astimezone(UTC).isoformat(timespec="microseconds")
    return doc


def publish(entry: AuditEntry, sink: Sink) -> bool:
    """Best effort: the local row is the record; a pool line that cannot be
    written is logged, never a reason to refuse the action. The row's fields are
    nested under `audit` (its seq, at, epoch and reason would collide with the
    event's own)."""
    try:
        sink.record(
            "audit",
            int(entry.epoch or 0),
            entry.reason or entry.message,
            required=True,
            audit=pool_doc(entry),
        )
    except Exception as exc:
        log.warning("audit entry #%s not published to the pool: %s", entry.seq, exc)
        return False
    return True


def from_pool_doc(doc: dict[str, Any]) -> AuditEntry:
    """An unsaved AuditEntry rebuilt from a published row (ValueError/TypeError/KeyError if malformed)."""
    fields = {name: doc[name] for name in POOL_FIELDS if name != "alg"}
    fields["alg"] = str(doc.get("alg") or LEGACY)
    at = datetime.fromisoformat(str(fields["at"]))
    fields["at"] = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    fields["seq"] = int(fields["seq"])
    return AuditEntry(**fields)


@dataclass(frozen=True)
class ChainStatus:
    ok: bool
    entries: int
    broken_at: int | None = None  # seq of the first row that does not verify
    detail: str = ""

    def __str__(self) -> str:
        if self.ok:
            return f"chain verified: {self.entries} entries"
        return f"chain broken at #{self.broken_at}: {self.detail}"


def _row_problem(entry: AuditEntry, keyed_seen: bool, key: str) -> str:
    """Why one row does not verify ('' if it does)."""
    if entry.alg not in (KEYED, LEGACY):
        return f"unknown hash algorithm {entry.alg[:16]!r}"
    if entry.alg == LEGACY and keyed_seen:
        return "an unkeyed row after keyed ones: forged"
    if not hmac.compare_digest(entry.compute_hash(key), entry.hash):
        return "content does not match its hash"
    return ""


def verify_chain(key: str | None = None) -> ChainStatus:
    """Recompute every hash in chain order; name the first row that does not verify."""
    key = _key(key)
    prev, expect_seq, n, keyed = GENESIS, 1, 0, False
    for entry in AuditEntry.objects.order_by("seq").iterator(chunk_size=2000):
        n += 1
        if entry.seq != expect_seq:
            return ChainStatus(False, n, expect_seq, f"row #{expect_seq} is missing")
        if entry.prev_hash != prev:
            return ChainStatus(False, n, entry.seq, "does not follow the previous row's hash")
        problem = _row_problem(entry, keyed, key)
        if problem:
            return ChainStatus(False, n, entry.seq, problem)
        keyed = keyed or entry.alg == KEYED
        prev, expect_seq = entry.hash, expect_seq + 1
    return ChainStatus(True, n)


def verify_published(entries: list[AuditEntry], key: str | None = None) -> ChainStatus:
    """Verify another agent's chain from its published rows. The rows may start
    after #1 (rows written before publishing existed): the first one's link is
    taken as given, every later row must follow it without a gap."""
    key = _key(key)
    rows = sorted(entries, key=lambda e: e.seq)
    prev: str | None = None
    expect_seq = rows[0].seq if rows else 1
    keyed = False
    for n, entry in enumerate(rows, 1):
        if entry.seq != expect_seq:
            return ChainStatus(False, n, expect_seq, f"row #{expect_seq} was not published")
        if prev is not None and entry.prev_hash != prev:
            return ChainStatus(False, n, entry.seq, "does not follow the previous row's hash")
        problem = _row_problem(entry, keyed, key)
        if problem:
            return ChainStatus(False, n, entry.seq, problem)
        keyed = keyed or entry.alg == KEYED
        prev, expect_seq = entry.hash, expect_seq + 1
    return ChainStatus(True, len(rows))


class LoginFailure(models.Model):
    """A failed login, counted per (username, client address) for throttling (kept for one window)."""

    username = models.CharField(max_length=150)
    client = models.CharField(max_length=200)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["username", "client", "at"], name="loginfail_user_client_at")]

    @classmethod
    def window(cls) -> timedelta:
        return timedelta(seconds=getattr(settings, "STK_LOGIN_WINDOW_S", 300))

    @classmethod
    def limit(cls) -> int:
        return int(getattr(settings, "STK_LOGIN_MAX_FAILURES", 5))

    @classmethod
    def blocked_for(cls, username: str, client: str, now: datetime | None = None) -> float:
        """Seconds until (username, client) may try again; 0 when not throttled."""
        now = now or timezone.now()
        recent = list(
            cls.objects.filter(username=username, client=client, at__gte=now - cls.window())
            .order_by("-at")
            .values_list("at", flat=True)[: cls.limit()]
        )
        if len(recent) < cls.limit():
            return 0.0
        return max((recent[-1] + cls.window() - now).total_seconds(), 1.0)

    @classmethod
    def note(cls, username: str, client: str, now: datetime | None = None) -> None:
        """Record one failure; rows older than the window count for nothing and go.
        Only attempts the in-memory throttle let through are noted, so the table
        holds at most STK_LOGIN_GLOBAL_BURST + STK_LOGIN_GLOBAL_RATE × window rows."""
        now = now or timezone.now()
        cls.objects.create(username=username[:150], client=client[:200], at=now)
        cls.objects.filter(at__lt=now - cls.window()).delete()

    @classmethod
    def forget(cls, username: str, client: str) -> None:
        cls.objects.filter(username=username, client=client).delete()

    @classmethod
    def locked(cls, now: datetime | None = None) -> list[tuple[str, str, float]]:
        """(username, client, seconds left) of every pair locked out now, longest first."""
        now = now or timezone.now()
        pairs = (
            cls.objects.filter(at__gte=now - cls.window())
            .values_list("username", "client")
            .annotate(n=models.Count("id"))
            .filter(n__gte=cls.limit())
            .order_by()
        )
        out = [(u, c, cls.blocked_for(u, c, now)) for u, c, _ in pairs[:200]]
        return sorted((x for x in out if x[2] > 0), key=lambda x: -x[2])


class ApiToken(models.Model):
    """A bearer token for scripts (`Authorization: Bearer stk_...`); only its sha256 is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="stk_tokens")
    label = models.CharField(max_length=100, blank=True)
    digest = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)

    PREFIX = "stk_"

    def __str__(self) -> str:
        return f"token {self.label or self.pk} of {self.user}"

    @staticmethod
    def digest_of(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(cls, user: Any, label: str = "") -> tuple[ApiToken, str]:
        """A new token; the key is returned once and never stored."""
        key = cls.PREFIX + secrets.token_urlsafe(32)
        return cls.objects.create(user=user, label=label, digest=cls.digest_of(key)), key

    @classmethod
    def user_for(cls, key: str) -> Any | None:
        """The active user owning `key`, or None."""
        if not key.startswith(cls.PREFIX):
            return None
        token = cls.objects.select_related("user").filter(digest=cls.digest_of(key)).first()
        if token is None or not token.user.is_active:
            return None
        now = timezone.now()
        if token.last_used is None or now - token.last_used > timedelta(minutes=1):
            cls.objects.filter(pk=token.pk).update(last_used=now)
        return token.user
