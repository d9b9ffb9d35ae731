"""The ``tubemq`` data source for PySpark (``pip install .[spark]``): see :mod:`gateway.spark.source`."""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register ``format("tubemq")`` with a SparkSession."""
    from gateway.spark.source import TubeMQDataSource

    spark.dataSource.register(TubeMQDataSource)
