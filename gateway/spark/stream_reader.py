"""Streaming reads of the ``tubemq`` source.

**Streaming read**: the stream offset is the JSON map ``{"brokerId:topic:partitionId": offset}``; it lives
only in Spark's checkpoint. Each micro-batch reads exactly ``[start, end)`` per partition, so a restarted
query resumes at the checkpointed offsets with no message skipped or read twice. Partitions found later
start at their store's oldest message and keep their key; a partition whose broker is down keeps its last
offset until it is back. ``maxMessagesPerTrigger`` (``maxOffsetsPerTrigger``) is exact: the partitions of
a store share its index, one entry per message, so they end at one offset and a micro-batch holds exactly
the cap when that many messages wait (fewer only while the partitions of a store still stand at different
offsets, e.g. after a ``startingOffsets`` JSON set them apart). ``trigger(availableNow=True)`` notes what
every partition holds when the run starts and reads exactly that, in micro-batches of the cap, then stops;
a run after a crash first finishes the batch the crash cut, then reads on to its own start's end.
``failOnDataLoss`` (default true) fails the query, naming the partition and the offsets, when its offset
lies past the partition's end (the store was lost or replaced) or before its oldest message (expired, also
checked when a task starts reading); false logs a warning and reads on from the oldest message.
``minPartitions`` splits large ranges into several exact tasks.

Query progress shows ``latestOffset`` (``reportLatestOffset``: what each partition held at the last
planning). Spark 4.3 gives Python sources no hook for ``sources[].metrics`` (its Python micro-batch stream
does not implement ``ReportsSourceMetrics``), so the lag per partition comes from
:func:`gateway.spark.progress.source_lag` applied to a progress report.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from gateway.spark import backend
from gateway.spark.core import PlannedPartition
from gateway.spark.options import SourceOptions
from gateway.spark.partitions import TubeMQInputPartition, read_partition, split_ranges
from gateway.tubemq.consumer import INDEX_ENTRY_SIZE

__all__ = ["TubeMQStreamReader", "capped_offsets"]


class TubeMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{partitionKey: offset}``; see the module docstring."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._last: dict[str, int] | None = None
        self._planned: dict[str, PlannedPartition] = {}
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        planned = backend.plan(self.options)
        spec = self.options.starting
        unknown = sorted(set(spec.per_partition) - set(planned))
        if unknown:
            raise ValueError(f"startingOffsets names partitions the topics do not have now: {unknown}")
        offsets = {
            key: spec.resolve(key, p.bounds.min_offset, p.bounds.max_offset) for key, p in planned.items()
        }
        self._last = offsets
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: read up to what every partition holds now, then stop."""
        self._target = {key: p.bounds.max_offset for key, p in backend.plan(self.options).items()}

    def getDefaultReadLimit(self) -> Any:
        cap = self.options.max_messages_per_trigger
        if cap is None:
            return ReadAllAvailable()
        return ReadMaxRows(cap)

    def reportLatestOffset(self) -> dict[str, int] | None:
        """What the partitions held at the last planning (``latestOffset`` in the query progress)."""
        return self._latest

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        begin = dict(start if start is not None else self._last or {})
        planned = self._planned = backend.plan(self.options)
        self._latest = {key: p.bounds.max_offset for key, p in planned.items()}
        floor = {key: self._floor(key, begin.get(key), p) for key, p in planned.items()}
        latest = dict(self._latest)
        if self._target is not None:  # availableNow: nothing past what was there when the run began
            latest = {k: max(floor[k], min(v, self._target.get(k, floor[k]))) for k, v in latest.items()}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if limit is None:
            cap = self.options.max_messages_per_trigger
        end = capped_offsets(floor, latest, cap, {key: p.store for key, p in planned.items()})
        result = dict(begin)  # partitions not visible right now keep their offset
        result.update(end)
        self._last = result
        return result

    def _floor(self, key: str, begin: int | None, planned: PlannedPartition) -> int:
        """Where ``key`` reads on from: its offset, unless the broker no longer has it (failOnDataLoss)."""
        low, high = planned.bounds.min_offset, planned.bounds.max_offset
        if begin is None:  # found after the query began: from its oldest message
            return low
        if begin > high:
            backend.data_loss(
                self.options,
                f"partition {key}: the query is at offset {begin}, past the partition's end {high} (its "
                f"store was lost or replaced; messages {low}..{high} would be skipped)",
            )
            return low
        if begin < low:
            backend.data_loss(
                self.options,
                f"partition {key}: offsets {begin}..{low} expired before the query read them (oldest "
                f"retained: {low})",
            )
            return low
        return begin

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        wanted: dict[str, tuple[int, int, bool]] = {}
        for key, offset in end.items():
            begin = start.get(key)
            # Found during the query, or its store was replaced (failOnDataLoss false): from its oldest
            # message (the broker clamps offset 0 up to it).
            if begin is None or offset < begin:
                wanted[key] = (0, offset, False)
            elif offset > begin:
                wanted[key] = (begin, offset, self.options.fail_on_data_loss)
        wanted = {key: w for key, w in wanted.items() if w[1] > w[0]}
        if not wanted:
            return []
        planned = self._planned
        if not set(wanted) <= set(planned):  # e.g. a restarted query plans its last batch again
            planned = self._planned = backend.plan(self.options)
        missing = sorted(set(wanted) - set(planned))
        if missing:
            raise RuntimeError(f"partitions {missing} of this micro-batch have no reachable broker now")
        ranges = [
            planned[key].range(low, high, fail_on_data_loss=strict)
            for key, (low, high, strict) in sorted(wanted.items())
        ]
        return [TubeMQInputPartition(r) for r in split_ranges(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint only."""


def capped_offsets(
    start: Mapping[str, int],
    latest: Mapping[str, int],
    cap: int | None,
    stores: Mapping[str, Hashable] | None = None,
) -> dict[str, int]:
    """End offsets covering at most ``cap`` index entries past ``start`` in total; ``cap`` None means
    everything up to ``latest``.

    Partitions of one store (``stores`` maps a key to its store; None: every key is a store of its own)
    share its index: each entry is one message of one of them. A store's partitions therefore end at one
    offset ``E`` (each at least at its start), so the batch holds exactly the entries in ``[s, E)`` when
    they start at one offset ``s`` (which they do unless startingOffsets or a late partition set them
    apart: then it holds fewer until they meet). The cap is shared by the stores in proportion to their
    backlog, largest remainders first.
    """
    group: dict[Hashable, list[str]] = {}
    for key in latest:
        group.setdefault(stores[key] if stores is not None else key, []).append(key)
    first = {store: min(start[k] for k in keys) for store, keys in group.items()}
    last = {store: max(latest[k] for k in keys) for store, keys in group.items()}
    backlog = {store: max(0, last[store] - first[store]) // INDEX_ENTRY_SIZE for store in group}
    total = sum(backlog.values())
    if cap is None or total <= cap:
        return {key: max(latest[key], start[key]) for key in latest}
    share = {store: backlog[store] * cap // total for store in backlog}
    left = cap - sum(share.values())
    for store in sorted(backlog, key=lambda s: (share[s] - backlog[s], str(s))):
        if left <= 0:
            break
        if share[store] < backlog[store]:
            share[store] += 1
            left -= 1
    end: dict[str, int] = {}
    for store, keys in group.items():
        cut = first[store] + INDEX_ENTRY_SIZE * share[store]
        for key in keys:
            end[key] = max(start[key], min(cut, latest[key]))
    return end
