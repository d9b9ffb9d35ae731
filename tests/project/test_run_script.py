"""``./scripts/run.sh`` installs only when the project or its dependencies changed, then starts at once.

The scripts run in a scratch copy of the repository's scripts and pyproject.toml whose ``.venv`` holds a
stand-in ``python`` (it logs how it was called; ``pip install`` creates the ``tubemq-gateway`` entry point,
or fails when the test says so, as pip does without a package index) and the entry point it creates (it
prints its arguments). One test runs the real ``run.sh`` on the repository's own complete ``.venv`` without
any package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.files import ROOT

FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
case "$*" in
    -c*) echo "3.11.9 (fake)" ;;
    "-m pip install"*)
        if [ "${FAKE_PIP_FAILS:-0}" = 1 ]; then
            echo "ERROR: no matching distribution (offline)" >&2
            exit 1
        fi
        printf '#!/bin/sh\\necho "started $*"\\n' > "$(dirname "$0")/tubemq-gateway"
        chmod +x "$(dirname "$0")/tubemq-gateway"
        ;;
esac
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A scratch copy of what run.sh and test.sh read, with a stand-in .venv/bin/python."""
    (tmp_path / "scripts").mkdir()
    for name in ("run.sh", "venv.sh"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON, encoding="utf-8")
    python.chmod(0o755)
    return tmp_path


def _run(
    tree: Path, *command: str, pip_fails: bool = False
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``command`` in ``tree``; (its result, the stand-in python's calls during it)."""
    log = tree / "python-calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "FAKE_LOG": str(log), "FAKE_PIP_FAILS": "1" if pip_fails else "0"}
    env.pop("TUBEMQ_GATEWAY_REINSTALL", None)
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return done, calls


def _pip(calls: list[str]) -> list[str]:
    """Every call of pip (installs and pip's own upgrade)."""
    return [call for call in calls if "pip" in call]


def _pip_installs(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("-m pip install") and "--upgrade pip" not in call]


def test_the_second_start_runs_no_pip_and_needs_no_index(tree: Path) -> None:
    first, calls = _run(tree, "./scripts/run.sh")
    assert first.returncode == 0, first.stderr
    assert _pip_installs(calls) == ["-m pip install -q -e ."]
    assert first.stdout.strip() == "started serve"
    # Complete .venv, nothing changed: no pip at all, so a machine without an index starts too.
    second, calls = _run(tree, "./scripts/run.sh", "serve", "--http-port", "0", pip_fails=True)
    assert second.returncode == 0, second.stderr
    assert not _pip(calls), calls
    assert second.stdout.strip() == "started serve --http-port 0"


def test_a_changed_pyproject_installs_again(tree: Path) -> None:
    assert _run(tree, "./scripts/run.sh")[0].returncode == 0
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8") + "\n# a new dependency\n", encoding="utf-8")
    done, calls = _run(tree, "./scripts/run.sh")
    assert done.returncode == 0, done.stderr
    assert _pip_installs(calls) == ["-m pip install -q -e ."]
    assert not _pip_installs(_run(tree, "./scripts/run.sh")[1]), "installed once per change"


def test_a_changed_c_source_or_setup_py_installs_again(tree: Path) -> None:
    """The editable install compiles the C extensions in place (setup.py): Python edits need no install, but
    a changed C source must be compiled again, or the compiled path would run stale code."""
    (tree / "setup.py").write_text("# the extensions\n", encoding="utf-8")
    source = tree / "gateway" / "tubemq" / "wire" / "_rpc.c"
    source.parent.mkdir(parents=True)
    source.write_text("/* one */\n", encoding="utf-8")
    assert _run(tree, "./scripts/run.sh")[0].returncode == 0
    assert not _pip(_run(tree, "./scripts/run.sh")[1])
    source.write_text("/* two */\n", encoding="utf-8")
    assert _pip_installs(_run(tree, "./scripts/run.sh")[1]) == ["-m pip install -q -e ."]
    (tree / "setup.py").write_text("# the extensions, changed\n", encoding="utf-8")
    assert _pip_installs(_run(tree, "./scripts/run.sh")[1]) == ["-m pip install -q -e ."]
    assert not _pip(_run(tree, "./scripts/run.sh")[1])


def test_a_failed_install_is_tried_again_and_not_started(tree: Path) -> None:
    failed, _ = _run(tree, "./scripts/run.sh", pip_fails=True)
    assert failed.returncode != 0 and "started" not in failed.stdout
    assert "offline" in failed.stderr
    done, calls = _run(tree, "./scripts/run.sh")
    assert done.returncode == 0 and _pip_installs(calls), "no stamp was left by the failed install"


def test_the_test_scripts_install_covers_run_and_extras_add_up(tree: Path) -> None:
    ensure = ["bash", "-c", '. scripts/venv.sh && ensure_venv "$1"', "ensure_venv"]
    done, calls = _run(tree, *ensure, "dev,spark,otel")  # what test.sh asks for
    assert done.returncode == 0 and _pip_installs(calls) == ["-m pip install -q -e .[dev,spark,otel]"]
    assert not _pip(_run(tree, "./scripts/run.sh")[1]), "run.sh needs a subset of what test.sh installed"
    assert not _pip(_run(tree, *ensure, "spark")[1])
    # After a plain install, asking for an extra installs it; both then count as installed.
    tree.joinpath(".venv", ".tubemq-gateway-install").unlink()
    assert _pip_installs(_run(tree, "./scripts/run.sh")[1])
    assert _pip_installs(_run(tree, *ensure, "dev")[1]) == ["-m pip install -q -e .[dev]"]
    assert not _pip(_run(tree, *ensure, "dev")[1]) and not _pip(_run(tree, "./scripts/run.sh")[1])


def test_a_moved_tree_installs_again(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The editable install points at the tree: a copy elsewhere (another worktree) is not current."""
    assert _run(tree, "./scripts/run.sh")[0].returncode == 0
    moved = tmp_path_factory.mktemp("moved") / "repo"
    shutil.copytree(tree, moved, symlinks=True)
    assert _pip_installs(_run(moved, "./scripts/run.sh")[1])


def test_the_real_run_script_starts_offline_on_a_complete_venv() -> None:
    """The repository's own .venv (scripts/test.sh made it, and wrote its stamp): ``run.sh --version`` with
    pip cut off from every index and configuration runs the gateway."""
    stamp = ROOT / ".venv" / ".tubemq-gateway-install"
    if not stamp.exists():
        pytest.skip(f"{stamp} is missing: this .venv was not made by scripts/test.sh (run it once)")
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_FIND_LINKS": "",
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
    }
    env.pop("TUBEMQ_GATEWAY_REINSTALL", None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "run.sh"), "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tubemq-gateway "), done.stdout
    assert "pip" not in done.stderr.lower()
