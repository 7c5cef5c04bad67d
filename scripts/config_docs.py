"""Write the configuration table of docs/configuration.md and `packaging/stk.ini.example` from the key table.

    python scripts/config_docs.py          # rewrite both
    python scripts/config_docs.py --check  # exit 1 (and name the file) when either is out of date

The table (`stkconfig/keys.py`) is the one place a key's default and meaning are
written; `tests/test_config_table.py` runs `--check`'s logic.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stkconfig.keys import KEYS  # noqa: E402
from stkconfig.table import example_ini, readme_table  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
EXAMPLE = ROOT / "packaging" / "stk.ini.example"
HEADING = "## `stk.ini`, section `[stk]`\n\n"


def page_with_table(text: str) -> str:
    """`text` (the configuration page) with the table under HEADING replaced by the generated one."""
    head, sep, rest = text.partition(HEADING)
    if not sep:
        raise SystemExit(f"docs/configuration.md has no {HEADING.strip()!r} heading")
    _old, _blank, tail = rest.partition("\n\n")
    return head + sep + readme_table(KEYS) + "\n" + tail


def wanted() -> dict[Path, str]:
    return {PAGE: page_with_table(PAGE.read_text()), EXAMPLE: example_ini(KEYS)}


def main(argv: list[str]) -> int:
    stale = [path for path, text in wanted().items() if path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date with stkconfig/keys.py: "
                  "run python scripts/config_docs.py", file=sys.stderr)  # fmt: skip
        return 1 if stale else 0
    for path, text in wanted().items():
        if path in stale:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
