"""Generated protobuf (proto2) modules for the TubeMQ wire messages.

``RPC_pb2`` (envelope), ``MasterService_pb2`` (client <-> master) and ``BrokerService_pb2``
(client <-> broker), generated from ``proto/wire/*.proto``. Do not edit the ``_pb2`` files: run
``python scripts/gen_protos.py`` after changing a ``.proto``; ``tests/tubemq/test_protos.py`` fails when they
are stale.
"""
