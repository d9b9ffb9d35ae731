"""Command line: ``tubemq-gateway <command> ...`` (or ``python -m gateway <command> ...``).

Commands:
  serve      run the HTTP gateway (on the embedded cluster when no master is configured)
  embedded   run an embedded TubeMQ-compatible cluster (master + brokers) in the foreground
  keys       make API keys (keys new --principal NAME [--role R ...])
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gateway import __version__
from gateway.embedded.auth import ServerAuth
from gateway.embedded.topics import TopicSpec, load_topic_file, parse_topic_specs
from gateway.event_loop import run_main as _run
from gateway.security.cli import add_keys_parser
from gateway.serve import add_serve_parser
from gateway.tubemq.wire import Credentials

# Not TubeMQ's own 8715/8123 (nor its 8716/8124 TLS and 8080/8081 web ports): an embedded cluster started
# on a machine that also runs a real TubeMQ must neither fail to bind nor be taken for the real one. A
# real cluster's masters keep 8715 as the port of an address given without one (gateway/upstream.py).
EMBEDDED_MASTER_PORT = 18715
EMBEDDED_BROKER_PORT_BASE = 18123
AUTH_PASSWORD_ENV = "TUBEMQ_EMBEDDED_AUTH_PASSWORD"

log = logging.getLogger("gateway")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tubemq-gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level (default: WARNING)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    add_serve_parser(commands)
    _add_embedded(commands)
    add_keys_parser(commands)
    return parser


def _add_embedded(commands: Any) -> None:
    embedded = commands.add_parser(
        "embedded",
        help="run an embedded TubeMQ-compatible cluster in the foreground",
        description=(
            "Run a TubeMQ-compatible master and brokers on this machine until Ctrl-C or SIGTERM. "
            "Every broker hosts every topic. Prints 'master: host:port', then one line per broker."
        ),
    )
    # The names serve gives the same settings (serve --embedded-topics ...); the short spellings stay
    # accepted for the scripts that have them.
    embedded.add_argument(
        "--embedded-topics",
        "--topics",
        dest="topics",
        default="",
        help="topics as name[:partitions[:stores]][,...], e.g. demo:4,orders:8 (--topics: the older "
        "spelling, still accepted)",
    )
    embedded.add_argument(
        "--embedded-topics-file",
        "--topics-file",
        dest="topics_file",
        type=Path,
        help='JSON file {"topics": [{"name": ..., "partitions": ...}, ...]} (--topics-file: the older '
        "spelling)",
    )
    embedded.add_argument(
        "--embedded-brokers",
        "--brokers",
        dest="brokers",
        type=int,
        default=1,
        help="number of brokers, ids 1..N (default: 1; --brokers: the older spelling)",
    )
    embedded.add_argument(
        "--embedded-data-dir",
        "--data-dir",
        dest="data_dir",
        type=Path,
        help="keep messages and offsets under DIR/broker-<id> (--data-dir: the older spelling)",
    )
    embedded.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    embedded.add_argument(
        "--master-port",
        type=int,
        default=EMBEDDED_MASTER_PORT,
        help=f"master port, 0 = any free port (default: {EMBEDDED_MASTER_PORT}, not TubeMQ's 8715)",
    )
    embedded.add_argument(
        "--broker-port-base",
        type=int,
        default=EMBEDDED_BROKER_PORT_BASE,
        help=f"broker i listens on BASE+i-1; 0 = any free ports (default: {EMBEDDED_BROKER_PORT_BASE})",
    )
    embedded.add_argument("--tls-cert", type=Path, help="PEM certificate: master and brokers listen with TLS")
    embedded.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert (if not inside it)")
    embedded.add_argument(
        "--tls-client-ca", type=Path, help="PEM CAs: clients must present a certificate they signed (two-way)"
    )
    embedded.add_argument(
        "--auth-user",
        help=f"require TubeMQ authentication as this user; the password comes from ${AUTH_PASSWORD_ENV}",
    )
    embedded.set_defaults(handler=_embedded, fail=embedded.error)


def _topics(args: argparse.Namespace) -> list[TopicSpec]:
    fail: Callable[[str], NoReturn] = args.fail
    specs: dict[str, TopicSpec] = {}
    try:
        if args.topics_file is not None:
            specs.update((s.name, s) for s in load_topic_file(args.topics_file))
        if args.topics.strip():
            for spec in parse_topic_specs(args.topics):
                if spec.name in specs:
                    raise ValueError(
                        f"topic {spec.name!r} is given in --embedded-topics and in --embedded-topics-file"
                    )
                specs[spec.name] = spec
    except (OSError, ValueError) as exc:
        fail(str(exc))
    if not specs:
        fail("give the topics with --embedded-topics and/or --embedded-topics-file")
    return list(specs.values())


def _embedded(args: argparse.Namespace) -> int:
    topics = _topics(args)
    if args.brokers < 1:
        args.fail("--embedded-brokers must be at least 1")
    base = args.broker_port_base
    ports = [base + i if base else 0 for i in range(args.brokers)]
    if not 0 <= args.master_port < 65536 or not all(0 <= p < 65536 for p in ports):
        args.fail("ports must be in 0..65535")
    return _run(_serve_embedded(args, topics, ports, _server_tls(args), _server_auth(args)))


def _server_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    fail: Callable[[str], NoReturn] = args.fail
    if args.tls_cert is None:
        if args.tls_key is not None or args.tls_client_ca is not None:
            fail("--tls-key and --tls-client-ca need --tls-cert")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
        if args.tls_client_ca is not None:
            context.load_verify_locations(args.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        fail(f"cannot load the TLS files: {exc}")
    return context


def _server_auth(args: argparse.Namespace) -> ServerAuth | None:
    fail: Callable[[str], NoReturn] = args.fail
    if args.auth_user is None:
        return None
    password = os.environ.get(AUTH_PASSWORD_ENV, "")
    if not password:
        fail(f"--auth-user needs the password in the environment variable {AUTH_PASSWORD_ENV}")
    try:
        return ServerAuth(Credentials(args.auth_user, password))
    except ValueError as exc:
        fail(str(exc))


async def _serve_embedded(
    args: argparse.Namespace,
    topics: list[TopicSpec],
    ports: list[int],
    tls: ssl.SSLContext | None = None,
    auth: ServerAuth | None = None,
) -> int:
    from gateway.embedded.cluster import EmbeddedCluster

    cluster = EmbeddedCluster(
        topics,
        brokers=args.brokers,
        data_dir=args.data_dir,
        host=args.host,
        master_port=args.master_port,
        broker_ports=ports,
        ssl=tls,
        auth=auth,
    )
    try:
        await cluster.start()
    except OSError as exc:
        print(f"tubemq-gateway: cannot start the embedded cluster: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"master: {cluster.master_address}{' (TLS)' if tls is not None else ''}")
        for broker in cluster.brokers:
            print(f"broker {broker.broker_id}: {broker.address}")
        print("topics: " + ", ".join(f"{t.name} ({t.partitions}x{t.stores})" for t in topics), flush=True)
        await _until_signalled()
    finally:
        await cluster.stop()
    return 0


async def _until_signalled() -> None:
    """Wait for SIGINT or SIGTERM (on platforms without signal handlers, for KeyboardInterrupt)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    try:
        for sig in signals:
            loop.add_signal_handler(sig, stop.set)
    except NotImplementedError:  # pragma: no cover - Windows
        await asyncio.Event().wait()
    try:
        await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:  # pragma: no cover - only where signal handlers are unavailable
        code = 0
    return code


if __name__ == "__main__":
    sys.exit(main())
