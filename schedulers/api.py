"""The Scheduler contract: what every backend implements, async throughout.

A scheduler turns a validated AppDef into a native job and reports on it. It knows nothing of
gRPC, the registry or clients; the daemon core owns those. Public methods hold the policy
(option checking, cancel-only-if-live); the `_`-prefixed hooks do the backend part.

Status reaches the daemon in one of two ways:
- push: the scheduler calls `self.notify(app_id)` whenever a job's state may have changed
  (local_cwd learns of every exit at once), and `poll_interval` is None;
- poll: `poll_interval` is set, and the daemon's status cache calls `describe_many` with every
  live job of this scheduler once per interval, however many clients are watching.
"""

from __future__ import annotations

import abc
import asyncio
import datetime as dt
import re
import string
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from txd.schedulers import options
from txd.schedulers.errors import Unsupported
from txd.v1 import TERMINAL_STATES
from txd.v1.app_pb2 import AppDef, AppStatus, Role
from txd.v1.runner_pb2 import Stream
from txd.v1.scheduler_pb2 import Capabilities, CfgValue, RunOpt

OptsT = TypeVar("OptsT")
ReqT = TypeVar("ReqT")

TERMINAL = TERMINAL_STATES


def is_terminal(state: int) -> bool:
    return state in TERMINAL


@dataclass
class SubmitContext:
    """Where a Run comes from: the caller's working directory and environment."""

    cwd: str
    env: dict[str, str]


@dataclass
class DryRunInfo(Generic[ReqT]):
    """A native request, ready for `schedule`, and how to print it.

    `native` is a JSON-able dict the daemon persists with the job and hands back to `reattach`
    after a restart (log paths, job directories ...): whatever the scheduler needs to find the
    job again without its in-memory state.
    """

    app: AppDef
    request: ReqT
    opts: Any
    native: dict[str, Any] = field(default_factory=dict)
    # Builds the printable form; only DryRun pays for it.
    render: Callable[[], str] = field(default=lambda: "")

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


class Scheduler(abc.ABC, Generic[OptsT, ReqT]):
    """Base class of every scheduler. Subclasses set the class attributes and the hooks.

    Contracts that hold for every method taking an app_id: it may be called for any job this
    scheduler ever returned from `schedule` (after a daemon restart, `reattach` comes first).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    Opts: ClassVar[type]
    # None: the scheduler pushes state changes through notify(); otherwise seconds between polls
    # (the default; `txd --poll-interval NAME=SECONDS` sets it per daemon).
    poll_interval: float | None = None

    def __init__(self, session_name: str) -> None:
        self.session_name = session_name
        self._listeners: list[Callable[[str], None]] = []

    # -- status push ------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Registers a callback that receives an app_id whenever its state may have changed."""
        self._listeners.append(listener)

    def notify(self, app_id: str) -> None:
        for listener in self._listeners:
            listener(app_id)

    def backend_calls(self) -> dict[str, int]:
        """Calls made to the backend so far, by kind (`squeue`, `sbatch` ...): the counter that
        shows what the status cache saves. Empty for schedulers that do not count."""
        return {}

    # -- options ----------------------------------------------------------------------------

    def run_opts(self) -> list[RunOpt]:
        return options.run_opts(self.Opts)

    # -- submission -------------------------------------------------------------------------

    async def submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgValue], ctx: SubmitContext
    ) -> DryRunInfo[ReqT]:
        """Checks cfg against the options and builds the native request; submits nothing.

        Raises InvalidArgument for a bad option or an app this scheduler cannot run.
        """
        opts: OptsT = options.resolve(self.Opts, cfg)
        return await self._submit_dryrun(app, opts, ctx)

    @abc.abstractmethod
    async def _submit_dryrun(
        self, app: AppDef, opts: OptsT, ctx: SubmitContext
    ) -> DryRunInfo[ReqT]: ...

    @abc.abstractmethod
    async def schedule(self, dryrun: DryRunInfo[ReqT]) -> str:
        """Submits the request and returns the app_id. On failure nothing is left running."""

    # -- observation ------------------------------------------------------------------------

    @abc.abstractmethod
    async def describe(self, app_id: str) -> AppStatus | None:
        """The job's status with per-replica detail, or None if the backend does not know it."""

    async def describe_many(self, app_ids: Iterable[str]) -> dict[str, AppStatus | None]:
        """Statuses of many jobs; polling schedulers override it with one batched query."""
        ids = list(app_ids)
        found = await asyncio.gather(*(self.describe(i) for i in ids))
        return dict(zip(ids, found, strict=True))

    async def list(self) -> list[AppStatus]:
        """Jobs the backend knows of. The daemon lists its registry; this is for backends whose
        jobs may have been submitted by other tools."""
        raise Unsupported(f"{self.name} cannot list jobs")

    def log_iter(self, app_id: str, role: str, k: int, query: LogQuery) -> AsyncIterator[bytes]:
        """Raw log bytes of replica k of `role`, in chunks.

        1. Bytes arrive exactly as written: no decoding, `\\r` and very long lines kept.
        2. With `query.regex`, only whole matching lines are sent (a final line without `\\n` is
           tested once the job is over).
        3. With `query.follow`, the iterator ends only when the job is terminal and every byte
           was sent; otherwise it ends at the current end of the log.
        4. `since`/`until` select lines by when they were written, where the scheduler knows it
           (Capabilities.log_since_until); otherwise they are ignored.
        5. Each call is independent; a slow consumer slows only its own iterator.
        Raises NotFound for an unknown role or replica, Unsupported if there are no logs.
        """
        raise Unsupported(f"{self.name} does not provide logs")

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, app_id: str) -> None:
        """Requests cancellation and returns without waiting for it.

        A no-op for an unknown or terminal job."""
        status = await self.describe(app_id)
        if status is not None and not is_terminal(status.state):
            await self._cancel_existing(app_id)

    @abc.abstractmethod
    async def _cancel_existing(self, app_id: str) -> None: ...

    async def delete(self, app_id: str) -> None:
        """Cancels the job if live and removes what the backend keeps of it (definitions, logs)."""
        await self.cancel(app_id)

    async def reattach(self, app_id: str, native: dict[str, Any], status: AppStatus) -> AppStatus:
        """Called once per job after a daemon restart, before any other call for that job.

        `status` is the last one recorded. Returns the status to record now: schedulers whose
        jobs cannot outlive the daemon settle them here (see local_cwd).
        """
        return status

    async def shutdown(self, grace: float) -> None:
        """The daemon is stopping: end whatever this scheduler runs on this host, giving it
        `grace` seconds to exit before it is killed."""

    async def close(self) -> None:
        """Releases clients and connections. Safe to call twice; never raises."""


# -- helpers shared by schedulers ------------------------------------------------------------

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
