"""The README is a short front door and every link of the docs resolves.

README.md maps `docs/` (one page per topic); a newcomer follows its links, so each relative
link of README.md, CHANGELOG.md and docs/*.md must name a file of the repository, and an
`#anchor` a heading of that page (as GitHub makes anchors). Links in code blocks and inline
code are text, not links, and are left alone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 200

FENCE = re.compile(r"(?ms)^```.*?^```[^\n]*$")
CODE = re.compile(r"``.*?``|`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading (its text lower-cased, punctuation dropped)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of `page`: one per heading, a repeated one with `-1`, `-2`, ... as GitHub does."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in re.findall(r"(?m)^#{1,6} (.+)$", FENCE.sub("", page.read_text())):
        base = anchor(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(page: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of `page` whose file or anchor does not exist (named relative to `root`)."""
    bad = []
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif frag and (dest.suffix != ".md" or frag not in anchors(dest)):
            bad.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return bad


def test_the_readme_is_a_short_front_door():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail to a page of docs/"


def test_every_relative_link_of_the_docs_names_a_file_and_a_heading_that_exist():
    assert [b for page in pages() for b in broken(page)] == []


def test_every_page_of_docs_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked] == []


def test_a_broken_link_or_anchor_is_noticed(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## The gate: VRRP (ADR 0011)\n\n## Same\n\n## Same\n")
    page = tmp_path / "b.md"
    good = "[x](a.md#the-gate-vrrp-adr-0011) [y](a.md#same-1) [z](#b) `[t](nowhere.md)`\n"
    page.write_text("# B\n\n" + good + "```\n[u](nowhere.md)\n```\n")
    assert broken(page, tmp_path) == []
    page.write_text("# B\n\n[x](a.md#the-gate) [y](c.md) [z](a.md#same-2)\n")
    assert len(broken(page, tmp_path)) == 3
