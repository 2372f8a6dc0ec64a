"""The base of the HPC schedulers driven by a batch system's commands (slurm, lsf): the commands
run on this host or on login nodes over SSH (hpc.hosts), status comes from one query per login
node per poll, and logs are files the batch system writes, read where they lie (hpc.logs).
(AWS Batch, a service behind an API, is unrelated: aws.aws_batch.)

A subclass writes only what differs: build and submit the request, `_query` (the statuses of
the jobs on one host, from one command), `_log_files` and `cancel`.
"""

from __future__ import annotations

import abc
import logging
import shlex
import shutil
import typing
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from txd.schedulers.api import (
    Described,
    DryRunInfo,
    Ended,
    Job,
    LogQuery,
    NoAnswer,
    OptsT,
    ReqT,
    Scheduler,
    Settings,
    SubmitContext,
    gather_limited,
)
from txd.schedulers.errors import BackendUnavailable, NotFound
from txd.schedulers.hpc.hosts import COMMAND_TIMEOUT, Host, Hosts, SshTarget, target_from_native
from txd.schedulers.hpc.logs import read_files
from txd.schedulers.hpc.precheck import SKIP, Check
from txd.schedulers.options import opt
from txd.v1 import Stream
from txd.v1.app_pb2 import AppDef
from txd.v1.scheduler_pb2 import CfgValue

log = logging.getLogger(__name__)

# Login nodes queried at once in one poll.
HOSTS_AT_ONCE = 8
# How long the readiness probe may take.
PROBE_TIMEOUT = 2.0


@dataclass
class BatchSettings(Settings):
    command_timeout: float = opt(
        COMMAND_TIMEOUT,
        "seconds a scheduler command (squeue, sbatch, bjobs ...) may take; one still running "
        "then is killed and the backend counted as not answering (statuses go stale)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.command_timeout > 0:
            raise ValueError(f"command_timeout must be > 0, got {self.command_timeout!r}")


class _Prechecked(typing.Protocol):
    """What a batch scheduler's options and request carry for its checks before queueing."""

    precheck: bool  # the option: run them
    checks: list[Check] | None  # the request: their results, for a dry run's text


class BatchScheduler(Scheduler[OptsT, ReqT]):
    """A scheduler over Hosts. A job's login node is `native["ssh"]` (hosts.target_to_native;
    None: this host)."""

    Settings = BatchSettings
    # A cheap command that fails when this host cannot reach the batch system (readiness).
    PROBE: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        session_name: str,
        settings: Any = None,
        *,
        hosts: Hosts | None = None,
    ) -> None:
        super().__init__(session_name, settings)
        self.hosts = hosts or Hosts(typing.cast(BatchSettings, self.settings).command_timeout)

    def backend_calls(self) -> dict[str, int]:
        return self.hosts.calls()

    async def readiness(self) -> str:
        """Whether PROBE succeeds on this host (a run that names a login node may work when
        it does not: the message says so)."""
        if not self.PROBE:
            return ""
        host = self.hosts.get(None)
        elsewhere = " (a run may name a login node: -c ssh_host=HOST)"
        if shutil.which(self.PROBE[0]) is None:
            return f"no {self.name} client here: {self.PROBE[0]} is not on txd's PATH{elsewhere}"
        try:
            result = await host.run(self.PROBE, timeout=PROBE_TIMEOUT)
        except BackendUnavailable as e:
            return f"{e}{elsewhere}"
        if result.returncode != 0:
            said = result.error().splitlines()[-1].strip()
            return f"`{shlex.join(self.PROBE)}` on {host.label} failed: {said}{elsewhere}"
        return ""

    async def submit_dryrun(
        self,
        app: AppDef,
        cfg: Mapping[str, CfgValue],
        ctx: SubmitContext,
        *,
        build_workspace: bool = False,
    ) -> DryRunInfo[ReqT]:
        """A dry run (no build_workspace) also runs the checks before queueing, for its text to
        show, or says why it could not (a dry run needs no cluster); a Run's come in
        `schedule`, just before the job is submitted."""
        info = await super().submit_dryrun(app, cfg, ctx, build_workspace=build_workspace)
        if not build_workspace and typing.cast(_Prechecked, info.opts).precheck:
            try:
                checks = await self._precheck(info, dry=True)
            except BackendUnavailable as e:
                checks = [Check("precheck", SKIP, f"not run: {e}")]
            typing.cast(_Prechecked, info.request).checks = checks
        return info

    async def _precheck(self, info: DryRunInfo[ReqT], *, dry: bool) -> list[Check]:
        """The checks before queueing (hpc.precheck), made where the job is submitted; `dry`:
        for a dry run's text, creating nothing."""
        return []

    def host_of(self, job: Job) -> Host:
        return self.hosts.get(target_from_native(job.native.get("ssh")))

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        """One `_query` per login node, at most HOSTS_AT_ONCE at a time. A host that fails
        leaves its jobs NoAnswer (the daemon keeps their last status); when every host failed,
        this raises the first failure."""
        by_target: dict[SshTarget | None, list[Job]] = defaultdict(list)
        for job in jobs:
            by_target[target_from_native(job.native.get("ssh"))].append(job)
        targets = list(by_target)
        results = await gather_limited(
            [
                lambda t=t: self._query(self.hosts.get(t), by_target[t])  # type: ignore[misc]
                for t in targets
            ],
            HOSTS_AT_ONCE,
        )
        out: dict[str, Described] = {}
        failures: list[BackendUnavailable] = []
        for target, result in zip(targets, results, strict=True):
            if isinstance(result, BackendUnavailable):
                failures.append(result)
                out.update((j.app_id, NoAnswer(str(result))) for j in by_target[target])
            elif isinstance(result, BaseException):
                raise result
            else:
                out.update(result)
        if failures and len(failures) == len(targets):
            raise failures[0]
        for e in failures:
            log.warning("%s: status query failed: %s", self.name, e)
        return out

    @abc.abstractmethod
    async def _query(self, host: Host, jobs: list[Job]) -> dict[str, Described]:
        """The statuses of `jobs`, all on `host`, from one backend query (plus whatever settles
        jobs the backend has forgotten; NoAnswer for a job that cannot be settled now). Raises
        BackendUnavailable if the host cannot answer."""

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        out, err = self._log_files(job, role, k)
        if query.stream == Stream.STDOUT:
            paths = [out]
        elif query.stream == Stream.STDERR:
            paths = [err]
        else:  # combined: the two files, interleaved as written when following
            paths = [out, err]
        return read_files(self.host_of(job), paths, query, ended)

    @abc.abstractmethod
    def _log_files(self, job: Job, role: str, k: int) -> tuple[str, str]:
        """The stdout and stderr files of replica k of `role`. Raises NotFound for a replica the
        job does not have, Unsupported when the job keeps no log files."""

    async def aclose(self) -> None:
        await self.hosts.close()


def check_replica(job: Job, replicas: Sequence[tuple[str, int]], role: str, k: int) -> None:
    if (role, k) not in replicas:
        raise NotFound(f"{job.app_id} has no replica {role}/{k}")
