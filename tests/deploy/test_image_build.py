"""The image's build stage, replayed without a container runtime: the Dockerfile's own install step
(``pip install --no-deps --no-build-isolation .`` on the files it copies) and its own check that the compiled
path is active, read from the Dockerfile itself, so the two cannot drift apart. A wheel that left out a C
source or a shared header (gateway/_cext/) or an extension that failed to build fails here, as it would
fail the image build."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.tubemq.wire import speedups
from tests.support.build_support import ROOT, built_and_installed, compiler

DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")

#: every compiled module the image must carry
EXTENSIONS = {name.replace(".", "/") for name in speedups.EXTENSIONS}


def _image_check() -> str:
    """The Python code the Dockerfile runs after installing the project (``python -c "..."``)."""
    (step,) = re.findall(
        r"pip install --no-deps --no-build-isolation \. \\\n(.*?)\n\n", DOCKERFILE, re.DOTALL
    )
    (command,) = [line for line in step.splitlines() if "/opt/venv/bin/python -c" in line]
    argv = shlex.split(command.strip().removeprefix("&&").removesuffix("\\").strip())
    assert argv[:2] == ["/opt/venv/bin/python", "-c"], argv
    return argv[2]


def test_the_build_stage_installs_the_compiled_path(tmp_path: Path) -> None:
    if compiler() is None:
        pytest.skip("no C compiler or Python headers on this machine: the image's build stage has both")
    env = {**os.environ, "PIP_NO_INDEX": "1"}
    env.pop(speedups.ENV_SWITCH, None)  # the image does not set it
    names, site = built_and_installed(tmp_path, env)
    compiled = {n.split(".", 1)[0] for n in names if n.endswith(".so")}
    assert compiled == EXTENSIONS, "setup.py builds every extension (optional=True hides a failed one)"
    checked = subprocess.run(
        [sys.executable, "-c", f"import gateway; print(gateway.__file__)\n{_image_check()}"],
        env={**env, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(str(site)), "the installed wheel ran, not this checkout"
