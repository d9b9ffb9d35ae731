"""Observability: Prometheus metrics and structured logs, both fed by the core's events.

Nothing in the client core imports this package; the app builds it and subscribes it to the runtime's
:class:`~gateway.tubemq.events.EventBus`.
"""
