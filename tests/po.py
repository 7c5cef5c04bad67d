"""A reader for gettext catalogues (.po), enough for the i18n tests: every entry's
msgctxt, msgid, msgid_plural, msgstr(s) and flags (`#, fuzzy, python-format`)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

_KEYWORD = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+(".*")$')


@dataclass
class Entry:
    msgid: str = ""
    msgid_plural: str | None = None
    msgctxt: str | None = None
    msgstr: dict[str, str] = field(default_factory=dict)  # "msgstr" or "msgstr[0]"...
    flags: set[str] = field(default_factory=set)

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.msgctxt, self.msgid)

    @property
    def translated(self) -> bool:
        return bool(self.msgstr) and all(self.msgstr.values()) and "fuzzy" not in self.flags


def read(path: Path) -> list[Entry]:
    """Every entry but the header (msgid ""); obsolete (#~) entries are skipped."""
    entries: list[Entry] = []
    current: Entry | None = None
    last = ""
    for raw in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        line = raw.strip()
        if not line:
            if current is not None and current.msgid:
                entries.append(current)
            current, last = None, ""
            continue
        if line.startswith("#~"):
            continue
        current = current or Entry()
        if line.startswith("#,"):
            current.flags |= {f.strip() for f in line[2:].split(",")}
            continue
        if line.startswith("#"):
            continue
        m = _KEYWORD.match(line)
        if m:
            last, value = m[1], ast.literal_eval(m[2])
        elif line.startswith('"'):
            value = ast.literal_eval(line)
        else:
            raise ValueError(f"{path}: cannot read {raw!r}")
        if last == "msgid":
            current.msgid += value
        elif last == "msgid_plural":
            current.msgid_plural = (current.msgid_plural or "") + value
        elif last == "msgctxt":
            current.msgctxt = (current.msgctxt or "") + value
        else:
            current.msgstr[last] = current.msgstr.get(last, "") + value
    return entries
