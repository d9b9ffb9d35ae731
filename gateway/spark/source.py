"""The ``tubemq`` data source on PySpark's Python Data Source API (pyspark >= 4.2).

    from gateway.spark import TubeMQDataSource
    spark.dataSource.register(TubeMQDataSource)
    df = spark.read.format("tubemq").option("masters", "127.0.0.1:18715").option("topic", "demo").load()

Each job lives in its module: batch reads in :mod:`gateway.spark.batch_reader` (with the stream-id filter
and its pushdown), streaming reads in :mod:`gateway.spark.stream_reader`, the tasks of a read in
:mod:`gateway.spark.partitions`, writes in :mod:`gateway.spark.writer`; what they ask of TubeMQ is
:mod:`gateway.spark.backend`. This module is the data source that hands them out.

``option("gateway", "http://...")`` sends all of it through a tubemq-gateway's REST API instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from gateway.spark.batch_reader import TubeMQBatchReader, TubeMQFilteringBatchReader
from gateway.spark.options import SourceOptions
from gateway.spark.partitions import split_ranges
from gateway.spark.stream_reader import TubeMQStreamReader, capped_offsets
from gateway.spark.writer import TubeMQStreamWriter, TubeMQWriter, check_value_type

__all__ = ["SCHEMA", "TubeMQDataSource", "TubeMQFilteringDataSource", "capped_offsets", "split_ranges"]

SCHEMA = (
    "topic string, partition string, offset bigint, message_id bigint, key string, value binary, "
    "attributes map<string,string>, stream_id string, msg_time timestamp, append_time timestamp"
)


class TubeMQDataSource(DataSource):
    """``format("tubemq")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "tubemq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return TubeMQBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TubeMQStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError(
                "save mode 'overwrite' is not allowed for tubemq (as for Spark's Kafka sink): a topic's "
                "messages cannot be replaced; use mode('append') to add the rows"
            )
        check_value_type(schema)
        return TubeMQWriter(_write_options(self.options), schema.fieldNames())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_value_type(schema)
        return TubeMQStreamWriter(_write_options(self.options), schema.fieldNames())


class TubeMQFilteringDataSource(TubeMQDataSource):
    """``format("tubemq")`` whose batch reader takes ``stream_id`` filters to the broker: registered by
    :func:`gateway.spark.register` when ``spark.sql.python.filterPushdown.enabled`` is true (Spark refuses a
    reader with ``pushFilters`` while that is false)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        return TubeMQFilteringBatchReader(SourceOptions.parse(self.options))


def _write_options(given: Mapping[str, str]) -> SourceOptions:
    """The options of a write: one topic (ValueError before any task runs otherwise)."""
    options = SourceOptions.parse(given)
    _ = options.topic
    return options
