"""The embedded TubeMQ broker: stores, offsets and consumer registrations behind an :class:`RpcServer`.

It serves SendMessage (13) here and the consumer calls (15-18) through
:class:`~gateway.embedded.broker_consume.ConsumerService`, answering as the Java broker does (§6.5-§6.11,
§10.2). With ``data_dir`` the messages (``data_dir/<topic>/store-<n>.log``) and the committed offsets
(``data_dir/offsets.json``) survive a restart; every acknowledged message is written through to the
operating system before the answer goes out (see :mod:`gateway.embedded.store` for the exact guarantees).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl as _ssl
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from google.protobuf.message import Message

from gateway.embedded.auth import ServerAuth, refusal
from gateway.embedded.broker_common import (
    BAD_REQUEST,
    FORBIDDEN,
    INTERNAL_SERVER_ERROR,
    SERVICE_UNAVAILABLE,
    SUCCESS,
    BadField,
    StoreTable,
    WrongPartition,
    check_client_id,
    check_topic_partition,
    is_blank,
    java_trim,
)
from gateway.embedded.broker_consume import ConsumerService
from gateway.embedded.listen import StartServer, tcp_server
from gateway.embedded.offsets import OffsetManager
from gateway.embedded.server import CallContext, RemoteFault, RpcServer
from gateway.embedded.store import NO_MSG_TYPE, AppendResult, Retention, TopicStore
from gateway.embedded.topics import DEFAULT_MAX_MSG_SIZE, TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import STATUS_ERROR
from gateway.tubemq.wire.payload import crc32_checksum, java_string_hash
from gateway.tubemq.wire.pb import BrokerService_pb2 as pb
from gateway.tubemq.wire.rpc import METHODS, Method

__all__ = ["MAX_MSG_SIZE_SLACK", "EmbeddedBroker"]

log = logging.getLogger(__name__)

# The broker accepts a payload up to the cluster's max message size plus this (room for attributes).
MAX_MSG_SIZE_SLACK = 10240
_OFFSETS_FILE = "offsets.json"


class EmbeddedBroker:
    """One TubeMQ-compatible broker on ``host:port`` (0 picks a free port; read ``address`` after start).

    ``consumer_timeout`` (seconds) is how long a consumer's partition registration lives without a
    heartbeat or fetch; ``max_msg_size`` (bytes) is the cluster's max message size; ``clock`` (monotonic
    seconds) drives registration expiry; ``id_clock`` (monotonic nanoseconds, the broker's ``nanoTime``)
    drives message ids (:mod:`gateway.embedded.msgid`); ``fsync`` forces every append and offsets rewrite
    to disk.
    ``auth`` refuses sends and consumer registrations/heartbeats without a valid broker token (415).
    """

    def __init__(
        self,
        broker_id: int,
        topics: Sequence[TopicSpec],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: Path | None = None,
        max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
        consumer_timeout: float = 30.0,
        ssl: _ssl.SSLContext | None = None,
        auth: ServerAuth | None = None,
        fsync: bool = False,
        clock: Callable[[], float] = time.monotonic,
        id_clock: Callable[[], int] = time.monotonic_ns,
        retention: Retention | None = None,
        retention_interval: float = 10.0,
        start_server: StartServer = tcp_server,
    ) -> None:
        names = [spec.name for spec in topics]
        if len(set(names)) != len(names):
            raise ValueError(f"a topic is given twice: {names}")
        if consumer_timeout <= 0:
            raise ValueError(f"consumer_timeout must be > 0 seconds, got {consumer_timeout}")
        self.broker_id = broker_id
        self.topics: Mapping[str, TopicSpec] = MappingProxyType({spec.name: spec for spec in topics})
        self.host = host
        self.data_dir = data_dir
        self.max_msg_size = max_msg_size
        self.consumer_timeout = consumer_timeout
        self.get_requests = 0
        """GetMessage requests handled since creation (idle-cost tests and benchmarks count them)."""
        self._port = port
        self._ssl = ssl
        self._auth = auth
        self._fsync = fsync
        self._clock = clock
        self._id_clock = id_clock
        self.retention = retention
        self._retention_interval = retention_interval
        self._retention_due = 0.0
        self._start_server = start_server
        self._server: RpcServer | None = None
        self._stores: StoreTable | None = None
        self._offsets: OffsetManager | None = None
        self._consumers: ConsumerService | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._serving = False

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open (or create) the stores and offsets, then listen; raises if already started.

        A restarted broker listens on the port it had before. A file-backed broker reloads its stores and
        offsets from ``data_dir``; an in-memory one keeps them across a stop/start. Consumer registrations
        never survive a stop, as on a real broker.
        """
        if self._server is not None:
            raise RuntimeError(f"{self!r} is already started")
        stores, offsets = self._stores, self._offsets
        if stores is None or offsets is None or self.data_dir is not None:
            # Reading the store files can take a while: keep it off the event loop.
            stores = await asyncio.to_thread(
                StoreTable,
                self.topics.values(),
                self.data_dir,
                id_clock=self._id_clock,
                fsync=self._fsync,
                retention=self.retention,
            )
            try:
                offsets_path = self.data_dir / _OFFSETS_FILE if self.data_dir is not None else None
                offsets = OffsetManager(offsets_path, fsync=self._fsync)
            except BaseException:
                stores.close()
                raise
        consumers = ConsumerService(
            self.broker_id,
            self.topics,
            stores,
            offsets,
            consumer_timeout=self.consumer_timeout,
            clock=self._clock,
            host=self.host,
        )
        name = f"broker-{self.broker_id}"
        server = RpcServer(
            self.handle, self.host, self._port, ssl=self._ssl, name=name, start_server=self._start_server
        )
        self._stores, self._offsets, self._consumers, self._server = stores, offsets, consumers, server
        self._serving = True
        try:
            await server.start()
        except BaseException:
            await self.stop()
            raise
        self._port = server.port
        self._sweeper = asyncio.get_running_loop().create_task(
            self._sweep(), name=f"broker-{self.broker_id} sweeper"
        )
        log.info("%r started", self, extra={"broker_id": self.broker_id, "address": str(self.address)})

    async def stop(self) -> None:
        """Stop listening, drop every client link and close the store files; a no-op when not started."""
        server, self._server = self._server, None
        if server is None:
            return
        self._serving = False
        if self._consumers is not None:
            self._consumers.serving = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        try:
            await server.stop()
        finally:
            if self._offsets is not None and self.data_dir is not None:
                await asyncio.to_thread(self._offsets.close)
            if self._stores is not None and self.data_dir is not None:
                await self._stores.aclose()
                self._stores = None
        log.info("%r stopped", self, extra={"broker_id": self.broker_id})

    async def __aenter__(self) -> EmbeddedBroker:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def _sweep(self) -> None:
        # Check often enough that a timed-out registration is gone well before a consumer retries.
        interval = min(self.consumer_timeout / 3, 1.0)
        while True:
            await asyncio.sleep(interval)
            self.expire_registrations()
            now = self._clock()
            if self.retention is not None and self._stores is not None and now >= self._retention_due:
                self._retention_due = now + self._retention_interval
                try:
                    await self._stores.enforce_retention_async()
                except OSError:
                    log.exception("retention failed", extra={"broker_id": self.broker_id})

    # -- state ---------------------------------------------------------------------------------------

    @property
    def is_serving(self) -> bool:
        return self._serving

    @property
    def address(self) -> NodeAddress:
        """Where the broker listens; only known once started."""
        if self._server is None:
            raise RuntimeError(f"{self!r} is not started: call start() first")
        return self._server.address

    @property
    def port(self) -> int:
        return self.address.port

    @property
    def offsets(self) -> OffsetManager:
        if self._offsets is None:
            raise RuntimeError(f"{self!r} has not been started: call start() first")
        return self._offsets

    @property
    def consumers(self) -> ConsumerService:
        if self._consumers is None:
            raise RuntimeError(f"{self!r} has not been started: call start() first")
        return self._consumers

    def store(self, topic: str, store_index: int = 0) -> TopicStore:
        """The store of one topic store index (for tests and admin views)."""
        if self._stores is None:
            raise RuntimeError(f"{self!r} has not been started: call start() first")
        return self._stores.get(topic, store_index)

    def expire_registrations(self) -> int:
        """Drop consumer registrations past their deadline now; returns how many were dropped."""
        return self._consumers.expire() if self._consumers is not None else 0

    # -- RPC -----------------------------------------------------------------------------------------

    async def handle(self, method: int, request: Message, ctx: CallContext) -> Message:
        """The :class:`RpcServer` handler: answer one broker call."""
        if self._auth is not None:
            refused = self._auth.check_broker_call(method, request)
            if refused is not None:
                return refusal(METHODS[method].response_type(), refused)
        consumers = self.consumers
        if method == Method.SEND_MESSAGE and isinstance(request, pb.SendMessageRequestP2B):
            return await self.send_message(request)
        if method == Method.CONSUMER_BROKER_REGISTER and isinstance(request, pb.RegisterRequestC2B):
            return consumers.register(request)
        if method == Method.CONSUMER_BROKER_HEARTBEAT and isinstance(request, pb.HeartBeatRequestC2B):
            return consumers.heartbeat(request)
        if method == Method.GET_MESSAGES and isinstance(request, pb.GetMessageRequestC2B):
            self.get_requests += 1
            return await consumers.get_message_async(request)
        if method == Method.CONSUMER_COMMIT and isinstance(request, pb.CommitOffsetRequestC2B):
            return consumers.commit(request)
        raise RemoteFault(STATUS_ERROR, "java.lang.Exception", f"Unsupported method ID :{method}")

    async def send_message(self, request: pb.SendMessageRequestP2B) -> pb.SendMessageResponseB2P:
        """Method 13: validate and append one message. A file store's write runs off the event loop; the
        answer goes out once the message is written through to the operating system."""
        checked = self._check_send(request)
        if isinstance(checked, pb.SendMessageResponseB2P):
            return checked
        store, type_hash, checksum = checked
        try:
            result = await store.append_async(
                request.partitionId, request.data, request.flag, type_hash, request.sentAddr, checksum
            )
        except OSError as exc:
            return self._store_failed(request, exc)
        return _stored(result)

    def _check_send(
        self, request: pb.SendMessageRequestP2B
    ) -> pb.SendMessageResponseB2P | tuple[TopicStore, int, int]:
        """The refusal for a send, or the store, msgType hash and checksum to append it with."""
        answer = pb.SendMessageResponseB2P(success=False)
        if not self._serving or self._stores is None:
            return _fail(answer, SERVICE_UNAVAILABLE, "Write StoreService temporary unavailable!")
        try:
            check_client_id(request.clientId)
            spec = check_topic_partition(request.topicName, request.partitionId, self.topics)
        except BadField as bad:
            return _fail(answer, bad.code, bad.message)
        type_hash = NO_MSG_TYPE
        if request.HasField("msgType") and not is_blank(request.msgType):
            type_hash = java_string_hash(java_trim(request.msgType))
        data = request.data
        limit = self.max_msg_size + MAX_MSG_SIZE_SLACK
        if not data:
            return _fail(answer, BAD_REQUEST, "data length is zero!")
        if len(data) > limit:
            message = (
                f"data length over max length, allowed max length is {limit}, data length is {len(data)}"
            )
            return _fail(answer, BAD_REQUEST, message)
        checksum = crc32_checksum(data)
        if request.checkSum != -1 and request.checkSum != checksum:
            message = (
                f"Checksum msg data failure: {request.checkSum} of {spec.name} "
                f"not equal to the data's checksum of {checksum}"
            )
            return _fail(answer, FORBIDDEN, message)
        try:
            store = self._stores.for_partition(spec.name, request.partitionId)
        except WrongPartition as exc:
            return self._store_failed(request, exc)
        return store, type_hash, checksum

    def _store_failed(self, request: pb.SendMessageRequestP2B, exc: Exception) -> pb.SendMessageResponseB2P:
        log.error(
            "embedded broker could not store a message: %s",
            exc,
            extra={
                "broker_id": self.broker_id,
                "topic": request.topicName,
                "partition_id": request.partitionId,
            },
        )
        answer = pb.SendMessageResponseB2P(success=False)
        return _fail(answer, INTERNAL_SERVER_ERROR, f"Put message failed from {self.host} {exc}")

    def __repr__(self) -> str:
        if self._server is not None:
            where = f"{self.host}:{self._server.port}"
        else:
            where = f"{self.host}:{self._port or '?'}"
        state = "serving" if self._serving else "stopped"
        storage = str(self.data_dir) if self.data_dir is not None else "memory"
        return f"<EmbeddedBroker {self.broker_id} {where} {state} topics={len(self.topics)} {storage}>"


def _stored(result: AppendResult) -> pb.SendMessageResponseB2P:
    answer = pb.SendMessageResponseB2P(success=True, errCode=SUCCESS, requireAuth=False)
    # The decimal id in errMsg is a legacy the Java client still parses when messageId is absent.
    answer.errMsg = str(result.message_id)
    answer.messageId = result.message_id
    answer.appendTime = result.append_time_ms
    answer.appendOffset = result.append_offset
    return answer


def _fail(answer: pb.SendMessageResponseB2P, code: int, message: str) -> pb.SendMessageResponseB2P:
    answer.errCode = code
    answer.errMsg = message
    return answer
