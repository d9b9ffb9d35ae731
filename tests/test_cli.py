"""``python -m gateway embedded`` as a real subprocess: address line, a producer call, clean Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from gateway.__main__ import build_parser, main
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.connection import Connection
from gateway.tubemq.pb import MasterService_pb2 as pb
from gateway.tubemq.rpc import Method

ROOT = Path(__file__).resolve().parent.parent


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
        (["embedded"], "give the topics with --topics and/or --topics-file"),
        (["embedded", "--topics", "1bad"], "invalid topic name"),
        (["embedded", "--topics", "demo", "--brokers", "0"], "--brokers must be at least 1"),
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


def test_parser_has_only_real_commands() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert sorted(commands.choices) == ["embedded", "serve"]  # type: ignore[union-attr]
