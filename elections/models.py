"""Election history: every transition is a row, never only a log line."""

from django.db import models


class ElectionEvent(models.Model):
    """One transition seen by one node: elected, stepped_down, released, renew_failed.

    `(kmsn, node, seq)` is unique so that every pool's event files (this
    agent's own and the watched ones, docs/design.md §6, §11) are ingested into every
    agent's database idempotently: node names repeat across pools (every site
    has an S001)."""

    KINDS = [
        ("elected", "elected"),
        ("stepped_down", "stepped down"),
        ("released", "released"),
        ("renew_failed", "renewal failed"),
        ("drain_requested", "drain requested"),
        ("undrain_requested", "undrain requested"),
        ("promote_requested", "promote requested"),
        ("pause_requested", "pause requested"),
        ("resume_requested", "resume requested"),
        ("handoff", "handed off"),
        ("action_applied", "action applied"),
        ("action_fenced", "action fenced"),
        ("action_failed", "action failed"),
        ("audit", "audit entry"),  # an operator audit row published by the agent that recorded it
    ]

    kmsn = models.CharField(max_length=64, db_index=True)
    node = models.CharField(max_length=64)
    seq = models.PositiveBigIntegerField()
    epoch = models.PositiveBigIntegerField(db_index=True)
    kind = models.CharField(max_length=32, choices=KINDS)
    reason = models.TextField(blank=True)
    observed_at = models.DateTimeField(db_index=True)
    detail = models.JSONField(default=dict, blank=True)  # command fields: target, actor, client, ...

    class Meta:
        ordering = ["-observed_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["kmsn", "node", "seq"], name="event_kmsn_node_seq")]

    def __str__(self) -> str:
        return f"{self.observed_at:%Y-%m-%d %H:%M:%S} {self.node} {self.kind} epoch {self.epoch}"


class PanelLanguage(models.Model):
    """The panel language a user chose (`elections.web.language`): remembered across
    sessions and browsers of this agent; without one, the browser's Accept-Language."""

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="panel_language")
    language = models.CharField(max_length=16)

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language}"


from elections.audit import ApiToken, AuditEntry, LoginFailure  # noqa: F401,E402
