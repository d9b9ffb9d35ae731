"""A worker process of ``serve --workers N`` (started by :mod:`gateway.workers.supervisor`).

Reads ``(settings, WorkerContext)`` from its standard input, then serves like a single gateway process on the
shared ports plus its private listener (:func:`gateway.serve.serve_process`). Standard input stays open
while the supervisor lives; when it closes, the worker shuts down gracefully as on SIGTERM.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import threading

from gateway.config import Settings
from gateway.observability.logging import configure_logging
from gateway.serve import serve_process
from gateway.workers.context import WorkerContext


class _WorkerField(logging.Filter):
    """Adds ``worker`` (this process's index) to every log record."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker"):
            record.worker = self.index
        return True


def _watch_parent() -> None:
    """SIGTERM this process (a graceful shutdown) once the supervisor's end of standard input closes."""

    fd = sys.stdin.fileno()

    def wait() -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader's lock aborts the
        # interpreter's exit
        while os.read(fd, 65536):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="parent-watch", daemon=True).start()


def main() -> int:
    settings, context = pickle.load(sys.stdin.buffer)
    if not isinstance(settings, Settings) or not isinstance(context, WorkerContext):
        print(
            "tubemq-gateway: a worker process is started by `tubemq-gateway serve --workers N`",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings.log_level, settings.log_format)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_WorkerField(context.index))
    _watch_parent()
    return serve_process(settings, context)


if __name__ == "__main__":
    sys.exit(main())
