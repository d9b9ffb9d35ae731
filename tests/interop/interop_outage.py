"""The real broker stopped and started again under a test (the harness's pid file and ``start.sh``), and the
gateway settings that let shielding and recovery happen within one: shared by the outage cases on plain TCP
(test_interop_outage.py) and on TLS with authentication (test_interop_tls_outage.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from interop_support import HOME, broker_pid, start_broker

__all__ = ["broker_stopped", "outage_settings"]


def outage_settings(heartbeat_interval: float) -> dict[str, Any]:
    """Short cooldowns and connect timeout, so shielding and recovery happen within the test."""
    return {
        "producer": {
            "heartbeat_interval": heartbeat_interval,
            "send_timeout": 5.0,
            "failure_cooldown": 5.0,
            "unavailable_cooldown": 5.0,
        },
        "pool": {"connect_timeout": 1.0},
    }


@contextlib.contextmanager
def broker_stopped() -> Iterator[None]:
    """Stop the real broker; always start it again (and wait until topics are publishable) on exit."""
    if not (HOME / "start.sh").is_file():
        pytest.skip(f"no {HOME}/start.sh: cannot stop and start the real broker")
    pid = broker_pid()
    if pid is None:
        pytest.skip(f"no running harness broker recorded in {HOME}/run/broker.pid")
    os.kill(pid, signal.SIGTERM)
    try:
        deadline = time.monotonic() + 40
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.2)
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)
            time.sleep(1)
        yield
    finally:
        start_broker()
