"""Consumer group offsets as TubeMQ itself keeps them, read from the master's and brokers' web API.

A group's lag must not depend on whether anyone consumes: the gateway's own view (what its consumers
fetched) ends with its last consumer. TubeMQ keeps each group's committed offset per partition on the
brokers, so :class:`GroupOffsetsReader` asks them (the methods the real servers serve, see
``BrokerAdminServlet`` and the master's ``WebBrokerConfHandler`` / ``WebOtherInfoHandler`` in apache/inlong):

* the master's ``admin_query_broker_configure`` lists the brokers with their web port (``brokerWebPort``);
* each broker's ``admin_query_offset`` (``groupName``: a comma list) gives, per booked group, topic and
  partition, ``curOffset`` (committed), ``offsetMax`` and ``offsetLag`` in index bytes (28 per message);
  a group that holds no offset on a broker is absent from its answer;
* the master's ``admin_query_sub_info`` (``groupName``: a comma list) gives each subscribed group's
  ``consumerNum`` (every client, not only this gateway's; a group without consumers is absent), and
  ``admin_query_consume_group_detail`` (``consumeGroup``) one group's consumers.

Addresses come only from configuration (the masters' hosts and ``tubemq.master_web_port``) and from the
master's answer, never from a client. Answers are bounded (:data:`MAX_ANSWER_BYTES`) and every call has a
timeout.

Requests are bounded too: the real master and brokers serve their web API with Jetty's default request
buffer (8 KiB for the request line and headers: a longer one is answered 414 or 431), and a group name may
have up to 1024 characters, so a comma list of groups is sent in parts of at most :data:`MAX_GROUP_LIST_BYTES`
each. A part the server still refuses as a request (an HTTP 4xx status) is halved until each group is asked
alone, so one group it will not take costs only that group's figures (:attr:`OffsetsReading.failed`); a
server that does not answer, or answers that it cannot serve, fails the whole reading (a partial reading
would show a group's lag too small).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.observability.lag_events import lag_entries

__all__ = [
    "MAX_GROUP_LIST_BYTES",
    "BrokerWeb",
    "GroupOffsetsReader",
    "OffsetsReading",
    "OffsetsRefused",
    "OffsetsUnavailable",
    "PartitionOffsets",
    "group_lists",
]

#: an answer larger than this is refused
MAX_ANSWER_BYTES = 8 * 1024 * 1024
#: bytes of the ``groupName`` value of one request (URL-encoded: a comma is 3 bytes); with the rest of the
#: request line and the headers it stays well inside Jetty's default 8 KiB request buffer
MAX_GROUP_LIST_BYTES = 6 * 1024
_COMMA_BYTES = 3


class OffsetsUnavailable(Exception):
    """No master or broker web API answered (the message says which and why)."""


class OffsetsRefused(OffsetsUnavailable):
    """A master or broker refused the request itself (an HTTP 4xx status: too long, malformed)."""


@dataclass(frozen=True, slots=True)
class OffsetsReading:
    """``found``: each group's partition offsets (a group holding none is absent); ``failed``: the groups
    a server refused to be asked about, even alone, with its answer."""

    found: dict[str, list[PartitionOffsets]]
    failed: dict[str, str]


def group_lists(groups: Collection[str], limit: int = MAX_GROUP_LIST_BYTES) -> list[list[str]]:
    """``groups`` sorted and cut into comma lists of at most ``limit`` URL-encoded bytes each (a name longer
    than ``limit`` goes alone)."""
    parts: list[list[str]] = []
    size = limit + 1
    for group in sorted(groups):
        cost = len(group.encode()) + _COMMA_BYTES
        if size + cost > limit + _COMMA_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(group)
        size += cost
    return parts


@dataclass(frozen=True, slots=True)
class BrokerWeb:
    broker_id: int
    host: str
    web_port: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One partition of a group on one broker: the committed offset and the partition's end (index bytes)."""

    group: str
    topic: str
    broker_id: int
    partition_id: int
    committed: int
    max_offset: int

    @property
    def lag_messages(self) -> int:
        """Messages (index entries) between the committed offset and the end."""
        return lag_entries(self.committed, self.max_offset) or 0


class GroupOffsetsReader:
    """Reads group offsets from the cluster whose master web APIs are ``masters`` (``host:port`` each, tried
    in order: the first that answers is the active master)."""

    def __init__(
        self,
        masters: Sequence[str],
        *,
        timeout: float = 5.0,
        max_group_list_bytes: int = MAX_GROUP_LIST_BYTES,
    ) -> None:
        if not masters:
            raise ValueError("the offsets reader needs at least one master web address")
        self.masters = list(masters)
        self.timeout = timeout
        self.max_group_list_bytes = max_group_list_bytes
        #: web API requests sent (master and brokers), for the operators' metrics and the benchmarks
        self.requests = 0
        self._client = httpx.AsyncClient(
            timeout=timeout, trust_env=False, follow_redirects=False, limits=httpx.Limits(max_connections=16)
        )

    def __repr__(self) -> str:
        return f"<GroupOffsetsReader masters={self.masters}>"

    async def close(self) -> None:
        await self._client.aclose()

    async def brokers(self) -> list[BrokerWeb]:
        """The brokers the master knows, with their web ports."""
        answer = await self._master("admin_query_broker_configure", {})
        found = []
        for item in answer.get("data") or ():
            try:
                found.append(
                    BrokerWeb(int(item["brokerId"]), str(item["brokerIp"]), int(item["brokerWebPort"]))
                )
            except (KeyError, TypeError, ValueError):
                continue
        return found

    async def consumers(self, group: str) -> int:
        """How many consumers the master lists in ``group``."""
        answer = await self._master("admin_query_consume_group_detail", {"consumeGroup": group})
        return int(answer.get("count") or 0)

    async def consumer_counts(self, groups: Collection[str]) -> dict[str, int]:
        """How many consumers the master lists in each of ``groups``, in as few calls as the request bound
        allows (its ``admin_query_sub_info`` lists only groups with a subscription: the others have none);
        -1 for a group the master refused to be asked about."""
        counts = dict.fromkeys(groups, 0)

        async def ask(part: list[str]) -> None:
            answer = await self._master("admin_query_sub_info", {"groupName": ",".join(part)})
            for item in answer.get("data") or ():
                group = item.get("consumeGroup") if isinstance(item, dict) else None
                if group in counts:
                    with contextlib.suppress(TypeError, ValueError):
                        counts[group] = int(item.get("consumerNum") or 0)

        for part in group_lists(groups, self.max_group_list_bytes):
            for group in await _halving(ask, part):
                counts[group] = -1
        return counts

    async def offsets(self, groups: Collection[str]) -> dict[str, list[PartitionOffsets]]:
        """Every partition offset of ``groups`` on every broker; a group holding none is absent. Raises
        OffsetsUnavailable when the master or a broker cannot be read about any of them."""
        reading = await self.read(groups)
        if reading.failed:
            group, error = next(iter(reading.failed.items()))
            raise OffsetsUnavailable(f"offsets of group {group[:80]!r}: {error}")
        return reading.found

    async def read(self, groups: Collection[str]) -> OffsetsReading:
        """Every partition offset of ``groups`` on every broker, asked in bounded parts; a group some broker
        refused to be asked about (even alone) is in ``failed``, not in ``found``. Raises OffsetsUnavailable
        when the master or a broker does not answer or cannot serve."""
        found: dict[str, list[PartitionOffsets]] = {}
        failed: dict[str, str] = {}
        wanted = set(groups)
        if not wanted:
            return OffsetsReading(found, failed)
        for broker in await self.brokers():
            url = f"http://{_host(broker.host)}:{broker.web_port}/broker.htm"

            async def ask(part: list[str], url: str = url, broker_id: int = broker.broker_id) -> None:
                answer = await self._get(url, {"method": "admin_query_offset", "groupName": ",".join(part)})
                asked = set(part)
                for entry in answer.get("dataSet") or ():
                    group = entry.get("groupName")
                    if group not in asked:
                        continue
                    rows = found.setdefault(group, [])
                    for sub in entry.get("subInfo") or ():
                        topic = str(sub.get("topicName", ""))
                        for item in sub.get("offsets") or ():
                            parsed = _partition(group, topic, broker_id, item)
                            if parsed is not None:
                                rows.append(parsed)

            for part in group_lists(wanted - failed.keys(), self.max_group_list_bytes):
                failed.update(await _halving(ask, part))
        return OffsetsReading(
            {group: rows for group, rows in found.items() if rows and group not in failed}, failed
        )

    async def _master(self, method: str, params: dict[str, str]) -> dict[str, Any]:
        errors = []
        refused = False
        for master in self.masters:
            url = f"http://{master}/webapi.htm"
            try:
                return await self._get(url, {"type": "op_query", "method": method, **params})
            except OffsetsRefused as exc:
                errors.append(str(exc))
                refused = True
            except OffsetsUnavailable as exc:
                errors.append(str(exc))
        raise (OffsetsRefused if refused else OffsetsUnavailable)("; ".join(errors))

    async def _get(self, url: str, params: dict[str, str]) -> dict[str, Any]:
        self.requests += 1
        try:
            async with self._client.stream("GET", url, params=params) as response:
                if 400 <= response.status_code < 500:
                    raise OffsetsRefused(
                        f"{url} refused {params.get('method')} with HTTP {response.status_code}"
                    )
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise OffsetsUnavailable(f"{url} answered more than {MAX_ANSWER_BYTES} bytes")
        except httpx.HTTPError as exc:
            raise OffsetsUnavailable(f"{url}: {type(exc).__name__}: {exc}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise OffsetsUnavailable(f"{url} answered something that is not JSON") from None
        if not isinstance(answer, dict) or answer.get("result") is not True:
            message = answer.get("errMsg") if isinstance(answer, dict) else None
            raise OffsetsUnavailable(f"{url} refused {params.get('method')}: {message}")
        return answer


async def _halving(ask: Callable[[list[str]], Awaitable[None]], part: list[str]) -> dict[str, str]:
    """``ask(part)``; a part refused as a request is asked again in halves, down to single groups. The
    groups refused alone, with the refusal (other errors propagate)."""
    try:
        await ask(part)
    except OffsetsRefused as exc:
        if len(part) == 1:
            return {part[0]: str(exc)}
        half = len(part) // 2
        return {**await _halving(ask, part[:half]), **await _halving(ask, part[half:])}
    return {}


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _partition(group: str, topic: str, broker_id: int, item: Any) -> PartitionOffsets | None:
    try:
        committed, max_offset = int(item["curOffset"]), int(item["offsetMax"])
        partition_id = int(item["partitionId"])
    except (KeyError, TypeError, ValueError):
        return None
    if committed < 0 or max_offset < 0:
        return None  # not known on this broker (-2)
    return PartitionOffsets(group, topic, broker_id, partition_id, committed, max_offset)
