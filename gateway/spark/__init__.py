"""The ``tubemq`` data source for PySpark (``pip install .[spark]``): see :mod:`gateway.spark.source`."""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register ``format("tubemq")`` with a SparkSession; with ``spark.sql.python.filterPushdown.enabled``
    true, batch reads take ``stream_id`` filters down to the broker (:mod:`gateway.spark.batch_reader`)."""
    from gateway.spark.source import TubeMQDataSource, TubeMQFilteringDataSource

    pushdown = str(spark.conf.get("spark.sql.python.filterPushdown.enabled", "false")).lower() == "true"
    spark.dataSource.register(TubeMQFilteringDataSource if pushdown else TubeMQDataSource)
