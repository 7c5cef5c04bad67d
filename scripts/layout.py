"""The layout section of docs/architecture.md, written from the code: each module's one job is the first line
of its docstring, each package's the first line of its ``__init__``'s; and the import contracts, written
from pyproject.toml's ``[tool.importlinter]``.

    python scripts/layout.py          rewrite the block between the page's layout markers
    python scripts/layout.py --check  exit 1 (and say which) if the page is out of date
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- layout: written by scripts/layout.py -->", "<!-- /layout -->"
CONTRACTS_BEGIN, CONTRACTS_END = "<!-- contracts: written by scripts/layout.py -->", "<!-- /contracts -->"
TOP = ("elections", "relay", "stkconfig", "stkhost", "stkrelay")
WIDTH = 30  # the column where a module's job starts
JOB = 80  # at most this many characters of it (cut at a word, with an ellipsis)


def first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    line = doc.strip().split("\n\n")[0].replace("\n", " ").split(". ")[0].rstrip(".:").strip()
    if len(line) > JOB:
        line = line[: JOB - 1].rsplit(" ", 1)[0].rstrip(",:;(") + "…"
    return line


def modules() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    return sorted(
        ROOT / f for f in tracked if f.split("/")[0] in TOP and "/migrations/" not in f and "/" in f
    )


OTHER = (  # the folders without Python modules of their own, and the ones outside the product
    ("templates/", "the panel's Django templates (shipped in the wheel as stkrelay/templates)"),
    ("static/", "the panel's CSS and JavaScript, htmx and axe-core vendored (no CDN)"),
    ("locale/", "the panel's catalogues: zh_Hant and English (scripts/messages.sh)"),
    ("packaging/", "the systemd units, redis.conf, stk.ini.example, Grafana dashboard, alert rules"),
    ("docker/", "the agent's container image and the compose demo site (scripts/image.sh)"),
    ("docs/", "one page per topic (README.md maps them), protocol vectors, screenshots"),
    ("scripts/", "bootstrap, demo, image, catalogues, this layout and the config docs"),
    ("bench/", "`make bench`: every figure docs/benchmarks.md quotes"),
    ("verify/", "`make verify`: the pool's model in Promela (pool.pml), checked by SPIN (check.sh)"),
    ("tests/", "`make test` (and long, chaos, fuzz, image): real agents, shares, etcd, browsers"),
)


def block() -> str:
    lines: list[str] = []
    seen: set[Path] = set()
    for path in modules():
        rel = path.relative_to(ROOT)
        for depth in range(1, len(rel.parts)):  # each package once, before its modules
            package = ROOT.joinpath(*rel.parts[:depth])
            if package not in seen:
                seen.add(package)
                init = package / "__init__.py"
                job = first_line(init) if init.exists() else ""
                lines.append(f"{'  ' * (depth - 1)}{package.name}/".ljust(WIDTH) + job)
        if path.name != "__init__.py":
            lines.append(f"{'  ' * (len(rel.parts) - 1)}{path.name}".ljust(WIDTH) + first_line(path))
    lines += [name.ljust(WIDTH) + job for name, job in OTHER]
    return "\n".join(line.rstrip() for line in lines)


def missing() -> list[str]:
    """Modules without a first docstring line: a newcomer could not tell their job."""
    return [str(p.relative_to(ROOT)) for p in modules() if p.name != "__init__.py" and not first_line(p)]


def contracts() -> str:
    """The import-linter contracts of pyproject.toml as a table: what each keeps apart."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]

    def names(modules: list[str]) -> str:
        return ", ".join(f"`{m}`" for m in modules)

    rows = ["| contract | kind | what it checks |", "|---|---|---|"]
    for contract in config["contracts"]:
        kind = contract["type"]
        if kind == "layers":
            layers = " > ".join(f"`{layer}`" for layer in contract["layers"])
            what = layers + ": each imports only those after it"
        elif kind == "independence":
            what = names(contract["modules"]) + ": none imports another"
        else:
            what = names(contract["source_modules"]) + " never import " + names(contract["forbidden_modules"])
        if contract.get("ignore_imports"):
            what += " (allowed: " + names(contract["ignore_imports"]) + ")"
        rows.append(f"| {contract['name']} | {kind} | {what.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


def between(text: str, begin: str, end: str, body: str) -> str:
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def rendered(text: str) -> str:
    text = between(text, BEGIN, END, f"```\n{block()}\n```")
    return between(text, CONTRACTS_BEGIN, CONTRACTS_END, contracts())


def main(argv: list[str]) -> int:
    text = PAGE.read_text()
    for begin, end in ((BEGIN, END), (CONTRACTS_BEGIN, CONTRACTS_END)):
        if begin not in text or end not in text:
            print(f"docs/architecture.md has no markers {begin} ... {end}", file=sys.stderr)
            return 1
    new = rendered(text)
    if "--check" in argv:
        if new != text:
            print("docs/architecture.md's layout is out of date: run python scripts/layout.py",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
