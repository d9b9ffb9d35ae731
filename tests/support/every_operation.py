"""Every operation of the gateway, enumerated from the app and the service descriptors (so that one added
later is covered without anyone listing it), with a request for each: what the authentication tests call."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import MethodDescriptor

from gateway.api.app import create_app
from gateway.api.auth import RestOperation, rest_operations
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb

#: the consumer group the requests name
GROUP = "g_auth"
SERVICE = pb.DESCRIPTOR.services_by_name["GatewayService"]
#: every method of the gRPC service
SERVICE_METHODS: list[MethodDescriptor] = list(SERVICE.methods)
#: request bodies of the operations that need one
REST_BODIES: dict[str, Any] = {
    "publishMessages": {"messages": [{"value": "hello"}]},
    "createConsumer": {"topics": ["demo"]},
    "commitMessages": {},
    "nackMessages": {"tokens": ["1"]},
    "extendDeadlines": {"tokens": ["1"], "extendMs": 1000},
    "seekPartitions": {"position": "earliest"},
}
#: every REST operation of the app (its OpenAPI document and FastAPI's docs routes)
APP_OPERATIONS = rest_operations(create_app())


def method_path(method: MethodDescriptor) -> str:
    """The full gRPC path of ``method``."""
    return f"/{SERVICE.full_name}/{method.name}"


def method_request(method: MethodDescriptor, instance_id: str) -> Any:
    """A valid request message of ``method`` on topic demo, group GROUP and ``instance_id``."""
    message = getattr(pb, method.input_type.name)()
    for name, value in (("topic", "demo"), ("group", GROUP), ("instance_id", instance_id)):
        if name in method.input_type.fields_by_name:
            setattr(message, name, value)
    if "topics" in method.input_type.fields_by_name:
        message.topics.append("demo")
    if "messages" in method.input_type.fields_by_name:
        message.messages.add(value=b"hello")
    if "all_delivered" in method.input_type.fields_by_name:
        message.all_delivered = True
    elif "tokens" in method.input_type.fields_by_name:
        message.tokens.append("1")
    if "extend_ms" in method.input_type.fields_by_name:
        message.extend_ms = 1000
    if method.name == "Seek":
        message.position = pb.START_POSITION_EARLIEST
    return message


def operation_url(
    op: RestOperation, instance_id: str = "x.y.z", topic: str = "demo", group: str = GROUP
) -> str:
    """The URL of ``op`` with its path parameters filled in."""
    asset = "app.js" if op.path.startswith("/console") else "favicon.png"  # a file of the console or docs
    path = op.path.format(
        topic=topic, group=group, instance_id=instance_id, partitionKey=f"1:{topic}:0", name=asset
    )
    return path + ("?from=0&to=1" if op.key == "readRange" else "")
