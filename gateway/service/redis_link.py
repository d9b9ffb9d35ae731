"""The one way the gateway opens a Redis it shares between replicas (the idempotency keys, the push
subscriptions made through the API): a client of ``redis.asyncio`` with every call bounded in time."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["redis_client"]


def redis_client(url: str, *, password: str | None, timeout: float) -> Any:
    """A client of the Redis at ``url`` (``password`` apart from it, when given); ``timeout`` bounds each
    call, connecting included. A call on a pooled connection that was cut (a restarted Redis) is tried once
    more on a new one, so what runs through it must be safe to run twice."""
    return aioredis.Redis.from_url(
        url,
        password=password,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        decode_responses=False,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError],
    )
