import pytest

from gateway.tubemq import errors
from gateway.tubemq.errors import (
    ClientError,
    ConnectError,
    ConnectionClosed,
    InvalidAttribute,
    MessageTooLarge,
    NoData,
    ProtocolError,
    RemoteException,
    RequestTimeout,
    ServerError,
    ServiceStoppingException,
    StandbyException,
    TransportError,
    TubeMQError,
    for_code,
    remote_exception,
)

WIRE_CODES = {
    301: (errors.Moved, True),
    400: (errors.BadRequest, False),
    401: (errors.Unauthorized, False),
    403: (errors.Forbidden, False),
    404: (errors.NoData, True),
    410: (errors.PartitionOccupied, False),
    411: (errors.HeartbeatNoNode, False),
    412: (errors.DuplicatePartition, False),
    415: (errors.CertificateFailure, False),
    419: (errors.ServerReceiveOverflow, True),
    424: (errors.InconsistentConsumeType, False),
    425: (errors.InconsistentTopicSet, False),
    426: (errors.InconsistentFilterSet, False),
    427: (errors.InconsistentSessionKey, False),
    428: (errors.InconsistentSelectBig, False),
    429: (errors.InconsistentSourceCount, False),
    430: (errors.DuplicateIndexId, False),
    431: (errors.TopicNotDeployed, False),
    450: (errors.ConsumeGroupForbidden, False),
    452: (errors.ConsumeSpeedLimit, True),
    455: (errors.ConsumeContentForbidden, False),
    500: (errors.InternalServerError, True),
    503: (errors.ServiceUnavailable, True),
}


@pytest.mark.parametrize("code", sorted(WIRE_CODES))
def test_for_code_maps_every_wire_code(code: int) -> None:
    cls, retriable = WIRE_CODES[code]
    err = for_code(code, "boom")
    assert type(err) is cls
    assert isinstance(err, ServerError) and isinstance(err, TubeMQError)
    assert err.errno == code
    assert err.retriable is retriable
    assert err.message == "boom"
    text = str(err)
    assert "boom" in text and str(code) in text and err.hint in text


def test_every_server_error_subclass_is_registered() -> None:
    subclasses = ServerError.__subclasses__()
    assert {c.errno for c in subclasses} == set(WIRE_CODES)
    assert len(subclasses) == len(WIRE_CODES)


@pytest.mark.parametrize(("code", "retriable"), [(299, False), (599, True), (201, False)])
def test_for_code_unknown_code_is_generic(code: int, retriable: bool) -> None:
    err = for_code(code, "strange")
    assert type(err) is ServerError
    assert err.errno == code and err.retriable is retriable
    assert "strange" in str(err) and f"errCode {code}" in str(err)
    assert repr(err) == f"ServerError(errno={code}, message='strange')"


def test_retry_after_hints() -> None:
    assert for_code(404, "").retry_after == 0.4
    assert for_code(301, "").retry_after == 0.2
    assert for_code(400, "").retry_after is None
    assert "(no message)" in str(for_code(400, ""))


def test_transport_errors_are_retriable() -> None:
    for cls in (ConnectError, ConnectionClosed, RequestTimeout):
        err = cls("link to 1.2.3.4:8123 failed")
        assert isinstance(err, TransportError) and err.retriable
        assert str(err) == "link to 1.2.3.4:8123 failed"
    assert not ProtocolError("bad token").retriable
    assert not TubeMQError("x").retriable


@pytest.mark.parametrize(
    "prefix", ["org.apache.inlong.tubemq.corerpc.exception.", "com.apache.tubemq.corerpc.exception.", ""]
)
@pytest.mark.parametrize(
    ("short", "cls", "switch"),
    [
        ("StandbyException", StandbyException, True),
        ("ServerNotReadyException", errors.ServerNotReadyException, True),
        ("UnknownProtocolException", errors.UnknownProtocolException, True),
        ("ServiceStoppingException", ServiceStoppingException, False),
    ],
)
def test_remote_exception_by_suffix(
    prefix: str, short: str, cls: type[RemoteException], switch: bool
) -> None:
    err = remote_exception(1, prefix + short, "10.0.0.1:8715 is not master now")
    assert type(err) is cls
    assert err.status == 1
    assert err.exception_name == prefix + short
    assert err.short_name == short
    assert err.message == "10.0.0.1:8715 is not master now"
    assert err.is_io_exception is switch and err.switch_node is switch
    assert err.retriable
    assert "10.0.0.1:8715 is not master now" in str(err) and "ERROR" in str(err)


def test_remote_exception_generic() -> None:
    err = remote_exception(2, "com.google.protobuf.InvalidProtocolBufferException", "missing fields")
    assert type(err) is RemoteException
    assert not err.retriable and not err.is_io_exception
    assert "FATAL" in str(err) and "missing fields" in str(err)
    crash = remote_exception(1, "java.lang.reflect.InvocationTargetException", "")
    assert type(crash) is RemoteException and crash.retriable
    assert str(crash).startswith("java.lang.reflect.InvocationTargetException (ERROR);")
    # A class merely ending like a known one must not match.
    assert type(remote_exception(1, "x.MyStandbyException", "")) is RemoteException


def test_client_errors() -> None:
    err = MessageTooLarge(2_000_000, 1_048_576, "demo")
    assert isinstance(err, ClientError) and not err.retriable
    assert (err.size, err.limit, err.topic) == (2_000_000, 1_048_576, "demo")
    assert "2000000" in str(err) and "1048576" in str(err) and "'demo'" in str(err)
    assert "demo" in str(errors.TopicNotPublished("demo"))
    assert errors.NoPartition("demo").topic == "demo"
    assert "closed" in str(errors.ClientClosed())
    bad = InvalidAttribute("attribute key 'a,b' contains ','")
    assert isinstance(bad, ValueError) and isinstance(bad, ClientError)


def test_catch_by_branch() -> None:
    with pytest.raises(TransportError):
        raise RequestTimeout("no answer in 1.0 s")
    with pytest.raises(ServerError):
        raise NoData("no data")
    with pytest.raises(RemoteException):
        raise remote_exception(1, "StandbyException", "")
