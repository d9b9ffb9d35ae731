"""Writes of the ``tubemq`` source (batch and streaming).

**Write** (batch and streaming): save mode ``append`` adds the rows; ``overwrite`` is refused, as Spark's
Kafka sink refuses it (a topic cannot be replaced). Kafka also takes the default mode, ErrorIfExists, as
append; a Python data source cannot: Spark itself refuses ErrorIfExists and Ignore for every Python data
source before the source is asked (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``), so writes say
``mode("append")``. Every row becomes one message (``value`` required, binary or string; optional
``key``, ``attributes``, ``stream_id``, ``msg_time``); a task sends its rows in batches bounded by
``writeBatchRows`` and ``writeBatchBytes`` (:mod:`gateway.spark.batches`), each through the producer's
batch path (``Producer.send_prepared``) of the process's one pooled core, one batch in flight while the
next is read. A row counts as written once a broker acknowledged it; a task fails when any of its messages
fails (:class:`gateway.spark.failures.WriteFailed`: how many of the batch, and the first one's error; the
batches after it are not sent), so Spark retries it (delivery is at-least-once).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from gateway.spark import backend
from gateway.spark.batches import check_columns
from gateway.spark.options import SourceOptions

__all__ = ["TubeMQCommitMessage", "TubeMQStreamWriter", "TubeMQWriter", "check_value_type"]


@dataclass
class TubeMQCommitMessage(WriterCommitMessage):
    """How many messages one write task sent."""

    messages: int


def check_value_type(schema: StructType) -> None:
    """Refuse, before any task runs, a ``value`` column that is neither string nor binary (as Spark's Kafka
    sink does): an integer would otherwise become that many zero bytes."""
    if "value" not in schema.fieldNames():
        check_columns(schema.fieldNames())
    kind = schema["value"].dataType
    if not isinstance(kind, StringType | BinaryType):
        raise ValueError(
            f"the 'value' column must be string or binary, not {kind.simpleString()}: cast it first, "
            "e.g. col('value').cast('string')"
        )


class _RowsWriter:
    """What a batch and a stream write task do alike: send the task's rows."""

    def __init__(self, options: SourceOptions, columns: list[str]) -> None:
        self.options = options
        self.columns = columns
        check_columns(columns)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return TubeMQCommitMessage(backend.write_rows(self.options, self.columns, iterator))


class TubeMQWriter(_RowsWriter, DataSourceWriter):
    pass


class TubeMQStreamWriter(_RowsWriter, DataSourceStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every message was acknowledged by a broker when its task finished: nothing left to do."""
