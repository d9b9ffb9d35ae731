"""The fenced code blocks of the README and the docs pages, by the section they sit in: what the tests that
run the documented examples verbatim extract."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.files import ROOT

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.M | re.S)


@dataclass(frozen=True)
class Block:
    section: str
    language: str
    code: str


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, each under its section: the last ``## `` heading above it (or the
    page's ``# `` title on a docs page whose blocks sit under no ``## `` heading)."""
    text = page.read_text()
    out = []
    for match in FENCE.finditer(text):
        prose = FENCE.sub("", text[: match.start()])  # a "# comment" line of an earlier block is no heading
        headings = re.findall(r"^##? (.+)$", prose, re.M)
        out.append(Block(headings[-1] if headings else "", match.group(1), match.group(2)))
    return out


def runnable(section: str, language: str, count: int = 1, page: Path = README) -> list[str]:
    """The ``count`` blocks in ``language`` of ``page``'s section ``section`` (a different count fails)."""
    found = [b.code for b in blocks(page) if b.section == section and b.language == language]
    assert len(found) == count, (
        f"{page.relative_to(ROOT)} section {section!r} should hold {count} {language} example(s), "
        f"found {len(found)}"
    )
    return found
