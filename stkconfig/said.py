"""`Said`: a configuration problem's message (or hint), English where it is compared and
translated where it is shown.

The configuration is read before Django's translations are ready (the settings are made
from it), so a message cannot be translated when it is made. A `Said` is the English text
as a `str` (compared in tests, written to JSON logs, matched by `in`), keeping its template
and values; `str()` and f-strings give it in the active language once Django's translations
are ready (`runagent`, `manage.py check`, `relayctl`: Django's app registry is ready), the
English text before that (never touching the settings being made) or without Django. The
translation is Django's, installed by the project (`translate_with`, `stkrelay.config`).
Templates are marked with `gettext_noop` where they are written, so `make messages` collects
them: this module's own `gettext_noop`, since Django's reads the settings being made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Translate = Callable[[str], "str | None"]  # a template -> its translation, None: not now (English)


def _english(template: str) -> str | None:
    return None


_translate: list[Translate] = [_english]  # the one translation in use (translate_with)


def translate_with(translate: Translate) -> None:
    """Where `str(said)` finds a template's translation: the Django project installs its own
    (`stkrelay.config`); stkconfig imports no Django. Until then, and without it: English."""
    _translate[0] = translate


def gettext_noop(template: str) -> str:
    """Marks a template for `make messages` (xgettext knows the name); returns it unchanged."""
    return template


class Said(str):
    """English `template % values` as a str; `str()` translates it where Django can."""

    template: str
    values: dict[str, Any]

    def __new__(cls, template: str, **values: Any) -> Said:
        english = {k: str.__str__(v) if isinstance(v, Said) else v for k, v in values.items()}
        said = super().__new__(cls, template % english if values else template)
        said.template, said.values = template, values
        return said

    def __str__(self) -> str:
        text = _translate[0](self.template)
        if text is None:  # the settings are being made (or there is no Django here): English
            return str.__str__(self)
        try:
            return text % self.values if self.values else text
        except (KeyError, TypeError, ValueError):  # a catalogue that lost a placeholder: English
            return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)
