"""Server reflection in both versions clients speak: ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``.

grpcurl, Postman and other current clients ask for v1 first; older ones only know v1alpha. grpcio-reflection
(up to at least 1.85) implements v1alpha only. The two protocols are the same messages under another package
name (``grpc/reflection/v1/reflection.proto`` is the v1alpha file renamed), so this module

* registers the v1 file in the default descriptor pool, made from grpcio-reflection's v1alpha descriptor with
  the package renamed (so a v1 client can also describe the reflection service itself), and
* serves v1 calls with grpcio-reflection's own servicer: each v1 request is re-read as its v1alpha twin and
  each answer written back as v1 (the bytes are the same; only the type names differ).

Both services list the same service names and resolve symbols and files from the default pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_FILE = "grpc/reflection/v1/reflection.proto"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
_ALPHA_PACKAGE = reflection_pb2.DESCRIPTOR.package  # grpc.reflection.v1alpha


def _renamed(type_name: str) -> str:
    prefix = f".{_ALPHA_PACKAGE}."
    return f".{V1_PACKAGE}.{type_name[len(prefix) :]}" if type_name.startswith(prefix) else type_name


def _v1_file_proto() -> descriptor_pb2.FileDescriptorProto:
    """grpc/reflection/v1/reflection.proto: the v1alpha file with its package (and references) renamed."""
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name, proto.package = V1_FILE, V1_PACKAGE
    proto.ClearField("options")  # v1alpha's (deprecation, language packages) are not v1's
    pending = list(proto.message_type)
    while pending:
        message = pending.pop()
        pending.extend(message.nested_type)
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = _renamed(field.type_name)
    for service in proto.service:
        for method in service.method:
            method.input_type, method.output_type = _renamed(method.input_type), _renamed(method.output_type)
    return proto


def _v1_messages() -> tuple[Any, Any]:
    """The v1 ServerReflectionRequest and ServerReflectionResponse classes (registering the file once)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(V1_FILE)
    except KeyError:
        pool.AddSerializedFile(_v1_file_proto().SerializeToString())
    request = pool.FindMessageTypeByName(f"{V1_PACKAGE}.ServerReflectionRequest")
    response = pool.FindMessageTypeByName(f"{V1_PACKAGE}.ServerReflectionResponse")
    return message_factory.GetMessageClass(request), message_factory.GetMessageClass(response)


V1Request, V1Response = _v1_messages()
#: The registered grpc/reflection/v1/reflection.proto.
V1_DESCRIPTOR = descriptor_pool.Default().FindFileByName(V1_FILE)


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection v1 and v1alpha on ``server``: they list ``service_names`` and themselves."""
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    alpha = reflection.aio.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(alpha, server)

    async def v1_info(requests: AsyncIterable[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async def as_alpha() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            async for request in requests:
                yield reflection_pb2.ServerReflectionRequest.FromString(request.SerializeToString())

        async for answer in alpha.ServerReflectionInfo(as_alpha(), context):
            yield V1Response.FromString(answer.SerializeToString())

    handler = grpc.stream_stream_rpc_method_handler(
        v1_info, request_deserializer=V1Request.FromString, response_serializer=V1Response.SerializeToString
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": handler}),)
    )
