"""Building the package as a user or the image does: a clean copy of the source tree, and pip on it."""

from __future__ import annotations

import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: pip as the tests run it: quiet, no version check
PIP = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]


def compiler() -> str | None:
    """The C compiler Python's build uses, when it and Python's headers are on this machine."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(cc) if headers.is_file() else None


def source_tree(dest: Path) -> Path:
    """What the Dockerfile copies (pyproject.toml, setup.py, README.md, gateway/), without built files."""
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "gateway", dest / "gateway", ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.pyc")
    )
    return dest
