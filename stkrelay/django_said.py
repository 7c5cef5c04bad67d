"""How a configuration problem's `Said` is translated in the Django project: gettext once Django's
app registry is ready (`runagent`, `manage.py check`, `relayctl`), English before (the settings
are being made from the configuration) — installed by `stkrelay.config` (`stkconfig.said`)."""

from __future__ import annotations


def django_translation(template: str) -> str | None:
    """`template` in the active language, or None while Django's translations are not ready."""
    from django.apps import apps

    if not apps.ready:
        return None
    from django.utils.translation import gettext

    return gettext(template)
