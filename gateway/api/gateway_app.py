"""The app class of ``create_app``: FastAPI, with a publish that enters through ASGI taking the direct way.

A ``POST /v1/topics/{topic}/messages`` that reaches the app as an ASGI request (not answered below ASGI by
``gateway/api/direct_protocol.py``: another HTTP protocol, a chunked body, ``Expect: 100-continue``, a
server that is not the gateway's) takes the same way as one answered below ASGI,
:class:`~gateway.api.direct_publish.DirectPublish`, with the ASGI ``receive`` and ``send`` as its request
(:class:`AsgiExchange`), while that way serves the app (:func:`~gateway.api.direct_ways.direct_publish_of`:
``http.direct_publish`` on). Every other request, and every publish then, goes through FastAPI's
middlewares and router, whose route takes the same steps (``gateway/api/publish_steps.py``).

The way skips the three layers FastAPI and Starlette put outside the app's own middlewares (server errors,
exception telemetry, body limit), none of which has work on a publish: an error is answered by the request-id
step, and the body is bounded by the admission step.
"""

from __future__ import annotations

import re

from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from gateway.api.direct_ways import direct_publish_of
from gateway.api.publish_steps import PUBLISH_PATH

__all__ = ["PUBLISH_PATTERN", "AsgiExchange", "GatewayApp"]

#: the publish route's path; ``{topic}`` matches as Starlette's ``str`` convertor does
PUBLISH_PATTERN = re.compile(re.escape(PUBLISH_PATH).replace(r"\{topic\}", "(?P<topic>[^/]+)"))


class GatewayApp(FastAPI):
    """See the module docstring."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            match = PUBLISH_PATTERN.fullmatch(scope["path"])
            if match is not None:
                way = direct_publish_of(self)
                if way is not None:
                    scope["app"] = self  # as Starlette.__call__ sets it
                    await way.serve_asgi(AsgiExchange(scope, receive, send), match["topic"])
                    return
        await super().__call__(scope, receive, send)


class AsgiExchange:
    """One ASGI publish as the direct way's request: its scope, its body (``client_gone`` once ``receive``
    said the client left) and ``respond`` sending the answer as two ASGI messages."""

    __slots__ = ("_receive", "_send", "client_gone", "scope")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.client_gone = False
        self._receive = receive
        self._send = send

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.client_gone = True
        return message

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})
