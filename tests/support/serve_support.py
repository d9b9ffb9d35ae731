"""``tubemq-gateway serve`` run as a real process by the tests: started (``start_serve``), waited for until it
is ready (``wait_ready``, ``http_ready``), and stopped as an orchestrator stops it (``stop_serve``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.files import ROOT


def start_serve(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``python -m gateway serve`` with ``args`` (on the embedded cluster unless ``env`` names masters), its
    output (stdout and stderr) piped for ``stop_serve`` to return."""
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TUBEMQ_GATEWAY_MASTERS": "", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def http_ready(client: httpx.Client | str) -> Callable[[], bool]:
    """A readiness check: ``/readyz`` of ``client`` (or of the base URL given) answers 200."""

    def ready() -> bool:
        try:
            if isinstance(client, str):
                return httpx.get(f"{client}/readyz", timeout=1).status_code == 200
            return client.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    return ready


def wait_ready(
    proc: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    timeout: float = 30.0,
    what: str = "ready",
    log: Path | None = None,
) -> None:
    """Poll ``ready`` until it holds; a process that exits meanwhile fails the test with its output (piped,
    or the file ``log`` it writes to), one that takes longer than ``timeout`` seconds fails it too."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            output = log.read_text() if log is not None else proc.stdout.read() if proc.stdout else b""
            raise AssertionError(f"serve exited with {proc.returncode} before it was {what}: {output!r}")
        assert time.monotonic() < deadline, f"gateway did not become {what} in {timeout:g} s"
        time.sleep(0.2)


def stop_serve(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Stop a serve process as an orchestrator does (SIGTERM, then up to 30 s to exit) and return its exit
    code and output; a process still running then is killed (and the TimeoutExpired raised)."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
        output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stdout:
            proc.stdout.close()
    return code, output
