"""Every relative link of README.md, CHANGELOG.md and docs/*.md resolves: the file or directory exists, and a
``#fragment`` names a heading of the target page (GitHub's anchor of it: lower case, punctuation dropped,
spaces as hyphens, ``-1``, ``-2``... for repeats) or an explicit ``<a id>`` / ``<a name>`` there. Links in
code (fenced blocks, inline code) are not links and are not read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.files import ROOT

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def pages() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if (ROOT / "CHANGELOG.md").exists():
        found.append(ROOT / "CHANGELOG.md")
    return found


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        out.append("" if fence else line)
    return out


def slug(title: str) -> str:
    title = re.sub(r"`([^`]*)`", r"\1", title)
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    text = page.read_text(encoding="utf-8")
    for line in prose(text):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    out.update(EXPLICIT.findall(text))
    return out


def links(page: Path) -> list[str]:
    lines = [re.sub(r"`[^`]*`", "``", line) for line in prose(page.read_text(encoding="utf-8"))]
    return [m.group(1) for line in lines for m in LINK.finditer(line)]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:: not ours to check
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(
                f"{target}: no {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}"
            )
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: {resolved.name} has no heading with the anchor #{fragment}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_the_link_checker_sees_links_and_anchors(tmp_path: Path) -> None:
    """The checker itself: a heading's anchor, a repeat, code spans and fences ignored, a link in a table."""
    page = tmp_path / "p.md"
    page.write_text(
        "# Title `x`\n\n## TLS on the gateway's listeners\n\n## Limits\n\n## Limits\n\n"
        "| a | [b](#limits-1) |\n\n`[not](nowhere.md)`\n\n```\n[no](nowhere.md)\n```\n"
    )
    assert anchors(page) == {"title-x", "tls-on-the-gateways-listeners", "limits", "limits-1"}
    assert links(page) == ["#limits-1"]


def test_readme_shows_the_two_setup_commands_near_the_top() -> None:
    """A fresh machine needs two commands; the README shows them before anything else it explains."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    top = [line.strip() for line in lines[:40]]
    assert "./scripts/run.sh" in top and "./scripts/test.sh" in top
    assert len(lines) <= 400, f"README.md has {len(lines)} lines: move the detail into docs/"
