"""The root of the TubeMQ client core's exception tree (the whole tree: :mod:`gateway.tubemq.errors`)."""

from __future__ import annotations


class TubeMQError(Exception):
    """Base of every error raised by the TubeMQ client core."""

    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
