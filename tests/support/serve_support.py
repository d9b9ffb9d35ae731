"""``tubemq-gateway serve`` run as a real process by the tests: a free port to give it, and its stop."""

from __future__ import annotations

import signal
import socket
import subprocess


def free_port() -> int:
    """A loopback port free now (bound and released: another process may take it before the caller does)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
