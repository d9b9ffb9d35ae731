"""The tests' layout holds: what tests share lives in support modules, and every test file the sources name
exists.

* No test module imports another test module (``tests/**/test_*.py``, by its package path or, as the interop
  suite and the benchmarks put folders on ``sys.path``, by its bare name): what two of them share is a
  harness in ``tests/support/`` (or ``tests/interop/interop_*.py``), so running, moving or deleting one test
  file never changes another's, and pytest never collects a test module's tests a second time.
* Code, scripts and docs point readers at the test that shows a rule (``tests/docs/test_clients.py``
  generates a client...); a path that moved or never existed sends them nowhere. Every ``tests/…py`` path
  named in the tracked text files outside the changelog (which speaks of earlier versions) must be a file.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

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


def imported_test_modules(source: str) -> list[str]:
    """The test modules (a last name part ``test_…``) that ``source``'s imports name, wherever they stand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.rpartition(".")[2].startswith("test_")]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.rpartition(".")[2].startswith("test_"):
                found.append(node.module)
            else:
                found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("test_")]
    return found


def python_files() -> list[Path]:
    return sorted(p for folder in ("tests", "bench", "scripts") for p in (ROOT / folder).rglob("*.py"))


def test_no_test_module_imports_another() -> None:
    found = {
        str(path.relative_to(ROOT)): names
        for path in python_files()
        if (names := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert not found, f"move what these share into tests/support (or tests/interop/interop_*.py): {found}"


def test_the_import_finder_finds_test_modules_by_path_and_by_name() -> None:
    source = (
        "from tests.tubemq.test_producer import Recorder\n"
        "from tests.tubemq import test_producer, conftest\n"
        "def f():\n    from test_interop_tls import check_links\n"
        "import tests.api.test_rendered as rendered\n"
        "from tests.support.producer_support import FAST\nimport pytest\n"
    )
    assert imported_test_modules(source) == [
        "tests.tubemq.test_producer",
        "tests.tubemq.test_producer",
        "tests.api.test_rendered",
        "test_interop_tls",
    ]
