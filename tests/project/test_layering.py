"""The one-way import flow of docs/architecture.md, checked on the source text.

Every module under ``gateway/`` is parsed with :mod:`ast` (nothing is imported), so a violation is caught
even inside a function body or an ``if TYPE_CHECKING:`` block. Generated protobuf modules are skipped.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.files import ROOT
from tests.support.imports import GATEWAY, Import, imports_of, module_name, modules, resolve_from

# Third-party code the client core and the embedded cluster may use: protobuf, nothing else, but for an
# accelerator the core takes when it is installed and does without (zlib's CRC-32 stands in for ISA-L's:
# gateway/tubemq/wire/payload.py), imported only in a try whose ImportError falls back on the stdlib.
CORE_THIRD_PARTY = frozenset({"google.protobuf"})
CORE_OPTIONAL = frozenset({"isal"})
WEB_AND_METRICS = (
    "fastapi",
    "starlette",
    "grpc",
    "grpc_health",
    "grpc_reflection",
    "uvicorn",
    "prometheus_client",
)
ABOVE_CORE = (
    "gateway.embedded",
    "gateway.service",
    "gateway.security",
    "gateway.api",
    "gateway.grpc",
    "gateway.observability",
    "gateway.spark",
    "gateway.config",
    "gateway.runtime",
    "gateway.upstream",
    "gateway.serve",
    "gateway.healthcheck",
    "gateway.shutdown",
    "gateway.tls",
    "gateway.event_loop",
    "gateway.workers",
    "gateway.__main__",
)
# Inside the core (docs/architecture.md § "Layers"): a module may import its own rank and the ranks below it.
# Keys are paths under gateway/tubemq; a subpackage key covers every module in it (its face included).
CORE_RANKS: dict[str, int] = {
    # the shared vocabulary: error classes, the event bus, broker addresses, TubeMQ's name rules
    "errors": 0,
    "refusals": 0,
    "events": 0,
    "address": 0,
    "randomness": 0,
    "names": 0,
    # wire: protobuf messages and payload/metadata codecs, then framing, then the RPC envelope
    "wire.pb": 1,
    "wire.payload": 1,
    "wire.attributes": 1,
    "wire.meta": 1,
    "wire.client_id": 1,
    "wire.auth": 1,
    "wire.methods": 1,
    "wire.strict": 1,
    # the switch between the compiled per-message loops and the pure ones, and the slots maker it picks;
    # each compiled module (its stub, checked against its Protocol) at the level of the module it speeds up
    "wire.speedups": 1,
    "wire.slots": 1,
    "wire._slots": 1,
    "wire.frame": 2,
    "wire.frame_decoder": 2,
    "wire._frame_decoder": 2,
    "wire.rpc": 3,
    "wire._rpc": 3,
    "wire.rpc_server": 3,
    "wire.send_answers": 3,
    "wire._send_answers": 3,
    "wire": 3,
    # net: leaf helpers, then one link (the socket, then the request multiplexer on it), the pool of links
    # (its records, then its behaviour), the master client
    "net.backoff": 1,
    "net.breaker": 1,
    "net.teardown": 1,
    "net.link_protocol": 1,
    "net.memory_transport": 1,
    "net.memory": 1,
    "net.outcomes": 1,
    "net.link": 4,
    "net.multiplex": 4,
    "net.connection": 4,
    "net.pool_state": 5,
    "net.pool": 5,
    "net.master": 6,
    "net": 6,
    # the two clients side by side, then the partition-explicit readers built on the consumer's codecs
    "producer": 7,
    "consumer": 7,
    "ranges": 8,
}
SANS_IO = (
    "wire/frame.py",
    "wire/frame_decoder.py",
    "wire/rpc.py",
    "wire/rpc_server.py",
    "wire/send_answers.py",
    "wire/methods.py",
    "wire/strict.py",
)
IO_MODULES = ("asyncio", "socket", "ssl", "selectors")


def _within(target: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(target == prefix or target.startswith(prefix + ".") for prefix in prefixes)


def _third_party(target: str) -> bool:
    return target.split(".")[0] not in sys.stdlib_module_names and target.split(".")[0] != "gateway"


def _core_module(target: str) -> str | None:
    """``wire.rpc`` for ``gateway.tubemq.wire.rpc.X``, ``errors`` for ``gateway.tubemq.errors``; None outside
    the core and for the package root."""
    parts = target.split(".")
    if parts[:2] != ["gateway", "tubemq"] or len(parts) < 3:
        return None
    rest = parts[2:]
    for size in range(len(rest), 0, -1):
        if ".".join(rest[:size]) in CORE_RANKS:
            return ".".join(rest[:size])
    return ".".join(rest)


def _core_module_of(path: Path) -> str:
    return _core_module(module_name(path)) or ""


def _layer(name: str) -> int:
    rank = CORE_RANKS.get(name)
    if rank is None:
        raise AssertionError(f"gateway.tubemq.{name} has no rank in CORE_RANKS: give it one")
    return rank


def _violations(paths: tuple[Path, ...], broken: Callable[[Import], bool]) -> list[str]:
    return [str(imp) for path in paths for imp in imports_of(path) if broken(imp)]


def core_breaks_rules(imp: Import) -> bool:
    return _within(imp.target, ABOVE_CORE) or (
        _third_party(imp.target) and not _within(imp.target, CORE_THIRD_PARTY | CORE_OPTIONAL)
    )


def _optional_imports_unguarded(path: Path) -> list[str]:
    """Imports of CORE_OPTIONAL packages in ``path`` that sit outside a try with an ImportError handler."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
            for h in node.handlers
        ):
            guarded.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    bad = []
    for node in ast.walk(tree):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        if any(_within(name, CORE_OPTIONAL) for name in names) and id(node) not in guarded:
            bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return bad


def test_the_walker_sees_the_packages_it_checks() -> None:
    # An empty glob would make every rule below pass vacuously.
    assert len(modules("tubemq")) > 20
    assert len(modules("embedded")) > 10
    assert len(modules("service")) > 3
    assert len(modules("security")) > 5
    assert not [p for p in modules("tubemq") if p.name.endswith("_pb2.py")]


def test_the_walker_resolves_relative_and_submodule_imports() -> None:
    inner = GATEWAY / "tubemq" / "net" / "pool.py"
    assert "gateway.tubemq.net.connection" in {imp.target for imp in imports_of(inner)}
    node = ast.parse("from ...service import errors\nfrom . import connection\n").body
    assert isinstance(node[0], ast.ImportFrom) and isinstance(node[1], ast.ImportFrom)
    assert resolve_from(node[0], inner) == "gateway.service"
    assert resolve_from(node[1], inner) == "gateway.tubemq.net"


def test_the_package_root_is_a_leaf() -> None:
    # The core reads gateway.__version__, so the root must stay free of imports from anywhere above it.
    assert [str(imp) for imp in imports_of(GATEWAY / "__init__.py")] == []


def test_the_core_imports_nothing_above_it_and_no_framework() -> None:
    bad = _violations(modules("tubemq"), core_breaks_rules)
    assert bad == [], "gateway/tubemq is the bottom layer (stdlib and protobuf only):\n" + "\n".join(bad)
    unguarded = [where for path in modules("tubemq") for where in _optional_imports_unguarded(path)]
    assert unguarded == [], "the core does without its accelerators (try, except ImportError):\n" + "\n".join(
        unguarded
    )


def test_the_embedded_cluster_builds_only_on_the_core() -> None:
    def above(imp: Import) -> bool:
        foreign = _third_party(imp.target) and not _within(imp.target, CORE_THIRD_PARTY)
        ours = imp.target.split(".")[0] == "gateway"
        return foreign or (ours and not _within(imp.target, ("gateway.tubemq", "gateway.embedded")))

    bad = _violations(modules("embedded"), above)
    assert bad == [], "gateway/embedded may import only gateway.tubemq, stdlib and protobuf:\n" + "\n".join(
        bad
    )


def test_the_service_layer_is_framework_free() -> None:
    def framework(imp: Import) -> bool:
        return _within(imp.target, WEB_AND_METRICS) or _within(
            imp.target,
            (
                "gateway.api",
                "gateway.grpc",
                "gateway.runtime",
                "gateway.serve",
                "gateway.__main__",
                "gateway.security",
                "gateway.workers",
            ),
        )

    bad = _violations(modules("service"), framework)
    assert bad == [], "gateway/service sits below the adapters (and below gateway/security):\n" + "\n".join(
        bad
    )


def test_worker_context_and_cpu_count_are_leaves() -> None:
    """The runtime and the adapters read a worker's context; it (and the CPU count) import nothing of the
    gateway, so the process wiring above them cannot form a cycle."""
    leaves = (GATEWAY / "workers" / "context.py", GATEWAY / "workers" / "cpus.py")
    bad = _violations(leaves, lambda imp: imp.target.split(".")[0] == "gateway")
    assert bad == [], "gateway/workers/context.py and cpus.py import only the stdlib:\n" + "\n".join(bad)


def security_breaks_rules(imp: Import) -> bool:
    """gateway/security sits beside the service layer, below the adapters: no web framework, no adapter,
    no process wiring, no client core; of the service layer only the principal, the errors and the access
    interface."""
    if _within(imp.target, WEB_AND_METRICS):
        return True
    if _within(imp.target, ("gateway.service",)):
        return not _within(
            imp.target, ("gateway.service.principal", "gateway.service.errors", "gateway.service.access")
        )
    return imp.target.split(".")[0] == "gateway" and not _within(
        imp.target, ("gateway.security", "gateway.config")
    )


def test_security_is_framework_free_and_below_the_adapters() -> None:
    bad = _violations(modules("security"), security_breaks_rules)
    assert bad == [], (
        "gateway/security may import stdlib, jwt, httpx, gateway.config, its own modules and the "
        + ("service layer's principal/errors/access:\n" + "\n".join(bad))
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import starlette.types\n", True),
        ("from gateway.api import errors\n", True),
        ("from gateway.service.consumers import ConsumerService\n", True),
        ("from gateway.tubemq.net import pool\n", True),
        ("from gateway.service.principal import Principal\n", False),
        ("import jwt\n", False),
        ("from . import rules\n", False),
    ],
)
def test_a_planted_security_import_is_caught(source: str, expected: bool) -> None:
    planted = GATEWAY / "security" / "planted.py"
    assert any(security_breaks_rules(imp) for imp in imports_of(planted, source)) is expected


def test_every_core_module_has_a_rank() -> None:
    for path in modules("tubemq"):
        if path.parent != GATEWAY / "tubemq" or path.name != "__init__.py":
            _layer(_core_module_of(path))


def test_core_modules_import_only_their_own_layer_or_lower() -> None:
    def upward(imp: Import) -> bool:
        target = _core_module(imp.target)
        return target is not None and _layer(target) > _layer(_core_module_of(imp.path))

    bad = _violations(tuple(p for p in modules("tubemq") if p != GATEWAY / "tubemq" / "__init__.py"), upward)
    assert bad == [], "shared <- wire <- net <- producer | consumer <- ranges:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        ("wire/planted.py", "from gateway.tubemq.net.pool import ConnectionPool\n", True),
        ("wire/frame.py", "from .rpc import RpcRequest\n", True),
        ("net/connection.py", "from gateway.tubemq.net.master import MasterClient\n", True),
        ("net/link.py", "from gateway.tubemq.net.pool import ConnectionPool\n", True),
        ("wire/methods.py", "from gateway.tubemq.wire.rpc import encode_request\n", True),
        ("net/pool_state.py", "from gateway.tubemq.net.connection import Connection\n", False),
        ("producer/planted.py", "from gateway.tubemq.ranges.reader import RangeReader\n", True),
        ("net/pool.py", "from gateway.tubemq.wire import rpc\n", False),
        ("ranges/planted.py", "from gateway.tubemq.consumer.batch import ConsumedBatch\n", False),
    ],
)
def test_a_planted_upward_core_import_is_caught(where: str, source: str, expected: bool) -> None:
    planted = GATEWAY / "tubemq" / where
    own = _core_module_of(planted)
    ranks = [_layer(t) for imp in imports_of(planted, source) if (t := _core_module(imp.target))]
    assert (max(ranks) > _layer(own)) is expected


def test_producer_and_consumer_do_not_import_each_other() -> None:
    def crossing(imp: Import) -> bool:
        own, target = _core_module_of(imp.path), _core_module(imp.target) or ""
        return {own.split(".")[0], target.split(".")[0]} == {"producer", "consumer"}

    bad = _violations(modules("tubemq"), crossing)
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("name", SANS_IO)
def test_the_codecs_are_sans_io(name: str) -> None:
    path = GATEWAY / "tubemq" / name
    bad = [str(imp) for imp in imports_of(path) if _within(imp.target, IO_MODULES)]
    assert bad == [], f"{name} works on bytes only:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import fastapi\n", True),
        ("from gateway.service.errors import ServiceError\n", True),
        ("from ..observability import metrics\n", True),
        ("def f() -> None:\n    from gateway.api import app\n", True),
        ("from gateway.tubemq.wire import rpc\n", False),
        ("from . import rpc\n", False),
        ("import google.protobuf.message\n", False),
    ],
)
def test_a_planted_import_is_caught(source: str, expected: bool) -> None:
    # The rules must be able to fail: read a made-up core module that breaks (or keeps) them.
    planted = GATEWAY / "tubemq" / "planted.py"
    assert any(core_breaks_rules(imp) for imp in imports_of(planted, source)) is expected


# --- every package: which of the gateway's own packages and modules each may import -----------------------
# Bottom to top (docs/architecture.md § Layers). A module may always import its own package, the package root
# (``gateway.__version__``) and the stdlib; of the gateway, only what its row lists. The core and the
# embedded cluster have their own, stricter tests above; gateway/workers/context.py and cpus.py are leaves.
# An entry "module:Name" allows only that name from the module (a core face); "module" allows all of it.
_ADAPTER_CORE = (
    "gateway.tubemq.events",
    "gateway.tubemq.net:ConnectionPool",
    "gateway.tubemq.producer:SendResult",
    # compiled twins of the adapters' loops load by the core's switch (gateway/grpc/_consumed_wire.c)
    "gateway.tubemq.wire:compiled_or",
)
_PROCESS = (
    "gateway.config",
    "gateway.tls",
    "gateway.shutdown",
    "gateway.event_loop",
    "gateway.workers.context",
)
ALLOWED: dict[str, tuple[str, ...]] = {
    # redaction of consumer instance ids is the one thing logs take from the service layer
    "gateway.observability": ("gateway.tubemq", "gateway.service.instance_id"),
    "gateway.service": ("gateway.tubemq", "gateway.observability"),
    "gateway.config": (
        "gateway.service.peers",
        "gateway.service.consume_limits",
        "gateway.tubemq.wire:local_ipv4",
    ),
    "gateway.upstream": ("gateway.config", "gateway.tubemq"),
    "gateway.tls": ("gateway.config",),
    "gateway.shutdown": (),
    # the container's HEALTHCHECK: the settings, nothing else of the gateway (it runs every few seconds)
    "gateway.healthcheck": ("gateway.config",),
    # runs the process's main coroutine (on uvloop when installed): the CLI's and the supervisor's
    "gateway.event_loop": (),
    "gateway.spark": ("gateway.tubemq", "gateway.config", "gateway.upstream"),
    "gateway.runtime": (
        "gateway.tubemq",
        "gateway.embedded",
        "gateway.observability",
        "gateway.service",
        "gateway.security",
        "gateway.config",
        "gateway.upstream",
        "gateway.workers.context",
    ),
    # the adapters: services through the runtime, never the embedded cluster or each other
    "gateway.api": (
        "gateway.runtime",
        "gateway.service",
        "gateway.security",
        "gateway.observability",
        *_PROCESS,
        *_ADAPTER_CORE,
    ),
    "gateway.grpc": (
        "gateway.runtime",
        "gateway.service",
        "gateway.security",
        "gateway.observability",
        *_PROCESS,
        *_ADAPTER_CORE,
    ),
    # process wiring on top: HTTP and gRPC hosted in one process over the runtime; serve, the CLI, workers
    "gateway.process_server": ("gateway.grpc", "gateway.runtime", *_PROCESS),
    "gateway.serve": (
        "gateway.api",
        "gateway.grpc",
        "gateway.process_server",
        "gateway.runtime",
        "gateway.security",
        "gateway.observability",
        "gateway.upstream",
        "gateway.workers",
        # the C allocator's thresholds, set once at the process's start (gateway/tubemq/net/allocator.py)
        "gateway.tubemq.net:retain_freed_memory",
        *_PROCESS,
    ),
    "gateway.workers": (
        "gateway.serve",
        "gateway.runtime",
        "gateway.embedded",
        "gateway.observability",
        "gateway.upstream",
        *_PROCESS,
    ),
}
#: third-party frameworks each package must not touch (the web stack and metrics stay in the adapters and
#: observability; the runtime wires services, it serves nothing)
FORBIDDEN_THIRD_PARTY: dict[str, tuple[str, ...]] = {
    "gateway.service": WEB_AND_METRICS,
    "gateway.runtime": WEB_AND_METRICS,
    "gateway.config": WEB_AND_METRICS,
    "gateway.upstream": WEB_AND_METRICS,
    "gateway.spark": WEB_AND_METRICS,
    "gateway.observability": ("fastapi", "grpc", "grpc_health", "grpc_reflection", "uvicorn"),
    "gateway.api": ("grpc", "grpc_health", "grpc_reflection"),
    "gateway.grpc": ("fastapi", "starlette", "uvicorn"),
}


def _paths_of(name: str) -> tuple[Path, ...]:
    relative = name.split(".", 1)[1]
    single = GATEWAY / f"{relative}.py"
    return (single,) if single.is_file() else modules(relative)


def _allows(entry: str, imp: Import) -> bool:
    module, _, name = entry.partition(":")
    if name:
        return imp.target == module and imp.name == name
    return _within(imp.target, (module,))


def breaks_package_rules(owner: str, imp: Import) -> bool:
    target = imp.target
    if _within(target, FORBIDDEN_THIRD_PARTY.get(owner, ())):
        return True
    if target.split(".")[0] != "gateway" or target == "gateway" or _within(target, (owner,)):
        return False
    return not any(_allows(entry, imp) for entry in ALLOWED[owner])


def test_every_package_has_rules() -> None:
    """A new package (or top-level module) under gateway/ must get a row here, so nothing grows unchecked."""
    checked_elsewhere = {"gateway.tubemq", "gateway.embedded", "gateway.security", "gateway.__main__"}
    found = {f"gateway.{p.stem}" for p in GATEWAY.glob("*.py") if p.stem != "__init__"}
    found |= {f"gateway.{p.parent.name}" for p in GATEWAY.glob("*/*.py")}
    assert found - checked_elsewhere == set(ALLOWED)


@pytest.mark.parametrize("owner", sorted(ALLOWED))
def test_each_package_imports_only_what_its_row_allows(owner: str) -> None:
    paths = _paths_of(owner)
    assert paths, owner
    bad = _violations(paths, lambda imp: breaks_package_rules(owner, imp))
    assert bad == [], f"{owner} may import {ALLOWED[owner]} of the gateway:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("owner", "source", "expected"),
    [
        ("gateway.observability", "from gateway.grpc.interceptors import GrpcCallFinished\n", True),
        ("gateway.observability", "from gateway.api import app\n", True),
        ("gateway.observability", "import grpc\n", True),
        ("gateway.observability", "from gateway.service.instance_id import redact_text\n", False),
        ("gateway.service", "from gateway.runtime import Runtime\n", True),
        ("gateway.runtime", "from gateway.api.app import create_app\n", True),
        ("gateway.runtime", "import fastapi\n", True),
        ("gateway.api", "from gateway.grpc import errors\n", True),
        ("gateway.api", "from gateway.embedded.cluster import EmbeddedCluster\n", True),
        ("gateway.api", "from gateway.tubemq.producer.client import Producer\n", True),
        ("gateway.api", "from gateway.tubemq.producer import Producer\n", True),
        ("gateway.api", "from gateway.tubemq.producer import SendResult\n", False),
        ("gateway.config", "from gateway.tubemq.wire import local_ipv4\n", False),
        ("gateway.config", "from gateway.tubemq.wire import Credentials\n", True),
        ("gateway.grpc", "from gateway.api.errors import STATUS_BY_KIND\n", True),
        ("gateway.grpc", "def f() -> None:\n    import fastapi\n", True),
        ("gateway.grpc", "from gateway.service.errors import ServiceError\n", False),
        ("gateway.spark", "from gateway.service.ranges import RangeService\n", True),
        ("gateway.spark", "from gateway.tubemq.net import ConnectionPool\n", False),
    ],
)
def test_a_planted_package_import_is_caught(owner: str, source: str, expected: bool) -> None:
    planted = GATEWAY / owner.split(".", 1)[1] / "planted.py"
    assert any(breaks_package_rules(owner, imp) for imp in imports_of(planted, source)) is expected


def test_the_runtime_owns_every_service() -> None:
    """The adapters take services from the runtime (which starts and stops them); none builds its own."""
    services = ("PublishService", "ConsumerService", "RangeService")

    def builds(path: Path) -> list[str]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        return [
            f"{path.relative_to(ROOT)}:{node.lineno} builds {node.func.id}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in services
        ]

    bad = [line for path in (*modules("api"), *modules("grpc")) for line in builds(path)]
    assert bad == [], "\n".join(bad)
    runtime = builds(GATEWAY / "runtime" / "__init__.py")
    assert {line.rsplit(" ", 1)[1] for line in runtime} == set(services)


# --- the core's faces: above the core, only gateway.tubemq.<subpackage> and the shared vocabulary ----------
# Each core subpackage's __init__.py exports (``__all__``) what the layers above use; the modules behind it
# are the core's business, free to split and rename. The embedded cluster is a peer speaking the wire, not a
# user of the client: it may use the wire's modules (codecs, protobuf messages, the RPC server side) and the
# shared vocabulary, and nothing of the client (net, producer, consumer, ranges), face or module.
CORE_FACES = tuple(f"gateway.tubemq.{sub}" for sub in ("wire", "net", "producer", "consumer", "ranges"))
CORE_SHARED = (
    "gateway.tubemq.errors",
    "gateway.tubemq.refusals",
    "gateway.tubemq.events",
    "gateway.tubemq.address",
    "gateway.tubemq.randomness",
    "gateway.tubemq.names",
)


def reaches_past_a_face(imp: Import) -> bool:
    target = imp.target
    return (
        _within(target, ("gateway.tubemq",)) and target not in CORE_FACES and not _within(target, CORE_SHARED)
    )


def embedded_reaches_the_client(imp: Import) -> bool:
    return _within(imp.target, ("gateway.tubemq",)) and not _within(
        imp.target, (*CORE_SHARED, "gateway.tubemq.wire")
    )


def _above_the_core() -> tuple[Path, ...]:
    return tuple(
        path for path in modules("") if path.relative_to(GATEWAY).parts[0] not in ("tubemq", "embedded")
    )


def test_the_layers_above_use_the_core_through_its_faces() -> None:
    paths = _above_the_core()
    assert GATEWAY / "runtime" / "__init__.py" in paths and len(paths) > 50
    bad = _violations(paths, reaches_past_a_face)
    assert bad == [], (
        f"above the core, import {', '.join(CORE_FACES)} or {', '.join(CORE_SHARED)} only:\n" + "\n".join(bad)
    )


def test_the_embedded_cluster_speaks_the_wire_without_the_client() -> None:
    bad = _violations(modules("embedded"), embedded_reaches_the_client)
    assert bad == [], "gateway/embedded may import the wire and the shared vocabulary only:\n" + "\n".join(
        bad
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from gateway.tubemq.producer.client import Producer\n", True),
        ("from gateway.tubemq.wire import rpc\n", True),
        ("import gateway.tubemq.net.pool\n", True),
        ("def f() -> None:\n    from gateway.tubemq.consumer.events import FetchOutcome\n", True),
        ("from gateway.tubemq import net\n", False),
        ("from gateway.tubemq.producer import Producer\n", False),
        ("from gateway.tubemq import errors as core\n", False),
        ("from gateway.tubemq.errors import InvalidAttribute\n", False),
        ("from gateway.service.errors import ServiceError\n", False),
    ],
)
def test_a_planted_import_past_a_face_is_caught(source: str, expected: bool) -> None:
    planted = GATEWAY / "service" / "planted.py"
    assert any(reaches_past_a_face(imp) for imp in imports_of(planted, source)) is expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from gateway.tubemq.net import ConnectionPool\n", True),
        ("from gateway.tubemq.consumer.batch import INDEX_ENTRY_SIZE\n", True),
        ("from gateway.tubemq.ranges import RangeReader\n", True),
        ("from gateway.tubemq.wire.rpc_server import decode_request\n", False),
        ("from gateway.tubemq.wire.pb import RPC_pb2\n", False),
        ("from gateway.tubemq.address import NodeAddress\n", False),
    ],
)
def test_a_planted_embedded_import_of_the_client_is_caught(source: str, expected: bool) -> None:
    planted = GATEWAY / "embedded" / "planted.py"
    assert any(embedded_reaches_the_client(imp) for imp in imports_of(planted, source)) is expected


@pytest.mark.parametrize("face", CORE_FACES)
def test_each_face_imports_alone_and_pulls_nothing_above_it(face: str) -> None:
    """Each face imports on its own (no cycle), exports every name it lists, and loads only its package and
    the ranks below: ``gateway.tubemq.wire`` never loads ``net``, the producer never the consumer."""
    code = (
        f"import sys, {face} as face\n"
        "missing = [n for n in face.__all__ if not hasattr(face, n)]\n"
        "assert face.__all__ and not missing, missing\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('gateway'))))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    own = face.rsplit(".", 1)[1]
    loaded = {_core_module(name) for name in run.stdout.split()} - {None, own}
    above = sorted(
        name
        for name in loaded
        if name is not None
        and (
            _layer(name.split(".")[0]) > _layer(own) or {own, name.split(".")[0]} == {"producer", "consumer"}
        )
    )
    assert above == [], f"{face} loads {above}"
    assert not [m for m in run.stdout.split() if m.split(".")[1:2] not in (["tubemq"], [])], run.stdout
