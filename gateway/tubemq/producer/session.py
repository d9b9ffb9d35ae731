"""The producer's master session: register, heartbeat, re-register, close (§7.2, §7.3, §7.9).

``start`` registers once (raising on failure) and starts the session task. The task heartbeats every
``heartbeat_interval`` seconds while topics are published (Java skips the heartbeat with none) and at
once when ``heartbeat_now`` asks (publishing a new topic). It registers again - immediately, then with
exponential backoff between failed attempts, until closed - when a heartbeat answers 411 (the master
forgot us, e.g. after a restart or a master switch), when no master answers a heartbeat, or after a
failed registration. Published topics are kept and sent with the new registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
from collections.abc import Callable

from gateway.tubemq.errors import ClientClosed, RequestTimeout, ServerError, TubeMQError, for_code
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.backoff import ExponentialBackoff
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.net.teardown import cancel_and_wait
from gateway.tubemq.producer.events import ProducerHeartbeatFailed, ProducerRegistered, RegisterFailed
from gateway.tubemq.producer.master_requests import (
    build_close_request,
    build_heartbeat_request,
    build_register_request,
)
from gateway.tubemq.producer.routes import RouteTable
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method

__all__ = ["ProducerSession"]

log = logging.getLogger(__name__)

SUCCESS = 200
NOT_READY = 201
HB_NO_NODE = 411
FORCE_BROKER_LIST = -1
RUNTIME_VERSION = f"python-{platform.python_version()}"


class ProducerSession:
    """Registration state and the heartbeat task of one producer id; times in seconds."""

    def __init__(
        self,
        master: MasterClient,
        routes: RouteTable,
        *,
        client_id: str,
        host_name: str,
        heartbeat_interval: float,
        register_backoff_base: float,
        register_backoff_max: float,
        broker_refresh_interval: float,
        on_brokers: Callable[[], None],
        events: EventBus | None = None,
    ) -> None:
        self._master = master
        self._routes = routes
        self._client_id = client_id
        self._host_name = host_name
        self._interval = heartbeat_interval
        self._backoff = ExponentialBackoff(register_backoff_base, register_backoff_max, jitter=0.2)
        self._refresh_interval = broker_refresh_interval
        self._on_brokers = on_brokers
        self._events = events
        self.topics: dict[str, None] = {}
        self.registered = False
        self.master_failures = 0
        """Master calls in a row (heartbeats, registrations) that no master answered; 0 after an answer."""
        self.unroutable_heartbeats = 0
        """Answered heartbeats in a row that listed no partition for any published topic (a broker outage
        when the topics had partitions); 0 once one has a route again."""
        self._register_sent = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._wake = asyncio.Event()
        self._waiters: list[asyncio.Future[None]] = []
        self._heartbeat_due = 0.0
        self._brokers_refreshed = 0.0

    def __repr__(self) -> str:
        return (
            f"<ProducerSession {self._client_id} registered={self.registered} "
            f"topics={len(self.topics)} running={self._task is not None and not self._task.done()}>"
        )

    @property
    def started(self) -> bool:
        return self._task is not None

    def add_topic(self, topic: str) -> bool:
        """Add ``topic`` to the published set; False if it was already there."""
        if topic in self.topics:
            return False
        self.topics[topic] = None
        return True

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)

    async def start(self) -> None:
        """Register (one pass over the masters) and start the session task; raises the register error."""
        if self._task is not None:
            return
        await self._register(again=False)
        if self._closed:
            # close() ran while the registration was on its way: leave again.
            await self.close()
            raise ClientClosed("the producer was closed while it started")
        self._task = asyncio.create_task(self._run(), name=f"tubemq-producer-session:{self._client_id}")

    async def heartbeat_now(self, timeout: float) -> None:  # noqa: ASYNC109 - bounds the wait, not I/O
        """Wait (at most ``timeout`` seconds) for a heartbeat that starts after this call to complete."""
        if self._closed:
            raise ClientClosed("the producer has been closed; create a new one")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._wake.set()
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            raise RequestTimeout(
                f"the master ({self._master.current}) did not answer a heartbeat within {timeout:g} s"
            ) from None

    async def close(self) -> None:
        """Stop the task, fail pending waiters and send ``CloseRequestP2M`` if registered."""
        self._closed = True
        # The task first: a heartbeat answered 411 would register the leaving producer again. Every step
        # may run again when a previous close was cancelled in the middle (see Producer.close).
        await cancel_and_wait([self._task])
        self._settle(self._take_waiters(), ClientClosed("the producer has been closed"))
        if self.registered or self._register_sent:
            # Also after a registration cancelled on its way: the master may have accepted it. If this
            # fails, the master expires the silent producer on its own (30 s).
            with contextlib.suppress(TubeMQError):
                await self._master.call(Method.PRODUCER_CLOSE, build_close_request(self._client_id))
            self.registered = self._register_sent = False

    # --- the task ------------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._heartbeat_due = loop.time() + self._interval
        failures = 0
        while True:
            if not self.registered:
                try:
                    await self._register(again=True)
                except Exception as exc:
                    if not isinstance(exc, TubeMQError):
                        log.exception(
                            "producer registration failed unexpectedly: %r",
                            self,
                            extra={"client_id": self._client_id},
                        )
                    failures += 1
                    if not isinstance(exc, ServerError):  # an errCode answer: the master is there
                        self.master_failures += 1
                    delay = self._backoff.compute(failures)
                    self._emit(RegisterFailed(self._client_id, str(exc), failures, delay))
                    self._settle(self._take_waiters(), exc)
                    await self._pause(delay)
                    continue
                failures = 0
                self._heartbeat_due = loop.time()  # learn the topics' partitions again at once
            await self._pause(self._heartbeat_due - loop.time())
            if self._waiters or loop.time() >= self._heartbeat_due:
                try:
                    await self._heartbeat()
                except Exception as exc:
                    # A bug must not end the session of a long-running gateway: log, register again.
                    log.exception(
                        "producer heartbeat failed unexpectedly: %r",
                        self,
                        extra={"client_id": self._client_id},
                    )
                    self.registered = False
                    self._settle(self._take_waiters(), exc)
                    self._emit(ProducerHeartbeatFailed(self._client_id, repr(exc), reregister=True))

    async def _pause(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less when ``heartbeat_now`` wakes the task."""
        if delay > 0 and not self._wake.is_set():
            try:
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _register(self, *, again: bool) -> None:
        request = build_register_request(
            self._client_id,
            self._host_name,
            broker_checksum=self._routes.broker_checksum,
            config_id=self._routes.config_id,
            topics=list(self.topics),
            jdk_version=RUNTIME_VERSION,
        )
        self._register_sent = True
        answer = await self._master.call(Method.PRODUCER_REGISTER, request)
        self.master_failures = 0
        assert isinstance(answer, master_pb.RegisterResponseM2P)
        if not (answer.success and answer.errCode == SUCCESS):
            raise for_code(answer.errCode if answer.errCode != SUCCESS else 500, answer.errMsg)
        changed = self._routes.apply_register(answer)
        self._brokers_refreshed = asyncio.get_running_loop().time()
        self.registered = True
        if changed or not again:
            self._on_brokers()
        self._emit(
            ProducerRegistered(self._client_id, self._master.current, len(self._routes.brokers), again)
        )

    async def _heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        waiters = self._take_waiters()
        self._heartbeat_due = loop.time() + self._interval
        if not self.topics:
            self._settle(waiters, None)
            return
        checksum = self._routes.broker_checksum
        if loop.time() - self._brokers_refreshed >= self._refresh_interval:
            checksum, self._brokers_refreshed = FORCE_BROKER_LIST, loop.time()
        request = build_heartbeat_request(
            self._client_id,
            self._host_name,
            broker_checksum=checksum,
            config_id=self._routes.config_id,
            topics=list(self.topics),
        )
        try:
            answer = await self._master.call(Method.PRODUCER_HEARTBEAT, request)
        except TubeMQError as exc:
            self.registered = False
            self.master_failures += 1
            self._emit(ProducerHeartbeatFailed(self._client_id, str(exc), reregister=True))
            self._settle(waiters, exc)
            return
        self.master_failures = 0
        assert isinstance(answer, master_pb.HeartResponseM2P)
        if answer.success and answer.errCode == SUCCESS:
            if self._routes.apply_heartbeat(answer):
                self._on_brokers()
            routed = any(topic in self._routes.topics for topic in self.topics)
            self.unroutable_heartbeats = 0 if routed else self.unroutable_heartbeats + 1
            self._settle(waiters, None)
        elif answer.errCode == NOT_READY:
            self._settle(waiters, None)  # Java keeps the metadata it has
        elif answer.errCode == HB_NO_NODE or "register" in answer.errMsg.lower():
            self.registered = False
            self._emit(
                ProducerHeartbeatFailed(
                    self._client_id, f"{answer.errCode}: {answer.errMsg}", reregister=True
                )
            )
            self._waiters[:0] = waiters  # answered by the heartbeat that follows the re-registration
        else:
            error = for_code(answer.errCode, answer.errMsg)
            self._emit(ProducerHeartbeatFailed(self._client_id, str(error), reregister=False))
            self._settle(waiters, error)

    # --- helpers -------------------------------------------------------------------------------------

    def _take_waiters(self) -> list[asyncio.Future[None]]:
        waiters, self._waiters = self._waiters, []
        self._wake.clear()
        return waiters

    @staticmethod
    def _settle(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
        for future in waiters:
            if future.done():
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def _emit(self, event: object) -> None:
        if self._events is not None:
            self._events.emit(event)
