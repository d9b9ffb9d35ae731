"""The interop suite's Spark cases skip, naming the missing package, in an environment without the spark
extras (``ensure_venv dev``), in either mode of the harness: run by pytest in a child process whose imports
of pyspark and pyarrow fail as they do where neither is installed. The harness is a stand-in directory (its
mode marker only) and its master an address nothing is sent to: each case must skip before any traffic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.files import ROOT

INTEROP = ROOT / "tests" / "interop"
#: imported by the child pytest (-p): pyspark and pyarrow cannot be imported, as where they are absent
NO_SPARK = """
import importlib.abc
import sys


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "pyarrow"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""


@pytest.mark.parametrize(
    ("module", "mode"),
    [
        ("test_interop_tls_spark.py", "1"),
        ("test_interop_spark.py", None),
        ("test_interop_spark_stream.py", None),
    ],
)
def test_interop_spark_cases_skip_without_pyspark(module: str, mode: str | None, tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    harness.mkdir()
    if mode is not None:
        (harness / "TLS_AUTH").write_text(mode)
    (tmp_path / "no_spark.py").write_text(NO_SPARK)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(tmp_path),
        "TUBEMQ_REAL_MASTER": "127.0.0.1:9",
        "TUBEMQ_REAL_HOME": str(harness),
        "TUBEMQ_REAL_WEB": "",
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no_spark", "-p", "no:cacheprovider", module],
        cwd=INTEROP,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "failed" not in out and "error" not in out.lower(), out
    assert "skipped" in out and "pyspark" in out, out
