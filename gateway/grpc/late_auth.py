"""Who a gRPC call's caller is, settled in the call's own task: the late half of authentication.

:class:`~gateway.grpc.call_admission.CallAdmission` checks the credentials a call's metadata carries when its
headers are in (``intercept_service``); what it could not settle there is settled here, when the handler
runs: a caller known only by its verified client certificate (``auth.mtls_principal``: gRPC's
``x509_subject``, a sibling worker's relayed subject, or the subject another replica signed, believed once
through :mod:`gateway.security.replica_subject`), and the ``authorize(method, metadata)`` hook. Either way
the principal (ANONYMOUS in open mode and on open methods) is entered with the peer's host for the call's
task (:func:`~gateway.service.principal.enter_caller`), refused or not, so the call's log line names who was
refused; then the refusal, if any, is raised.

:class:`CallerAuthentication` is the collaborator of :class:`~gateway.grpc.interceptors.GatewayInterceptor`
that does it; :func:`client_subject` is the subject the consumer methods pass on when they relay a call.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Mapping

import grpc

from gateway.grpc.call_budget import CALL
from gateway.grpc.convert import peer_host
from gateway.grpc.siblings import forwarded_subject
from gateway.security.credentials import credential_headers, from_headers
from gateway.security.operations import grpc_operation
from gateway.security.replica_subject import REPLICA_CERT_KEY, ReplicaSubjects
from gateway.security.setup import Security
from gateway.service.errors import Unauthenticated
from gateway.service.principal import ANONYMOUS, Principal, enter_caller
from gateway.tls import GRPC_PEM_CERT_KEY, GRPC_SUBJECT_KEY

__all__ = ["Authorizer", "CallerAuthentication", "client_subject"]

#: ``authorize(method, metadata)``: return to let the call through, raise ``AuthError`` to refuse it.
#: ``method`` is the full method name (``/tubemq.gateway.v1.GatewayService/Publish``); ``metadata`` maps each
#: request header (lower-case) to its last value.
Authorizer = Callable[[str, Mapping[str, str | bytes]], Awaitable[None]]

#: Peers whose host is remembered (the cache is emptied when full: connections come and go).
_MAX_PEERS = 4096


class CallerAuthentication:
    """Settles and enters each call's caller (see the module docstring): with ``security`` (None: every call
    is ANONYMOUS), the extra ``authorize`` hook, and the replicas' signed subjects once the gateway has
    started (``replica_subjects``)."""

    def __init__(
        self,
        *,
        security: Security | None = None,
        authorize: Authorizer | None = None,
        replica_subjects: Callable[[], ReplicaSubjects | None] = lambda: None,
    ) -> None:
        self._security = security
        self._authorize = authorize
        self._replica_subjects = replica_subjects
        #: peer (a connection's ``ipv4:host:port``) -> its host, for the caller's address
        self._hosts: dict[str, str] = {}

    def admit(
        self, method: str, metadata: dict[str, str | bytes], context: grpc.aio.ServicerContext
    ) -> Awaitable[None] | None:
        """Authenticate the caller (unless ``intercept_service`` did from the metadata) and enter it, with
        the peer's address, for this call's task (each call runs in a task of its own): the one place a gRPC
        call's caller is set, refused or not (the call's log line names who was refused). Raises
        ServiceError / AuthError. Done at once when nothing is left to await (the caller known, no
        ``authorize`` hook); else the awaitable that does it."""
        settled = self._settled(method)
        if settled is None or self._authorize is not None:
            return self._admit_later(method, metadata, context)
        self._enter_caller(context, *settled)
        return None

    async def _admit_later(
        self, method: str, metadata: dict[str, str | bytes], context: grpc.aio.ServicerContext
    ) -> None:
        self._enter_caller(context, *await self._principal(method, metadata, context))
        if self._authorize is not None:
            await self._authorize(method, metadata)

    def _enter_caller(
        self, context: grpc.aio.ServicerContext, principal: Principal, refusal: Exception | None
    ) -> None:
        peer = context.peer()
        host = self._hosts.get(peer)
        if host is None:
            if len(self._hosts) >= _MAX_PEERS:
                self._hosts.clear()
            host = self._hosts[peer] = peer_host(peer) or ""
        enter_caller(principal, host or None)
        if refusal is not None:
            raise refusal

    def _settled(self, method: str) -> tuple[Principal, Exception | None] | None:
        """The call's principal (ANONYMOUS in open mode and on open methods) and why it is refused (None:
        admitted), when no credentials are left to check; None when they are (:meth:`_principal`)."""
        call = CALL.get()
        if call is not None and call.error is not None:
            return call.principal or ANONYMOUS, call.error
        security = self._security
        if security is None or security.mode == "open" or grpc_operation(method).open:
            return ANONYMOUS, None
        if call is not None and call.principal is not None:
            return call.principal, None
        return None

    async def _principal(
        self, method: str, metadata: dict[str, str | bytes], context: grpc.aio.ServicerContext
    ) -> tuple[Principal, Exception | None]:
        """The call's principal and why it is refused (None: admitted), credentials checked here when
        ``intercept_service`` could not (a certificate's subject)."""
        settled = self._settled(method)
        if settled is not None:
            return settled
        security = self._security
        assert security is not None  # _settled answers every call without security
        operation = grpc_operation(method)
        call = CALL.get()
        authenticator = security.authenticator
        headers = call.metadata if call is not None and call.metadata is not None else None
        try:
            authorization, api_key = credential_headers(headers or context.invocation_metadata() or ())
            credentials = from_headers(
                authorization,
                api_key,
                self._client_subject(method, context, metadata) if authenticator.mtls else None,
            )
            principal = await authenticator.authenticate(credentials)
        except Exception as exc:
            return ANONYMOUS, exc
        try:
            security.admit(operation, principal)
        except Exception as exc:
            return principal, exc
        if call is not None:
            call.principal = principal
        return principal, None

    def _client_subject(
        self, method: str, context: grpc.aio.ServicerContext, metadata: Mapping[str, str | bytes]
    ) -> str | None:
        """The call's verified client certificate subject (:func:`client_subject`); on a call another replica
        relayed with one it signed, that subject once believed (Unauthenticated when it is not), kept for the
        call's further hop to a sibling worker."""
        signed = metadata.get(REPLICA_CERT_KEY)
        if signed is None or forwarded_subject(context.peer(), metadata) is not None:
            return client_subject(context, metadata)
        subjects = self._replica_subjects()
        if subjects is None:
            raise Unauthenticated(f"{REPLICA_CERT_KEY} cannot be checked before this gateway has started")
        pem = (context.auth_context() or {}).get(GRPC_PEM_CERT_KEY) or ()
        subject = subjects.believe(
            signed if isinstance(signed, str) else "",
            request=method,
            peer_certificate=pem[0].decode("ascii", "replace") if pem else None,
            client=peer_host(context.peer()),
        )
        _RELAYED_SUBJECT.set(subject)
        return subject


#: the client certificate subject another replica relayed with this call, once believed
_RELAYED_SUBJECT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gateway_grpc_relayed_subject", default=None
)


def client_subject(context: grpc.aio.ServicerContext, metadata: Mapping[str, str | bytes]) -> str | None:
    """The verified client certificate's subject, when the TLS listener verified one (gRPC's
    ``x509_subject``, an RFC 2253 string: the RFC 4514 text the HTTP listener gives for usual names), the
    one a sibling worker relayed on the private unix socket (:mod:`gateway.grpc.siblings`), or on a call
    another replica relayed, the one it signed, as :class:`CallerAuthentication` believed it
    (:mod:`gateway.security.replica_subject`; the connection's certificate is then the replicas' own)."""
    relayed = forwarded_subject(context.peer(), metadata)
    if relayed is not None:
        return relayed
    if REPLICA_CERT_KEY in metadata:
        return _RELAYED_SUBJECT.get()
    names = (context.auth_context() or {}).get(GRPC_SUBJECT_KEY) or ()
    for name in names:
        text = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        if text:
            return text
    return None
