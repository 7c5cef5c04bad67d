"""Configuration problems as Django system checks with stable ids: errors (stkrelay.Exxx) and
warnings (stkrelay.W1xx, e.g. an ini holding a secret that others may read)."""

from django.conf import settings
from django.core import checks


@checks.register()
def stk_config(app_configs, **kwargs):
    stk = settings.STK
    return [
        checks.Error(f"{p.key}: {p.message}", hint=str(p.hint), id=p.id, obj=stk.source) for p in stk.problems
    ] + [
        checks.Warning(f"{p.key}: {p.message}", hint=str(p.hint), id=p.id, obj=stk.source)
        for p in stk.warnings
    ]
