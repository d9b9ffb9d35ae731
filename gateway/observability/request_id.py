"""Request ids: one per HTTP request or gRPC call, in every log line and error body of it.

The HTTP middleware (:class:`gateway.observability.logging.RequestIdMiddleware`) and the gRPC interceptor
(:mod:`gateway.grpc.interceptors`) both take the client's ``X-Request-ID`` when it is a sane token
(:func:`accepted`), else make one (:func:`new_request_id`), and bind it to the task serving the call
(:func:`bind`); logs and error bodies read it back with :func:`current_request_id`.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import re
import secrets

__all__ = ["REQUEST_ID_HEADER", "accepted", "bind", "current_request_id", "new_request_id", "unbind"]

REQUEST_ID_HEADER = "X-Request-ID"
#: Accepted incoming ids: what proxies and tracing systems send (uuids, hex, base64url), length-bounded so a
#: client cannot inject log noise or oversized fields.
_VALID_ID = re.compile(r"^[A-Za-z0-9._:+/=-]{1,128}$")

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

# Generated request ids: 16 random hex digits drawn once per process (again in a forked child) and a
# 16-digit counter, 32 hex digits as uuid4().hex had; unique within the process and, with the random
# prefix, across processes and restarts. uuid4 read the OS's random source on every request (a system call).
_id_prefix = ""
_id_counter = itertools.count()


def _new_id_prefix() -> None:
    global _id_prefix
    _id_prefix = secrets.token_hex(8)


_new_id_prefix()
os.register_at_fork(after_in_child=_new_id_prefix)


def new_request_id() -> str:
    """A fresh request id (see above)."""
    return f"{_id_prefix}{next(_id_counter) & 0xFFFFFFFFFFFFFFFF:016x}"


def accepted(text: str | None) -> str | None:
    """``text`` when it may serve as a request id, else None (make a new one)."""
    return text if text is not None and _VALID_ID.match(text) else None


def bind(request_id: str) -> contextvars.Token[str | None]:
    """Make ``request_id`` the current one of this task (and the tasks it starts)."""
    return _request_id.set(request_id)


def unbind(token: contextvars.Token[str | None]) -> None:
    _request_id.reset(token)


def current_request_id() -> str | None:
    """The id of the HTTP request or gRPC call being served in this task, if any."""
    return _request_id.get()
