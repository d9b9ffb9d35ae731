"""A replica stopped while its worker processes are still starting (a rollout that changes its mind, a pod
deleted during start-up) exits 0: a worker that the supervisor's SIGTERM ends before it serves has accepted
nothing, so its stop is as clean as a graceful one."""

from __future__ import annotations

import signal
import time

from tests.support.serve_support import start_serve


def test_a_replica_stopped_while_its_workers_start_exits_0() -> None:
    proc = start_serve(["--http-host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--workers", "2"])
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        # the moment both worker processes exist, long before they have imported the app and serve
        while sum('"msg":"worker process started"' in line for line in lines) < 2:
            assert time.monotonic() < deadline, "the workers did not start in 60 s"
            line = proc.stdout.readline().decode(errors="replace")
            assert line, f"serve exited with {proc.wait()} before starting its workers: {''.join(lines)}"
            lines.append(line)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + proc.stdout.read().decode(errors="replace")
    proc.stdout.close()
    assert code == 0, output
    assert '"msg":"worker processes stopped"' in output, output
