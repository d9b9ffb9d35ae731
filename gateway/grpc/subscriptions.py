"""The push subscription RPCs of the GatewayService: thin over
:class:`gateway.service.push_admin.SubscriptionAdmin`, as the REST routes are
(``gateway/api/routes_subscriptions.py``).

A definition travels as ``PushSubscriptionDefinition``, whose proto3 JSON names are the API's own
(``ack_deadline_ms`` <-> ``ackDeadlineMs``): :func:`definition_of` turns it into the JSON object the service
checks, so an error names the field as REST does; :func:`subscription_message` turns an answer back.
Service errors propagate to the interceptor, which maps them to statuses (``gateway/grpc/errors.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.push_admin import SubscriptionAdmin

__all__ = ["SubscriptionRpcs", "definition_of", "subscription_message"]


def definition_of(message: pb.PushSubscriptionDefinition) -> tuple[dict[str, Any], int]:
    """The definition as the API's JSON object (fields left unset out), and the size of that JSON."""
    data = json_format.MessageToDict(message)
    topics = data.get("topics")
    if isinstance(topics, dict):
        data["topics"] = {topic: ids.get("streamIds", []) for topic, ids in topics.items()}
    return data, len(json.dumps(data, separators=(",", ":")))


def subscription_message(view: dict[str, Any]) -> pb.PushSubscription:
    """An answer of the service (the REST JSON object) as a ``PushSubscription``."""
    definition = dict(view)
    has_secret = definition.pop("hasSecret")
    source = definition.pop("source")
    state = definition.pop("state")
    definition["topics"] = {topic: {"streamIds": ids} for topic, ids in definition["topics"].items()}
    return pb.PushSubscription(
        definition=json_format.ParseDict(definition, pb.PushSubscriptionDefinition()),
        has_secret=has_secret,
        source=source,
        state=json_format.ParseDict(state, pb.PushSubscriptionState()),
    )


class SubscriptionRpcs:
    """The RPCs' bodies; ``admin`` gives the runtime's service at call time (UNAVAILABLE while it starts or
    stops)."""

    def __init__(self, admin: Callable[[], SubscriptionAdmin]) -> None:
        self._admin = admin

    async def list(self, request: pb.ListSubscriptionsRequest) -> pb.ListSubscriptionsResponse:
        views = self._admin().list()
        return pb.ListSubscriptionsResponse(subscriptions=[subscription_message(v) for v in views])

    async def get(self, request: pb.GetSubscriptionRequest) -> pb.GetSubscriptionResponse:
        return pb.GetSubscriptionResponse(subscription=subscription_message(self._admin().get(request.name)))

    async def create(self, request: pb.CreateSubscriptionRequest) -> pb.CreateSubscriptionResponse:
        data, size = definition_of(request.subscription)
        view = await self._admin().create(data, size)
        return pb.CreateSubscriptionResponse(subscription=subscription_message(view))

    async def replace(self, request: pb.ReplaceSubscriptionRequest) -> pb.ReplaceSubscriptionResponse:
        data, size = definition_of(request.subscription)
        view = await self._admin().replace(request.name, data, size)
        return pb.ReplaceSubscriptionResponse(subscription=subscription_message(view))

    async def delete(self, request: pb.DeleteSubscriptionRequest) -> pb.DeleteSubscriptionResponse:
        await self._admin().delete(request.name)
        return pb.DeleteSubscriptionResponse()

    async def pause(self, request: pb.PauseSubscriptionRequest) -> pb.PauseSubscriptionResponse:
        view = await self._admin().set_paused(request.name, True)
        return pb.PauseSubscriptionResponse(subscription=subscription_message(view))

    async def resume(self, request: pb.ResumeSubscriptionRequest) -> pb.ResumeSubscriptionResponse:
        view = await self._admin().set_paused(request.name, False)
        return pb.ResumeSubscriptionResponse(subscription=subscription_message(view))
