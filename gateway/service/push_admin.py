"""The push subscriptions API, the same under REST and gRPC: list, get, create, replace, delete, pause and
resume, with who may do what, over the definitions of this process
(:class:`~gateway.service.push.PushService`) and the shared store of those made through the API
(:class:`~gateway.service.push_store.RedisSubscriptions`).

* **Where definitions live.** The API writes to the store (``idempotency.redis_url``: one Redis for every
  replica); each process reads it again whenever its version counter moved (polled every
  ``push.reload_interval`` seconds, and at once after a change it made), so every worker of every replica
  runs the same set within seconds and the set survives restarts. Without a store, writes are refused with
  the setting to set. A store that does not answer refuses writes (503) while the running subscriptions go
  on as last read.
* **Two sources, one namespace.** A definition of ``push.subscriptions_file`` cannot be changed, paused or
  deleted through the API (409 naming the file), and the API defines no name or group the file has.
* **Who may.** ``manage_subscriptions`` on the subscription's group and every one of its topics to see,
  define, change, pause or delete it (a list shows only those); defining one also takes what consuming it
  would take the principal itself (``consume`` on its topics and its retry topic, ``publish`` on its retry
  and dead-letter topics), since the gateway consumes and republishes for it as itself: no principal gets
  a topic's messages sent to an endpoint, nor writes to a topic, that it could not read or write itself.
* **Bounds.** At most ``push.max_subscriptions`` definitions (the file's and the store's), each at most
  :data:`MAX_DEFINITION_BYTES` of JSON; each checked by the file's own check
  (:func:`~gateway.service.push_subscription.parse_subscription`), naming the field, the endpoint against
  ``push.allow`` (its host, and where its name resolves now, an address the delivery would refuse).

Answers are the definition in the API's spelling without the secret (``hasSecret``) and without the
endpoint's query string (it may carry a credential), with ``source``
(``file`` or ``api``) and ``state``: what this process knows of its delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from gateway.service.access import ADMIN, MANAGE_SUBSCRIPTIONS, AccessPolicy, check_consuming
from gateway.service.errors import (
    AlreadyDefined,
    Conflict,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    Quota,
    RateLimited,
    Unavailable,
)
from gateway.service.principal import Principal, current_principal
from gateway.service.push import FILE, STORE, PushService
from gateway.service.push_outbound import EndpointPolicy, EndpointRefused, resolve, shown_url
from gateway.service.push_runner import SubscriptionRunner
from gateway.service.push_store import Changed, RedisSubscriptions, StoreDown
from gateway.service.push_subscription import PushSubscription, SubscriptionBounds, parse_subscription

__all__ = ["MAX_DEFINITION_BYTES", "SubscriptionAdmin", "definition_too_large"]

log = logging.getLogger("gateway.service.push")

#: the largest definition the API takes, as JSON (a request body above it is refused before it is read)
MAX_DEFINITION_BYTES = 64 * 1024
#: the setting that names the shared store
STORE_SETTING = "idempotency.redis_url"
#: seconds a name resolution at definition time may take (then the delivery checks it)
_RESOLVE_TIMEOUT = 2.0


class SubscriptionAdmin:
    """See the module docstring. ``store`` None: no shared store (reads only). ``subscriptions_file`` names
    the file in the 409 of a definition it holds."""

    def __init__(
        self,
        push: PushService,
        access: AccessPolicy,
        policy: EndpointPolicy,
        store: RedisSubscriptions | None,
        *,
        subscriptions_file: str = "",
    ) -> None:
        self._push = push
        self._access = access
        self._policy = policy
        self._store = store
        self._file = subscriptions_file or "push.subscriptions_file"
        # What a stored definition is read with to learn whose it is (its group and topics) for a delete,
        # pause or resume, so that one that no longer passes the check (push.allow changed) can still go.
        self._lenient = SubscriptionBounds(max_ack_deadline=1e9, max_backoff=1e9, can_sign=True)
        self._version: int | None = None
        self._reading = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False

    # --- the store's definitions in this process ---------------------------------------------------------

    async def start(self) -> None:
        """Run the store's definitions and follow its changes; a store that does not answer now is read
        when it does (the log says so)."""
        if self._store is None:
            return
        try:
            await self.refresh()
        except StoreDown as exc:
            log.error(
                "push subscriptions store does not answer; the API's subscriptions start when it does",
                extra={"setting": STORE_SETTING, "error": str(exc)},
            )
        self._watcher = asyncio.create_task(self._watch(), name="push-subscriptions-store")

    async def close(self) -> None:
        # The flag ends the watch even where the Redis client turns the cancellation of a call in progress
        # into a connection error, which the watch would take for the store being down and go on.
        self._closing = True
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        if self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.close()

    async def refresh(self, *, force: bool = False) -> None:
        """Read the store's definitions when its version moved (``force``: anyway) and run them; StoreDown
        when it does not answer. A definition that no longer passes the check (``push.allow`` changed) is
        logged and not run."""
        store = self._store
        if store is None:
            return
        async with self._reading:
            if not force and self._version is not None and await store.version() == self._version:
                return
            version, documents = await store.read()
            definitions: list[PushSubscription] = []
            for name, document in sorted(documents.items()):
                try:
                    definitions.append(parse_subscription(json.loads(document), self._push.bounds))
                except (ValueError, InvalidInput) as exc:
                    log.error(
                        "push subscription of the store not run: it fails the check; replace or delete it",
                        extra={"subscription": name, "field": getattr(exc, "field", None), "error": str(exc)},
                    )
            self._version = version
            await self._push.apply(definitions, STORE)

    async def _watch(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._push.options.reload_interval)
            if self._closing:
                return
            try:
                await self.refresh()
            except StoreDown as exc:
                if self._closing:
                    return
                log.warning(
                    "push subscriptions store does not answer; the running subscriptions go on",
                    extra={"setting": STORE_SETTING, "error": str(exc)},
                )
            except Exception:  # a bug must not end the watch: log it loudly and go on
                if self._closing:
                    return
                log.exception("reading the push subscriptions store failed")

    # --- reads -------------------------------------------------------------------------------------------

    def list(self) -> list[dict[str, Any]]:
        """Every subscription the caller may manage, by name."""
        principal = current_principal()
        if self._access.enforcing:
            self._access.check(principal, MANAGE_SUBSCRIPTIONS)
        return [
            self._view(definition, runner)
            for definition, runner in self._push.subscriptions()
            if self._may_manage(principal, definition)
        ]

    def get(self, name: str) -> dict[str, Any]:
        definition, runner = self._find(name)
        self._check_manage(current_principal(), definition)
        return self._view(definition, runner)

    # --- writes ------------------------------------------------------------------------------------------

    async def create(self, data: object, size: int) -> dict[str, Any]:
        """Define a subscription from ``data`` (its JSON object, ``size`` bytes as sent)."""
        definition, document = await self._parse(data, size)
        principal = current_principal()
        self._check_defining(principal, definition)
        self._outside_file(definition)
        store = self._writable()
        limit = self._push.options.max_subscriptions - len(self._push.defined(FILE))
        answer = await self._write(
            store.put(definition.name, definition.group, document, create=True, limit=limit)
        )
        self._refused(answer, definition.name, definition.group)
        return await self._after_write(definition)

    async def replace(self, name: str, data: object, size: int) -> dict[str, Any]:
        """Replace the definition ``name`` by ``data`` (``name`` in it may be left out)."""
        if isinstance(data, dict):
            given = data.setdefault("name", name)
            if given != name:
                raise InvalidInput(
                    f"name {given!r} differs from the subscription replaced ({name!r})", field="name"
                )
        definition, document = await self._parse(data, size)
        principal = current_principal()
        self._check_defining(principal, definition)
        old, before = await self._stored(name)
        store = self._writable()
        self._check_manage(principal, old)
        self._outside_file(definition)
        answer = await self._write(
            store.put(name, definition.group, document, create=False, limit=0, expect=before)
        )
        self._refused(answer, definition.name, definition.group)
        return await self._after_write(definition)

    async def delete(self, name: str) -> None:
        old, before = await self._stored(name, readable=False)
        store = self._writable()
        if old is not None:
            self._check_manage(current_principal(), old)
        self._refused(await self._write(store.delete(name, expect=before)), name, "")
        await self._after_write(None)

    async def set_paused(self, name: str, paused: bool) -> dict[str, Any]:
        """Pause (no member of the group on any gateway; what was delivered and not settled goes back to
        the group) or resume the subscription ``name``."""
        old, before = await self._stored(name)
        store = self._writable()
        self._check_manage(current_principal(), old)
        data = json.loads(before)
        data["paused"] = paused
        document = _document(data)
        if document != before:
            answer = await self._write(
                store.put(name, old.group, document, create=False, limit=0, expect=before)
            )
            self._refused(answer, name, old.group)
        return await self._after_write(parse_subscription(data, self._lenient))

    # --- the steps -------------------------------------------------------------------------------------

    def _writable(self) -> RedisSubscriptions:
        if self._store is None:
            raise Unavailable(
                "push subscriptions made through the API live in a store every replica shares, and none is "
                f"set: set {STORE_SETTING} (a Redis), or define the subscriptions in push.subscriptions_file",
                retry_after=60.0,
            )
        return self._store

    async def _write(self, call: Any) -> Any:
        try:
            return await call
        except StoreDown as exc:
            raise Unavailable(
                f"the push subscriptions store ({STORE_SETTING}) does not answer ({exc}); nothing was "
                "changed and the running subscriptions go on: retry when it is back",
                retry_after=5.0,
            ) from None

    async def _stored(self, name: str, *, readable: bool = True) -> tuple[Any, bytes]:
        """The store's definition ``name`` as it is now (and its JSON); NotFound, or AlreadyDefined for the
        file's. One that cannot be read at all (written into the store around the API) is None, for an
        ``admin`` to delete (``readable`` False); InvalidInput for anything else."""
        if self._push.source(name) == FILE:
            raise AlreadyDefined(
                f"push subscription {name!r} is defined in {self._file}; change it there (the API "
                "changes only the subscriptions it made)",
                field="name",
            )
        if self._store is None:
            raise NotFound(
                f"no push subscription {name!r} (none can be made through the API before {STORE_SETTING} is "
                "set)",
                resource_name=name,
            )
        before = await self._write(self._store.one(name))
        if before is None:
            raise NotFound(f"no push subscription {name!r}", resource_name=name)
        try:
            return parse_subscription(json.loads(before), self._lenient), before
        except (ValueError, RecursionError, InvalidInput):
            self._access.check(current_principal(), ADMIN)
            if readable:
                raise InvalidInput(
                    f"the stored definition of {name!r} cannot be read: delete it and define it again",
                    field="name",
                ) from None
            return None, before

    async def _parse(self, data: object, size: int) -> tuple[PushSubscription, bytes]:
        if size > MAX_DEFINITION_BYTES:
            raise definition_too_large()
        definition = parse_subscription(data, self._push.bounds)
        await self._check_resolves(definition.endpoint)
        assert isinstance(data, dict)
        return definition, _document(data)

    async def _check_resolves(self, endpoint: str) -> None:
        """Refuse an endpoint whose name resolves now to an address the delivery would refuse (the delivery
        checks again each time; a name that does not resolve now is left to it)."""
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            async with asyncio.timeout(_RESOLVE_TIMEOUT):
                addresses = await resolve(host, port)
        except (OSError, TimeoutError, UnicodeError, ValueError):
            return
        try:
            self._policy.check_addresses(host, addresses)
        except EndpointRefused as exc:
            raise InvalidInput(f"endpoint is not allowed: {exc}", field="endpoint") from None

    def _outside_file(self, definition: PushSubscription) -> None:
        for other in self._push.defined(FILE):
            if other.name == definition.name:
                raise AlreadyDefined(
                    f"push subscription {definition.name!r} is defined in {self._file}; the API cannot "
                    "change it: choose another name",
                    field="name",
                )
            if other.group == definition.group:
                raise AlreadyDefined(
                    f"group {definition.group!r} belongs to push subscription {other.name!r} of {self._file} "
                    "(the two would share its messages): give each subscription its own group",
                    field="group",
                )

    def _refused(self, answer: Any, name: str, group: str) -> None:
        if not isinstance(answer, Changed):
            return
        if answer.reason == "exists":
            raise AlreadyDefined(
                f"push subscription {name!r} exists: replace it, or choose another name", field="name"
            )
        if answer.reason == "missing":
            raise NotFound(f"no push subscription {name!r}", resource_name=name)
        if answer.reason == "group":
            raise AlreadyDefined(
                f"group {group!r} belongs to push subscription {answer.detail!r} (the two would "
                "share its messages): give each subscription its own group",
                field="group",
            )
        if answer.reason == "full":
            limit = self._push.options.max_subscriptions
            raise RateLimited(
                f"{limit} push subscriptions are defined, the most push.max_subscriptions allows: delete "
                "one first",
                retry_after=60.0,
                quota=Quota("subscriptions", limit, None, 0, "subscriptions"),
            )
        raise Conflict(
            f"push subscription {name!r} changed while this request changed it: read it again and retry",
            retry_after=1.0,
        )

    async def _after_write(self, definition: PushSubscription | None) -> dict[str, Any]:
        """Run the store's definitions here at once; the answer is ``definition`` as it now runs."""
        try:
            await self.refresh(force=True)
        except StoreDown as exc:  # written: the watch reads it when the store answers again
            log.warning("push subscriptions store did not answer after a change", extra={"error": str(exc)})
        if definition is None:
            return {}
        runner = next((r for d, r in self._push.subscriptions() if d.name == definition.name), None)
        return self._view(definition, runner)

    def _find(self, name: str) -> tuple[PushSubscription, SubscriptionRunner | None]:
        for definition, runner in self._push.subscriptions():
            if definition.name == name:
                return definition, runner
        raise NotFound(f"no push subscription {name!r}", resource_name=name)

    # --- who may -----------------------------------------------------------------------------------------

    def _may_manage(self, principal: Principal, definition: PushSubscription) -> bool:
        return all(
            self._access.allows(principal, MANAGE_SUBSCRIPTIONS, topic=topic, group=definition.group)
            for topic in definition.topics
        )

    def _check_manage(self, principal: Principal, definition: PushSubscription) -> None:
        for topic in definition.topics:
            self._access.check(principal, MANAGE_SUBSCRIPTIONS, topic=topic, group=definition.group)

    def _check_defining(self, principal: Principal, definition: PushSubscription) -> None:
        self._check_manage(principal, definition)
        check_consuming(
            self._access,
            principal,
            definition.group,
            definition.topics,
            definition.retry_topic,
            definition.dead_letter_topic,
        )

    # --- answers -----------------------------------------------------------------------------------------

    def _view(self, definition: PushSubscription, runner: SubscriptionRunner | None) -> dict[str, Any]:
        view = definition.to_dict()
        # the query string may carry a credential of the receiver's: shown to nobody, as in the logs
        shown = shown_url(definition.endpoint)
        view["endpoint"] = shown if shown == definition.endpoint else shown + "?…"
        if view.get("tokenAudience") == definition.endpoint:
            view["tokenAudience"] = view["endpoint"]
        view["source"] = self._push.source(definition.name) or STORE
        view["state"] = _state(definition, runner)
        return view


def definition_too_large() -> PayloadTooLarge:
    return PayloadTooLarge(
        f"a subscription's definition has at most {MAX_DEFINITION_BYTES} bytes of JSON",
        limit=MAX_DEFINITION_BYTES,
    )


def _document(data: dict[str, Any]) -> bytes:
    """A definition as the store keeps it: compact JSON, keys sorted (equal definitions, equal bytes)."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _state(definition: PushSubscription, runner: SubscriptionRunner | None) -> dict[str, Any]:
    """What this process knows of the subscription's delivery."""
    if definition.paused or runner is None:
        return {"status": "paused" if definition.paused else "starting", "inFlight": 0, "deliveries": {}}
    state: dict[str, Any] = {
        "status": "running",
        "inFlight": runner.in_flight,
        "deliveries": dict(runner.outcomes),
    }
    if runner.last_outcome is not None:
        outcome, at = runner.last_outcome
        state["lastOutcome"] = outcome
        state["lastDeliveryAt"] = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        if outcome != "acked":
            state["status"] = "failing"
    if runner.last_error is not None:
        state["status"] = "failing"
        state["lastError"] = runner.last_error
    return state
