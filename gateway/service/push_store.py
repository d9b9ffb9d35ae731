"""Push subscriptions made through the API, in the Redis every replica shares (``idempotency.redis_url``), so
they survive restarts and every process of every replica runs the same set.

Layout (``prefix`` first): ``defs`` a hash of name -> the definition as its JSON (the API's spelling, the
secret included: protect the Redis as the secrets it holds deserve), ``groups`` a hash of group -> name (two
subscriptions of one group would share its messages), ``version`` a counter every change increments, which
each process polls to learn that it must read the definitions again. Each change is one Lua script, atomic
across replicas, and safe to run twice (the client tries a call once more on a new connection).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from gateway.service.redis_link import redis_client

__all__ = ["Changed", "RedisSubscriptions", "StoreDown", "Stored"]

# Shared by the scripts: forget the group of the definition ``doc`` of ``name`` (one that is not JSON, written
# around the API, has none to forget).
_GROUP = """
local function drop_group(groups, name, doc)
  local ok, parsed = pcall(cjson.decode, doc)
  local was = ok and type(parsed) == 'table' and parsed['group']
  if type(was) == 'string' and redis.call('HGET', groups, was) == name then
    redis.call('HDEL', groups, was)
  end
end
"""

# ARGV: prefix, name, group, definition, mode ('create' or 'replace'), the most definitions, the definition
# replaced as read before (replace; '' = any)
_PUT = (
    _GROUP
    + """
local prefix, name, group, doc, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local defs, groups = prefix .. 'defs', prefix .. 'groups'
local old = redis.call('HGET', defs, name)
if old == doc then return {'ok', redis.call('GET', prefix .. 'version') or '0'} end
if mode == 'create' and old then return {'exists'} end
if mode == 'replace' and not old then return {'missing'} end
if mode == 'replace' and ARGV[7] ~= '' and old ~= ARGV[7] then return {'changed'} end
local holder = redis.call('HGET', groups, group)
if holder and holder ~= name then return {'group', holder} end
local count = redis.call('HLEN', defs)
if not old and count >= tonumber(ARGV[6]) then return {'full', tostring(count)} end
if old then
  drop_group(groups, name, old)
end
redis.call('HSET', defs, name, doc)
redis.call('HSET', groups, group, name)
return {'ok', tostring(redis.call('INCR', prefix .. 'version'))}
"""
)

# ARGV: prefix, name, the definition as read before ('' = any)
_DELETE = (
    _GROUP
    + """
local prefix, name = ARGV[1], ARGV[2]
local defs, groups = prefix .. 'defs', prefix .. 'groups'
local old = redis.call('HGET', defs, name)
if not old then return {'missing'} end
if ARGV[3] ~= '' and old ~= ARGV[3] then return {'changed'} end
drop_group(groups, name, old)
redis.call('HDEL', defs, name)
return {'ok', tostring(redis.call('INCR', prefix .. 'version'))}
"""
)

# ARGV: prefix
_READ = """
local prefix = ARGV[1]
return {redis.call('GET', prefix .. 'version') or '0', redis.call('HGETALL', prefix .. 'defs')}
"""


class StoreDown(Exception):
    """The store could not be read or written (down, unreachable, past the timeout); the message says
    which."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A change went through; ``version`` is the store's after it."""

    version: int


@dataclass(frozen=True, slots=True)
class Changed:
    """A change was refused: ``reason`` is ``exists`` (create: the name is taken), ``missing`` (no such
    definition), ``changed`` (another change came first), ``group`` (``detail`` names the subscription that
    has the group) or ``full`` (``detail``: how many there are)."""

    reason: str
    detail: str = ""


class RedisSubscriptions:
    """The definitions in the Redis at ``url`` under ``prefix``; see the module docstring. ``timeout`` bounds
    each call (connecting included)."""

    def __init__(self, url: str, *, password: str | None, prefix: str, timeout: float) -> None:
        self._client: Any = redis_client(url, password=password, timeout=timeout)
        self._prefix = prefix
        self._put = self._client.register_script(_PUT)
        self._delete = self._client.register_script(_DELETE)
        self._read = self._client.register_script(_READ)

    def __repr__(self) -> str:
        return f"<RedisSubscriptions prefix={self._prefix!r}>"

    async def _call(self, script: Any, *args: object) -> Any:
        with _answering():
            return await script(args=[self._prefix, *args])

    async def version(self) -> int:
        with _answering():
            value = await self._client.get(self._prefix + "version")
        return int(value or 0)

    async def one(self, name: str) -> bytes | None:
        """The definition ``name`` as its JSON (None: not in the store)."""
        with _answering():
            document = await self._client.hget(self._prefix + "defs", name)
        return None if document is None else bytes(document)

    async def read(self) -> tuple[int, dict[str, bytes]]:
        """The version and every definition (name -> its JSON), read at one moment."""
        version, flat = await self._call(self._read)
        pairs = iter(flat)
        return int(version), {
            bytes(name).decode(): bytes(doc) for name, doc in zip(pairs, pairs, strict=True)
        }

    async def put(
        self, name: str, group: str, document: bytes, *, create: bool, limit: int, expect: bytes = b""
    ) -> Stored | Changed:
        """Create (``create``) or replace the definition ``name``; ``limit`` is the most definitions the
        store may hold, ``expect`` the definition a replace read before (empty: any)."""
        mode = "create" if create else "replace"
        found = await self._call(self._put, name, group, document, mode, limit, expect)
        return _answer(found)

    async def delete(self, name: str, *, expect: bytes = b"") -> Stored | Changed:
        return _answer(await self._call(self._delete, name, expect))

    async def close(self) -> None:
        await self._client.aclose()


@contextmanager
def _answering() -> Iterator[None]:
    """A Redis call in the block that fails (an error of the client, a refused or cut connection) raises
    StoreDown."""
    try:
        yield
    except (RedisError, OSError) as exc:
        raise StoreDown(f"{type(exc).__name__}: {exc}") from exc


def _answer(found: list[Any]) -> Stored | Changed:
    kind = bytes(found[0]).decode()
    if kind == "ok":
        return Stored(int(found[1]))
    return Changed(kind, bytes(found[1]).decode() if len(found) > 1 else "")
