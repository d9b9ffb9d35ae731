"""Building the package as a user or the image does: a clean copy of the source tree, and pip on it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from tests.support.files import ROOT

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


def built_and_installed(tmp_path: Path, env: dict[str, str]) -> tuple[list[str], Path]:
    """Build a wheel from a clean copy of the tree (``pip wheel --no-deps --no-build-isolation``, what
    ``pip install .`` does) and install it into a directory of its own: the wheel's file names and that
    directory (put it on PYTHONPATH and run from elsewhere to import the installed package)."""
    tree = source_tree(tmp_path / "src")
    wheels = tmp_path / "wheel"
    built = subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(tree)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    site = tmp_path / "site"
    installed = subprocess.run(
        [*PIP, "install", "--no-deps", "--target", str(site), str(wheel)],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    return names, site
