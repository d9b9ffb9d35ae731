"""The error mappings as tables: core -> service (gateway/service/core_errors.py), service -> HTTP
(gateway/api/errors.py) and service -> gRPC (gateway/grpc/errors.py), and the docstrings documenting them."""

from __future__ import annotations

import ast
import re

import grpc
import pytest

from gateway.api.errors import STATUS_BY_KIND
from gateway.grpc.errors import CODE_BY_KIND
from gateway.service import core_errors, errors
from gateway.service.core_errors import Doing, service_error
from gateway.service.errors import ErrorKind
from gateway.tubemq import errors as core
from tests.support.files import ROOT

#: (core error, what the gateway was doing) -> (service error kind, field, errno)
CORE_TO_SERVICE: list[tuple[BaseException, Doing, ErrorKind, str | None, int | None]] = [
    (core.MessageTooLarge(2000, 1024), Doing.PUBLISH, ErrorKind.TOO_LARGE, "value", None),
    (core.TopicNotPublished("demo"), Doing.PUBLISH, ErrorKind.NOT_FOUND, "topic", None),
    (core.TopicNotDeployed("no topic", 431), Doing.PUBLISH, ErrorKind.NOT_FOUND, "topic", 431),
    (core.TopicNotDeployed("no topic", 431), Doing.READ, ErrorKind.NOT_FOUND, "topic", 431),
    (core.TopicNotDeployed("no topic", 431), Doing.JOIN, ErrorKind.NOT_FOUND, "topics", 431),
    (core.CertificateFailure("bad sig", 415), Doing.JOIN, ErrorKind.UPSTREAM, None, 415),
    (core.CertificateFailure("bad sig", 415), Doing.PUBLISH, ErrorKind.UPSTREAM, None, 415),
    (core.ClientClosed("closed"), Doing.PUBLISH, ErrorKind.UNAVAILABLE, None, None),
    (core.ClientClosed("closed"), Doing.JOIN, ErrorKind.UNAVAILABLE, None, None),
    (core.NoPartition("none"), Doing.PUBLISH, ErrorKind.UNAVAILABLE, None, None),
    (core.InvalidAttribute("bad key"), Doing.PUBLISH, ErrorKind.INVALID, None, None),
    (core.InconsistentTopicSet("other topics", 427), Doing.JOIN, ErrorKind.INVALID, "topics", 427),
    (core.ConsumeGroupForbidden("forbidden", 450), Doing.JOIN, ErrorKind.INVALID, "topics", 450),
    (core.ConsumeGroupForbidden("forbidden", 450), Doing.COMMIT, ErrorKind.UPSTREAM, None, 450),
    (core.Forbidden("no", 403), Doing.PUBLISH, ErrorKind.UPSTREAM, None, 403),
    (core.BadRequest("bad", 400), Doing.READ, ErrorKind.UPSTREAM, None, 400),
    (core.ServiceUnavailable("busy", 503), Doing.PUBLISH, ErrorKind.UNAVAILABLE, None, 503),
    (core.ServiceUnavailable("busy", 503), Doing.JOIN, ErrorKind.UNAVAILABLE, None, 503),
    (core.ServerReceiveOverflow("full", 419), Doing.PUBLISH, ErrorKind.UNAVAILABLE, None, 419),
    (core.InternalServerError("oops", 500), Doing.READ, ErrorKind.UNAVAILABLE, None, 500),
    (core.for_code(599, "unknown 5xx"), Doing.COMMIT, ErrorKind.UNAVAILABLE, None, 599),
    (core.for_code(499, "unknown 4xx"), Doing.COMMIT, ErrorKind.UPSTREAM, None, 499),
    # a timeout is 503 whatever timed out: a commit used to answer 502 where a publish answered 503
    (core.RequestTimeout("no answer"), Doing.COMMIT, ErrorKind.UNAVAILABLE, None, None),
    (core.RequestTimeout("no answer"), Doing.PUBLISH, ErrorKind.UNAVAILABLE, None, None),
    (core.ConnectError("refused"), Doing.READ, ErrorKind.UNAVAILABLE, None, None),
    (core.ConnectionClosed("closed"), Doing.JOIN, ErrorKind.UNAVAILABLE, None, None),
    (core.StandbyException(1, "StandbyException", "standby"), Doing.JOIN, ErrorKind.UNAVAILABLE, None, None),
    (
        core.RemoteException(1, "java.lang.NullPointerException", "npe"),
        Doing.READ,
        ErrorKind.UPSTREAM,
        None,
        None,
    ),
    # a peer that answers bytes we cannot parse is a bad gateway on every path (publishing used to say 503)
    (core.ProtocolError("garbage"), Doing.PUBLISH, ErrorKind.UPSTREAM, None, None),
    (core.ProtocolError("garbage"), Doing.COMMIT, ErrorKind.UPSTREAM, None, None),
    (TimeoutError(), Doing.PUBLISH, ErrorKind.UNAVAILABLE, None, None),
]


@pytest.mark.parametrize(("exc", "doing", "kind", "field", "errno"), CORE_TO_SERVICE)
def test_core_to_service_table(
    exc: BaseException, doing: Doing, kind: ErrorKind, field: str | None, errno: int | None
) -> None:
    mapped = service_error(exc, doing, topic="demo", group="g1", index=3)
    assert mapped.kind is kind
    assert mapped.field == field
    assert mapped.errno == errno
    assert str(exc) in mapped.message
    if kind is ErrorKind.UNAVAILABLE:
        assert isinstance(mapped, errors.Unavailable) and "retry" in mapped.message
        assert mapped.retry_after == (2.0 if doing is Doing.JOIN else 1.0)


def test_every_row_of_the_core_table_is_reached() -> None:
    reached = set()
    for exc, doing, *_ in CORE_TO_SERVICE:
        failure = core_errors.Failure(exc, doing)
        reached.add(
            next(i for i, r in enumerate(core_errors.RULES) if isinstance(exc, r.error) and r.when(failure))
        )
    assert reached == set(range(len(core_errors.RULES)))


def test_service_errors_pass_through_and_bugs_are_not_mapped() -> None:
    gone = errors.Gone("expired")
    assert service_error(gone, Doing.COMMIT) is gone
    with pytest.raises(KeyError):
        service_error(KeyError("a bug"), Doing.PUBLISH)


def test_messages_name_what_failed() -> None:
    assert "topic 'demo'" in service_error(core.RequestTimeout("t"), Doing.PUBLISH, topic="demo").message
    assert "group 'g1'" in service_error(core.RequestTimeout("t"), Doing.COMMIT, group="g1").message
    assert "group 'g1'" in service_error(core.RequestTimeout("t"), Doing.JOIN, group="g1").message
    assert "tubemq.auth" in service_error(core.CertificateFailure("x", 415), Doing.READ).message
    too_large = service_error(core.MessageTooLarge(2000, 1024), Doing.PUBLISH, index=7)
    assert isinstance(too_large, errors.PayloadTooLarge) and (too_large.limit, too_large.index) == (1024, 7)


def _docstring_table() -> dict[str, tuple[int, str]]:
    """``ServiceError subclass name -> (HTTP status, gRPC code name)`` from gateway/service/errors.py's
    docstring, the table the adapters implement."""
    doc = ast.get_docstring(ast.parse((ROOT / "gateway/service/errors.py").read_text())) or ""
    rows = re.findall(r"(\w+)\s+-> (\d{3}) / (\w+)", doc)
    return {name: (int(status), code) for name, status, code in rows}


def test_service_to_http_and_grpc_tables_match_the_documented_table() -> None:
    documented = _docstring_table()
    classes = {cls.__name__: cls for cls in vars(errors).values() if isinstance(cls, type)}
    kinds = {classes[name].kind: value for name, value in documented.items()}
    assert set(kinds) == set(ErrorKind) == set(STATUS_BY_KIND) == set(CODE_BY_KIND)
    for kind, (status, code) in kinds.items():
        assert STATUS_BY_KIND[kind] == status, kind
        assert CODE_BY_KIND[kind] is getattr(grpc.StatusCode, code), kind


def test_grpc_docstring_agrees_with_both_tables() -> None:
    doc = ast.get_docstring(ast.parse((ROOT / "gateway/grpc/errors.py").read_text())) or ""
    rows = re.findall(r"^    (\w+)\s+([A-Z_]+)\s+(\d{3})\b", doc, re.MULTILINE)
    documented = _docstring_table()
    assert {name for name, _, _ in rows} == set(documented)
    for name, code, status in rows:
        assert documented[name] == (int(status), code), name
