"""aws_batch: an app as an AWS Batch job (aioboto3), polled in batches of 100.

The request (a job definition, then the job) is built by txd.schedulers.aws.batch_request and
its status read by txd.schedulers.aws.batch_status. App ids are `<queue>:<job name>`, as
TorchX's; the Batch job id, the job definition's ARN and the app's shape are kept with the job
(`native`), so no call looks a job up by name.

Status is polled: one describe_jobs per 100 live jobs per poll interval, whatever the number of
jobs and clients (the daemon's feed calls describe_many once per interval with every live job).
A multi-node job's nodes are described (`<id>#<node>`, also 100 a call) once, when the job has
ended, for their own states and exit codes. Throttling is retried with backoff by aws.client; jobs
of a batch that still could not be described get NoAnswer (the daemon keeps their last status,
marked stale), never a state. A job txd terminated is CANCELLED (see aws.batch_status).

Logs come from CloudWatch Logs (`/aws/batch/job`), the stream of each node as describe_jobs
names it once the node runs (txd.schedulers.aws.cloudwatch). The AWS account is the daemon's:
region, profile and endpoint_url settings, credentials from txd's environment.
"""

from __future__ import annotations

import asyncio
import getpass
import time
import typing
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from txd.schedulers.api import (
    Described,
    DryRunInfo,
    Ended,
    Job,
    LogQuery,
    NoAnswer,
    Scheduler,
    SubmitContext,
    Submitted,
)
from txd.schedulers.aws import batch_request as request
from txd.schedulers.aws import batch_status as status
from txd.schedulers.aws import cloudwatch
from txd.schedulers.aws.client import Aws, AwsSettings
from txd.schedulers.errors import BackendUnavailable, NotFound, Unsupported
from txd.schedulers.workspace import images
from txd.v1 import AppState, Stream
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import Capabilities

NAME = request.NAME
DESCRIBE_BATCH = 100  # ids per describe_jobs: Batch's maximum
DESCRIBES_AT_ONCE = 4  # describe_jobs calls in flight for one poll
# A job submitted this recently that describe_jobs does not return yet is not "unknown" yet.
VISIBLE_WITHIN = 60.0


@dataclass
class BatchSettings(AwsSettings):
    docker_host: str = images.docker_host_setting()


def _chunks(items: Sequence[str], size: int = DESCRIBE_BATCH) -> list[list[str]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class AwsBatchScheduler(Scheduler[request.BatchOpts, request.BatchRequest]):
    name = NAME
    description = "AWS Batch jobs (container or multi-node parallel), logs from CloudWatch"
    capabilities = Capabilities(
        logs=True,
        log_follow=True,
        log_since_until=True,
        cancel=True,
        delete=True,
        list=True,
        describe=True,
        distributed=True,
        mounts=True,
        retries=True,
        workspace=True,
    )
    Opts: typing.ClassVar[type] = request.BatchOpts
    Settings = BatchSettings

    def __init__(self, session_name: str, settings: Mapping[str, Any] | None = None) -> None:
        super().__init__(session_name, settings)
        self.aws = Aws(typing.cast(BatchSettings, self.settings), NAME)
        self._images = images.Builder(typing.cast(BatchSettings, self.settings).docker_host)

    # -- submission -------------------------------------------------------------------------

    async def _submit_dryrun(
        self, app: AppDef, opts: request.BatchOpts, ctx: SubmitContext
    ) -> DryRunInfo[request.BatchRequest]:
        req = request.build(app, opts, session=self.session_name, user=getpass.getuser())
        return DryRunInfo(app=app, request=req, opts=opts, render=req.render)

    async def prepare_workspace(
        self, app: AppDef, opts: request.BatchOpts, ctx: SubmitContext, *, dryrun: bool
    ) -> tuple[AppDef, str]:
        """Role 0 runs an image built FROM its own with the workspace in it, on the Docker
        engine of the `docker_host` setting, pushed to `image_repo` for Batch's hosts to pull
        (without image_repo it stays on that engine)."""
        return await self._images.prepare_app(
            app, ctx.workspace, image_repo=opts.image_repo, dryrun=dryrun
        )

    async def schedule(self, dryrun: DryRunInfo[request.BatchRequest]) -> Submitted:
        req = dryrun.request
        batch = await self.aws.client("batch")
        registered = await self.aws.call(
            batch, "register_job_definition", field="app", **req.job_definition
        )
        arn = registered["jobDefinitionArn"]
        try:
            submitted = await self.aws.call(
                batch, "submit_job", field="cfg.queue", **{**req.submit, "jobDefinition": arn}
            )
        except BaseException:
            # Nothing is left behind: the definition goes with the failed submission.
            await self._deregister(arn)
            raise
        native = {
            "job_id": submitted["jobId"],
            "job_definition": arn,
            "queue": req.submit["jobQueue"],
            "name": req.submit["jobName"],
            "roles": [[r, n] for r, _, n in req.role_nodes],
            "multinode": req.job_definition["type"] == request.MULTINODE,
            "submitted_at": time.time(),
        }
        return Submitted(req.app_id, native)

    async def _deregister(self, arn: str) -> None:
        try:
            batch = await self.aws.client("batch")
            await self.aws.call(batch, "deregister_job_definition", jobDefinition=arn)
        except (NotFound, BackendUnavailable):
            pass

    # -- observation ------------------------------------------------------------------------

    async def _describe(self, ids: Sequence[str]) -> dict[str, Any]:
        """describe_jobs of `ids`, 100 a call, a few calls at once: {id: job} of those Batch
        returned, and for a batch that failed, {id: the error}."""
        batch = await self.aws.client("batch")
        chunks = _chunks(ids)
        gate = asyncio.Semaphore(DESCRIBES_AT_ONCE)

        async def one(chunk: list[str]) -> dict[str, Any]:
            async with gate:
                try:
                    found = await self.aws.call(batch, "describe_jobs", jobs=chunk)
                except BackendUnavailable as e:
                    return dict.fromkeys(chunk, e)
            out: dict[str, Any] = {}
            for job in found.get("jobs") or []:
                out[str(job.get("jobId"))] = job
            return out

        out: dict[str, Any] = {}
        for part in await asyncio.gather(*(one(c) for c in chunks)):
            out.update(part)
        return out

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        ids = [str(j.native["job_id"]) for j in jobs if j.native.get("job_id")]
        found = await self._describe(ids) if ids else {}
        failed = [v for v in found.values() if isinstance(v, BackendUnavailable)]
        if ids and len(failed) == len(ids):  # no batch could be asked
            raise failed[0]
        ended_mnp = [
            (jid, int((job.get("nodeProperties") or {}).get("numNodes", 0)))
            for jid, job in found.items()
            if isinstance(job, dict)
            and job.get("nodeProperties")
            and status.STATES.get(str(job.get("status"))) in _TERMINAL
        ]
        nodes = await self._nodes(ended_mnp)
        out: dict[str, Described] = {}
        now = time.time()
        for j in jobs:
            jid = str(j.native.get("job_id", ""))
            value = found.get(jid)
            if not jid:
                out[j.app_id] = None  # txd never made it
            elif isinstance(value, BackendUnavailable):
                out[j.app_id] = NoAnswer(str(value))
            elif value is None:
                young = now - float(j.native.get("submitted_at", 0)) < VISIBLE_WITHIN
                shown = f"{NAME}: Batch does not show job {jid} yet"
                out[j.app_id] = NoAnswer(shown) if young else None
            else:
                st = status.app_status(value, nodes.get(jid))
                st.app_id = j.app_id
                out[j.app_id] = st
        return out

    async def _nodes(self, jobs: Sequence[tuple[str, int]]) -> dict[str, dict[int, Any]]:
        """The node descriptions (`<id>#<i>`) of ended multi-node jobs, by job id and node
        index; a job whose nodes could not be described gets none (its own state is used)."""
        ids = [f"{jid}#{i}" for jid, n in jobs for i in range(n)]
        if not ids:
            return {}
        found = await self._describe(ids)
        out: dict[str, dict[int, Any]] = {}
        for node_id, node in found.items():
            if isinstance(node, dict):
                jid, _, index = node_id.partition("#")
                if index.isdigit():
                    out.setdefault(jid, {})[int(index)] = node
        return out

    async def list(self) -> list[AppStatus]:
        batch = await self.aws.client("batch")
        queues = await self.aws.call(batch, "describe_job_queues")
        ids: list[str] = []
        for q in queues.get("jobQueues") or []:
            token: str | None = None
            while True:
                kw: dict[str, Any] = {"nextToken": token} if token else {}
                # A filter lists jobs of every status (without one, only RUNNING jobs).
                page = await self.aws.call(
                    batch,
                    "list_jobs",
                    jobQueue=q["jobQueueName"],
                    filters=[{"name": "AFTER_CREATED_AT", "values": ["0"]}],
                    **kw,
                )
                ids.extend(str(s["jobId"]) for s in page.get("jobSummaryList") or [])
                token = page.get("nextToken")
                if not token:
                    break
        found = await self._describe(list(dict.fromkeys(ids)))
        for value in found.values():
            if isinstance(value, BackendUnavailable):
                raise value
        return [
            status.app_status(job)
            for job in found.values()
            if isinstance(job, dict) and (job.get("tags") or {}).get(request.TAG_SCHEDULER) == NAME
        ]

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        if query.stream != Stream.COMBINED:
            raise Unsupported(f"{NAME} keeps stdout and stderr in one CloudWatch stream")
        index = _node_index(job, role, k)
        jid = str(job.native["job_id"])
        multinode = job.native.get("multinode")
        if multinode is None:  # recorded before txd made every job multi-node by default
            multinode = sum(int(n) for _, n in job.native.get("roles", [])) > 1

        async def stream_name() -> str:
            """The node's log stream as describe_jobs names it ("" until it runs)."""
            ids = [f"{jid}#{index}", jid] if multinode else [jid]
            found = await self._describe(ids)
            for one in ids:  # moto describes no node: the job's own stream then
                described = found.get(one)
                if isinstance(described, BackendUnavailable):
                    raise described
                if described:
                    return _log_stream(described)
            return ""

        group, poll = request.LOG_GROUP, self.settings.poll_interval
        return cloudwatch.read_stream(self.aws, group, stream_name, query, ended, poll=poll)

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        jid = job.native.get("job_id")
        if not jid:
            return
        found = (await self._describe([str(jid)])).get(str(jid))
        if isinstance(found, BackendUnavailable):
            raise found
        if not found or status.STATES.get(str(found.get("status"))) in _TERMINAL:
            return  # ended, or forgotten: nothing to cancel (and its reason stays its own)
        batch = await self.aws.client("batch")
        # terminate (not cancel_job): it also ends a job that is already running.
        await self.aws.call(batch, "terminate_job", jobId=jid, reason=status.CANCEL_REASON)

    async def delete(self, job: Job) -> None:
        await self.cancel(job)
        if arn := job.native.get("job_definition"):
            await self._deregister(str(arn))

    async def aclose(self) -> None:
        await self.aws.aclose()
        await self._images.aclose()

    async def readiness(self) -> str:
        return await self.aws.readiness()

    def backend_calls(self) -> dict[str, int]:
        calls = dict(self.aws.calls)
        calls.update(self._images.calls)
        return calls


_TERMINAL = (AppState.SUCCEEDED, AppState.FAILED)


def _node_index(job: Job, role: str, k: int) -> int:
    index = 0
    for name, n in job.native.get("roles", []):
        if name == role:
            if 0 <= k < int(n):
                return index + k
            break
        index += int(n)
    raise NotFound(f"{job.app_id} has no replica {role}/{k}")


def _log_stream(job: Mapping[str, Any]) -> str:
    name = (job.get("container") or {}).get("logStreamName")
    if not name:
        attempts = job.get("attempts") or []
        if attempts:
            name = (attempts[-1].get("container") or {}).get("logStreamName")
    return str(name or "")


def create_scheduler(session_name: str, **kwargs: Any) -> AwsBatchScheduler:
    return AwsBatchScheduler(session_name, kwargs.get("settings"))
