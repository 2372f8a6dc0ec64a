"""The Scheduler contract: what every backend implements, async throughout.

A scheduler turns a validated AppDef into a native job, and reports on jobs it is told about. It
knows nothing of gRPC, the job store or clients; the daemon owns those, and the daemon keeps the
only copy of every job's status. What a backend author writes is: build the request
(`_submit_dryrun`), submit it (`schedule`), describe jobs (`describe_many`), cancel them, read
their logs. The rules every method follows:

- **Stateless per job.** Every per-job call receives a `Job`: the app id and the native facts
  `schedule` returned, which the daemon persists with the job. A scheduler keeps no per-job
  table it would need after a daemon restart; caches are allowed, dependence on them is not.
- **Status reaches the daemon one of two ways** (`feeds` in the daemon runs one feed per
  scheduler, started when its first job is tracked):
  - poll (the default): the daemon calls `describe_many` with every live job of this scheduler
    once per `settings.poll_interval`, however many clients watch;
  - push: `changes()` yields each job's new status as the backend reports it (process exits,
    Docker events, a Kubernetes watch). The daemon reconnects a dropped stream after
    `settings.poll_interval` and then resyncs with one `describe_many`.
- **One rule folds replica states into an app state** (`txd.schedulers.fold.fold`): an app is
  terminal only when every replica is. A backend that fails fast stops the survivors itself
  before it may report the app FAILED.
- **Capabilities are facts.** A claimed capability works; an unclaimed one raises Unsupported.
  `push_status` is derived from whether `changes` is overridden. The contract suite
  (txd.schedulers.testing) checks all of this, for third-party schedulers too.
- **Credentials come from the daemon**, never from a caller's Run: a backend's client (kubeconfig,
  AWS profile, Docker host, SLURM_CONF, SSH keys) is configured by the daemon's environment and
  its settings section, because the feed talks to the backend with no caller around. The
  caller's environment (`SubmitContext.env`) is the job's environment, nothing more.
- **Errors** are the closed set of txd.schedulers.errors; a backend that cannot be reached
  raises BackendUnavailable, which never crashes the daemon's feeds or its shutdown.
"""

from __future__ import annotations

import abc
import asyncio
import datetime as dt
import re
import string
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

from txd.schedulers import options
from txd.schedulers.errors import Unsupported
from txd.v1 import TERMINAL_STATES, Stream
from txd.v1.app_pb2 import AppDef, AppStatus, Role
from txd.v1.scheduler_pb2 import Capabilities, CfgValue, RunOpt

OptsT = TypeVar("OptsT")
ReqT = TypeVar("ReqT")


def is_terminal(state: int) -> bool:
    return state in TERMINAL_STATES


@dataclass(frozen=True)
class Job:
    """A job as every per-job call receives it: what `schedule` returned, as persisted."""

    app_id: str
    native: Mapping[str, Any]


@dataclass(frozen=True)
class Submitted:
    """What `schedule` submitted: the app id and the JSON-able facts needed to find the job
    again (native job ids, log paths, the login node ...). The daemon records both before it
    returns the handle, and hands them back in every `Job`."""

    app_id: str
    native: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoAnswer:
    """`describe_many`'s value for a job it could not ask about (its login node is down, say):
    the daemon keeps the job's last status and marks it stale with `reason`."""

    reason: str


# A value of describe_many: the job's status, None when the backend does not know the job
# (it will never report on it again), or NoAnswer.
Described = AppStatus | None | NoAnswer


@dataclass(frozen=True)
class Change:
    """A job's new status, as a push scheduler's `changes()` reports it: anything
    `describe_many` can say of it. `status` None: the backend no longer knows the job;
    NoAnswer: it cannot tell now (the daemon keeps the last status, marked stale). A backend
    never re-yields SUBSCRIBED to have the daemon ask for what it could say itself."""

    app_id: str
    status: Described


class Subscribed:
    """Yielded by `changes()` once it is subscribed (again): the daemon then describes every
    live job, so nothing that changed before the subscription is missed."""

    def __repr__(self) -> str:
        return "SUBSCRIBED"


SUBSCRIBED: Final = Subscribed()


@dataclass
class SubmitContext:
    """Where a Run comes from: the caller's working directory and environment, which become the
    job's. They are not the backend's credentials (see the module docstring). `workspace`: the
    caller's code to run (an absolute directory on the daemon's host, checked to exist), or ""
    for none; see Scheduler.prepare_workspace."""

    cwd: str
    env: dict[str, str]
    workspace: str = ""


@dataclass
class DryRunInfo(Generic[ReqT]):
    """A native request, ready for `schedule`, and how to print it."""

    app: AppDef
    request: ReqT
    opts: Any
    # Builds the printable form; only DryRun pays for it.
    render: Callable[[], str] = field(default=lambda: "")
    # What prepare_workspace did (or, in a dry run, would do); "" without a workspace.
    workspace: str = ""
    # The app id, when the scheduler chooses it before `schedule` (a local one does; a cluster's
    # comes from its backend): the daemon then records the job, with `native`, before it is
    # scheduled, so that a daemon that dies during `schedule` leaves a record `recover` finds.
    app_id: str = ""
    native: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.render()


@dataclass(frozen=True)
class LogQuery:
    """Which log bytes of one replica to read (see LogsRequest in runner.proto)."""

    regex: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    follow: bool = False
    stream: int = Stream.COMBINED
    # The daemon keeps only this many last lines of what log_iter sends (Scheduler.log_iter,
    # rule 6): a hint that earlier bytes may be skipped. None: the whole log.
    tail: int | None = None
    # Bytes of what this query selects that were delivered already (LogsRequest.offsets):
    # skipped. Only passed to a scheduler whose `log_seek` is set; the daemon skips them for
    # every other one.
    offset: int = 0
    # Told of each line the regex filter dropped without being sure it does not match (rule 2).
    on_long_line: Callable[[LongLine], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class LongLine:
    """A line dropped by the regex although a match longer than the window overlap could have
    been missed in it (txd.schedulers.longlines): where it begins, in bytes from the first
    byte read of the replica's stream, and its length without its newline."""

    offset: int
    length: int


# Returns once the daemon's status cache holds a terminal status for the job.
Ended = Callable[[], Coroutine[Any, Any, None]]


class TaskGroupLike(Protocol):
    """Where background tasks go: the daemon's task group (an asyncio.TaskGroup will do)."""

    def create_task(
        self, coro: Coroutine[Any, Any, Any], *, name: str | None = None
    ) -> asyncio.Task[Any]: ...


@dataclass
class Settings:
    """Per-daemon settings of a scheduler: `[schedulers.<name>]` in the daemon's config file,
    overridden by `txd --set <name>.<key>=<value>`. Schedulers that need more (a Kubernetes
    context, an AWS region) subclass this and set `Settings` on their class."""

    poll_interval: float = options.opt(
        1.0,
        "seconds between status queries of a polled scheduler; for a scheduler that pushes, "
        "how long to wait before reconnecting a dropped change stream",
    )

    def __post_init__(self) -> None:
        if not self.poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0, got {self.poll_interval!r}")


class Scheduler(abc.ABC, Generic[OptsT, ReqT]):
    """Base class of every scheduler. Subclasses set the class attributes and implement the
    abstract methods; everything else has a sensible default.

    Built by a factory `create_scheduler(session_name, **kwargs)` (TorchX's signature) that
    passes `settings=` (a mapping, checked here against `Settings`) and may take `state_dir=`
    (a directory this scheduler may keep files in).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    # Its jobs run on the daemon's own host (local_cwd; local_docker with a local engine): a
    # daemon that takes a shared state dir over from another host records them as lost
    # (daemon.serving). An instance may set it from its settings.
    jobs_live_on_host: bool = False
    # log_iter applies LogQuery.offset itself (it can start reading there); otherwise the
    # daemon reads from the start and skips that many bytes.
    log_seek: ClassVar[bool] = False
    Opts: ClassVar[type]  # per run: the cfg a Run may pass (schedulers.options)
    Settings: ClassVar[type[Settings]] = Settings  # per daemon

    def __init__(self, session_name: str, settings: Mapping[str, Any] | None = None) -> None:
        self.session_name = session_name
        self.settings = resolve_settings(type(self).Settings, settings or {})
        self._tasks: TaskGroupLike | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, tasks: TaskGroupLike) -> None:
        """Called once, before any other call, with the daemon's task group: background tasks
        go there (`spawn`), so that shutdown ends them and none is left unawaited."""
        self._tasks = tasks

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        if self._tasks is None:
            coro.close()
            raise RuntimeError(f"{self.name}: spawn() before start()")
        return self._tasks.create_task(coro, name=f"{self.name}: {name}")

    async def recover(self, jobs: Sequence[tuple[Job, AppStatus]]) -> dict[str, AppStatus]:
        """Called once at daemon start with every job recorded as live, and its last status.
        Returns the statuses to record now, by app id: schedulers whose jobs cannot outlive the
        daemon settle them here (see local_cwd). The default changes nothing: the status feed
        asks the backend as usual."""
        return {}

    async def shutdown(self, grace: float) -> None:
        """The daemon is stopping: end whatever this scheduler runs on this host itself, giving
        it `grace` seconds before it is killed. Jobs that live on a cluster are left running."""

    async def aclose(self) -> None:
        """Releases clients and connections. Safe to call twice; never raises."""

    def backend_calls(self) -> dict[str, int]:
        """Calls made to the backend so far, by kind (`squeue`, `sbatch` ...): the counter that
        shows what the status cache saves. Empty for schedulers that do not count."""
        return {}

    async def readiness(self) -> str:
        """Why this scheduler cannot run jobs now, in one line ("the Docker engine at ... does
        not answer", "no cluster configured: ..."), or "" when it can as far as a quick look
        tells: whether its backend is there (a ping, its configuration, its commands), never a
        submission. The daemon shows it in Schedulers, bounding it to a few seconds; it is not
        asked before a Run, which finds out for itself."""
        return ""

    # -- options ----------------------------------------------------------------------------

    def run_opts(self) -> list[RunOpt]:
        return options.run_opts(self.Opts)

    # -- submission -------------------------------------------------------------------------

    async def submit_dryrun(
        self,
        app: AppDef,
        cfg: Mapping[str, CfgValue],
        ctx: SubmitContext,
        *,
        build_workspace: bool = False,
    ) -> DryRunInfo[ReqT]:
        """Checks cfg against the options and builds the native request; submits nothing.
        With `ctx.workspace`, `prepare_workspace` runs first, so the request runs the
        workspace: with `build_workspace` (Run) it builds or copies it, else (DryRun) it only
        says what it would do, in `DryRunInfo.workspace`.

        Raises InvalidArgument for a bad option or an app this scheduler cannot run.
        """
        opts: OptsT = options.resolve(self.Opts, cfg)
        said = ""
        if ctx.workspace:
            app, said = await self.prepare_workspace(app, opts, ctx, dryrun=not build_workspace)
        info = await self._submit_dryrun(app, opts, ctx)
        info.workspace = said
        return info

    async def prepare_workspace(
        self, app: AppDef, opts: OptsT, ctx: SubmitContext, *, dryrun: bool
    ) -> tuple[AppDef, str]:
        """Makes `ctx.workspace` what the app runs (TorchX's WorkspaceMixin): returns the app
        to submit (an image replaced by one built from the workspace, say) and one line saying
        what was done, or with `dryrun` what would be done, while doing nothing that lasts.
        Called by submit_dryrun only when there is a workspace. Schedulers that support
        workspaces override it and claim `capabilities.workspace`; this default ignores it.
        Raises InvalidArgument (field `workspace`) for a workspace it cannot use."""
        return app, f"workspace ignored: {self.name} has no workspace support"

    @abc.abstractmethod
    async def _submit_dryrun(
        self, app: AppDef, opts: OptsT, ctx: SubmitContext
    ) -> DryRunInfo[ReqT]: ...

    @abc.abstractmethod
    async def schedule(self, dryrun: DryRunInfo[ReqT]) -> Submitted:
        """Submits the request. On failure nothing is left running."""

    # -- observation ------------------------------------------------------------------------

    @abc.abstractmethod
    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        """The status of each job, by app id, with per-replica detail, from as few backend
        queries as the backend allows (one squeue per cluster, not one per job).

        A job's value is None when the backend does not know it, NoAnswer when it could not be
        asked; a job left out counts as NoAnswer. Raises BackendUnavailable when no job could
        be asked at all.
        """

    def changes(self) -> AsyncGenerator[Change | Subscribed, None]:
        """Status changes as the backend pushes them, for schedulers that can push (override
        it, and the daemon stops polling). The iterator yields SUBSCRIBED first, once it is
        subscribed, then a Change whenever a job's status changes; changes of jobs the daemon
        does not track are ignored. The daemon applies each Change as newer than any answer
        `describe_many` gave before it, so a status is read as late as the backend allows (as
        it is yielded, not when the change was queued: a queued PENDING yielded after the job
        was described RUNNING would take it back). It ends, or raises BackendUnavailable,
        when the stream drops; the daemon opens a new one after `settings.poll_interval`."""
        raise Unsupported(f"{self.name} cannot push status changes")

    @classmethod
    def pushes(cls) -> bool:
        """Whether status is pushed (`changes` is implemented) rather than polled."""
        return cls.changes is not Scheduler.changes

    async def list(self) -> list[AppStatus]:
        """Jobs the backend knows of (each with its app_id), including ones txd did not launch.
        Raises Unsupported unless `capabilities.list`."""
        raise Unsupported(f"{self.name} cannot list jobs")

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        """Raw log bytes of replica k of `role`, in chunks.

        1. Bytes arrive exactly as written: no decoding, `\\r` and very long lines kept.
        2. With `query.regex`, only whole matching lines are sent (a final line without `\\n` is
           tested once the job is over). A line of any length is tested whole where the
           pattern's reach is bounded (txd.schedulers.longlines); one dropped without that
           certainty is passed to `query.on_long_line`. logfiles.selected does all of this.
        3. With `query.follow`, the iterator ends only when the job is terminal and every byte
           was sent; otherwise it ends at the current end of the log. `ended()` returns once
           the daemon knows the job is terminal: the scheduler keeps no status of its own.
        4. `since`/`until` select lines by when they were written, where the scheduler knows it
           (Capabilities.log_since_until); otherwise they raise Unsupported.
        5. Each call is independent; a slow consumer slows only its own iterator.
        6. With `query.tail`, the daemon keeps only the last `tail` lines of what is sent (then,
           following, all that comes after them), so the scheduler may skip earlier bytes, as
           long as it starts at a line's start at or before those lines (logfiles reads from
           the file's end back). Ignoring the hint is correct, only slower.
        7. An empty chunk means "caught up with everything written so far" (optional; the
           daemon sends no empty chunk on). A follow with a tail shows its lines at the first
           one, or else only when the log ends.
        8. `query.offset` (a resumed read) is only set for a scheduler whose `log_seek` is set:
           it skips exactly that many bytes of what it would send. For any other the daemon
           reads from the start and skips, so a second read of an ended job's log must give
           the same bytes.
        Raises NotFound for an unknown role or replica, Unsupported if there are no logs.
        """
        raise Unsupported(f"{self.name} does not provide logs")

    # -- control ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def cancel(self, job: Job) -> None:
        """Requests cancellation and returns without waiting for it. Idempotent: a no-op for a
        job that has ended or that the backend no longer knows."""

    async def delete(self, job: Job) -> None:
        """Cancels the job if live and removes what the backend keeps of it (definitions, logs).
        Idempotent. The default only cancels."""
        await self.cancel(job)


# -- helpers shared by schedulers ------------------------------------------------------------

SettingsT = TypeVar("SettingsT", bound=Settings)


def resolve_settings(cls: type[SettingsT], raw: Mapping[str, Any]) -> SettingsT:
    """`raw` (from TOML or `--set`: typed values or strings) checked against the settings
    dataclass. Raises InvalidArgument naming the key for an unknown key or a bad value."""
    from txd.cfgvalue import to_cfg_value
    from txd.schedulers.errors import InvalidArgument

    cfg = {}
    for key, value in raw.items():
        try:
            cfg[key] = to_cfg_value(value)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(key, str(e)) from None
    try:
        return options.resolve(cls, cfg)
    except InvalidArgument as e:
        raise InvalidArgument(e.field.removeprefix("cfg."), e.reason) from None
    except ValueError as e:  # __post_init__'s checks
        raise InvalidArgument(", ".join(raw) or "settings", str(e)) from None


_ID_FIRST = "bcdfghjklmnpqrstvwxz"
_ID_REST = _ID_FIRST + "012345679"


def make_unique(name: str, size: int = 12) -> str:
    """`name-<random suffix>`, as TorchX: the suffix starts with a consonant and has no vowel."""
    import secrets

    suffix = secrets.choice(_ID_FIRST) + "".join(secrets.choice(_ID_REST) for _ in range(size - 1))
    return f"{name}-{suffix}" if name else suffix


@dataclass(frozen=True)
class Macros:
    """Values of the AppDef macros for one replica."""

    img_root: str
    app_id: str
    replica_id: str
    rank0_env: str

    def substitute(self, text: str) -> str:
        # safe_substitute: unknown ${x} stay as they are, $$ becomes $.
        return string.Template(text).safe_substitute(
            img_root=self.img_root,
            app_id=self.app_id,
            replica_id=self.replica_id,
            rank0_env=self.rank0_env,
        )

    def apply(self, role: Role) -> Role:
        """A copy of role with args, env values and metadata values substituted."""
        out = Role()
        out.CopyFrom(role)
        del out.args[:]
        out.args.extend(self.substitute(a) for a in role.args)
        for key, value in role.env.items():
            out.env[key] = self.substitute(value)
        for key, value in role.metadata.items():
            out.metadata[key] = self.substitute(value)
        return out


def num_replicas(role: Role) -> int:
    return role.num_replicas if role.HasField("num_replicas") else 1


def compile_regex(pattern: str) -> re.Pattern[bytes] | None:
    return re.compile(pattern.encode()) if pattern else None


async def gather_limited(
    calls: Sequence[Callable[[], Awaitable[Any]]], limit: int
) -> list[Any | BaseException]:
    """Runs the calls with at most `limit` at once; each result is its value or its exception
    (a backend queried per job must not get a thousand requests at once)."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
