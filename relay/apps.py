"""The Django app of relay/: it makes the management commands (runrelay, relayclient) visible; no models."""

from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"
    default_auto_field = "django.db.models.BigAutoField"
