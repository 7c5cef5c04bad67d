"""The site's `stk.ini` as its Windows admins write it: Notepad, a Traditional Chinese Windows.

`read(path, secrets, argv_keys)` gives the file's sections (`IniFile`) or the problems that
stop start-up, each naming the line. Encoding: a byte-order mark says it (UTF-8, or UTF-16
as Notepad's "Unicode" writes it); else the file is UTF-8 if its bytes are, else cp950 (the
Big5 of Traditional Chinese Windows' "ANSI"); neither: `stkrelay.E110`, naming the first line
UTF-8 cannot read and the first cp950 cannot. CRLF, LF and CR end lines alike.

| a line (whitespace around it ignored) | reads as |
|---|---|
| blank, or starting with `;` or `#` | nothing |
| `[name]` (a comment may follow) | a section; names compare without case (`[STK]` is `[stk]`) |
| `KEY = value` (or `KEY: value`) | the key, upper-cased, and its value (below); the last of two wins |
| a bare word | nothing, as the old agent's reader does |

A value ends where a `;` or `#` follows whitespace outside quotes: `NODE_IP = 192.168.1.10
; this PC` reads `192.168.1.10`; a `;` or `#` with no whitespace before it stays (a password
`ab;cd`). A quote opens where a value starts or after whitespace and runs to the same quote;
a value that is one quoted run loses its quotes (`"a ; b"` reads `a ; b`), except the keys
that hold a command line (`argv_keys`), whose own splitter reads their quotes.
`stkrelay.E111`: an unclosed quote (in a command line, its own check says so), a `[`
without `]` or with text after it, a key with no name. `stkrelay.E112`: a secret (`secrets`)
whose unquoted value still holds whitespace (a comment without `;`, or `abc;rotated 2026-01`):
a secret is never read with its comment inside; quote it if the space is part of it.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Collection
from dataclasses import dataclass, field

from stkconfig.model import Problem
from stkconfig.said import Said, gettext_noop

TOP = "__top__"  # the keys before any section header
ENCODING, LINE, SECRET = "stkrelay.E110", "stkrelay.E111", "stkrelay.E112"
BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
FALLBACK = "cp950"
LINE_END = re.compile(r"\r\n|\r|\n")
COMMENT = ";#"
QUOTES = "\"'"


@dataclass(frozen=True)
class IniFile:
    """A read `stk.ini`: per section (`TOP` for the keys before any header, other names as
    written), each key's value and the line it stands on (1-based)."""

    path: str
    sections: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # each section's header line (TOP: 0)

    def named(self, name: str) -> list[str]:
        """The sections called `name`, whatever their case (`[STK]`, `[Stk]`: `[stk]`)."""
        return [s for s in self.sections if s != TOP and s.strip().lower() == name]


def read(
    path: str, secrets: Collection[str], argv_keys: Collection[str]
) -> tuple[IniFile | None, list[Problem]]:
    """The file read, or None and the problems that stop start-up (E110–E112); raises
    OSError when the file cannot be opened."""
    with open(path, "rb") as fh:
        raw = fh.read()
    text, problems = decode(raw, path)
    if text is None:
        return None, problems
    return parse(text, path, secrets, argv_keys)


def decode(raw: bytes, path: str) -> tuple[str | None, list[Problem]]:
    """The file's text, by its byte-order mark, else UTF-8, else cp950; or E110 naming the line."""
    for bom, encoding in BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(encoding), []
            except UnicodeDecodeError as exc:
                return None, [_undecodable(path, encoding, _line_of(raw, exc.start), None)]
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        not_utf8 = _line_of(raw, exc.start)
    try:
        return raw.decode(FALLBACK), []
    except UnicodeDecodeError as exc:
        return None, [_undecodable(path, "utf-8", not_utf8, _line_of(raw, exc.start))]


def _line_of(raw: bytes, offset: int) -> int:
    """The 1-based line of a byte offset (CRLF, LF and CR end lines)."""
    head = raw[:offset]
    return head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1


def _undecodable(path: str, encoding: str, first: int, second: int | None) -> Problem:
    if second is None:
        said = Said(gettext_noop("%(path)s says it is %(encoding)s, but line %(line)d is not"),
                    path=path, encoding=encoding.upper(), line=first)  # fmt: skip
        where = first
    else:
        said = Said(gettext_noop("%(path)s is neither UTF-8 (line %(first)d is not) nor cp950 (line "
                                 "%(second)d is not)"), path=path, first=first, second=second)  # fmt: skip
        where = second
    hint = Said(gettext_noop("save it again in Notepad as UTF-8 (or ANSI on a Traditional Chinese Windows)"))
    return Problem(ENCODING, f"line {where}", said, hint)


def parse(
    text: str, path: str, secrets: Collection[str] = (), argv_keys: Collection[str] = ()
) -> tuple[IniFile | None, list[Problem]]:
    """The sections of a decoded file, or None and a problem per line that cannot be read."""
    sections: dict[str, dict[str, tuple[str, int]]] = {TOP: {}}
    headers: dict[str, int] = {TOP: 0}
    problems: list[Problem] = []
    current = TOP
    for number, raw_line in enumerate(LINE_END.split(text.removeprefix("\ufeff")), start=1):
        line = raw_line.strip()
        if not line or line[0] in COMMENT:
            continue
        if line.startswith("["):
            name, bad = _header(line)
            if bad:
                problems.append(_unreadable(number, bad))
                continue
            current = name
            sections.setdefault(current, {})
            headers.setdefault(current, number)
            continue
        at = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if at < 0:
            continue  # a bare word: no key (the old agent's reader skips it too)
        key = line[:at].strip().upper()
        if not key:
            problems.append(_unreadable(number, Said(gettext_noop("a value with no key before its '='"))))
            continue
        value, quoted, bad = _value(line[at + 1 :], keep_quotes=key in argv_keys)
        if bad:
            problems.append(_unreadable(number, bad))
            continue
        if key in secrets and not quoted and any(c.isspace() for c in value):
            problems.append(Problem(SECRET, f"{key} (line {number})",
                                    Said(gettext_noop("holds whitespace: a comment inside the secret?")),
                                    Said(gettext_noop("put a comment after ' ; ' (a space first), or quote "
                                                      "the value if the space is part of it"))))  # fmt: skip
            continue
        sections[current][key] = (value, number)
    if problems:
        return None, problems
    return IniFile(path, sections, headers), []


def _header(line: str) -> tuple[str, Said | None]:
    """A section header's name, or what is wrong with it."""
    end = line.find("]")
    if end < 0:
        return "", Said(gettext_noop("a section header without its closing ']'"))
    rest = line[end + 1 :].strip()
    if rest and rest[0] not in COMMENT:
        return "", Said(gettext_noop("text after a section header's ']'"))
    name = line[1:end].strip()
    if not name:
        return "", Said(gettext_noop("a section header with no name"))
    return name, None


def _value(text: str, keep_quotes: bool) -> tuple[str, bool, Said | None]:
    """(value, wholly quoted, what is wrong): the text after the key's delimiter, its inline
    comment cut, its quotes taken off when it is one quoted run (not for a command line)."""
    out: list[str] = []
    i, n = 0, len(text)
    runs = 0  # quoted runs met
    while i < n:
        c = text[i]
        after_space = i == 0 or text[i - 1].isspace()
        if c in COMMENT and after_space:
            break
        if c in QUOTES and after_space:
            end = text.find(c, i + 1)
            if end < 0 and keep_quotes:  # a command line: its own splitter says what is wrong
                out.append(text[i:])
                break
            if end < 0:
                return "", False, Said(gettext_noop("a quote (%(quote)s) that is never closed"), quote=c)
            out.append(text[i : end + 1])
            runs += 1
            i = end + 1
            continue
        out.append(c)
        i += 1
    value = "".join(out).strip()
    whole = runs == 1 and len(value) >= 2 and value[0] in QUOTES and value[-1] == value[0]
    whole = whole and value.find(value[0], 1) == len(value) - 1
    if whole and not keep_quotes:
        return value[1:-1], True, None
    return value, whole, None


def _unreadable(number: int, what: Said) -> Problem:
    hint = Said(gettext_noop("write it KEY = value, a section [name], or a comment after ';'"))
    return Problem(LINE, f"line {number}", what, hint)
