"""The parent process of ``serve --workers N``: one gateway replica as N worker processes.

What it does, in order:

1. reserves the HTTP, gRPC and admin ports: it binds each with ``SO_REUSEPORT`` and never listens on it, so
   the port is held (port 0 becomes a real port every worker gets) while the kernel hands connections only to
   the workers' listening sockets of the same port (``SO_REUSEPORT`` spreads new connections over them);
   a port another process serves already stops it first (another gateway must not join the port's group:
   :mod:`gateway.workers.ports`);
2. without ``masters``, starts the embedded cluster: one for the replica, which every worker uses;
3. makes a private directory (mode 0700) for the workers' private listeners (unix sockets), and, when
   ``consumers.id_secret`` is empty, a random secret that the workers share (instance ids are checked by
   whichever worker a request lands on); the bounds the settings give per replica (requests and publish
   bytes in progress) are split evenly over the workers (:func:`per_worker_limits`); the consumer instance
   caps and the publish rates are not: the workers count instances together, and share what each caller
   spent, in the private directory (:mod:`gateway.service.instance_counts`,
   :mod:`gateway.service.shared_spending`), so they hold per replica;
4. starts the workers (``python -P -m gateway.workers.child``), each with the settings and its
   :class:`~gateway.workers.context.WorkerContext` on its standard input, which stays open: a worker whose
   parent is gone sees it close and shuts down gracefully;
5. on SIGTERM or SIGINT, passes SIGTERM to every worker (each drains as a single process does; a second
   signal is passed on too, and skips the waits) and waits for them (at most ``shutdown.grace_period`` and
   a little more, then SIGKILL), then stops the embedded cluster (after the workers: their instances commit
   and release their partitions on the way out) and removes the directory.

A worker that exits on its own is started again (same index, so its siblings keep their ids; the instances it
held are gone, answered 410); one that fails within :data:`RESTART_AFTER` seconds of its start is started
again with a growing backoff while the others keep serving, and the replica stops with exit status 1 only
when every worker is failing (a setting is wrong, a port is taken) or ``supervisor.max_restarts`` is passed
(:mod:`gateway.workers.restarts`).

Why ``SO_REUSEPORT`` and not one listening socket inherited by every worker: grpc.aio binds its port itself
(with ``SO_REUSEPORT``, its default on Linux) and cannot serve an inherited socket, and one mechanism for all
ports keeps them alike; the kernel spreads connections evenly (by a hash of the addresses), and a worker that
is not ready yet gets none since it listens only once started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import ConsumerSettings, Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.event_loop import run_main
from gateway.runtime import embedded_cluster, embedded_upstream, retry_secrets
from gateway.upstream import upstream_options
from gateway.workers.context import WorkerContext
from gateway.workers.ports import PortInUse, reserve
from gateway.workers.restarts import GiveUp, RestartPolicy

__all__ = ["RESTART_AFTER", "Supervisor", "per_worker_limits", "private_directory", "supervise"]

log = logging.getLogger("gateway.workers")

#: seconds a worker must have run for its exit not to count as a failure soon after start
RESTART_AFTER = 10.0
#: seconds past the grace period the supervisor waits for workers before killing them
KILL_MARGIN = 5.0
#: the longest unix socket path every system binds (Linux takes 107 bytes, macOS 103)
SOCKET_PATH_MAX = 100
#: room for a worker's socket name in the private directory (``/w<index>.sock``)
SOCKET_NAME_ROOM = 16


def private_directory() -> Path:
    """A new directory (mode 0700) for the workers' unix sockets, in the temporary directory (``TMPDIR``)
    unless a socket's path there would be too long to bind: then in ``/tmp``."""
    made = Path(tempfile.mkdtemp(prefix="tubemq-gateway-"))
    if len(os.fsencode(made)) + SOCKET_NAME_ROOM <= SOCKET_PATH_MAX:
        return made
    made.rmdir()
    short = Path(tempfile.mkdtemp(prefix="tubemq-gateway-", dir="/tmp"))
    log.info(
        "the temporary directory's path is too long for unix sockets: the workers' sockets go to /tmp",
        extra={"socket_dir": str(short)},
    )
    return short


def per_worker_limits(settings: Settings, count: int) -> dict[str, object]:
    """The ``limits`` and ``consumers`` groups of one of ``count`` workers: what the settings bound per
    replica (requests and publish bytes in progress, each caller's share of them, the consumer instances
    held) split evenly, so that the replica as a whole keeps the configured bounds. Each worker enforces its
    share of the connections the kernel gives it. Each principal's consumer instance cap and publish rates
    stay whole: the workers share the count (:mod:`gateway.service.instance_counts`) and what each caller
    spent (:mod:`gateway.service.shared_spending`; a share of the rate per worker refused a client whose
    connections had all reached one worker at 1/N of its rate). docs/configuration.md's table of what holds
    per worker is read from this function (scripts/gen_config_doc.py)."""
    limits = settings.limits
    return {
        "limits": limits.model_copy(
            update={
                "max_concurrent_requests": _cap(limits.max_concurrent_requests, count),
                "max_concurrent_per_caller": _cap(limits.max_concurrent_per_caller, count),
                "max_inflight_publish_bytes": _cap(limits.max_inflight_publish_bytes, count),
            }
        ),
        "consumers": settings.consumers.model_copy(
            update={"max_instances": _share(settings.consumers.max_instances, count)}
        ),
    }


def _share(value: int, count: int) -> int:
    """One worker's share of a positive bound: at least 1."""
    return max(1, -(-value // count))


def _cap(value: int | None, count: int) -> int | None:
    """One worker's share of a cap where 0 or None means none."""
    return value if not value else _share(value, count)


def supervise(settings: Settings, count: int) -> int:
    """Run the replica as ``count`` worker processes until a signal; the exit status."""
    return run_main(Supervisor(settings, count).run())


@dataclass
class _Worker:
    index: int
    process: asyncio.subprocess.Process
    started: float = field(default_factory=time.monotonic)


class Supervisor:
    """Starts, watches and stops the worker processes (see the module docstring)."""

    def __init__(self, settings: Settings, count: int) -> None:
        if count < 2:
            raise ValueError(f"a supervisor runs 2 or more workers, not {count}")
        self.settings = settings
        self.count = count
        self._reserved: list[socket.socket] = []
        self._workers: dict[int, _Worker] = {}
        self._stopping = False
        self._stop = asyncio.Event()
        self._failed = False

    def __repr__(self) -> str:
        return f"<Supervisor workers={len(self._workers)}/{self.count} stopping={self._stopping}>"

    async def run(self) -> int:
        cluster: EmbeddedCluster | None = None
        socket_dir: Path | None = None
        try:
            try:
                settings = self._reserve_ports(self.settings)
            except PortInUse as exc:
                print(f"tubemq-gateway: cannot start: {exc}", file=sys.stderr)
                return 1
            except OSError as exc:
                print(f"tubemq-gateway: cannot bind the gateway's ports: {exc}", file=sys.stderr)
                return 1
            masters: tuple[str, ...] = ()
            master_web: tuple[str, ...] = ()
            if not settings.masters:
                try:
                    cluster = embedded_cluster(settings, embedded_upstream(upstream_options(settings.tubemq)))
                    await cluster.start()
                except (OSError, ValueError) as exc:
                    print(f"tubemq-gateway: cannot start the embedded cluster: {exc}", file=sys.stderr)
                    return 1
                masters = tuple(str(a) for a in cluster.master_addresses)
                master_web = tuple(cluster.master_web_addresses)
            socket_dir = private_directory()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
            log.info(
                "starting worker processes",
                extra={
                    "workers": self.count,
                    "http_port": settings.http_port,
                    "grpc_port": settings.grpc.port if settings.grpc.enabled else None,
                    "admin_port": settings.admin.port,
                    "embedded_masters": list(masters),
                    "socket_dir": str(socket_dir),
                },
            )
            contexts = [
                WorkerContext(i, self.count, socket_dir, masters, master_web) for i in range(self.count)
            ]
            for context in contexts:
                await self._spawn(settings, context)
            await self._watch(settings, contexts)
            await self._stop_workers(settings)
        finally:
            for worker in self._workers.values():
                if worker.process.returncode is None:
                    worker.process.kill()
                    await worker.process.wait()
            if cluster is not None:
                await cluster.stop()
            if socket_dir is not None:
                shutil.rmtree(socket_dir, ignore_errors=True)
            for sock in self._reserved:
                sock.close()
        codes = [w.process.returncode for w in self._workers.values()]
        return 1 if self._failed or not all(self._stopped_cleanly(code) for code in codes) else 0

    def _stopped_cleanly(self, code: int | None) -> bool:
        """A worker's exit is clean when it exited 0, or when the supervisor's own SIGTERM ended it before it
        had installed its graceful handler (still starting: it had accepted nothing)."""
        return code == 0 or (self._stopping and code == -signal.SIGTERM)

    def _reserve_ports(self, settings: Settings) -> Settings:
        """Hold the ports (see the module docstring); the settings with the ports bound and the shared
        instance id secret."""
        http = self._reserve("HTTP", settings.http_host, settings.http_port)
        updates: dict[str, object] = {"http_port": http}
        if settings.grpc.enabled:
            port = self._reserve("gRPC", settings.grpc.host or settings.http_host, settings.grpc.port)
            updates["grpc"] = settings.grpc.model_copy(update={"port": port})
        if settings.admin.port is not None:
            port = self._reserve("admin", settings.admin.host or settings.http_host, settings.admin.port)
            updates["admin"] = settings.admin.model_copy(update={"port": port})
        updates.update(per_worker_limits(settings, self.count))
        if not settings.consumers.id_secret:
            # The workers of this replica check each other's instance ids: one secret for all of them.
            # Retry copies outlive the processes: their secret stays the one the operator's settings give,
            # and only without one (authentication on) is it this run's.
            shared = updates["consumers"]
            assert isinstance(shared, ConsumerSettings)
            generated = secrets.token_hex(32)
            retry = retry_secrets(settings, generated)[0].decode("utf-8")
            if retry == generated:
                log.warning(
                    "consumers.id_secret and consumers.retry_secret are not set: retry copies of nacked "
                    "messages are signed with a secret of this run, and those left in retry topics when it "
                    "stops are set aside (not delivered) after a restart; set consumers.id_secret"
                )
            updates["consumers"] = shared.model_copy(update={"id_secret": generated, "retry_secret": retry})
        return settings.model_copy(update=updates)

    def _reserve(self, what: str, host: str, port: int) -> int:
        sock = reserve(what, host, port)
        self._reserved.append(sock)
        bound: int = sock.getsockname()[1]
        return bound

    async def _spawn(self, settings: Settings, context: WorkerContext) -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            # -P: no current or script directory on the import path, so that only the installed package
            # (the one this supervisor runs) loads, whatever directory the gateway was started from
            "-P",
            "-m",
            "gateway.workers.child",
            stdin=asyncio.subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C reaches the supervisor only, which passes it on
        )
        assert process.stdin is not None
        process.stdin.write(pickle.dumps((settings, context)))
        await process.stdin.drain()
        self._workers[context.index] = _Worker(context.index, process)
        log.info("worker process started", extra={"worker": context.index, "pid": process.pid})

    async def _watch(self, settings: Settings, contexts: list[WorkerContext]) -> None:
        """Until a signal (or the replica given up): start again workers that exit on their own, each after
        its own backoff (gateway.workers.restarts) while the others keep serving."""
        policy = self._restart_policy(settings)
        for index in self._workers:
            policy.started(index)
        pending: dict[asyncio.Task[None], int] = {}  # delayed restarts
        stop = asyncio.create_task(self._stop.wait())
        try:
            while not self._stopping:
                waiting = set(pending.values())
                exits = {
                    asyncio.create_task(w.process.wait()): w
                    for w in self._workers.values()
                    if w.index not in waiting
                }
                done, _ = await asyncio.wait({stop, *exits, *pending}, return_when=asyncio.FIRST_COMPLETED)
                for task in exits:
                    task.cancel()
                if self._stopping:
                    return
                for delayed in [t for t in pending if t in done]:
                    index = pending.pop(delayed)
                    await self._spawn(settings, contexts[index])
                    policy.started(index)
                for task, worker in exits.items():
                    if task in done and not self._restart_later(policy, worker, pending):
                        return
        finally:
            stop.cancel()
            for delayed in pending:
                delayed.cancel()

    def _restart_policy(self, settings: Settings) -> RestartPolicy:
        s = settings.supervisor
        return RestartPolicy(
            self.count,
            RESTART_AFTER,
            backoff=s.restart_backoff,
            backoff_max=s.restart_backoff_max,
            max_restarts=s.max_restarts,
        )

    def _restart_later(
        self, policy: RestartPolicy, worker: _Worker, pending: dict[asyncio.Task[None], int]
    ) -> bool:
        """Schedule worker's restart (True), or stop the replica when the policy gives it up (False)."""
        decision = policy.exited(worker.index)
        extra: dict[str, object] = {
            "worker": worker.index,
            "exit_code": worker.process.returncode,
            "seconds": round(time.monotonic() - worker.started, 1),
        }
        if isinstance(decision, GiveUp):
            log.error(f"stopping the replica: {decision.reason}", extra=extra)
            self._failed = True
            self._begin_stop(signal.SIGTERM)
            return False
        extra.update(
            {
                "restart_in": decision.delay,
                "failures_in_a_row": decision.failures,
                "serving": policy.serving(),
            }
        )
        if decision.failures:
            log.error("a worker process failed soon after it started: starting it again later", extra=extra)
        else:
            log.error("a worker process exited: starting it again", extra=extra)
        pending[asyncio.create_task(asyncio.sleep(decision.delay))] = worker.index
        return True

    def _on_signal(self, sig: int) -> None:
        if self._stopping:
            log.warning(
                "second signal: passing it on to the workers", extra={"signal": signal.Signals(sig).name}
            )
            self._signal_workers(signal.SIGTERM)
            return
        log.info("stopping the worker processes", extra={"signal": signal.Signals(sig).name})
        self._begin_stop(signal.SIGTERM)

    def _begin_stop(self, sig: int) -> None:
        self._stopping = True
        self._stop.set()
        self._signal_workers(sig)

    def _signal_workers(self, sig: int) -> None:
        for worker in self._workers.values():
            if worker.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(sig)

    async def _stop_workers(self, settings: Settings) -> None:
        """Wait for the workers to finish their graceful shutdown; kill those past the grace period."""
        processes = [w.process for w in self._workers.values()]
        deadline = settings.shutdown.grace_period + KILL_MARGIN
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in processes)), deadline)
        except TimeoutError:
            log.error("worker processes overran the grace period: killing them", extra={"seconds": deadline})
            for process in processes:
                if process.returncode is None:
                    process.kill()
            self._failed = True
        log.info(
            "worker processes stopped",
            extra={"exit_codes": {w.index: w.process.returncode for w in self._workers.values()}},
        )
