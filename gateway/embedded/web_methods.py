"""The methods of the embedded web API (:mod:`gateway.embedded.web`): what a real master and broker answer,
field for field, for the read-only methods the gateway's offsets reader calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gateway.embedded.web import WebHandler, fail

if TYPE_CHECKING:
    from gateway.embedded.broker import EmbeddedBroker
    from gateway.embedded.master import EmbeddedMaster

__all__ = ["broker_methods", "master_methods"]

#: partition ids of a store are ``store * 10000 + index``
_STORE_BASE = 10000
_UNKNOWN = -2


def _names(text: str | None) -> set[str]:
    return {name.strip() for name in (text or "").split(",") if name.strip()}


def _ok(**fields: Any) -> dict[str, Any]:
    return {"result": True, "errCode": 0, "errMsg": "OK", **fields}


def master_methods(
    master: Callable[[], EmbeddedMaster], brokers: Sequence[EmbeddedBroker], web_port: Callable[[int], int]
) -> WebHandler:
    """The master's methods over the active ``master()`` and ``brokers`` (``web_port(broker_id)``: each
    broker's web port)."""

    def broker_configure(params: Mapping[str, str]) -> dict[str, Any]:
        data = []
        for broker in brokers:
            specs = list(broker.topics.values())
            data.append(
                {
                    "brokerId": broker.broker_id,
                    "brokerIp": broker.host,
                    "brokerPort": broker.port,
                    "brokerTLSPort": broker.port,
                    "brokerWebPort": web_port(broker.broker_id),
                    "manageStatus": "online" if broker.is_serving else "offline",
                    "acceptPublish": True,
                    "acceptSubscribe": True,
                    "numTopicStores": max((s.stores for s in specs), default=1),
                    "numPartitions": max((s.partitions for s in specs), default=1),
                }
            )
        return _ok(data=data, count=len(data))

    def group_detail(params: Mapping[str, str]) -> dict[str, Any]:
        name = params.get("consumeGroup", "")
        if not name:
            return fail("Bad request: consumeGroup is required")
        registry = master().consumers
        group = registry.groups.get(name)
        if group is None:
            return _ok(count=0, topicSet=[], consumeGroup=name, data=[])
        data = [
            {
                "consumerId": consumer_id,
                "parCount": len(registry.holdings.get(consumer_id, ())),
            }
            for consumer_id in sorted(group.consumers)
        ]
        return _ok(count=len(data), topicSet=sorted(group.topics), consumeGroup=name, data=data)

    def sub_info(params: Mapping[str, str]) -> dict[str, Any]:
        wanted = _names(params.get("groupName")) or _names(params.get("consumeGroup"))
        registry = master().consumers
        data = [
            {"consumeGroup": name, "topicSet": sorted(group.topics), "consumerNum": len(group.consumers)}
            for name, group in sorted(registry.groups.items())
            if group.consumers and (not wanted or name in wanted)
        ]
        return _ok(data=data, count=len(data))

    methods = {
        "admin_query_sub_info": sub_info,
        "admin_query_broker_configure": broker_configure,
        "admin_query_consume_group_detail": group_detail,
    }
    return _dispatch(methods)


def broker_methods(broker: EmbeddedBroker) -> WebHandler:
    """One broker's methods."""

    def booked_groups(params: Mapping[str, str]) -> dict[str, Any]:
        if not broker.is_serving:
            return fail("the broker is not serving")
        groups = sorted({group for group, _, _ in broker.offsets.booked()})
        entry = {"type": "all", "groupName": groups, "groupCount": len(groups)}
        return {"result": True, "errCode": 0, "errMsg": "Success!", "dataSet": [entry], "dataCount": 1}

    def group_offsets(params: Mapping[str, str]) -> dict[str, Any]:
        if not broker.is_serving:
            return fail("the broker is not serving")
        offsets = broker.offsets
        booked = offsets.booked()
        wanted_groups, wanted_topics = _names(params.get("groupName")), _names(params.get("topicName"))
        by_group: dict[str, dict[str, dict[int, int]]] = {}
        for (group, topic, partition_id), committed in booked.items():
            if (wanted_groups and group not in wanted_groups) or (
                wanted_topics and topic not in wanted_topics
            ):
                continue
            by_group.setdefault(group, {}).setdefault(topic, {})[partition_id] = committed
        data_set = []
        for group, topics in sorted(by_group.items()):
            sub_info = []
            for topic, partitions in sorted(topics.items()):
                rows = []
                for partition_id, committed in sorted(partitions.items()):
                    store = broker.store(topic, partition_id // _STORE_BASE)
                    rows.append(
                        {
                            "partitionId": partition_id,
                            "curOffset": committed,
                            "flightOffset": offsets.pending(group, topic, partition_id),
                            "curDataOffset": _UNKNOWN,
                            "offsetLag": store.max_offset - committed,
                            "dataLag": _UNKNOWN,
                            "offsetMax": store.max_offset,
                            "dataMax": store.data_max_offset,
                        }
                    )
                sub_info.append({"topicName": topic, "offsets": rows, "partCount": len(rows)})
            data_set.append({"groupName": group, "subInfo": sub_info, "topicCount": len(sub_info)})
        return {
            "result": True,
            "errCode": 0,
            "errMsg": "Success!",
            "dataSet": data_set,
            "totalCnt": len(data_set),
        }

    return _dispatch({"admin_query_offset": group_offsets, "admin_get_booked_groupname": booked_groups})


def _dispatch(methods: Mapping[str, Callable[[Mapping[str, str]], dict[str, Any]]]) -> WebHandler:
    def handle(method: str, params: Mapping[str, str]) -> dict[str, Any]:
        found = methods.get(method)
        if found is None:
            return fail(f"Unsupported method {method!r}")
        return found(params)

    return handle
