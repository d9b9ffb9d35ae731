"""tubemq-gateway: HTTP/gRPC gateway for Apache InLong TubeMQ."""

__version__ = "0.1.0"
