"""The tests' layout holds: every test file the sources name exists.

Code, scripts and docs point readers at the test that shows a rule (``tests/docs/test_clients.py``
generates a client...); a path that moved or never existed sends them nowhere. Every ``tests/…py`` path named
in the tracked text files outside the changelog (which speaks of earlier versions) must be a file.
"""

from __future__ import annotations

import re
import subprocess

from tests.support.files import ROOT

#: a test file's path as text names it, from ``tests/`` to ``.py``
TEST_PATH = re.compile(r"\btests/[A-Za-z0-9_/]+\.py\b")
#: the changelog names the files of its versions as they were
HISTORY = frozenset({"CHANGELOG.md"})


def named_test_paths(text: str) -> set[str]:
    """The test file paths ``text`` names."""
    return set(TEST_PATH.findall(text))


def tracked_text_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if name not in HISTORY]


def test_every_test_file_the_sources_name_exists() -> None:
    missing: dict[str, list[str]] = {}
    for name in tracked_text_files():
        path = ROOT / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        gone = sorted(p for p in named_test_paths(text) if not (ROOT / p).is_file())
        if gone:
            missing[name] = gone
    assert not missing, f"these files name test files that do not exist: {missing}"


def test_the_path_finder_finds_test_paths_in_prose() -> None:
    gone = "/".join(("tests", "test_client_models.py"))  # spelt in parts, so this file names no missing path
    text = f"``{gone}`` generates a client; see tests/api/test_openapi_generators.py."
    assert named_test_paths(text) == {gone, "tests/api/test_openapi_generators.py"}
