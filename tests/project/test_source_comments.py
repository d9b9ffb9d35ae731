"""The gateway's comments and docstrings explain the code as it is: none cites this project's issues.

An issue number says where a change came from, which the commit message keeps; a reader of the code needs
what it does and why. Every source file under ``gateway/`` (generated protobuf modules aside) is read as
text, so a docstring, a comment, a C comment and a string alike are checked. A reference to another
project's tracker names that project first (``uvicorn issue #2722``) and stays.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.files import ROOT

GATEWAY = ROOT / "gateway"
SUFFIXES = {".py", ".pyi", ".c", ".h", ".js", ".html", ".css"}
#: other projects whose issues the code may cite, as "<project> issue #N"
OTHER_PROJECTS = frozenset({"uvicorn"})
#: "issue 26", "issues #13 and", "(#26)", "gh-26"
CITATION = re.compile(r"(?:(\w+)\s+)?\bissues?\s*#?\s*\d+|\(#\d+\)|\bgh-\d+", re.IGNORECASE)


def citations(text: str) -> list[str]:
    """The citations of this project's issues in ``text``."""
    return [m.group(0) for m in CITATION.finditer(text) if (m.group(1) or "").lower() not in OTHER_PROJECTS]


def sources() -> list[Path]:
    return sorted(
        p for p in GATEWAY.rglob("*") if p.suffix in SUFFIXES and "pb" not in p.relative_to(GATEWAY).parts
    )


def test_no_source_under_gateway_cites_an_issue_of_this_project() -> None:
    found = {
        str(path.relative_to(GATEWAY.parent)): hits
        for path in sources()
        if (hits := citations(path.read_text(encoding="utf-8")))
    }
    assert not found, f"explain the code, not its history (the commit message keeps the issue): {found}"


@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ('"""The short way through the app (issue #13)."""', ["issue #13"]),
        ("/* in C (issue #26): the loop */", ["issue #26"]),
        ("# see issues 13 and 26", ["see issues 13"]),
        ("(#41) and gh-7", ["(#41)", "gh-7"]),
        ("(a known bug: uvicorn issue #2722, open)", []),
        ("``http://10.0.0.7:8080#2``, colour #162040", []),
    ],
)
def test_a_citation_is_told_from_a_reference_elsewhere(text: str, cited: list[str]) -> None:
    assert citations(text) == cited
