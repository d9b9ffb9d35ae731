"""The service-error -> gRPC-status translation: codes, messages, details and trailers (no server)."""

from __future__ import annotations

import grpc
import pytest

from gateway.grpc import errors
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.errors import (
    ErrorKind,
    Gone,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    Quota,
    RateLimited,
    ServiceError,
    Unavailable,
    UpstreamError,
)


def test_every_error_kind_has_its_own_code() -> None:
    assert set(errors.CODE_BY_KIND) == set(ErrorKind)
    assert errors.CODE_BY_KIND[ErrorKind.INVALID] is grpc.StatusCode.INVALID_ARGUMENT
    assert errors.CODE_BY_KIND[ErrorKind.TOO_LARGE] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert errors.CODE_BY_KIND[ErrorKind.NOT_FOUND] is grpc.StatusCode.NOT_FOUND
    assert errors.CODE_BY_KIND[ErrorKind.GONE] is grpc.StatusCode.FAILED_PRECONDITION
    assert errors.CODE_BY_KIND[ErrorKind.UNAVAILABLE] is grpc.StatusCode.UNAVAILABLE
    assert errors.CODE_BY_KIND[ErrorKind.UPSTREAM] is grpc.StatusCode.INTERNAL
    assert errors.CODE_BY_KIND[ErrorKind.RATE_LIMITED] is grpc.StatusCode.RESOURCE_EXHAUSTED


QUOTA = Quota("messages", 200, 2.0, 0, "messages")


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (InvalidInput("bad", field="topic"), grpc.StatusCode.INVALID_ARGUMENT),
        (PayloadTooLarge("big", limit=10), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (NotFound("no"), grpc.StatusCode.NOT_FOUND),
        (Gone("gone"), grpc.StatusCode.FAILED_PRECONDITION),
        (Unavailable("later"), grpc.StatusCode.UNAVAILABLE),
        (RateLimited("slow down", retry_after=1, quota=QUOTA), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (UpstreamError("refused", errno=500), grpc.StatusCode.INTERNAL),
        (errors.AuthError("who are you"), grpc.StatusCode.UNAUTHENTICATED),
        (errors.AuthError("not you", denied=True), grpc.StatusCode.PERMISSION_DENIED),
        (errors.StreamSuperseded("taken over"), grpc.StatusCode.ABORTED),
    ],
)
def test_code_of(exc: ServiceError | errors.AdapterError, code: grpc.StatusCode) -> None:
    assert errors.code_of(exc) is code


def test_detail_carries_the_rest_error_body() -> None:
    exc = PayloadTooLarge("message of 20 bytes is above 10", limit=10, field="messages[3].value", index=3)
    detail = errors.error_detail(exc)
    rest = exc.to_dict()
    assert detail.code == rest["code"] == "payload_too_large"
    assert detail.message == rest["message"]
    assert detail.field == rest["field"] == "messages[3].value"
    assert detail.index == rest["index"] == 3
    assert detail.limit == rest["limit"] == 10
    assert detail.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert not detail.HasField("retry_after_seconds") and not detail.HasField("tubemq_error_code")


def test_detail_of_unavailable_and_upstream() -> None:
    unavailable = errors.error_detail(Unavailable("no broker", retry_after=2.5, errno=503))
    assert unavailable.retry_after_seconds == 2.5 and unavailable.tubemq_error_code == 503
    assert not unavailable.HasField("field") and not unavailable.HasField("index")
    upstream = errors.error_detail(UpstreamError("refused", errno=400, index=0))
    assert (upstream.code, upstream.tubemq_error_code, upstream.index) == ("upstream_error", 400, 0)


def test_status_message_names_the_field() -> None:
    assert errors.status_message(InvalidInput("must be set", field="topic")) == "topic: must be set"
    assert errors.status_message(NotFound("no such topic")) == "no such topic"


def test_trailers_round_trip_through_unpack_status() -> None:
    exc = Unavailable("no broker can take topic 'demo' now", retry_after=1.6)
    detail = errors.error_detail(exc)
    trailers = errors.trailers_for(grpc.StatusCode.UNAVAILABLE, "no broker", detail)
    assert dict(trailers)[errors.RETRY_AFTER_TRAILER] == "2"
    unpacked = errors.unpack_status(trailers)
    assert unpacked is not None
    status, got = unpacked
    assert (status.code, status.message) == (grpc.StatusCode.UNAVAILABLE.value[0], "no broker")
    assert status.details[0].type_url == "type.googleapis.com/tubemq.gateway.v1.ErrorDetail"
    assert got == detail


def test_retry_after_is_at_least_one_second() -> None:
    detail = errors.error_detail(Unavailable("soon", retry_after=0.1))
    assert dict(errors.trailers_for(grpc.StatusCode.UNAVAILABLE, "soon", detail))["retry-after"] == "1"


def test_unpack_status_without_details() -> None:
    assert errors.unpack_status(()) is None
    assert errors.unpack_status(None) is None
    bare = pb.ErrorStatus(code=5, message="x").SerializeToString()
    unpacked = errors.unpack_status(((errors.DETAILS_TRAILER, bare),))
    assert unpacked is not None and unpacked[1] == pb.ErrorDetail()


def test_renamed_maps_service_field_names() -> None:
    with pytest.raises(InvalidInput) as caught, errors.renamed({"max_messages": "maxMessages"}):
        raise InvalidInput("max_messages must be 1 to 10", field="max_messages")
    assert caught.value.field == "maxMessages"
    with pytest.raises(NotFound) as other, errors.renamed({"max_messages": "maxMessages"}):
        raise NotFound("no instance", field="instanceId")
    assert other.value.field == "instanceId"


def test_error_status_is_wire_compatible_with_google_rpc_status() -> None:
    # google.rpc.Status is {int32 code = 1; string message = 2; repeated Any details = 3}.
    fields = {f.name: (f.number, f.type) for f in pb.ErrorStatus.DESCRIPTOR.fields}
    descriptor = pb.ErrorStatus.DESCRIPTOR.fields_by_name
    assert fields["code"][0] == 1 and fields["message"][0] == 2 and fields["details"][0] == 3
    assert descriptor["details"].message_type.full_name == "google.protobuf.Any"


def test_rate_limited_carries_retry_info_google_clients_understand() -> None:
    exc = RateLimited("principal 'alice' is above its publish limit", retry_after=0.25, quota=QUOTA)
    detail = errors.error_detail(exc)
    assert detail.code == "rate_limited" and detail.retry_after_seconds == 0.25
    assert detail.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    trailers = errors.trailers_for(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message, detail)
    assert dict(trailers)[errors.RETRY_AFTER_TRAILER] == "1"  # whole seconds, rounded up
    unpacked = errors.unpack_status(trailers)
    assert unpacked is not None and unpacked[1] == detail  # details[0] stays the ErrorDetail
    status = unpacked[0]
    assert [d.type_url for d in status.details] == [
        "type.googleapis.com/tubemq.gateway.v1.ErrorDetail",
        "type.googleapis.com/google.rpc.RetryInfo",
    ]
    assert errors.retry_delay(status) == 0.25
    # google.rpc.RetryInfo is {google.protobuf.Duration retry_delay = 1}: read it as such, by hand.
    info = status.details[1].value
    assert info[0] == 0x0A and info[1] == len(info) - 2
    assert errors.retry_delay(pb.ErrorStatus(code=8)) is None


def test_unavailable_also_says_when_to_retry_in_retry_info() -> None:
    detail = errors.error_detail(Unavailable("later", retry_after=2.0))
    unpacked = errors.unpack_status(errors.trailers_for(grpc.StatusCode.UNAVAILABLE, "later", detail))
    assert unpacked is not None and errors.retry_delay(unpacked[0]) == 2.0
