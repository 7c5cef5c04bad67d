"""The README is a short front door, and every link and § reference of the docs resolves.

README.md maps `docs/` (one page per topic); a newcomer follows its links, so each relative
link of README.md, CHANGELOG.md and docs/*.md must name a file of the repository, and an
`#anchor` a heading of that page (as GitHub makes anchors). Links in code blocks and inline
code are text, not links, and are left alone. The code and the docs cite the design by
section, `docs/design.md §5.1`: every such number must be a numbered heading of
docs/design.md (a § after `000` is the seed's, after `RFC n` the RFC's, after `windows.md`
that page's own numbered sections). A comment that cites a page's words, `docs/relay.md
"Legacy stations"`, finds them on that page."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 200

FENCE = re.compile(r"(?ms)^```.*?^```[^\n]*$")
CODE = re.compile(r"``.*?``|`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
CHAIN = r"(?:\s*§\d+(?:\.\d+)?,)*\s*$"  # "000 §2, §5": every § of the list is the seed's
ELSEWHERE = {
    "seed": re.compile(r"\b000" + CHAIN),
    "rfc": re.compile(r"\bRFC \d+" + CHAIN),
    "windows": re.compile(r"windows\.md`?" + CHAIN),
}
CITED = re.compile(r"(README(?:\.md)?|docs/[a-z-]+\.md)(?:'s)?,?:? \(?\"([^\"\n]{4,})\"")  # README "The gate"
OLD_NAME = "DESIGN" + ".md"  # the design outside the repository, which nothing may cite any more


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


def numbered(page: Path) -> set[str]:
    """The section numbers of `page`'s headings (`## 5. Lease store`, `### 5.1 File backend`)."""
    return set(re.findall(r"(?m)^#{2,3} (\d+(?:\.\d+)?)\.?\s", page.read_text()))


def tracked_text() -> dict[str, str]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    texts = {}
    for name in names.split():
        try:
            texts[name] = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
    return texts


def unresolved(texts: dict[str, str], design: set[str], windows: set[str]) -> list[str]:
    """Every `§N` of `texts` that names no section of the design (or of the page it cites)."""
    bad = []
    for name, text in texts.items():
        for found in SECTION.finditer(text):
            before = text[max(0, found.start() - 60) : found.start()]
            number = found.group(1)
            if ELSEWHERE["seed"].search(before) or ELSEWHERE["rfc"].search(before):
                continue
            sections = windows if ELSEWHERE["windows"].search(before) else design
            if number not in sections:
                line = text.count("\n", 0, found.start()) + 1
                bad.append(f"{name}:{line}: §{number}")
    return bad


def test_every_section_reference_in_the_code_and_the_docs_names_a_section_that_exists():
    texts = tracked_text()
    design, windows = numbered(DOCS / "design.md"), numbered(DOCS / "windows.md")
    assert {"5.1", "5.4", "13", "15"} <= design
    assert unresolved(texts, design, windows) == []
    assert sorted(n for n, text in texts.items() if OLD_NAME in text and n != "CHANGELOG.md") == []


def test_a_section_the_design_does_not_have_is_noticed():
    s = "\N{SECTION SIGN}"  # spelled so, this file's own examples are no references
    texts = {
        "a.py": f"# (docs/design.md {s}5.1, {s}13); seed 000 {s}2, {s}7; RFC 6455 {s}4.1; windows.md {s}4",
        "b.md": f"see [design {s}99](design.md) and docs/windows.md {s}9",
    }
    assert unresolved(texts, {"5.1", "13"}, {"4"}) == [f"b.md:1: {s}99", f"b.md:1: {s}9"]


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", "").replace("*", "")).lower()


def uncited(texts: dict[str, str], root: Path = ROOT) -> list[str]:
    """Every `README "…"` or `docs/x.md "…"` of `texts` whose words are not on that page."""
    bad = []
    for name, text in texts.items():
        for page, words in CITED.findall(text):
            target = root / ("README.md" if page.startswith("README") else page)
            if not target.exists() or flat(words) not in flat(target.read_text()):
                bad.append(f'{name}: {page} "{words}"')
    return bad


def test_every_page_a_comment_cites_by_its_words_has_those_words():
    assert uncited(tracked_text()) == []


def test_words_cited_from_a_page_that_lacks_them_are_noticed(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "relay.md").write_text("# The relay\n\n## Legacy stations (`RELAY_LEGACY`)\n")
    (tmp_path / "README.md").write_text("# x\n\n## Install on a site\n")
    q = chr(34)  # spelled so, this file's own examples are no citations
    texts = {
        "a.py": f"# docs/relay.md {q}Legacy stations{q}; README {q}Install on a site{q}",
        "b.py": f"# docs/relay.md, {q}Nowhere said{q}; docs/cloud.md {q}Entry members{q}",
    }
    wanted = [f"b.py: docs/relay.md {q}Nowhere said{q}", f"b.py: docs/cloud.md {q}Entry members{q}"]
    assert uncited(texts, tmp_path) == wanted
