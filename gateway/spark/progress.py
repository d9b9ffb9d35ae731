"""Lag of a ``tubemq`` streaming source, read from Spark's query progress.

Spark 4.3 gives Python data sources no hook for a source's ``metrics`` in the progress report (its Python
micro-batch stream does not implement ``ReportsSourceMetrics``), so the lag is derived from what the report
does hold: ``endOffset`` (where the query stands) and ``latestOffset`` (what each partition held at the last
planning, from ``reportLatestOffset``)::

    from gateway.spark.progress import source_lag
    lag = source_lag(query.lastProgress["sources"][0])
    lag["partitions"]  # {"1:demo:0": 120, ...}: index entries behind per partition
    lag["maxOffsetsBehindLatest"], lag["avgOffsetsBehindLatest"], lag["minOffsetsBehindLatest"]

The names of the totals are those of Spark's Kafka source. Counts are index entries (28-byte offset steps):
on a store with one partition that is the messages behind; the partitions of one store share its index, so
there each counts the store's entries behind it (an upper bound of its own messages).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.tubemq.consumer import INDEX_ENTRY_SIZE

__all__ = ["source_lag"]


def _offsets(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    data = json.loads(value) if isinstance(value, str) else value
    if not isinstance(data, Mapping):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)}


def source_lag(source: Mapping[str, Any]) -> dict[str, Any]:
    """Entries behind per partition and Kafka's min/avg/max totals for one ``sources[i]`` entry of a
    progress report (a dict, or JSON text as Spark may give it); empty totals when nothing is known yet."""
    end = _offsets(source.get("endOffset"))
    latest = _offsets(source.get("latestOffset"))
    behind = {key: max(0, latest[key] - end.get(key, 0)) // INDEX_ENTRY_SIZE for key in sorted(latest)}
    result: dict[str, Any] = {"partitions": behind}
    if behind:
        values = list(behind.values())
        result["minOffsetsBehindLatest"] = min(values)
        result["maxOffsetsBehindLatest"] = max(values)
        result["avgOffsetsBehindLatest"] = sum(values) / len(values)
    return result
