"""The declarative key table's row type, and what is made from the table.

One `Key` per key of `[stk]` (`stkconfig.keys.KEYS`), and per variable the agent reads from
its environment alone (`environment`: `STK_DEBUG`, named as the variable, never read from
`stk.ini`): its name, the kind of value it holds, its raw default, the range a number must
fall in, the check ids that report a bad value, and its one-line meaning. From the table come:

- `DEFAULTS`: the raw value of every `[stk]` key before the file and `STK_<KEY>` apply;
- `number_spec`: the kind and range `config.load` checks a number against
  (E010 not a number, E011 out of range);
- `readme_table` / `example_ini`: the configuration table of docs/configuration.md and
  `packaging/stk.ini.example` (`scripts/config_docs.py` writes both;
  `tests/test_config_table.py` fails when either is out of date).

A key's *meaning* is a contract (docs/design.md §11): change `doc` only to say the
same thing better.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

KINDS = ("str", "int", "float", "flag", "list", "set", "argv", "address", "family")


@dataclass(frozen=True)
class Key:
    """One row of the table. `kind`: `str`, `int`, `float`, `flag` (0/1), `list` (comma list),
    `set` (comma list, order-free), `argv` (a command line, split like a shell), `address`
    (`host:port`), or `family` (a prefix of keys another module reads, e.g. `VIP_*`)."""

    name: str
    kind: str
    default: str = ""  # the raw value when unset; "" = unset (a derived default is said in `shown`)
    check: str = ""  # the check ids that report this key, e.g. "E010/E011/E007"
    range: tuple[float, float] | None = None  # inclusive; a number outside it is E011
    shown: str = ""  # the docs table's default column when it is not the raw default
    example: str | None = None  # the value stk.ini.example sets; None: shown commented, at its default
    row: str = ""  # the key whose docs table row this one shares (SMB_PASSWORD_FILE -> SMB_PASSWORD)
    doc: str = ""  # the meaning, one line of markdown (the row's first key only)
    environment: bool = False  # an environment variable only (named as it is set), never a key of stk.ini

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}")
        if self.range is not None and self.kind not in ("int", "float"):
            raise ValueError(f"{self.name}: a range needs a number")
        if bool(self.doc) == bool(self.row):
            raise ValueError(f"{self.name}: a row's first key has the doc, the others name that key")
        if self.environment and (not self.name.startswith("STK_") or self.example is not None):
            raise ValueError(f"{self.name}: an environment variable is named STK_..., never set in stk.ini")

    @property
    def is_family(self) -> bool:
        return self.kind == "family"

    def default_cell(self) -> str:
        return self.shown or (f"`{self.default}`" if self.default else "—")


def defaults(keys: Iterable[Key]) -> dict[str, str]:
    """The raw value of every `[stk]` key (families excluded: their modules hold their own;
    environment variables too: they are no key of the file)."""
    return {k.name: k.default for k in keys if not k.is_family and not k.environment}


def rows(keys: Iterable[Key]) -> list[list[Key]]:
    """The docs table's rows: each key with the keys that share its row, in table order."""
    out: dict[str, list[Key]] = {}
    for key in keys:
        out.setdefault(key.row or key.name, []).append(key)
    return list(out.values())


def readme_table(keys: Iterable[Key]) -> str:
    """The configuration table of README.md, header included, one line per row."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for row in rows(keys):
        names = (
            " / ".join(f"`{k.name}`" for k in row)
            if not row[0].is_family
            else ", ".join(f"`{k.name}`" for k in row)
        )
        if row[0].environment:
            names += " (environment, not `stk.ini`)"
        cells = [k.default_cell() for k in row]
        default = "—" if all(c == "—" for c in cells) else " / ".join(cells)
        lines.append(f"| {names} | {default} | {row[0].doc} |")
    return "\n".join(lines) + "\n"


def _plain(doc: str) -> str:
    return doc.replace("`", "")


EXAMPLE_HEAD = """\
; stk.ini: one agent's configuration (docs/configuration.md). Written by
; scripts/config_docs.py from the key table (stkconfig/keys.py): edit the table, not this file.
; Every key may also be set as STK_<KEY> in the environment; the keys commented out
; below show their defaults.
"""


def example_ini(keys: Iterable[Key]) -> str:
    """`packaging/stk.ini.example`: the keys a site must set, then every other key
    commented out at its default, each after its meaning."""
    table = list(keys)
    out = [EXAMPLE_HEAD, "[stk]"]
    out += [f"{k.name} = {k.example}" for k in table if k.example is not None]
    for row in rows(table):
        rest = [k for k in row if k.example is None and not k.is_family and not k.environment]
        if not rest:
            continue
        out.append("")
        out += textwrap.wrap(_plain(row[0].doc), 94, initial_indent="; ", subsequent_indent="; ",
                             break_on_hyphens=False)  # fmt: skip
        derived = [f"{k.name}: {_plain(k.shown)}" for k in rest if k.shown and not k.default]
        if derived:
            out.append("; default " + ", ".join(derived))
        out += [f"; {k.name} = {k.default}" if k.default else f"; {k.name} =" for k in rest]
    return "\n".join(out) + "\n"
