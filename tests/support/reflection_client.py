"""A reflection-driven gRPC client, as grpcurl is one: it knows no generated code of the gateway.

It asks the server's reflection service (``v1`` or ``v1alpha``) for the services and the files defining a
symbol (and, one by one, the files those import), builds its own descriptor pool from the answers, and calls
methods with JSON requests converted through that pool (the proto3 JSON mapping, as grpcurl's ``-d``).
The reflection messages are encoded with grpcio-reflection's v1alpha classes: v1 has the same messages under
another package, so the bytes on the wire are those of a v1 client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha import reflection_pb2


class ReflectionClient:
    def __init__(self, channel: grpc.aio.Channel, version: str = "v1") -> None:
        self.version = version
        self._info = channel.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        self._channel = channel
        self.pool = descriptor_pool.DescriptorPool()
        self._protos: dict[str, descriptor_pb2.FileDescriptorProto] = {}
        self._added: set[str] = set()

    async def ask(self, **request: Any) -> reflection_pb2.ServerReflectionResponse:
        async def one() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(**request)

        answers = [answer async for answer in self._info(one())]
        assert len(answers) == 1, answers
        assert not answers[0].HasField("error_response"), answers[0].error_response
        return answers[0]

    async def services(self) -> set[str]:
        listed = await self.ask(list_services="")
        return {s.name for s in listed.list_services_response.service}

    def _collect(self, answer: reflection_pb2.ServerReflectionResponse) -> None:
        for raw in answer.file_descriptor_response.file_descriptor_proto:
            proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
            self._protos.setdefault(proto.name, proto)

    def _add(self, name: str) -> None:
        if name in self._added:
            return
        for dependency in self._protos[name].dependency:
            self._add(dependency)
        self.pool.Add(self._protos[name])
        self._added.add(name)

    async def resolve(self, symbol: str) -> descriptor_pb2.FileDescriptorProto:
        """Load the file defining ``symbol`` (and every file it imports, asked by name when the answer lacks
        one) into :attr:`pool`; return that file."""
        answer = await self.ask(file_containing_symbol=symbol)
        first = descriptor_pb2.FileDescriptorProto.FromString(
            answer.file_descriptor_response.file_descriptor_proto[0]
        )
        self._collect(answer)
        while missing := {d for p in self._protos.values() for d in p.dependency} - set(self._protos):
            for name in sorted(missing):
                self._collect(await self.ask(file_by_filename=name))
        for name in sorted(self._protos):
            self._add(name)
        return first

    async def call_json(self, method: str, body: str) -> dict[str, Any]:
        """Call the unary ``service/Method`` with a JSON request; return the answer as JSON (as grpcurl)."""
        service_name, _, method_name = method.partition("/")
        await self.resolve(service_name)
        descriptor = self.pool.FindServiceByName(service_name).methods_by_name[method_name]
        request_class = message_factory.GetMessageClass(descriptor.input_type)
        response_class = message_factory.GetMessageClass(descriptor.output_type)
        request = json_format.Parse(body, request_class())
        call = self._channel.unary_unary(
            f"/{service_name}/{method_name}",
            request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString,
        )
        answer = await call(request, timeout=10)
        text = json_format.MessageToJson(answer, descriptor_pool=self.pool)
        result: dict[str, Any] = json.loads(text)
        return result
