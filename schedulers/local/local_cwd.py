"""local_cwd: every replica is a process group on this host, started in the caller's directory.

The daemon supervises the processes itself: it reads their stdout/stderr through pipes into
indexed log files (schedulers.logfiles) and learns of every exit from the event loop at once,
so state changes are pushed, never polled. Replicas cannot outlive the daemon: on shutdown they
are stopped (SIGTERM to the group, SIGKILL after a grace period), and after a crash the next
daemon finds the ones still alive by pid and start time, and stops them (local.recovery).

Ignored, as in TorchX: image (the caller's cwd is the image root), resources, retries, mounts.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import signal
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from txd.schedulers.aiters import until
from txd.schedulers.api import (
    SUBSCRIBED,
    Change,
    Described,
    DryRunInfo,
    Ended,
    Job,
    LogQuery,
    Scheduler,
    SubmitContext,
    Submitted,
    Subscribed,
    make_unique,
)
from txd.schedulers.errors import (
    BackendUnavailable,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from txd.schedulers.exhaustion import exhausted
from txd.schedulers.fold import app_status
from txd.schedulers.local import request
from txd.schedulers.local.recovery import killpg, settle_after_crash
from txd.schedulers.local.request import LocalOpts, PopenRequest, ReplicaSpec
from txd.schedulers.local.spawner import Spawner, SpawnerLost
from txd.schedulers.logfiles import LogSource, LogWriter, read_log
from txd.v1 import AppState
from txd.v1.app_pb2 import AppDef, AppStatus, ReplicaStatus
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

# Stopping an app (on cancel, or once its last replica has exited and leftover children may
# still hold its pipes): SIGTERM to each group, SIGKILL after this many seconds, and the pipes
# closed after as long again. Daemon shutdown uses its own --grace instead.
DRAIN_GRACE = 2.0
# Final statuses kept after an app ends, for a describe that races its end (a job that ends
# before the daemon follows it). The daemon records the final status; this is only a buffer.
RECENT_FINISHED = 1024


def _exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


class _Replica:
    """One running replica: its pipes feed its LogWriter (_Pipe), the spawner reports its exit
    (LocalScheduler._exited), and it tells its app when it ends."""

    def __init__(self, app: _App, spec: ReplicaSpec) -> None:
        self.app = app
        self.spec = spec
        self.writer = LogWriter(Path(spec.log), on_loss=app.output_lost)
        self.pipes: list[asyncio.ReadTransport] = []
        self.pid = 0
        self.returncode: int | None = None
        self.exit_unknown = False  # ended, but its exit code went with a lost spawner
        self.exited_after_cancel = False
        self._open_pipes = 2
        # Set once the process has exited AND its pipes are closed: all its output is on disk.
        self.ended = asyncio.Event()

    def pipe_closed(self) -> None:
        self._open_pipes -= 1
        if self._open_pipes == 0:
            self.writer.close()
            self._check_ended()
            if self.returncode is not None:  # its exit came first: it has ended only now
                self.app.replica_exited()

    def process_exited(self, returncode: int | None) -> None:
        """returncode None: the process ended, its exit code unknown (see spawner)."""
        self.returncode = 255 if returncode is None else returncode
        self.exit_unknown = returncode is None
        self.exited_after_cancel = self.app.cancelled
        self._check_ended()
        self.app.replica_exited()

    def close_pipes(self) -> None:
        for pipe in self.pipes:
            pipe.close()

    def _check_ended(self) -> None:
        if self._open_pipes == 0 and self.returncode is not None:
            self.ended.set()

    def status(self) -> ReplicaStatus:
        """RUNNING until the process has exited and all its output is on disk; then
        SUCCEEDED or FAILED by its exit, or CANCELLED if it exited after a cancel."""
        msg = ReplicaStatus(id=self.spec.replica_id, role=self.spec.role, hostname="localhost")
        if self.returncode is not None:
            msg.exit_code = _exit_code(self.returncode)
        if not self.ended.is_set():
            msg.state = AppState.RUNNING
        elif self.returncode is None or self.exited_after_cancel:
            # Cancelled, or stopped around a process that could not be reaped.
            msg.state = AppState.CANCELLED if self.app.cancelled else AppState.FAILED
        else:
            msg.state = AppState.SUCCEEDED if self.returncode == 0 else AppState.FAILED
        if self.exit_unknown:
            msg.ClearField("exit_code")
        return msg


class _Pipe(asyncio.Protocol):
    """One of a replica's output pipes (fd 1 or 2, Stream.STDOUT / STDERR) into its log."""

    def __init__(self, replica: _Replica, fd: int) -> None:
        self.replica = replica
        self.fd = fd

    def data_received(self, data: bytes) -> None:
        self.replica.writer.write(self.fd, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.replica.pipe_closed()


def _create_files(app_dir: Path, replicas: Sequence[_Replica]) -> None:
    """The job's log folder and its replicas' log files (in a worker thread)."""
    app_dir.mkdir(parents=True, exist_ok=True)
    for replica in replicas:
        replica.writer.create()


def _close_writers(replicas: Sequence[_Replica]) -> None:
    """The logs of replicas that will not start (their files may be open already)."""
    for replica in replicas:
        replica.writer.close()


class _App:
    """The live state of one local app. Terminal only when every replica has exited AND every
    byte of output was written, so a client told "done" can read complete logs."""

    def __init__(self, sched: LocalScheduler, req: PopenRequest) -> None:
        self.sched = sched
        self.req = req
        self.replicas: list[_Replica] = []
        self.cancelled = False
        self.cancel_msg = ""
        self.finisher: asyncio.Task[None] | None = None
        self.grace = DRAIN_GRACE
        self.spawning = True  # schedule() is still starting replicas

    def output_lost(self) -> None:
        """A replica's log began to lose bytes (a full disk): its status now says so."""
        self.sched.changed(self.req.app_id)

    def replica_exited(self) -> None:
        self.maybe_finish()
        self.sched.changed(self.req.app_id)

    def maybe_finish(self) -> None:
        """Starts the finisher once every replica was started and has exited (a replica may
        exit while a later one is still being spawned)."""
        started = len(self.replicas) == len(self.req.replicas)
        if started and all(r.returncode is not None for r in self.replicas):
            self._start_finisher()

    def cancel(self, msg: str, grace: float = DRAIN_GRACE) -> None:
        """Stops the app in the background (SIGTERM, SIGKILL after `grace` seconds); a no-op
        once it has ended or is ending."""
        if self.finisher is None:  # not already ending on its own
            self.cancelled = True
            self.cancel_msg = msg
            self.grace = grace
            self._start_finisher()

    def _start_finisher(self) -> None:
        if self.finisher is None:
            self.finisher = self.sched.spawn(self._finish(), f"finish {self.req.app_id}")

    async def _finish(self) -> None:
        await self.stop(self.grace)
        self.sched.retire(self)

    async def stop(self, grace: float) -> None:
        """SIGTERM to every replica's group, SIGKILL after `grace`; returns once every replica
        has exited and its pipes are closed."""
        for r in self.replicas:
            killpg(r.pid, signal.SIGTERM)
        if await self._ended_within(grace):
            return
        for r in self.replicas:
            killpg(r.pid, signal.SIGKILL)
        if not await self._ended_within(grace):
            # A process that left the group (setsid) still holds a pipe: stop reading from it.
            for r in self.replicas:
                r.close_pipes()
                r.writer.close()
                r.ended.set()

    async def _ended_within(self, seconds: float) -> bool:
        waits = [r.ended.wait() for r in self.replicas]
        try:
            async with asyncio.timeout(seconds):
                await asyncio.gather(*waits)
            return True
        except TimeoutError:
            return False

    def status(self) -> AppStatus:
        replicas = [r.status() for r in self.replicas]
        # Replicas still to be spawned are PENDING: one that exits while a later one is being
        # started must not make the app look ended.
        if self.spawning:  # a start that failed or was cancelled leaves no PENDING behind
            replicas += [
                ReplicaStatus(id=spec.replica_id, role=spec.role, state=AppState.PENDING)
                for spec in self.req.replicas[len(self.replicas) :]
            ]
        out = app_status(self.req.app_id, replicas)
        out.ui_url = f"file://{self.req.app_dir}"
        if out.state == AppState.CANCELLED:
            out.msg = self.cancel_msg
        elif out.state == AppState.FAILED:
            out.msg = ", ".join(
                f"{r.role}/{r.id} exited with {r.exit_code}"
                for r in replicas
                if r.state == AppState.FAILED and r.HasField("exit_code")
            )
            out.structured_error_msg = _first_error_file(self.req)
        if unknown := [r for r in self.replicas if r.exit_unknown]:
            note = "exit code unknown (txd's process spawner exited meanwhile): " + ", ".join(
                f"{r.spec.role}/{r.spec.replica_id}" for r in unknown
            )
            out.msg = f"{out.msg}; {note}" if out.msg else note
        if lost := [r for r in self.replicas if r.writer.lost]:
            note = "output lost: " + ", ".join(
                f"{r.spec.role}/{r.spec.replica_id} {r.writer.lost} bytes ({r.writer.loss})"
                for r in lost
            )
            out.msg = f"{out.msg}; {note}" if out.msg else note
        return out


def _first_error_file(req: PopenRequest) -> str:
    """TorchElastic's error.json of the earliest failing replica, if any replica wrote one."""
    files = [Path(f"{s.log}.error.json") for s in req.replicas]
    existing = sorted((f for f in files if f.exists()), key=lambda f: f.stat().st_mtime)
    return existing[0].read_text() if existing else ""


class LocalScheduler(Scheduler[LocalOpts, PopenRequest]):
    name = "local_cwd"
    description = "processes on this host, started in the caller's working directory"
    jobs_live_on_host = True
    log_seek = True  # read_log starts at LogQuery.offset
    capabilities = Capabilities(
        logs=True,
        log_follow=True,
        log_since_until=True,
        log_streams=True,
        cancel=True,
        delete=True,
        list=True,
        describe=True,
        distributed=True,
        push_status=True,
    )
    Opts = LocalOpts

    def __init__(
        self,
        session_name: str,
        settings: Mapping[str, Any] | None = None,
        *,
        state_dir: str | os.PathLike[str],
    ) -> None:
        super().__init__(session_name, settings)
        self.log_base = Path(state_dir) / "logs"
        self._apps: dict[str, _App] = {}  # live: processes this daemon supervises
        self._recent: OrderedDict[str, AppStatus] = OrderedDict()  # see RECENT_FINISHED
        # Each subscriber's news: an app id, with the final status of an app that ended.
        self._subscribers: set[asyncio.Queue[tuple[str, AppStatus | None]]] = set()
        self._spawner = Spawner(self._exited)
        self._by_pid: dict[int, _Replica] = {}  # started, exit not yet reported
        self._early_exits: dict[int, int | None] = {}  # reported before _start recorded the pid

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: LocalOpts, ctx: SubmitContext
    ) -> DryRunInfo[PopenRequest]:
        app_id = make_unique(app.name)
        base = Path(opts.log_dir).expanduser() if opts.log_dir else self.log_base
        if not base.is_absolute():
            base = Path(ctx.cwd) / base
        app_dir = base / self.session_name / app_id
        req = await request.build(app, opts, ctx, app_id, app_dir)
        return DryRunInfo(
            app=app,
            request=req,
            opts=opts,
            render=lambda: request.render(req, ctx.env),
            app_id=app_id,
            native=request.native(req, {}),  # no pids yet: recover() finds them by REPLICA_ENV
        )

    async def schedule(self, dryrun: DryRunInfo[PopenRequest]) -> Submitted:
        req = dryrun.request
        app = _App(self, req)
        replicas = [_Replica(app, spec) for spec in req.replicas]
        try:
            # Off the event loop: on a busy disk, creating the folder and each replica's two
            # files took over a third of the loop's time under a storm of submissions (and
            # every other call waited meanwhile).
            await asyncio.to_thread(_create_files, Path(req.app_dir), replicas)
        except OSError as e:
            _close_writers(replicas)
            if (why := exhausted(e)) is not None:
                raise ResourceExhausted(f"cannot make the job's log directory: {why}") from e
            raise
        except BaseException:
            _close_writers(replicas)
            raise
        self._apps[req.app_id] = app  # before the first spawn: an exit may be reported at once
        try:
            for k, replica in enumerate(replicas):
                spec = replica.spec
                try:
                    await self._start(replica)
                except OSError as e:
                    _close_writers(replicas[k:])
                    await self._abort(app)
                    what = f"could not start replica {spec.role}/{spec.replica_id}"
                    if (why := exhausted(e)) is not None:  # the host's fault, not the app's
                        raise ResourceExhausted(f"{what}: {why}") from e
                    if isinstance(e, SpawnerLost):  # the next spawn starts a new one
                        raise BackendUnavailable(f"{what}: {e.strerror}") from e
                    raise InvalidArgument("app", f"{what}: {e}") from e
                except BaseException:
                    _close_writers(replicas[k + 1 :])  # this one's pipes may feed its log already
                    raise
                app.replicas.append(replica)
        finally:
            app.spawning = False
        app.maybe_finish()  # every replica may have exited during the spawns
        # Crash recovery identifies a replica's process group by its leader's pid and start
        # time, so a reused pid is never hit.
        pids = {(r.spec.role, r.spec.replica_id): r.pid for r in app.replicas}
        return Submitted(req.app_id, request.native(req, pids))

    async def _start(self, replica: _Replica) -> None:
        """Starts the replica through the spawner (off the event loop), its output piped into
        its log: the read ends stay here, the write ends go to the process."""
        loop = asyncio.get_running_loop()
        fds: list[int] = []
        try:
            for _ in range(2):
                fds += os.pipe2(os.O_CLOEXEC)
            out_r, out_w, err_r, err_w = fds
            spec = replica.spec
            pid = await self._spawner.spawn(spec.args, spec.env, spec.cwd, out_w, err_w)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        os.close(out_w)
        os.close(err_w)
        replica.pid = pid
        self._by_pid[pid] = replica
        for fd, stream in ((out_r, 1), (err_r, 2)):  # Stream.STDOUT / STDERR
            pipe = os.fdopen(fd, "rb", buffering=0)  # the transport closes it
            reader = functools.partial(_Pipe, replica, stream)
            transport, _ = await loop.connect_read_pipe(reader, pipe)
            replica.pipes.append(transport)
        if pid in self._early_exits:
            self._exited(pid, self._early_exits.pop(pid))

    def _exited(self, pid: int, returncode: int | None) -> None:
        """The spawner reaped a replica (returncode None: it ended, its exit code unknown)."""
        if (replica := self._by_pid.pop(pid, None)) is not None:
            replica.process_exited(returncode)
        else:  # before _start has recorded it
            self._early_exits[pid] = returncode

    async def _abort(self, app: _App) -> None:
        """Undoes a half-done schedule: stops what started, then forgets the app and its logs."""
        app.cancel("could not start every replica")
        assert app.finisher is not None
        await app.finisher
        self._recent.pop(app.req.app_id, None)
        shutil.rmtree(app.req.app_dir, ignore_errors=True)

    # -- observation ------------------------------------------------------------------------

    def changed(self, app_id: str, final: AppStatus | None = None) -> None:
        """Tells each subscriber that the app changed. A live app's status is read as the
        subscriber takes the news (changes()), not now: one read now and taken after the
        daemon described the app would be older than what it was told (RUNNING, then the
        PENDING of a replica that exited while it was being started)."""
        for queue in self._subscribers:
            queue.put_nowait((app_id, final))

    def _status_now(self, app_id: str) -> AppStatus | None:
        if (app := self._apps.get(app_id)) is not None:
            return app.status()
        return self._recent.get(app_id)

    def retire(self, app: _App) -> None:
        """An app has ended: report its final status and let go of its processes."""
        for r in app.replicas:
            r.close_pipes()
        app_id = app.req.app_id
        status = app.status()
        self._recent[app_id] = status
        while len(self._recent) > RECENT_FINISHED:
            self._recent.popitem(last=False)
        del self._apps[app_id]
        self.changed(app_id, status)  # kept in the news: _recent may drop it first

    async def changes(self) -> AsyncGenerator[Change | Subscribed, None]:
        # Unbounded, but fed only by process exits: at most a few items per replica.
        queue: asyncio.Queue[tuple[str, AppStatus | None]] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            yield SUBSCRIBED
            while True:
                app_id, status = await queue.get()
                if status is None:  # a live app's news: its status now
                    status = self._status_now(app_id)
                if status is not None:  # else it ended, _recent dropped it: its end is queued
                    yield Change(app_id, status)
        finally:
            self._subscribers.discard(queue)

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        return {job.app_id: self._status_now(job.app_id) for job in jobs}

    async def list(self) -> list[AppStatus]:
        """The apps whose processes run on this host now."""
        return [app.status() for app in self._apps.values()]

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        if (app := self._apps.get(job.app_id)) is not None:
            for r in app.replicas:
                if r.spec.role == role and r.spec.replica_id == k:
                    # The writer closes once the replica's pipes have: no byte can follow.
                    src = LogSource(Path(r.spec.log), r.writer.pulse, _closed(r.writer))
                    return until(read_log(src, query), ended if query.follow else None)
        else:
            for rep in job.native.get("replicas", []):
                if rep["role"] == role and rep["replica_id"] == k:
                    return read_log(LogSource(Path(rep["log"]), None, lambda: True), query)
        raise NotFound(f"{job.app_id} has no replica {role}/{k}")

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        # Returns at once; the exits are pushed as they happen.
        if (app := self._apps.get(job.app_id)) is not None:
            app.cancel("cancelled by request")

    async def delete(self, job: Job) -> None:
        app = self._apps.get(job.app_id)
        if app is not None:
            app.cancel("cancelled by request")
            if app.finisher is not None:
                # Retires the app. Shielded: a caller that gives up (a client's deadline
                # cancels its Delete) must not cancel the stopping of the app with it.
                await asyncio.shield(app.finisher)
        self._recent.pop(job.app_id, None)
        if app_dir := job.native.get("app_dir"):
            shutil.rmtree(app_dir, ignore_errors=True)

    async def recover(self, jobs: Sequence[tuple[Job, AppStatus]]) -> dict[str, AppStatus]:
        """Jobs the previous daemon left running: their replicas cannot outlive it, so stop
        whatever of them still runs, and record what happened."""
        return {
            job.app_id: await settle_after_crash(job, status, DRAIN_GRACE) for job, status in jobs
        }

    async def shutdown(self, grace: float) -> None:
        live = list(self._apps.values())
        for app in live:
            app.cancel("cancelled by txd shutdown", grace)
        await asyncio.gather(*(a.finisher for a in live if a.finisher))

    async def aclose(self) -> None:
        for app in self._apps.values():
            for r in app.replicas:
                r.close_pipes()
        self._spawner.close()


def _closed(writer: LogWriter) -> Callable[[], bool]:
    return lambda: writer.closed


def create_scheduler(session_name: str, **kwargs: Any) -> LocalScheduler:
    return LocalScheduler(session_name, kwargs.get("settings"), state_dir=kwargs["state_dir"])
