"""The service-error -> gRPC-status translation: codes, messages, details and trailers (no server)."""

from __future__ import annotations

import re

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from gateway.grpc import errors
from gateway.service.errors import (
    AlreadyDefined,
    Conflict,
    ErrorKind,
    Gone,
    InvalidInput,
    KeyReused,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    Quota,
    RateLimited,
    ServiceError,
    Unauthenticated,
    Unavailable,
    UpstreamError,
    renamed_fields,
)
from tests.support.grpc_support import describe


def test_every_error_kind_has_its_own_code() -> None:
    assert set(errors.CODE_BY_KIND) == set(ErrorKind)
    assert errors.CODE_BY_KIND[ErrorKind.INVALID] is grpc.StatusCode.INVALID_ARGUMENT
    assert errors.CODE_BY_KIND[ErrorKind.TOO_LARGE] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert errors.CODE_BY_KIND[ErrorKind.NOT_FOUND] is grpc.StatusCode.NOT_FOUND
    assert errors.CODE_BY_KIND[ErrorKind.GONE] is grpc.StatusCode.FAILED_PRECONDITION
    assert errors.CODE_BY_KIND[ErrorKind.UNAVAILABLE] is grpc.StatusCode.UNAVAILABLE
    assert errors.CODE_BY_KIND[ErrorKind.UPSTREAM] is grpc.StatusCode.INTERNAL
    assert errors.CODE_BY_KIND[ErrorKind.RATE_LIMITED] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert errors.CODE_BY_KIND[ErrorKind.CONFLICT] is grpc.StatusCode.ABORTED
    assert errors.CODE_BY_KIND[ErrorKind.ALREADY_DEFINED] is grpc.StatusCode.ALREADY_EXISTS


QUOTA = Quota("messages", 200, 2.0, 0, "messages")


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (InvalidInput("bad", field="topic"), grpc.StatusCode.INVALID_ARGUMENT),
        (PayloadTooLarge("big", limit=10), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (NotFound("no"), grpc.StatusCode.NOT_FOUND),
        (Gone("gone"), grpc.StatusCode.FAILED_PRECONDITION),
        (Conflict("busy", retry_after=1.0), grpc.StatusCode.ABORTED),
        (AlreadyDefined("taken", field="name"), grpc.StatusCode.ALREADY_EXISTS),
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


def test_status_carries_the_rest_error_body() -> None:
    exc = PayloadTooLarge("message of 20 bytes is above 10", limit=10, field="messages[3].value", index=3)
    status = errors.error_status(exc)
    detail = describe(status)
    rest = exc.to_dict()
    assert detail.code == rest["code"] == "payload_too_large"
    assert status.message == f"messages[3].value: {rest['message']}"
    assert detail.field == rest["field"] == "messages[3].value"
    assert detail.index == rest["index"] == 3
    assert detail.limit == rest["limit"] == 10
    assert detail.violations == [("messages[3].value", rest["message"])]
    assert detail.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert detail.retry_after_seconds is None and detail.tubemq_error_code is None


def test_status_of_unavailable_and_upstream() -> None:
    unavailable = describe(errors.error_status(Unavailable("no broker", retry_after=2.5, errno=503)))
    assert unavailable.retry_after_seconds == 2.5 and unavailable.tubemq_error_code == 503
    assert unavailable.field is None and unavailable.index is None and unavailable.violations == []
    upstream = describe(errors.error_status(UpstreamError("refused", errno=400, index=0)))
    assert (upstream.code, upstream.tubemq_error_code, upstream.index) == ("upstream_error", 400, 0)
    assert upstream.retry_after_seconds is None


def test_status_message_names_the_field() -> None:
    assert errors.status_message(InvalidInput("must be set", field="topic")) == "topic: must be set"
    assert errors.status_message(NotFound("no such topic")) == "no such topic"


#: One error of each kind, as the service layer raises them.
EVERY_KIND = [
    InvalidInput("bad", field="messages[0].key", index=0),
    PayloadTooLarge("big", limit=10, field="messages[1].value", index=1),
    NotFound("no such topic", field="topic", errno=404),
    Gone("instance expired", field="instanceId"),
    Conflict("another seek is running", retry_after=1.0),
    AlreadyDefined("push subscription 'x' exists", field="name"),
    KeyReused("used for another request", field="Idempotency-Key"),
    Unavailable("later", retry_after=1.0, errno=503),
    RateLimited("slow down", retry_after=0.5, quota=QUOTA),
    UpstreamError("refused", errno=500),
    Unauthenticated("who are you"),
    PermissionDenied("not you", action="publish", resource="topic demo"),
]


def test_every_kind_is_covered_below() -> None:
    assert {exc.kind for exc in EVERY_KIND} == set(ErrorKind)


@pytest.mark.parametrize("exc", EVERY_KIND, ids=lambda e: e.kind.value)
def test_error_info_reason_is_the_rest_code_and_metadata_the_rest_body(exc: ServiceError) -> None:
    status = errors.error_status(exc)
    assert status.code == errors.code_of(exc).value[0]
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    rest = exc.to_dict()
    # google.rpc.ErrorInfo: reason UPPER_SNAKE_CASE, at most 63 characters; metadata keys lowerCamelCase.
    assert info.reason == str(rest.pop("code")).upper()
    assert re.fullmatch(r"[A-Z][A-Z0-9_]+[A-Z0-9]", info.reason) and len(info.reason) <= 63
    assert info.domain == errors.DOMAIN == "tubemq-gateway"
    rest.pop("message")
    assert set(info.metadata) == set(rest)
    for key, value in rest.items():
        assert re.fullmatch(r"[a-z][a-zA-Z0-9-_]+", key) and len(key) <= 64
        if isinstance(value, int | float):
            assert float(info.metadata[key]) == value, key
        else:
            assert info.metadata[key] == value, key


def _kinds_of(status: status_pb2.Status) -> list[str]:
    return [d.type_url.rpartition("/")[2] for d in status.details]


@pytest.mark.parametrize(
    ("exc", "details"),
    [
        (InvalidInput("bad", field="topic"), ["ErrorInfo", "BadRequest"]),
        (InvalidInput("bad"), ["ErrorInfo"]),  # no field to blame: no BadRequest
        (PayloadTooLarge("big", limit=10, field="messages[0].value"), ["ErrorInfo", "BadRequest"]),
        (NotFound("no such topic", field="topic"), ["ErrorInfo", "ResourceInfo"]),
        (NotFound("no route", field="path"), ["ErrorInfo"]),
        (Gone("expired", field="instanceId"), ["ErrorInfo", "ResourceInfo"]),
        (Gone("expired"), ["ErrorInfo", "ResourceInfo"]),  # only consumer instances are ever gone
        (Unavailable("later"), ["ErrorInfo", "RetryInfo"]),
        (Conflict("busy", retry_after=1.0), ["ErrorInfo", "RetryInfo"]),
        (RateLimited("slow", retry_after=1, quota=QUOTA), ["ErrorInfo", "RetryInfo", "QuotaFailure"]),
        (UpstreamError("refused", errno=500), ["ErrorInfo"]),
        (errors.StreamSuperseded("taken over"), ["ErrorInfo"]),
    ],
)
def test_standard_details_by_kind(exc: ServiceError | errors.AdapterError, details: list[str]) -> None:
    assert _kinds_of(errors.error_status(exc)) == [f"google.rpc.{d}" for d in details]


def test_resource_info_names_the_missing_resource() -> None:
    exc = NotFound("no consumer instance 'x' in group 'g': expired", field="instanceId", resource_name="x")
    status = errors.error_status(exc)
    info = error_details_pb2.ResourceInfo()
    assert status.details[1].Unpack(info)
    assert (info.resource_type, info.resource_name) == ("consumer instance", "x")
    assert "no consumer instance" in info.description
    unnamed = describe(errors.error_status(NotFound("no partition now", field="partitionKey")))
    assert unnamed.resource == ("partition", "")


def test_rate_limited_says_which_quota_and_when_to_retry() -> None:
    exc = RateLimited("principal 'alice' is above its publish limit", retry_after=0.25, quota=QUOTA)
    status = errors.error_status(exc)
    detail = describe(status)
    assert detail.code == "rate_limited" and detail.retry_after_seconds == 0.25
    assert detail.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    quota = error_details_pb2.QuotaFailure()
    assert status.details[2].Unpack(quota)
    assert [(v.subject, v.description) for v in quota.violations] == [("messages", exc.message)]
    assert dict(errors.trailers_for(status))[errors.RETRY_AFTER_TRAILER] == "1"  # whole seconds, rounded up


def test_adapter_errors_have_the_status_code_as_reason() -> None:
    detail = describe(errors.error_status(errors.StreamSuperseded("a newer Subscribe took over")))
    assert (detail.code, detail.metadata) == ("aborted", {})
    assert detail.grpc_code == grpc.StatusCode.ABORTED.value[0]
    denied = describe(errors.error_status(errors.AuthError("not you", denied=True)))
    assert denied.code == "permission_denied"


def test_trailers_carry_the_status_as_grpcio_status_encodes_it() -> None:
    status = errors.error_status(Unavailable("no broker can take topic 'demo' now", retry_after=1.6))
    trailers = dict(errors.trailers_for(status))
    assert trailers[errors.RETRY_AFTER_TRAILER] == "2"
    assert status_pb2.Status.FromString(trailers[errors.DETAILS_TRAILER]) == status
    assert set(trailers) == {errors.DETAILS_TRAILER, errors.RETRY_AFTER_TRAILER}


def test_retry_after_is_at_least_one_second_and_absent_when_not_retryable() -> None:
    soon = errors.error_status(Unavailable("soon", retry_after=0.1))
    assert dict(errors.trailers_for(soon))["retry-after"] == "1"
    assert errors.RETRY_AFTER_TRAILER not in dict(errors.trailers_for(errors.error_status(NotFound("no"))))


def test_renamed_maps_service_field_names() -> None:
    with pytest.raises(InvalidInput) as caught, renamed_fields({"max_messages": "maxMessages"}):
        raise InvalidInput("max_messages must be 1 to 10", field="max_messages")
    assert caught.value.field == "maxMessages"
    with pytest.raises(NotFound) as other, renamed_fields({"max_messages": "maxMessages"}):
        raise NotFound("no instance", field="instanceId")
    assert other.value.field == "instanceId"
