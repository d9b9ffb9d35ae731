"""Idempotency keys in a Redis every replica shares (``idempotency.redis_url``): a
:class:`~gateway.service.idempotency_store.KeyStore` whose every step is one Lua script, so a step is atomic
across replicas as a SQLite transaction is across one replica's workers.

Layout (``prefix`` first): ``e:<id>`` a hash per key (``id``: SHA-256 of principal, topic and key) holding
the fingerprint, the holder's token, the expiry (ms, Redis' own clock: every replica reads the same one),
the size and, once recorded, the status and body; ``p:<principal id>`` a sorted set of the principal's
entries by expiry (its count is the principal's keys); ``all`` a sorted set of every entry by expiry (what
expired is removed from there, a few on each reservation, all when a bound is reached); ``usage`` a hash of
bytes per principal id and in all (field ``""``). The scripts touch keys they compute, so the store needs a
single Redis (or a primary with replicas), not a Redis Cluster.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from redis.exceptions import RedisError

from gateway.service.idempotency_store import (
    ROW_OVERHEAD,
    Full,
    InFlight,
    Mismatch,
    Replay,
    Reservation,
    Reserved,
    StoreFailed,
)
from gateway.service.redis_link import redis_client

__all__ = ["RedisKeys"]

#: expired entries removed on each reservation (all of them when a bound is reached)
_PURGE_STEP = 8

# Shared by the scripts: Redis' clock, whether a reservation is the token's, an entry's expiry, removing one
# entry (its member of "all" is "<principal id>:<entry id>") with its usage, removing the expired ones.
_DROP = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function drop(prefix, member)
  local sep = string.find(member, ':', 1, true)
  local ph, eid = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  local size = tonumber(redis.call('HGET', prefix .. 'e:' .. eid, 'size') or '0')
  redis.call('DEL', prefix .. 'e:' .. eid)
  redis.call('ZREM', prefix .. 'p:' .. ph, eid)
  redis.call('ZREM', prefix .. 'all', member)
  if size > 0 then
    redis.call('HINCRBY', prefix .. 'usage', ph, -size)
    redis.call('HINCRBY', prefix .. 'usage', '', -size)
  end
end
local function held(e, token)
  local row = redis.call('HMGET', e, 'token', 'status')
  return row[1] == token and not row[2]
end
local function expire_at(prefix, ph, eid, expires)
  redis.call('HSET', prefix .. 'e:' .. eid, 'expires', expires)
  redis.call('ZADD', prefix .. 'p:' .. ph, expires, eid)
  redis.call('ZADD', prefix .. 'all', expires, ph .. ':' .. eid)
end
local function purge(prefix, now, limit)
  local expired
  if limit < 0 then
    expired = redis.call('ZRANGEBYSCORE', prefix .. 'all', '-inf', now)
  else
    expired = redis.call('ZRANGEBYSCORE', prefix .. 'all', '-inf', now, 'LIMIT', 0, limit)
  end
  for _, member in ipairs(expired) do drop(prefix, member) end
end
"""

# ARGV: prefix, principal id, entry id, fingerprint, token, lease ms, size, max keys, max principal bytes,
# max bytes, purge step
_RESERVE = (
    _DROP
    + """
local prefix, ph, eid = ARGV[1], ARGV[2], ARGV[3]
local e = prefix .. 'e:' .. eid
local member = ph .. ':' .. eid
local now = now_ms()
local row = redis.call('HMGET', e, 'fp', 'status', 'body', 'expires')
if row[4] then
  if tonumber(row[4]) > now then
    if row[1] ~= ARGV[4] then return {'mismatch'} end
    if not row[2] then return {'inflight', tostring(tonumber(row[4]) - now)} end
    return {'replay', row[2], row[3] or ''}
  end
  drop(prefix, member)
end
purge(prefix, now, tonumber(ARGV[11]))
local size = tonumber(ARGV[7])
local function full()
  local keys = redis.call('ZCARD', prefix .. 'p:' .. ph)
  local used = tonumber(redis.call('HGET', prefix .. 'usage', ph) or '0')
  local total = tonumber(redis.call('HGET', prefix .. 'usage', '') or '0')
  if keys >= tonumber(ARGV[8]) then return {'keys', ARGV[8], 'p:' .. ph} end
  if used + size > tonumber(ARGV[9]) then return {'bytes', ARGV[9], 'p:' .. ph} end
  if total + size > tonumber(ARGV[10]) then return {'store', ARGV[10], 'all'} end
  return nil
end
local over = full()
if over then
  purge(prefix, now, -1)
  over = full()
end
if over then
  local first = redis.call('ZRANGE', prefix .. over[3], 0, 0, 'WITHSCORES')
  local wait = 1000
  if first[2] then wait = math.max(1000, tonumber(first[2]) - now) end
  return {'full', over[1], over[2], tostring(wait)}
end
redis.call('HSET', e, 'fp', ARGV[4], 'token', ARGV[5], 'size', size)
expire_at(prefix, ph, eid, now + tonumber(ARGV[6]))
redis.call('HINCRBY', prefix .. 'usage', ph, size)
redis.call('HINCRBY', prefix .. 'usage', '', size)
return {'reserved'}
"""
)

# ARGV: prefix, principal id, entry id, token, lease ms
_RENEW = (
    _DROP
    + """
local prefix, ph, eid = ARGV[1], ARGV[2], ARGV[3]
if not held(prefix .. 'e:' .. eid, ARGV[4]) then return 0 end
expire_at(prefix, ph, eid, now_ms() + tonumber(ARGV[5]))
return 1
"""
)

# ARGV: prefix, principal id, entry id, token, window ms, status, body
_RECORD = (
    _DROP
    + """
local prefix, ph, eid = ARGV[1], ARGV[2], ARGV[3]
local e = prefix .. 'e:' .. eid
if not held(e, ARGV[4]) then return 0 end
local grown = string.len(ARGV[7])
redis.call('HSET', e, 'status', ARGV[6], 'body', ARGV[7])
redis.call('HINCRBY', e, 'size', grown)
expire_at(prefix, ph, eid, now_ms() + tonumber(ARGV[5]))
redis.call('HINCRBY', prefix .. 'usage', ph, grown)
redis.call('HINCRBY', prefix .. 'usage', '', grown)
return 1
"""
)

# ARGV: prefix, principal id, entry id, token
_RELEASE = (
    _DROP
    + """
local prefix, ph, eid = ARGV[1], ARGV[2], ARGV[3]
if not held(prefix .. 'e:' .. eid, ARGV[4]) then return 0 end
drop(prefix, ph .. ':' .. eid)
return 1
"""
)


def _id(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


class RedisKeys:
    """The keys in the Redis at ``url`` (``password`` apart from it, when given), under ``prefix``; see the
    module docstring. ``timeout`` bounds each call (connecting included)."""

    def __init__(
        self,
        url: str,
        *,
        password: str | None,
        prefix: str,
        max_keys: int,
        max_principal_bytes: int,
        max_bytes: int,
        timeout: float,
    ) -> None:
        # A call is tried once more on a new connection when a pooled one was cut: every script is safe to
        # run twice (a second reservation finds the first, in flight, and answers 409).
        self._client: Any = redis_client(url, password=password, timeout=timeout)
        self._prefix = prefix
        self._limits = (max_keys, max_principal_bytes, max_bytes)
        self._reserve = self._client.register_script(_RESERVE)
        self._renew = self._client.register_script(_RENEW)
        self._record = self._client.register_script(_RECORD)
        self._release = self._client.register_script(_RELEASE)

    def __repr__(self) -> str:
        return f"<RedisKeys prefix={self._prefix!r}>"

    async def _run(self, script: Any, *args: object) -> Any:
        try:
            return await script(args=[self._prefix, *args])
        except (RedisError, OSError) as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc

    async def reserve(
        self, principal: str, topic: str, key: str, fingerprint: bytes, *, lease: float
    ) -> Reservation:
        size = ROW_OVERHEAD + len(principal.encode()) + len(topic.encode()) + len(key) + len(fingerprint)
        token = os.urandom(16)
        max_keys, max_principal_bytes, max_bytes = self._limits
        found = await self._run(
            self._reserve,
            _id(principal),
            _id(principal, topic, key),
            fingerprint,
            token,
            int(lease * 1000),
            size,
            max_keys,
            max_principal_bytes,
            max_bytes,
            _PURGE_STEP,
        )
        kind = found[0]
        if kind == b"reserved":
            return Reserved(token)
        if kind == b"replay":
            return Replay(int(found[1]), bytes(found[2]))
        if kind == b"inflight":
            return InFlight(retry_after=int(found[1]) / 1000)
        if kind == b"mismatch":
            return Mismatch()
        unit = found[1].decode()
        return Full(
            principal=unit != "store",
            unit="bytes" if unit == "store" else unit,
            limit=int(found[2]),
            retry_after=int(found[3]) / 1000,
        )

    async def renew(self, principal: str, topic: str, key: str, token: bytes, *, lease: float) -> bool:
        held = await self._run(
            self._renew, _id(principal), _id(principal, topic, key), token, int(lease * 1000)
        )
        return bool(held)

    async def record(
        self, principal: str, topic: str, key: str, token: bytes, status: int, body: bytes, *, window: float
    ) -> bool:
        kept = await self._run(
            self._record, _id(principal), _id(principal, topic, key), token, int(window * 1000), status, body
        )
        return bool(kept)

    async def release(self, principal: str, topic: str, key: str, token: bytes) -> None:
        await self._run(self._release, _id(principal), _id(principal, topic, key), token)

    async def close(self) -> None:
        await self._client.aclose()
