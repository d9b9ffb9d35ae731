"""What the client-example tests (test_clients.py) need from outside Python, made ready once and reused:
the npm packages of examples/js (exact versions from its package-lock.json, installed with ``npm ci`` into its
gitignored node_modules, again only when the lock file changes), openapi-python-client in a virtualenv in the
user's cache directory (outside the repository), and the tools on PATH (node >= 20, javac/java >= 17, which
scripts/ensure_client_tools.sh installs when missing). Each helper skips the calling test with the reason
when its tool truly cannot be had."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.files import ROOT

EXAMPLES = ROOT / "examples"
JS = EXAMPLES / "js"
#: the generator the Python example documents (examples/python/generated_client.py)
OPENAPI_PYTHON_CLIENT = "openapi-python-client==0.29.1"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tubemq-gateway"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _major(argv: list[str], pattern: str) -> int:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    found = re.search(pattern, out.stdout + out.stderr)
    return int(found.group(1)) if found else 0


def node() -> str:
    """node's path, when it is Node.js 20 or newer (eventsource 4 and the examples' fetch need it)."""
    path, npm = shutil.which("node"), shutil.which("npm")
    if path is None or npm is None:
        pytest.skip("node/npm are not installed and scripts/ensure_client_tools.sh could not install them")
    major = _major([path, "--version"], r"v(\d+)")
    if major < 20:
        pytest.skip(f"the Node.js examples need Node.js 20 or newer; this machine has {major}")
    return path


def java_tools() -> tuple[str, str]:
    """(javac, java), JDK 17 or newer (the example uses switch expressions and pattern matching)."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.skip("no JDK (javac, java) and scripts/ensure_client_tools.sh could not install one")
    major = _major([javac, "-version"], r"javac (\d+)")
    if major < 17:
        pytest.skip(f"the Java example needs JDK 17 or newer; this machine has {major}")
    return javac, java


def npm_packages() -> Path:
    """examples/js with its node_modules installed as package-lock.json pins them (npm ci, once per lock)."""
    node()
    lock = (JS / "package-lock.json").read_bytes()
    stamp = JS / "node_modules" / ".tubemq-gateway-lock-sha256"
    digest = hashlib.sha256(lock).hexdigest()
    with _locked("npm"):
        if not stamp.exists() or stamp.read_text() != digest:
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"],
                cwd=JS,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                pytest.fail(f"npm ci in examples/js failed (is the npm registry reachable?):\n{done.stderr}")
            stamp.write_text(digest)
    return JS


def openapi_python_client() -> Path:
    """The openapi-python-client command, from a virtualenv under the cache directory (made once)."""
    home = CACHE / OPENAPI_PYTHON_CLIENT.replace("==", "-")
    command = home / "bin" / "openapi-python-client"
    with _locked("openapi-python-client"):
        if not command.exists():
            shutil.rmtree(home, ignore_errors=True)
            venv.create(home, with_pip=True)
            done = subprocess.run(
                [str(home / "bin" / "python"), "-m", "pip", "install", "-q", OPENAPI_PYTHON_CLIENT],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                shutil.rmtree(home, ignore_errors=True)
                pytest.fail(
                    f"pip install {OPENAPI_PYTHON_CLIENT} failed (is PyPI reachable?):\n{done.stderr}"
                )
    return command


def python() -> str:
    """The interpreter running the tests (its environment has httpx and attrs, what generated code needs)."""
    return sys.executable


async def run_example(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 180.0) -> str:  # noqa: ASYNC109
    """Runs one example (or tool) to its end; its output, or an assertion error with both streams. Async,
    so that the gateway serving it keeps running in the test's event loop."""

    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{' '.join(argv)} did not end within {timeout}s") from None
    assert proc.returncode == 0, (
        f"{' '.join(argv)}: exit {proc.returncode}\nstdout: {stdout.decode()}\nstderr: {stderr.decode()}"
    )
    return stdout.decode()
