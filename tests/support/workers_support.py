"""``tubemq-gateway serve --workers N`` as a real process tree for the tests: the supervisor on loopback ports
chosen by the kernel, its embedded cluster, and clients pinned to one worker (through the worker's private
unix socket) or going through the shared port (the kernel picks the worker per connection)."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.auth_support import AuthFiles, write_auth_files
from tests.support.files import ROOT

#: consumer intervals that keep the tests in seconds
FAST_CONSUMERS = {
    "TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "0.5",
    "TUBEMQ_GATEWAY_CONSUMERS__EMPTY_FETCH_WAIT": "0.05",
    "TUBEMQ_GATEWAY_CONSUMERS__SSE_KEEPALIVE": "0.3",
    "TUBEMQ_GATEWAY_CONSUMERS__REBALANCE_COMMIT_WAIT": "0.3",
}


@dataclass
class WorkerGateway:
    """A running ``serve --workers N``: the supervisor process and what its first log line tells."""

    proc: subprocess.Popen[bytes]
    log: Path
    count: int
    http_port: int
    grpc_port: int
    socket_dir: Path
    admin_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def pinned(self, worker: int, **options: Any) -> httpx.AsyncClient:
        """A client whose every request goes to ``worker`` (its private listener)."""
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket_dir / f"w{worker}.sock"))
        return httpx.AsyncClient(transport=transport, base_url=self.url, timeout=15.0, **options)

    def shared(self, **options: Any) -> httpx.AsyncClient:
        """A client of the shared port (a new connection may land on any worker)."""
        return httpx.AsyncClient(base_url=self.url, timeout=15.0, **options)

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records written so far."""
        return _records(self.log)

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def serve_command(*args: str) -> tuple[list[str], dict[str, str]]:
    """``python -m gateway serve`` on 127.0.0.1 with ``args``, and its environment (the embedded cluster)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "TUBEMQ_GATEWAY_MASTERS": ""}
    return [sys.executable, "-m", "gateway", "serve", "--http-host", "127.0.0.1", *args], environment


def start_workers(
    tmp: Path,
    count: int | None,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    session: bool = False,
) -> WorkerGateway:
    """Start ``serve`` (``--workers count`` unless None: the default) on the embedded cluster and wait until
    every worker answers /readyz on its private listener. With ``cwd``, the supervisor runs in that
    directory, started like the installed ``tubemq-gateway`` script (no current directory on its path).
    With ``session``, in a session (and process group) of its own, which ``os.killpg`` ends as a whole."""
    log = tmp / "gateway.log"
    command, environment = serve_command("--http-port", "0", "--grpc-port", "0", *args)
    if cwd is not None:
        command.insert(1, "-P")
    environment.pop("TUBEMQ_GATEWAY_WORKERS", None)
    # the supervisor's private directory goes to TMPDIR
    environment.update({"TMPDIR": str(tmp), **FAST_CONSUMERS, **(env or {})})
    if count is not None:
        command += ["--workers", str(count)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=environment, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=session
        )
    gateway: WorkerGateway | None = None
    try:
        deadline = time.monotonic() + 90
        while gateway is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no worker start in 90 s:\n{log.read_text()}"
            for record in _records(log):
                if record.get("msg") == "starting worker processes":
                    gateway = WorkerGateway(
                        proc,
                        log,
                        record["workers"],
                        record["http_port"],
                        record["grpc_port"],
                        Path(record["socket_dir"]),
                        record["admin_port"],
                    )
            time.sleep(0.1)
        for worker in range(gateway.count):
            _wait_ready(gateway, worker, deadline)
        return gateway
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _records(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith('{"ts"'):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _wait_ready(gateway: WorkerGateway, worker: int, deadline: float) -> None:
    path = str(gateway.socket_dir / f"w{worker}.sock")
    while not _ready(path):
        assert gateway.proc.poll() is None, gateway.log.read_text()
        assert time.monotonic() < deadline, f"worker {worker} not ready:\n{gateway.log.read_text()}"
        time.sleep(0.1)


def _ready(path: str) -> bool:
    """Whether the worker listening on ``path`` answers /readyz with 200 (a plain socket: httpx's unix
    transport leaks the socket of a refused connection)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: worker\r\nConnection: close\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False


def owner_worker(instance_id: str) -> int | None:
    """The worker an instance id names (read from the id's owner part; the tag is not checked here)."""
    owner = instance_id.split(".")[0]
    text = base64.urlsafe_b64decode(owner + "=" * (-len(owner) % 4)).decode()
    worker = text.partition("#")[2].partition(";")[0]
    return int(worker) if worker else None


def samples(exposition: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples called ``name`` in a Prometheus exposition, with their labels."""
    from prometheus_client.parser import text_string_to_metric_families

    found = []
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name:
                found.append((dict(sample.labels), sample.value))
    return found


def proc_status(pid: int, field: str) -> int:
    """A size field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``: kB there) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def worker_pids(gateway: WorkerGateway) -> list[int]:
    """The process ids of the gateway's worker processes."""
    pid = gateway.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    pids = [int(c) for c in children if b"gateway.workers.child" in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert len(pids) == gateway.count, pids
    return pids


@contextmanager
def keyed_workers(tmp: Path, count: int, *args: str, **env: str) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    """:func:`start_workers` with ``serve`` arguments ``args``, API keys required (auth_support's keys and
    rules) and ``env``; stopped at the end."""
    files = write_auth_files(tmp)
    gateway = start_workers(tmp, count, *args, env=files.environment(**env))
    try:
        yield gateway, files
    finally:
        gateway.stop()


async def poll_as(
    client: httpx.AsyncClient, base: str, headers: dict[str, str], **params: Any
) -> list[dict[str, Any]]:
    """One poll of the instance at ``base`` with ``headers`` (utf8 values, 500 ms unless ``params`` say
    otherwise); its messages."""
    query = {"timeout_ms": 500, "format": "utf8", **params}
    answer = await client.get(f"{base}/messages", params=query, headers=headers)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages
