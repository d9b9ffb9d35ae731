"""Edge security: who is calling (authentication) and what they may do (authorization).

Framework-free, beside the service layer and below the adapters: the REST middleware
(``gateway/api/auth.py``) and the gRPC interceptor (``gateway/grpc/interceptors.py``) hand it the caller's
credentials and get a :class:`~gateway.service.principal.Principal` back or an
:class:`~gateway.service.errors.Unauthenticated`; the services ask the :class:`~.rules.RuleSet` (an
:class:`~gateway.service.access.AccessPolicy`) whether that principal may act on a resource.

=====================  ==============================================================================
module                 job
=====================  ==============================================================================
``credentials``        the credentials of one request, read from headers / gRPC metadata
``api_keys``           hashed API keys: the keys file, key generation, the API-key authenticator
``jwt_auth``           JWT bearer tokens checked against an OIDC issuer's JWKS (PyJWT)
``authenticator``      the one :class:`Authenticator` chaining API keys, JWTs and client certificates
``rules``              authorization rules (``auth.rules_file``) as an access policy
``operations``         the one table: every REST operation and gRPC method -> its action
``setup``              building all of it from ``Settings.auth``; refusing a required mode with nothing
``jsonfile``           reading the keys and rules files
``cli``                ``tubemq-gateway keys new``
=====================  ==============================================================================
"""
