"""Every command that the README and docs/ give for one of the repository's Python scripts (bench/,
scripts/, examples/) runs as written from the repository root on a machine where only the system's
directories are on PATH and no virtualenv is activated (its ``python3`` lacks the project's dependencies):
a script that takes ``--help`` is run with it (as written, plus ``--help``); one that does not, and would
rewrite files, has every module it imports imported by the command's interpreter."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.files import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]
#: an interpreter (a path, or a name looked up on PATH) running a script of the repository, and its arguments
COMMAND = re.compile(
    r"(?:^|[`\s(&;])((?:PYSPARK_PYTHON=\S+ )?(?:[^\s`]*/)?python3?(?:\.\d+)? "
    r"(?:bench|scripts|examples)/[\w/]+\.py)(?=[\s`)\[]|$)",
    re.M,
)
SYSTEM_PATH = "/usr/bin:/bin"


def documented() -> list[tuple[str, str]]:
    """(page, command) for each script command of the pages, without repeats."""
    found: dict[str, str] = {}
    for page in PAGES:
        for match in COMMAND.finditer(page.read_text(encoding="utf-8")):
            found.setdefault(match.group(1), page.name)
    return sorted((page, command) for command, page in found.items())


def imported(script: Path) -> list[str]:
    """The absolute modules ``script`` imports anywhere in it (top level and inside functions), except
    those it guards with ``except ImportError``."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
            for h in node.handlers
        ):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    local = {p.stem for p in script.parent.glob("*.py")}
    return sorted(n for n in names if n.split(".")[0] not in local and n != "__future__")


def test_the_pages_name_the_scripts_this_test_runs() -> None:
    commands = [command for _, command in documented()]
    for script in ("bench/bench_publish.py", "scripts/gen_openapi.py", "examples/spark_pipeline.py"):
        assert any(script in command for command in commands), script


@pytest.mark.parametrize(("page", "command"), documented())
def test_a_documented_script_command_runs_without_an_activated_virtualenv(page: str, command: str) -> None:
    argv = shlex.split(command)
    env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": str(ROOT)}
    while "=" in argv[0]:
        name, _, value = argv.pop(0).partition("=")
        env[name] = value
    script = ROOT / argv[1]
    assert script.is_file(), f"{page}: `{command}` names no script of the repository"
    if "argparse" in script.read_text(encoding="utf-8"):
        argv.append("--help")
    else:
        modules = imported(script)
        setup = f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(script.parent)!r}]; "
        argv = [argv[0], "-c", setup + "".join(f"import {m}; " for m in modules)]
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        pytest.fail(f"{page}: `{command}`: {argv[0]} is not a command with PATH={SYSTEM_PATH}")
    assert done.returncode == 0, f"{page}: `{command}` fails as written:\n{done.stderr[-2000:]}"
