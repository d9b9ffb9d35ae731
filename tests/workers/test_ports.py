"""One gateway per port (issue #23 row 1): a gateway refuses to start, naming the port and its holder,
when its HTTP, gRPC or admin port is served already, with any worker count; workers of one gateway share."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.workers.ports import PortInUse, holder, probe, reserve
from tests.support.workers_support import WorkerGateway, serve_command, start_workers


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGateway]:
    gateway = start_workers(tmp_path_factory.mktemp("ports"), 2, "--admin-port", "0")
    yield gateway
    gateway.stop()


def _second(*args: str) -> subprocess.CompletedProcess[str]:
    command, env = serve_command(*args)
    env.pop("TUBEMQ_GATEWAY_WORKERS", None)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("workers", [None, "2", "1"])
@pytest.mark.parametrize("which", ["http", "grpc", "admin"])
def test_a_second_gateway_on_a_served_port_refuses_to_start(
    gw: WorkerGateway, which: str, workers: str | None
) -> None:
    ports = {"http": gw.http_port, "grpc": gw.grpc_port, "admin": gw.admin_port}
    taken = ports[which]
    assert taken
    args = {"http": "0", "grpc": "0", "admin": "0"}
    args[which] = str(taken)
    command = ["--http-port", args["http"], "--grpc-port", args["grpc"], "--admin-port", args["admin"]]
    if workers is not None:
        command += ["--workers", workers]
    done = _second(*command)
    assert done.returncode != 0, done.stderr
    name = {"http": "HTTP", "grpc": "gRPC", "admin": "admin"}[which]
    assert f"the {name} port {taken} " in done.stderr, done.stderr
    assert "already in use by pid " in done.stderr and "gateway" in done.stderr, done.stderr
    # the running gateway is untouched
    assert gw.proc.poll() is None


def _listener(reuse_port: bool) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("reuse_port", [True, False])
def test_probe_sees_a_listener_with_or_without_reuse_port(reuse_port: bool) -> None:
    with _listener(reuse_port) as sock:
        port = sock.getsockname()[1]
        with pytest.raises(PortInUse) as caught:
            probe("HTTP", "127.0.0.1", port)
        assert caught.value.port == port
        assert caught.value.held_by is not None and caught.value.held_by.startswith("pid ")
        assert holder(port) == caught.value.held_by
    probe("HTTP", "127.0.0.1", port)  # free again


def test_a_reservation_holds_the_port_for_workers_only(tmp_path: Path) -> None:
    held = reserve("gRPC", "127.0.0.1", 0)
    try:
        port = held.getsockname()[1]
        with pytest.raises(PortInUse):  # another gateway's probe, before any worker listens
            probe("gRPC", "127.0.0.1", port)
        with pytest.raises(PortInUse):
            reserve("gRPC", "127.0.0.1", port)
        # a worker of this gateway joins the port (SO_REUSEPORT)
        worker = socket.socket()
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        worker.bind(("127.0.0.1", port))
        worker.listen()
        worker.close()
    finally:
        held.close()


def test_connections_left_in_time_wait_do_not_hold_the_port() -> None:
    with _listener(True) as sock:
        port = sock.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = sock.accept()
        accepted.close()  # the server side closes first: its end waits in TIME_WAIT
        client.close()
    probe("HTTP", "127.0.0.1", port)
    reserve("HTTP", "127.0.0.1", port).close()
