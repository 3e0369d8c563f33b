"""README.md is the front door, so it stays short, and no link in it or in docs/ (its subfolders
and dated records included) leads nowhere: every relative link names a file that exists and, for a
Markdown page, a heading it has. The pages of current figures stay short enough to read; their
history lives in docs/experiments/."""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import REPO

ROOT = REPO
README_MAX_LINES = 150
PAGE_MAX_LINES = 300
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, … as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` whose file, or whose heading in that file, does not exist."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            out.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return out


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_readme_is_at_most_150_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; measurements belong in docs/"


def test_the_pages_of_current_figures_stay_short():
    """docs/benchmarks.md, docs/simnet.md and their topic pages say what holds now; a run's story
    goes to a dated record in docs/experiments/ instead of growing the page."""
    docs = ROOT / "docs"
    current = [docs / "benchmarks.md", docs / "simnet.md", *sorted(docs.glob("benchmarks/*.md")),
               *sorted(docs.glob("simnet/*.md"))]
    long = {p.relative_to(ROOT).as_posix(): n for p in current
            if (n := p.read_text(encoding="utf-8").count("\n")) > PAGE_MAX_LINES}
    assert not long, f"over {PAGE_MAX_LINES} lines: {long}"


def test_every_relative_link_in_readme_and_docs_resolves():
    broken = [b for page in pages() for b in broken_links(page)]
    assert not broken, "\n".join(broken)


CODE_LINK = re.compile(r"docs/([\w/-]+\.md)(?:#([\w-]+))?")
SOURCES = ("gossip_tts", "peer", "protocol", "async_opt", "simnet", "benchmarks", "tests")


def broken_code_links() -> list[str]:
    """The `docs/<page>.md#anchor` a docstring or comment points its evidence at, where it is gone."""
    out = []
    for source in sorted(f for package in SOURCES for f in (ROOT / package).rglob("*.py")):
        for name, anchor in CODE_LINK.findall(source.read_text(encoding="utf-8")):
            page = ROOT / "docs" / name
            if not page.exists():
                out.append(f"{source.relative_to(ROOT)}: docs/{name} (no such file)")
            elif anchor and anchor not in anchors(page.read_text(encoding="utf-8")):
                out.append(f"{source.relative_to(ROOT)}: docs/{name}#{anchor} (no such heading)")
    return out


def test_every_docs_page_and_heading_named_in_the_code_exists():
    broken = broken_code_links()
    assert not broken, "\n".join(broken)


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "other.md").write_text("# A page\n\n## Its section (`x`, 5×)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#its-section-x-5) [gone](missing.md) [bad](other.md#nowhere)\n"
                    "[web](https://example.org/x) `[code](nothing.md)`\n```\n[fenced](nothing.md)\n```\n")
    assert broken_links(page) == ["page.md: missing.md (no such file)", "page.md: other.md#nowhere (no such heading)"]


def test_repeated_headings_are_numbered_as_github_numbers_them():
    assert anchors("## Runs\n\n## Runs\n\n```\n## not a heading\n```\n") == {"runs", "runs-1"}
