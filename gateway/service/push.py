"""Push subscriptions of this process: the definitions of ``push.subscriptions_file`` (reloaded when the file
changes) and those made through the API (:mod:`gateway.service.push_admin`, kept in the shared store), and a
:class:`~gateway.service.push_runner.SubscriptionRunner` for each one not paused.

The two sources are merged with the file first: a definition of the API whose name or group the file
already uses is not run (the API refuses to make one; a file edited later wins), and the log says so.

Every process of every replica runs every subscription as a member of its group, so TubeMQ spreads the
partitions over them and moves a dead one's partitions to the others. A file that does not parse at start
stops the gateway (ValueError); a later edit that does not parse is logged and the running definitions stay.
A changed definition restarts its runner (its unsettled messages go back to the group first).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

from gateway.observability.push_events import PushSubscriptionState
from gateway.service.consumers import ConsumerService
from gateway.service.push_outbound import EndpointPolicy, Outbound
from gateway.service.push_request import Renderer
from gateway.service.push_runner import SubscriptionRunner
from gateway.service.push_subscription import PushSubscription, SubscriptionBounds, load_subscriptions
from gateway.service.push_token import PushTokens
from gateway.tubemq.events import EventBus

__all__ = ["FILE", "SOURCES", "STORE", "PushOptions", "PushService"]

#: where a definition comes from: the subscriptions file or the API (the shared store)
FILE = "file"
STORE = "api"
SOURCES = (FILE, STORE)

log = logging.getLogger("gateway.service.push")


@dataclass(frozen=True, slots=True)
class PushOptions:
    """The service's settings (``push.*``; seconds)."""

    subscriptions_file: Path | None = None
    reload_interval: float = 5.0
    max_subscriptions: int = 100
    max_answer_bytes: int = 65536
    poll_wait: float = 1.0
    error_backoff: float = 1.0


class PushService:
    """See the module docstring."""

    def __init__(
        self,
        consumers: ConsumerService,
        policy: EndpointPolicy,
        render: Renderer,
        options: PushOptions = PushOptions(),
        *,
        events: EventBus | None = None,
        verify: ssl.SSLContext | bool = True,
        tokens: PushTokens | None = None,
    ) -> None:
        #: signs the JWTs of subscriptions with ``token`` (None: no push.token_key_file)
        self.tokens = tokens
        self._consumers = consumers
        self._policy = policy
        self._render = render
        self._options = options
        self._events = events
        self._verify = verify
        self.bounds = SubscriptionBounds(
            max_ack_deadline=consumers.max_ack_deadline,
            max_backoff=consumers.max_nack_delay,
            check_endpoint=policy.check_url,
            can_sign=tokens is not None,
        )
        self._definitions: dict[str, PushSubscription] = {}
        self._sources: dict[str, list[PushSubscription]] = {source: [] for source in SOURCES}
        self._source_of: dict[str, str] = {}
        self._runners: dict[str, tuple[SubscriptionRunner, Outbound]] = {}
        self._seen: tuple[int, int] | None = None
        self._watcher: asyncio.Task[None] | None = None

    def subscriptions(self) -> list[tuple[PushSubscription, SubscriptionRunner | None]]:
        """Each definition with its runner in this process (None: paused)."""
        return [
            (d, self._runners[name][0] if name in self._runners else None)
            for name, d in sorted(self._definitions.items())
        ]

    def source(self, name: str) -> str | None:
        """Where the definition ``name`` that runs here comes from (:data:`SOURCES`); None: none runs."""
        return self._source_of.get(name) if name in self._definitions else None

    def defined(self, source: str) -> list[PushSubscription]:
        """The definitions ``source`` gave, run or not (one of the API's the file shadows is not run)."""
        return list(self._sources[source])

    @property
    def options(self) -> PushOptions:
        return self._options

    async def start(self) -> None:
        """Load the subscriptions file (ValueError when it does not parse) and start its subscriptions."""
        path = self._options.subscriptions_file
        if path is None:
            return
        self._seen = _stamp(path)
        await self.apply(load_subscriptions(path, self.bounds, self._options.max_subscriptions))
        self._watcher = asyncio.create_task(self._watch(path), name="push-subscriptions-file")

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        self._sources = {source: [] for source in SOURCES}
        await self._run([])

    async def apply(self, definitions: list[PushSubscription], source: str = FILE) -> None:
        """Take ``definitions`` as all that ``source`` defines and run the merge of the sources."""
        self._sources[source] = list(definitions)
        merged: list[PushSubscription] = []
        names: set[str] = set()
        groups: set[str] = set()
        source_of: dict[str, str] = {}
        for origin in SOURCES:
            for definition in self._sources[origin]:
                if definition.name in names or definition.group in groups:
                    log.warning(
                        "push subscription not run: another source already defines its name or group",
                        extra={"subscription": definition.name, "group": definition.group, "source": origin},
                    )
                    continue
                names.add(definition.name)
                groups.add(definition.group)
                source_of[definition.name] = origin
                merged.append(definition)
        self._source_of = source_of
        await self._run(merged)

    async def _run(self, definitions: list[PushSubscription]) -> None:
        """Run exactly ``definitions``: stop the runners of removed, changed or paused ones, start the new
        ones."""
        wanted = {d.name: d for d in definitions}
        old = self._definitions
        stale = [n for n, d in old.items() if wanted.get(n) != d and n in self._runners]
        await asyncio.gather(*(self._stop(name) for name in stale))
        self._definitions = wanted
        for name, definition in old.items():
            if name not in wanted:
                self._emit(PushSubscriptionState(name, definition.group, "removed"))
        for name, definition in wanted.items():
            if name not in self._runners and not definition.paused:
                self._start(definition)
            if old.get(name) != definition:
                state = "paused" if definition.paused else "running"
                self._emit(PushSubscriptionState(name, definition.group, state))

    def _emit(self, event: object) -> None:
        if self._events is not None:
            self._events.emit(event)

    def _start(self, definition: PushSubscription) -> None:
        outbound = Outbound(
            definition.endpoint,
            self._policy,
            max_connections=definition.max_concurrency,
            max_answer_bytes=self._options.max_answer_bytes,
            verify=self._verify,
        )
        runner = SubscriptionRunner(
            definition,
            self._consumers,
            outbound,
            self._render,
            poll_wait=self._options.poll_wait,
            error_backoff=self._options.error_backoff,
            events=self._events,
            tokens=self.tokens,
        )
        self._runners[definition.name] = (runner, outbound)
        runner.start()
        log.info(
            "push subscription started", extra={"subscription": definition.name, "endpoint": outbound.shown}
        )

    async def _stop(self, name: str) -> None:
        runner, outbound = self._runners.pop(name)
        try:
            await runner.stop()
        finally:
            await outbound.close()
        log.info("push subscription stopped", extra={"subscription": name})

    async def _watch(self, path: Path) -> None:
        while True:
            await asyncio.sleep(self._options.reload_interval)
            stamp = _stamp(path)
            if stamp == self._seen:
                continue
            self._seen = stamp
            try:
                definitions = load_subscriptions(path, self.bounds, self._options.max_subscriptions)
            except ValueError as exc:
                log.error(
                    "push subscriptions file changed but does not parse; the running subscriptions stay: fix "
                    "the file",
                    extra={"error": str(exc)},
                )
                continue
            await self.apply(definitions)
            log.info("push subscriptions reloaded", extra={"subscriptions": len(definitions)})


def _stamp(path: Path) -> tuple[int, int] | None:
    """What tells a changed file: its modification time and size (None: missing)."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size
