"""``python -m gateway embedded`` as a real subprocess: address line, a producer call, clean Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from gateway.__main__ import AUTH_PASSWORD_ENV, build_parser, main
from gateway.config import TubeMQSettings
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import CertificateFailure
from gateway.tubemq.net.connection import Connection
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer
from gateway.tubemq.wire.pb import MasterService_pb2 as pb
from gateway.tubemq.wire.rpc import Method
from gateway.upstream import upstream_options
from tests.support.files import ROOT
from tests.support.tls_support import make_pki


async def _read_line(stream: asyncio.StreamReader) -> str:
    async with asyncio.timeout(20.0):
        return (await stream.readline()).decode().strip()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_embedded_command_runs_a_cluster_until_signalled(tmp_path: Path, sig: signal.Signals) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics": [{"name": "orders", "partitions": 2}]}')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "embedded",
        "--topics",
        "demo:4",
        "--topics-file",
        str(topics),
        "--brokers",
        "2",
        "--master-port",
        "0",
        "--broker-port-base",
        "0",
        "--data-dir",
        str(tmp_path / "d"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = await _read_line(proc.stdout)
        assert first.startswith("master: "), first + (await proc.stderr.read()).decode()
        master = NodeAddress.parse(first.removeprefix("master: "))
        brokers = [await _read_line(proc.stdout) for _ in range(2)]
        assert [line.split(":")[0] for line in brokers] == ["broker 1", "broker 2"]
        assert await _read_line(proc.stdout) == "topics: orders (2x1), demo (4x1)"

        link = Connection(master)
        await link.connect(5.0)
        try:
            register = pb.RegisterRequestP2M(clientId="cli-test", brokerCheckSum=-1, hostName="127.0.0.1")
            answer = await link.request(Method.PRODUCER_REGISTER, register, 5.0)
            assert isinstance(answer, pb.RegisterResponseM2P) and answer.success
            assert len(answer.brokerInfos) == 2
        finally:
            await link.close()
        proc.send_signal(sig)
        async with asyncio.timeout(20.0):
            assert await proc.wait() == 0
        assert (tmp_path / "d" / "broker-2").is_dir()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["embedded"], "give the topics with --embedded-topics and/or --embedded-topics-file"),
        (["embedded", "--topics", "1bad"], "invalid topic name"),
        (["embedded", "--topics", "demo", "--brokers", "0"], "--embedded-brokers must be at least 1"),
        (["embedded", "--topics", "demo", "--master-port", "70000"], "ports must be in 0..65535"),
        ([], "the following arguments are required: <command>"),
    ],
)
def test_bad_arguments_exit_with_usage(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_embedded_and_serve_name_the_embedded_settings_alike(capsys: pytest.CaptureFixture[str]) -> None:
    """One name for one thing: serve's --embedded-* flags are the embedded command's too; the embedded
    command's older short spellings give the same arguments, and its --help says they are the older ones."""
    parser = build_parser()
    new = ["--embedded-topics", "demo:4", "--embedded-topics-file", "t.json", "--embedded-brokers", "2"]
    new += ["--embedded-data-dir", "d"]
    old = ["--topics", "demo:4", "--topics-file", "t.json", "--brokers", "2", "--data-dir", "d"]
    assert parser.parse_args(["embedded", *new]) == parser.parse_args(["embedded", *old])
    serve = {flag for flag in parser.parse_args(["serve"]).__dict__}
    assert {"embedded_topics", "embedded_brokers", "embedded_data_dir"} <= serve
    with pytest.raises(SystemExit):
        main(["embedded", "--help"])
    usage = " ".join(capsys.readouterr().out.split())  # as one line: argparse wraps the help
    for name in ("topics", "brokers", "data-dir"):
        assert f"--embedded-{name}" in usage and f"--{name}: the older spelling" in usage


def test_parser_has_only_real_commands() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert sorted(commands.choices) == ["embedded", "keys", "serve"]  # type: ignore[union-attr]


async def test_embedded_command_serves_tls_and_demands_credentials(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", name="cli")
    env = {**os.environ, "PYTHONPATH": str(ROOT), AUTH_PASSWORD_ENV: "cli-pw"}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "embedded", "--topics", "demo:2", "--master-port", "0"),
        *("--broker-port-base", "0", "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key)),
        *("--tls-client-ca", str(pki.ca), "--auth-user", "cli"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = await _read_line(proc.stdout)
        assert first.endswith(" (TLS)"), first + (await proc.stderr.read()).decode()
        master = NodeAddress.parse(first.removeprefix("master: ").removesuffix(" (TLS)"))
        tls = {"enabled": True, "ca_file": str(pki.ca), "cert_file": str(pki.client.cert)}
        tls["key_file"] = str(pki.client.key)
        for password, works in (("cli-pw", True), ("wrong", False)):
            settings = TubeMQSettings.model_validate(
                {"tls": tls, "auth": {"username": "cli", "password": password}}
            )
            async with ConnectionPool(**upstream_options(settings).pool_kwargs()) as pool:  # type: ignore[arg-type]
                producer = Producer([master], pool=pool)
                try:
                    if works:
                        await producer.start()
                        await producer.register_topic("demo")
                        await producer.send("demo", b"secured")
                    else:
                        with pytest.raises(CertificateFailure):
                            await producer.start()
                finally:
                    await producer.close()
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20.0):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_embedded_tls_and_auth_arguments_are_checked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(AUTH_PASSWORD_ENV, raising=False)
    cases = [
        (["--tls-key", "k.pem"], "--tls-key and --tls-client-ca need --tls-cert"),
        (["--tls-cert", str(tmp_path / "none.pem")], "cannot load the TLS files"),
        (["--auth-user", "cli"], AUTH_PASSWORD_ENV),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as caught:
            main(["embedded", "--topics", "demo", *extra])
        assert caught.value.code == 2
        assert message in capsys.readouterr().err


def test_embedded_defaults_leave_tubemq_ports_free() -> None:
    """A real TubeMQ on the same machine listens on 8715 (master), 8716 (TLS), 8080 (web) and 8123, 8124,
    8081 (broker): the embedded cluster's default ports are none of them, whatever the broker count."""
    args = build_parser().parse_args(["embedded", "--topics", "demo", "--brokers", "4"])
    real = {8715, 8716, 8080, 8123, 8124, 8081}
    ports = {args.master_port, *(args.broker_port_base + i for i in range(args.brokers))}
    assert args.master_port == 18715 and args.broker_port_base == 18123
    assert not ports & real
