"""A real ``redis-server`` (the Debian package, ``scripts/ensure_redis.sh``) on a free loopback port, with a
password, no persistence, in a directory of the test's; the tests that need one skip without it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.serving import free_port

PASSWORD = "redis-test-password-0123456789"


@dataclass
class RedisServer:
    proc: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def redis_binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found is None:
        pytest.skip(
            "redis-server not found: install the Debian package 'redis-server' (scripts/ensure_redis.sh)"
        )
    return found


def start_redis(directory: Path, port: int | None = None) -> RedisServer:
    """Start redis-server on ``port`` (a free one by default) and wait until it answers."""
    binary = redis_binary()
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [
        binary,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--requirepass",
        PASSWORD,
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
        "--logfile",
        str(directory / "redis.log"),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    server = RedisServer(proc, port, directory)
    deadline = time.monotonic() + 10
    while True:
        assert proc.poll() is None, (directory / "redis.log").read_text(errors="replace")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return server
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)


@contextmanager
def running_redis(directory: Path) -> Iterator[RedisServer]:
    server = start_redis(directory)
    try:
        yield server
    finally:
        server.stop()
