"""The Django app of elections/: its models and commands; it registers the config checks."""

from django.apps import AppConfig


class ElectionsConfig(AppConfig):
    name = "elections"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from stkrelay import checks  # noqa: F401  (registers the config checks)
