"""Serving: the gRPC server on a Unix socket, and the daemon's lifecycle from start to exit."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from txd import defaults
from txd.daemon import access, reflection, serving, socketfile, statedir, tcp, wire
from txd.daemon.core import JobService
from txd.daemon.readdoor import ReadDoor
from txd.daemon.servicer import About, RunnerServicer
from txd.daemon.socketfile import SocketNotPrivate
from txd.daemon.sockwatch import Listeners
from txd.daemon.tasks import Tasks
from txd.daemon.watchdoor import WatchDoor
from txd.filekind import describe
from txd.v1 import runner_pb2

log = logging.getLogger(__name__)

SERVICE = runner_pb2.DESCRIPTOR.services_by_name["Runner"].full_name


class AlreadyRunning(Exception):
    """Another daemon holds the socket or the state dir. `serving_here`: it serves (or is
    about to serve) this very socket, so a client may just use it."""

    def __init__(self, message: str, *, serving_here: bool) -> None:
        super().__init__(message)
        self.serving_here = serving_here


class SocketBlocked(Exception):
    """Something that is not a stale socket of the user's sits at the socket's path: another
    user's file, or a file that is no socket. txd never removes it."""


def _claim_socket(path: Path) -> None:
    """Creates the socket's folder (mode 0700) and removes a stale socket file, refusing to
    take over a socket another live daemon listens on, to remove a file that is no socket of
    the user's, or to serve where others can reach."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        socketfile.check_private(folder)
    except OSError as e:
        raise SocketNotPrivate(f"cannot use the socket's folder {folder}: {e.strerror}") from None
    there = socketfile.clear_stale(path)
    if there is None:
        return
    if not there.live:
        raise SocketBlocked(
            f"{path} is {describe(there.stat)}, not a stale socket of yours: txd never "
            "removes it; remove it or move it away, or choose another --socket"
        )
    raise AlreadyRunning(f"a txd daemon is already listening on {path}", serving_here=True)


def _hold_state_dir(state_dir: Path, socket_path: Path, period: float) -> serving.Serving:
    """Holds the state dir for the daemon's life: two daemons must never share a job store, or
    the second would "recover" the first one's running jobs. On one host the flock on
    <state_dir>/txd.lock decides (released by the kernel however the process ends); across
    hosts sharing the state dir, the serving record and its heartbeat (daemon.serving)."""
    try:
        return serving.acquire(state_dir, socket_path, period=period)
    except serving.Busy as e:
        here = not e.host and e.socket_path == str(socket_path)
        raise AlreadyRunning(str(e), serving_here=here) from None


# gRPC core cancels a new call once more than 1,000 (soft) or 3,000 (hard) calls wait for the
# server to take them, and the asyncio server takes them one at a time: a burst of a few
# thousand Watch streams (100 clients opening their watches at once) would lose the excess as
# CANCELLED. The socket is the user's own (a private folder, the file 0600), so there is no
# stranger to shed load for. Message sizes are set explicitly, the client's the same
# (txd.defaults): a bigger request is RESOURCE_EXHAUSTED before the daemon reads it.
SERVER_OPTIONS = [
    ("grpc.server.max_pending_requests", 1_000_000),
    ("grpc.server.max_pending_requests_hard_limit", 1_000_000),
    ("grpc.max_receive_message_length", defaults.MAX_REQUEST_BYTES),
    ("grpc.max_send_message_length", defaults.MAX_RESPONSE_BYTES),
]


def _add_services(
    server: grpc.aio.Server, service: JobService, health: HealthServicer, about: About
) -> None:
    wire.add_runner(RunnerServicer(service, about), server)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable(server, [SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name])


async def create_server(
    service: JobService, socket_path: Path, about: About
) -> tuple[grpc.aio.Server, HealthServicer]:
    server = grpc.aio.server(
        interceptors=[access.AccessInterceptor(access.UNIX, service.metrics)],
        options=SERVER_OPTIONS,
    )
    health = HealthServicer()
    _add_services(server, service, health, about)
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    os.chmod(socket_path, 0o600)  # the folder decides; this still holds if it is opened later
    for name in ("", SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, health


# The TCP listener may face strangers: gRPC's default limits on waiting calls stay (not the Unix
# socket's); the message sizes are the same. gRPC binds with SO_REUSEPORT by default, so a
# second daemon (any process of the user's) could bind the same port and take half of its
# connections: a port in use must be a refusal.
TCP_SERVER_OPTIONS = [*SERVER_OPTIONS[2:], ("grpc.so_reuseport", 0)]


async def create_tcp_server(
    service: JobService, health: HealthServicer, listen: tcp.TcpListen, about: About
) -> grpc.aio.Server:
    """The same services as the Unix socket's, behind TLS and the token check."""
    server = tcp.server(
        listen, TCP_SERVER_OPTIONS, access.AccessInterceptor(access.TCP, service.metrics)
    )
    _add_services(server, service, health, about)
    bound = tcp.bind(server, listen)
    await server.start()
    log.info(
        "txd serving on %s (TLS%s, tokens)",
        ", ".join(bound),
        ", client certificates" if listen.client_ca else "",
    )
    return server


async def serve(
    socket_path: Path,
    state_dir: Path,
    session: str,
    grace: float,
    on_ready: Callable[[], None] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    listen: tcp.TcpListen | None = None,
    heartbeat: float = serving.PERIOD,
    *,
    on_stopping: Callable[[], object] | None = None,
) -> None:
    """Runs until SIGTERM or SIGINT (or until another host's daemon took the state dir over
    from this one, stalled past the serving record's staleness limit), then shuts down in
    order: health NOT_SERVING, local jobs stopped and recorded, status feeds stopped,
    in-flight calls given `grace` seconds, the remaining background tasks cancelled and
    awaited, schedulers and job store closed. A backend that fails on the way is logged; the
    shutdown goes on."""
    statedir.make_private(state_dir)  # before anything is written there
    hold = _hold_state_dir(state_dir, socket_path, heartbeat)
    hold.start_beating(asyncio.get_running_loop())  # before the job store opens: it may be slow
    try:
        _claim_socket(socket_path)  # both checks before start(), which ends leftover replicas
    except BaseException:
        hold.abandon()
        raise
    service: JobService | None = None
    try:
        try:
            async with asyncio.TaskGroup() as group:
                tasks = Tasks(group)
                try:
                    service = JobService.open(state_dir, session, settings, tasks=tasks)
                    hold.fence_store(service.store)  # before the first job is read
                    await _serve(service, hold, socket_path, grace, on_ready, listen, on_stopping)
                finally:
                    tasks.cancel_all()
        except BaseExceptionGroup as group_error:
            # Tasks log their own errors, so this is the body's one (a SettingsError, say),
            # which the task group wraps: raise it as it is.
            if len(group_error.exceptions) == 1:
                raise group_error.exceptions[0] from None
            raise
    finally:
        if service is not None:
            await service.aclose()
        if hold.gone:
            os.close(hold.lock_fd)  # the record is the new daemon's: leave it alone
        elif service is None or not service.started:
            hold.abandon()  # a dead host's jobs not yet settled: its record goes back
        else:
            hold.close()
    log.info("stopped")


async def _serve(
    service: JobService,
    hold: serving.Serving,
    socket_path: Path,
    grace: float,
    on_ready: Callable[[], None] | None,
    listen: tcp.TcpListen | None = None,
    on_stopping: Callable[[], object] | None = None,
) -> None:
    state_dir = hold.state_dir
    await service.start(moved_from=hold.took_over_from)
    about = About.here(socket_path, state_dir)

    async def start(path: Path) -> tuple[grpc.aio.Server, HealthServicer]:
        return await create_server(service, path, about)

    listeners = Listeners(socket_path, _claim_socket, start)
    watch_door = WatchDoor(socket_path, service)
    others: list[grpc.aio.Server] = []  # the TCP listener's: health shared with the socket's
    try:
        await listeners.first()
        door = ReadDoor(socket_path, service.store.path, service.metrics)
        service.cache.on_store_failing = door.store_failing
        service.tasks.create_task(door.keep(), name="read door")
        await watch_door.start()
        if listen is not None:
            health = listeners.served[0][1]
            others.append(await create_tcp_server(service, health, listen, about))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("txd serving on %s (state in %s, pid %d)", socket_path, state_dir, os.getpid())
        if on_ready is not None:
            on_ready()

        async def doors_again() -> None:  # the folder is there: the doors' sockets checked
            door.check()
            await watch_door.check()

        service.tasks.create_task(listeners.watch(then=doors_again), name="socket watch")
        hold.on_lost = stop.set  # the state dir lost to another host stops this daemon too
        await stop.wait()
        if hold.gone:  # the new daemon's job store now: nothing more is written to it
            service.store.fence("this daemon lost the state dir to another (see the log)")
        log.info("shutting down")
        if on_stopping is not None:  # systemd: STOPPING=1
            on_stopping()
        try:
            await listeners.enter_graceful_shutdown()
            await service.shutdown(grace)
        finally:
            # Calls still running (waits, log follows) get `grace` seconds.
            await asyncio.gather(
                listeners.stop(grace), watch_door.stop(grace), *(s.stop(grace) for s in others)
            )
    finally:
        await listeners.stop(0)  # idempotent; ends a server left by an error above
        await watch_door.stop(0)
        await asyncio.gather(*(s.stop(0) for s in others))
