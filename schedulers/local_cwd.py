"""local_cwd: every replica is a process group on this host, started in the caller's directory.

The daemon supervises the processes itself: it reads their stdout/stderr through pipes into
indexed log files (schedulers.logfiles) and learns of every exit from the event loop at once,
so state changes are pushed, never polled. Replicas cannot outlive the daemon: on shutdown they
are stopped (SIGTERM to the group, SIGKILL after a grace period), and after a crash the next
daemon finds the ones still alive by pid and start time, and stops them.

Ignored, as in TorchX: image (the caller's cwd is the image root), resources, retries, mounts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pprint
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from txd.schedulers.api import (
    DryRunInfo,
    LogQuery,
    Macros,
    Scheduler,
    SubmitContext,
    is_terminal,
    make_unique,
    num_replicas,
)
from txd.schedulers.errors import InvalidArgument, NotFound
from txd.schedulers.logfiles import LogSource, LogWriter, read_log
from txd.schedulers.options import opt
from txd.v1.app_pb2 import AppDef, AppState, AppStatus, ReplicaStatus, RoleStatus
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

RANK0_ENV = "TORCHX_RANK0_HOST"
# Stopping an app (on cancel, or once its last replica has exited and leftover children may
# still hold its pipes): SIGTERM to each group, SIGKILL after this many seconds, and the pipes
# closed after as long again. Daemon shutdown uses its own --grace instead.
DRAIN_GRACE = 2.0


@dataclass
class LocalOpts:
    log_dir: str | None = opt(
        None, "directory for the replicas' log files (default: under the daemon's state dir)"
    )
    prepend_cwd: bool = opt(
        False, "put the working directory first on the replicas' PATH (default: last)"
    )
    auto_set_cuda_visible_devices: bool = opt(
        False,
        "give each GPU-requesting replica its own CUDA_VISIBLE_DEVICES; does nothing when the "
        "host has fewer GPUs than requested",
    )


@dataclass
class ReplicaSpec:
    role: str
    replica_id: int
    args: list[str]
    env: dict[str, str]
    cwd: str
    log: str  # the replica's log files are <log>.log and <log>.idx


@dataclass
class PopenRequest:
    app_id: str
    app_dir: str
    replicas: list[ReplicaSpec]


def _exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


def _start_ticks(pid: int) -> int | None:
    """The process start time (clock ticks since boot) from /proc, to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22; the command name (field 2) may contain spaces, so count from its closing paren.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


@dataclass(slots=True)
class _Finished:
    """What is kept of an app once it has ended, or when it is known only from a previous
    daemon run: where its logs are, and (when it ended in this run) its final status. A few
    hundred bytes, so 10,000 finished jobs cost the daemon little memory."""

    app_dir: str
    logs: dict[tuple[str, int], str]
    status: bytes = b""


class _Replica(asyncio.SubprocessProtocol):
    """One running replica: feeds its pipes into its LogWriter and tells its app when it ends."""

    def __init__(self, app: _App, spec: ReplicaSpec) -> None:
        self.app = app
        self.spec = spec
        self.writer = LogWriter(Path(spec.log))
        self.transport: asyncio.SubprocessTransport | None = None
        self.pid = 0
        self.returncode: int | None = None
        self._open_pipes = 2
        # Set once the process has exited AND its pipes are closed: all its output is on disk.
        self.ended = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.pid = transport.get_pid()  # type: ignore[attr-defined]

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.writer.write(fd, data)  # fd 1 / 2 are Stream.STDOUT / STDERR

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open_pipes -= 1
        if self._open_pipes == 0:
            self.writer.close()
            self._check_ended()

    def process_exited(self) -> None:
        assert self.transport is not None
        self.returncode = self.transport.get_returncode()
        self._check_ended()
        self.app.replica_exited()

    def _check_ended(self) -> None:
        if self._open_pipes == 0 and self.returncode is not None:
            self.ended.set()

    def status(self) -> ReplicaStatus:
        msg = ReplicaStatus(id=self.spec.replica_id, role=self.spec.role, hostname="localhost")
        if self.returncode is None:
            # Still running, unless the app has ended around a process it could not reap.
            msg.state = self.app.terminal_state or AppState.RUNNING
        else:
            msg.exit_code = _exit_code(self.returncode)
            msg.state = AppState.SUCCEEDED if self.returncode == 0 else AppState.FAILED
        return msg


class _App:
    """The live state of one local app. Terminal only when every replica has exited AND every
    byte of output was written, so a client told "done" can read complete logs."""

    def __init__(self, sched: LocalScheduler, req: PopenRequest) -> None:
        self.sched = sched
        self.req = req
        self.replicas: list[_Replica] = []
        self.cancelled = False
        self.cancel_msg = ""
        self.terminal_state: AppState | None = None
        self.finisher: asyncio.Task[None] | None = None
        self.grace = DRAIN_GRACE

    def replica_exited(self) -> None:
        self.maybe_finish()
        self.sched.notify(self.req.app_id)

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
            self.finisher = asyncio.get_running_loop().create_task(self._finish())

    async def _finish(self) -> None:
        await self.stop(self.grace)
        self.terminal_state = self._computed_state()
        self.sched._retire(self)

    async def stop(self, grace: float) -> None:
        """SIGTERM to every replica's group, SIGKILL after `grace`; returns once every replica
        has exited and its pipes are closed."""
        for r in self.replicas:
            _killpg(r.pid, signal.SIGTERM)
        if await self._ended_within(grace):
            return
        for r in self.replicas:
            _killpg(r.pid, signal.SIGKILL)
        if not await self._ended_within(grace):
            # A process that left the group (setsid) still holds a pipe: stop reading from it.
            for r in self.replicas:
                if r.transport is not None:
                    r.transport.close()
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

    def _computed_state(self) -> AppState:
        if self.cancelled:
            return AppState.CANCELLED
        if any(r.returncode not in (0, None) for r in self.replicas):
            return AppState.FAILED
        return AppState.SUCCEEDED

    def status(self) -> AppStatus:
        state = AppState.RUNNING if self.terminal_state is None else self.terminal_state
        out = AppStatus(state=state, app_id=self.req.app_id, ui_url=f"file://{self.req.app_dir}")
        if state == AppState.CANCELLED:
            out.msg = self.cancel_msg
        elif state == AppState.FAILED:
            failed = [r for r in self.replicas if r.returncode]
            out.msg = ", ".join(
                f"{r.spec.role}/{r.spec.replica_id} exited with {_exit_code(r.returncode or 0)}"
                for r in failed
            )
            out.structured_error_msg = _first_error_file(self.req)
        by_role: dict[str, RoleStatus] = {}
        for r in self.replicas:
            role = by_role.setdefault(r.spec.role, RoleStatus(role=r.spec.role))
            role.replicas.append(r.status())
        out.roles.extend(by_role.values())
        return out


def _first_error_file(req: PopenRequest) -> str:
    """TorchElastic's error.json of the earliest failing replica, if any replica wrote one."""
    files = [Path(f"{s.log}.error.json") for s in req.replicas]
    existing = sorted((f for f in files if f.exists()), key=lambda f: f.stat().st_mtime)
    return existing[0].read_text() if existing else ""


class LocalScheduler(Scheduler[LocalOpts, PopenRequest]):
    name = "local_cwd"
    description = "processes on this host, started in the caller's working directory"
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

    def __init__(self, session_name: str, *, state_dir: str | os.PathLike[str]) -> None:
        super().__init__(session_name)
        self.log_base = Path(state_dir) / "logs"
        self._apps: dict[str, _App] = {}  # live
        self._finished: dict[str, _Finished] = {}

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: LocalOpts, ctx: SubmitContext
    ) -> DryRunInfo[PopenRequest]:
        app_id = make_unique(app.name)
        base = Path(opts.log_dir).expanduser() if opts.log_dir else self.log_base
        if not base.is_absolute():
            base = Path(ctx.cwd) / base
        app_dir = base / self.session_name / app_id
        cuda = await self._cuda_devices(app) if opts.auto_set_cuda_visible_devices else {}
        replicas = []
        for i, role in enumerate(app.roles):
            for k in range(num_replicas(role)):
                macros = Macros(
                    img_root=ctx.cwd, app_id=app_id, replica_id=str(k), rank0_env=RANK0_ENV
                )
                r = macros.apply(role)
                log = app_dir / f"{role.name}.{k}"
                env = dict(ctx.env)
                env.update(r.env)
                env[RANK0_ENV] = "localhost"
                env.setdefault("PYTHONUNBUFFERED", "x")
                env.setdefault("TORCHELASTIC_ERROR_FILE", f"{log}.error.json")
                env["PATH"] = _join_path(
                    r.env.get("PATH", ""),
                    ctx.env.get("PATH", ""),
                    ctx.cwd,
                    prepend_cwd=opts.prepend_cwd,
                )
                if (role.name, k) in cuda:
                    env["CUDA_VISIBLE_DEVICES"] = cuda[(role.name, k)]
                if shutil.which(r.entrypoint, path=env["PATH"]) is None and not (
                    "/" in r.entrypoint and os.access(Path(ctx.cwd, r.entrypoint), os.X_OK)
                ):
                    raise InvalidArgument(
                        f"app.roles[{i}].entrypoint",
                        f"{r.entrypoint!r} is not an executable found on the caller's PATH "
                        f"or relative to {ctx.cwd}",
                    )
                replicas.append(
                    ReplicaSpec(
                        role=role.name,
                        replica_id=k,
                        args=[r.entrypoint, *r.args],
                        env=env,
                        cwd=ctx.cwd,
                        log=str(log),
                    )
                )
        req = PopenRequest(app_id=app_id, app_dir=str(app_dir), replicas=replicas)
        return DryRunInfo(
            app=app,
            request=req,
            opts=opts,
            native=_native(req),
            render=lambda: _render(req, ctx.env),
        )

    async def _cuda_devices(self, app: AppDef) -> dict[tuple[str, int], str]:
        """Consecutive GPU indices per replica, all or nothing, as TorchX assigns them."""
        wanted = [
            (role.name, k, role.resource.gpu)
            for role in app.roles
            if role.resource.gpu > 0
            for k in range(num_replicas(role))
        ]
        total = sum(n for _, _, n in wanted)
        if total == 0 or total > await _gpu_count():
            return {}
        out, next_dev = {}, 0
        for role_name, k, n in wanted:
            out[(role_name, k)] = ",".join(str(d) for d in range(next_dev, next_dev + n))
            next_dev += n
        return out

    async def schedule(self, dryrun: DryRunInfo[PopenRequest]) -> str:
        req = dryrun.request
        app = _App(self, req)
        self._apps[req.app_id] = app  # before the first spawn: an exit may be reported at once
        Path(req.app_dir).mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        for spec in req.replicas:
            replica = _Replica(app, spec)
            try:
                await loop.subprocess_exec(
                    _factory(replica),
                    *spec.args,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=spec.cwd,
                    env=spec.env,
                    start_new_session=True,
                )
            except OSError as e:
                replica.writer.close()
                await self._abort(app)
                raise InvalidArgument(
                    "app", f"could not start replica {spec.role}/{spec.replica_id}: {e}"
                ) from e
            app.replicas.append(replica)
        # Recorded with the job (the registry stores `native` once schedule returns): crash
        # recovery identifies a replica by pid and start time, so a reused pid is never hit.
        for entry, r in zip(dryrun.native["replicas"], app.replicas, strict=True):
            entry["pid"], entry["start_ticks"] = r.pid, _start_ticks(r.pid)
        app.maybe_finish()  # every replica may have exited during the spawns
        return req.app_id

    async def _abort(self, app: _App) -> None:
        """Undoes a half-done schedule: stops what started, then forgets the app and its logs."""
        app.cancel("could not start every replica")
        assert app.finisher is not None
        await app.finisher
        if (done := self._finished.pop(app.req.app_id, None)) is not None:
            shutil.rmtree(done.app_dir, ignore_errors=True)

    # -- observation ------------------------------------------------------------------------

    def _retire(self, app: _App) -> None:
        """An app has ended: keep only its _Finished record, then tell the daemon."""
        for r in app.replicas:
            if r.transport is not None:
                r.transport.close()
        app_id = app.req.app_id
        self._finished[app_id] = _Finished(
            app.req.app_dir,
            {(s.role, s.replica_id): s.log for s in app.req.replicas},
            app.status().SerializeToString(),
        )
        del self._apps[app_id]
        self.notify(app_id)

    async def describe(self, app_id: str) -> AppStatus | None:
        if (app := self._apps.get(app_id)) is not None:
            return app.status()
        done = self._finished.get(app_id)
        return AppStatus.FromString(done.status) if done and done.status else None

    def log_iter(self, app_id: str, role: str, k: int, query: LogQuery) -> AsyncIterator[bytes]:
        if (app := self._apps.get(app_id)) is not None:
            for r in app.replicas:
                if r.spec.role == role and r.spec.replica_id == k:
                    # Once the writer is closed the replica's pipes are, so no byte can follow.
                    src = LogSource(Path(r.spec.log), r.writer.pulse, _closed(r.writer))
                    return read_log(src, query)
        elif (done := self._finished.get(app_id)) is not None:
            if (role, k) in done.logs:
                return read_log(LogSource(Path(done.logs[(role, k)]), None, lambda: True), query)
        else:
            raise NotFound(f"{self.name} has no logs for {app_id}")
        raise NotFound(f"{app_id} has no replica {role}/{k}")

    # -- control ----------------------------------------------------------------------------

    async def _cancel_existing(self, app_id: str) -> None:
        # Returns at once; the exits are pushed as they happen.
        self._apps[app_id].cancel("cancelled by request")

    async def delete(self, app_id: str) -> None:
        app = self._apps.get(app_id)
        if app is not None:
            await self.cancel(app_id)
            if app.finisher is not None:
                await app.finisher  # retires the app
        done = self._finished.pop(app_id, None)
        if done is not None:
            shutil.rmtree(done.app_dir, ignore_errors=True)

    async def reattach(self, app_id: str, native: dict[str, Any], status: AppStatus) -> AppStatus:
        self._finished[app_id] = _Finished(
            native["app_dir"],
            {(r["role"], r["replica_id"]): r["log"] for r in native["replicas"]},
        )
        if is_terminal(status.state):
            return status
        return await _settle_after_crash(native["replicas"], status)

    async def shutdown(self, grace: float) -> None:
        live = list(self._apps.values())
        for app in live:
            app.cancel("cancelled by txd shutdown", grace)
        await asyncio.gather(*(a.finisher for a in live if a.finisher))

    async def close(self) -> None:
        for app in self._apps.values():
            for r in app.replicas:
                if r.transport is not None:
                    r.transport.close()


async def _settle_after_crash(recorded: list[dict[str, Any]], status: AppStatus) -> AppStatus:
    """A job the previous daemon left running: stop the replicas still alive, record why."""
    alive = [
        r["pid"]
        for r in recorded
        if r.get("start_ticks") is not None and _start_ticks(r["pid"]) == r["start_ticks"]
    ]
    await _stop_strangers(alive)
    out = AppStatus()
    out.CopyFrom(status)
    if alive:
        out.state = AppState.CANCELLED
        out.msg = (
            f"txd restarted after a crash; stopped {len(alive)} replica(s) "
            f"still running from before"
        )
    else:
        out.state = AppState.FAILED
        out.msg = "txd stopped unexpectedly while the job ran; its outcome is unknown"
    for role in out.roles:
        for replica in role.replicas:
            if replica.state not in (AppState.SUCCEEDED, AppState.FAILED):
                replica.state = out.state
    return out


async def _stop_strangers(pids: list[int]) -> None:
    """SIGTERM, then SIGKILL after the grace period, to process groups that are not our
    children; their exits are awaited through pidfds, which the loop watches (no polling)."""
    loop = asyncio.get_running_loop()
    waits = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        gone = loop.create_future()
        loop.add_reader(fd, _resolve, gone)
        waits.append((fd, gone))
        _killpg(pid, signal.SIGTERM)
    try:
        for sig in (signal.SIGKILL, None):
            try:
                async with asyncio.timeout(DRAIN_GRACE):
                    await asyncio.gather(*(g for _, g in waits))
                return
            except TimeoutError:
                if sig is not None:
                    for pid in pids:
                        _killpg(pid, sig)
    finally:
        for fd, _ in waits:
            loop.remove_reader(fd)
            os.close(fd)


def _native(req: PopenRequest) -> dict[str, Any]:
    """What the registry keeps to find the job's logs after a restart."""
    return {
        "app_dir": req.app_dir,
        "replicas": [
            {"role": s.role, "replica_id": s.replica_id, "log": s.log} for s in req.replicas
        ],
    }


def _render(req: PopenRequest, caller_env: dict[str, str]) -> str:
    """The request for people: the caller's environment is left out, only what txd adds or
    changes in it is shown."""
    replicas = []
    for s in req.replicas:
        env = {k: v for k, v in s.env.items() if caller_env.get(k) != v}
        replicas.append({**asdict(s), "env": env})
    data = {"app_id": req.app_id, "app_dir": req.app_dir, "replicas": replicas}
    return pprint.pformat(data, width=100, sort_dicts=False)


def _closed(writer: LogWriter) -> Callable[[], bool]:
    return lambda: writer.closed


def _factory(replica: _Replica) -> Callable[[], _Replica]:
    return lambda: replica


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _join_path(role_path: str, caller_path: str, cwd: str, *, prepend_cwd: bool) -> str:
    parts = [p for p in (role_path + ":" + caller_path).split(":") if p]
    parts = [cwd, *parts] if prepend_cwd else [*parts, cwd]
    return ":".join(dict.fromkeys(parts))


async def _gpu_count() -> int:
    """GPUs on this host, from `nvidia-smi -L` (0 when it is missing or fails)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    with contextlib.suppress(OSError):
        proc = await asyncio.create_subprocess_exec(
            "nvidia-smi", "-L", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        out, _ = await proc.communicate()
        if proc.returncode == 0:
            return sum(1 for line in out.decode().splitlines() if line.startswith("GPU "))
    return 0


def create_scheduler(session_name: str, **kwargs: Any) -> LocalScheduler:
    return LocalScheduler(session_name, state_dir=kwargs["state_dir"])
