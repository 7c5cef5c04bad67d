"""Configuration problems as Django system checks with stable ids."""

from django.conf import settings
from django.core.checks import Error, register


@register()
def stk_config(app_configs, **kwargs):  # type: ignore[no-untyped-def]
    return [
        Error(f"{p.key}: {p.message}", hint=p.hint, id=p.id, obj=settings.STK.source)
        for p in settings.STK.problems
    ]
