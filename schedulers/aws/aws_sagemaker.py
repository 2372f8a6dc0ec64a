"""aws_sagemaker: an app of one role as a SageMaker training job (aioboto3).

The request is built by txd.schedulers.aws.sagemaker_framework in framework mode (the default:
TorchX's request, the SDK's; schedule first packs the source directory and uploads it to S3,
learning the account from STS and creating the SDK's default bucket when the request needs
them) or by txd.schedulers.aws.sagemaker_request in container mode (the role's command in its
image); DryRun prints it as JSON and asks nothing of AWS. The status is read by
txd.schedulers.aws.sagemaker_status. The app id is the training job's name.

SageMaker has no batch describe: a job's status costs one DescribeTrainingJob. So each poll
describes at most `describe_budget` jobs, the least recently described first
(txd.schedulers.aws.rotation: every job is reached within ceil(jobs / budget) polls, a new one at
once), at most `describe_concurrency` at a time; a job not described in a poll keeps the status
this scheduler last described (NoAnswer before it has one, as after a daemon restart). 1,000
live jobs never make 1,000 calls at once, nor more than the budget per poll interval.

Logs are CloudWatch Logs' `/aws/sagemaker/TrainingJobs`, one stream per instance,
`<job>/algo-<i>-<epoch seconds>` (found by prefix with describe_log_streams), read by
txd.schedulers.aws.cloudwatch. cancel is StopTrainingJob; list finds txd's jobs by their
`txd.dev/scheduler` tag with one paged Search. Region, profile and endpoint are the daemon's
settings (AwsSettings), credentials its environment's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import typing
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
    Scheduler,
    SubmitContext,
    Submitted,
    gather_limited,
)
from txd.schedulers.aws.client import Aws, AwsSettings
from txd.schedulers.aws.cloudwatch import read_stream
from txd.schedulers.aws.rotation import Rotation
from txd.schedulers.aws.sagemaker_framework import (
    ACCOUNT,
    REGION,
    default_bucket,
    framework_job,
)
from txd.schedulers.aws.sagemaker_request import (
    ROLE_TAG,
    SCHEDULER_TAG,
    SageMakerOpts,
    TrainingJob,
    tag_map,
    training_job,
)
from txd.schedulers.aws.sagemaker_source import LinkCycle, SourceUpload, pack
from txd.schedulers.aws.sagemaker_status import app_status
from txd.schedulers.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unsupported,
)
from txd.schedulers.options import opt
from txd.schedulers.workspace import images
from txd.v1 import Stream
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import Capabilities

log = logging.getLogger(__name__)

NAME = "aws_sagemaker"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
SEARCH_PAGE = 100  # Search's MaxResults limit
SEARCH_PAGES = 1000  # a bound on list's pages (100,000 jobs)
MODES = ("framework", "container")


@dataclass
class SageMakerSettings(AwsSettings):
    describe_budget: int = opt(
        20, "DescribeTrainingJob calls per poll at most; other live jobs wait for a later poll"
    )
    describe_concurrency: int = opt(4, "DescribeTrainingJob calls in flight at once at most")
    docker_host: str = images.docker_host_setting()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.describe_budget < 1:
            raise ValueError(f"describe_budget must be >= 1, got {self.describe_budget}")
        if self.describe_concurrency < 1:
            raise ValueError(f"describe_concurrency must be >= 1, got {self.describe_concurrency}")


class SageMakerScheduler(Scheduler[SageMakerOpts, TrainingJob]):
    name = NAME
    description = "AWS SageMaker: one role as a training job, polled within a describe budget"
    capabilities = Capabilities(
        logs=True,
        log_follow=True,
        log_since_until=True,
        cancel=True,
        list=True,
        describe=True,
        distributed=True,
        retries=True,
        workspace=True,
    )
    Opts: ClassVar[type] = SageMakerOpts
    Settings = SageMakerSettings

    def __init__(self, session_name: str, settings: Mapping[str, Any] | None = None) -> None:
        super().__init__(session_name, settings)
        s = self._settings
        self.aws = Aws(s, self.name)
        self._rotation = Rotation(s.describe_budget)
        self._last: dict[str, AppStatus] = {}  # app id -> the status last described
        self._images = images.Builder(s.docker_host)

    @property
    def _settings(self) -> SageMakerSettings:
        return typing.cast(SageMakerSettings, self.settings)

    async def _client(self) -> Any:
        return await self.aws.client("sagemaker")

    # -- submission -------------------------------------------------------------------------

    async def submit_dryrun(
        self,
        app: AppDef,
        cfg: Mapping[str, Any],
        ctx: SubmitContext,
        *,
        build_workspace: bool = False,
    ) -> DryRunInfo[TrainingJob]:
        """As every scheduler's; a dry run in framework mode also says what would be uploaded."""
        info = await super().submit_dryrun(app, cfg, ctx, build_workspace=build_workspace)
        upload = info.request.upload
        if upload is not None and not build_workspace:
            try:
                line = await asyncio.to_thread(upload.describe)
            except LinkCycle as e:
                field = "cfg.source_dir" if info.opts.source_dir else "workspace"
                raise InvalidArgument(field, f"cannot pack it: {e}") from None
            info.workspace = "\n".join(filter(None, [info.workspace, line]))
        return info

    async def _submit_dryrun(
        self, app: AppDef, opts: SageMakerOpts, ctx: SubmitContext
    ) -> DryRunInfo[TrainingJob]:
        if opts.mode not in MODES:
            raise InvalidArgument(
                "cfg.mode", f"expected one of {', '.join(MODES)}, got {opts.mode!r}"
            )
        if opts.mode == "container":
            job = training_job(app, opts, session=self.session_name)
        else:
            region = self.aws.region() or REGION  # a run without one is refused (schedule)
            job = await asyncio.to_thread(
                framework_job, app, opts, ctx, session=self.session_name, region=region
            )
        return DryRunInfo(app=app, request=job, opts=opts, render=job.render)

    async def prepare_workspace(
        self, app: AppDef, opts: SageMakerOpts, ctx: SubmitContext, *, dryrun: bool
    ) -> tuple[AppDef, str]:
        """The role runs an image built FROM its own with the workspace in it, pushed to
        `image_repo` (SageMaker pulls from a registry, ECR, never from this host's engine).
        In framework mode the workspace is the uploaded source directory (unless source_dir
        names another), and an image is built only when image_repo is set (as TorchX)."""
        if opts.mode == "framework" and not opts.image_repo:
            if opts.source_dir:
                return app, f"workspace not used: source_dir ({opts.source_dir}) is the job's code"
            return app, f"the job's source directory: {ctx.workspace}"
        if not opts.image_repo:
            raise InvalidArgument(
                "cfg.image_repo",
                "required with a workspace: SageMaker pulls the image from a registry (ECR)",
            )
        return await self._images.prepare_app(
            app, ctx.workspace, image_repo=opts.image_repo, dryrun=dryrun
        )

    async def schedule(self, dryrun: DryRunInfo[TrainingJob]) -> Submitted:
        job = dryrun.request
        request, upload = job.request, job.upload
        text = json.dumps(request)
        if REGION in text:
            raise FailedPrecondition(
                f"{self.name}: no AWS region (framework mode names it in the request): set "
                f"[schedulers.{self.name}] region, or AWS_REGION in txd's environment"
            )
        if ACCOUNT in text or (upload and ACCOUNT in upload.uri):
            account = await self._account()
            request = json.loads(text.replace(ACCOUNT, account))
            upload = upload.with_text(ACCOUNT, account) if upload else None
            region = self.aws.region()
            if not dryrun.opts.output_path or (upload and upload.default_bucket):
                await self._ensure_bucket(default_bucket(region, account), region, account)
        if upload is not None:
            await self._upload(upload, dryrun.opts)
        await self.aws.call(await self._client(), "create_training_job", **request)
        native = {"name": job.name, "role": job.role, "instances": job.instances}
        return Submitted(job.name, native)

    async def _account(self) -> str:
        sts = await self.aws.client("sts")
        answer = await self.aws.call(sts, "get_caller_identity")
        return str(answer["Account"])

    async def _ensure_bucket(self, bucket: str, region: str, account: str) -> None:
        """The SDK's default bucket, created when missing (Session.default_bucket)."""
        s3 = await self.aws.client("s3")
        try:
            await self.aws.call(s3, "head_bucket", Bucket=bucket, ExpectedBucketOwner=account)
            return
        except NotFound:
            pass
        kw: dict[str, Any] = {}
        if region != "us-east-1":
            kw["CreateBucketConfiguration"] = {"LocationConstraint": region}
        await self.aws.call(s3, "create_bucket", Bucket=bucket, **kw)

    async def _upload(self, upload: SourceUpload, opts: SageMakerOpts) -> None:
        """Packs the source directory and puts it at upload.uri, as the SDK does."""
        if why := upload.missing_script():
            raise InvalidArgument("app.roles[0].args[0]", why)
        fd, path = tempfile.mkstemp(prefix="txd-sourcedir-", suffix=".tar.gz")
        os.close(fd)
        field = "cfg.code_location" if opts.code_location else "cfg.output_path"
        try:
            await asyncio.to_thread(pack, upload, path)
            s3 = await self.aws.client("s3")
            try:
                await self.aws.call(
                    s3,
                    "upload_file",
                    field=field,
                    Filename=path,
                    Bucket=upload.bucket,
                    Key=upload.key,
                    ExtraArgs=dict(upload.extra),
                )
            except NotFound as e:
                raise InvalidArgument(
                    field, f"cannot upload the code to {upload.uri}: {e}"
                ) from None
        except (OSError, LinkCycle) as e:
            raise InvalidArgument(
                "cfg.source_dir" if opts.source_dir else "workspace",
                f"cannot pack {upload.source_dir}: {e}",
            ) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)

    # -- observation ------------------------------------------------------------------------

    async def describe_many(self, jobs: Sequence[Job]) -> dict[str, Described]:
        """At most describe_budget DescribeTrainingJob calls, describe_concurrency at a time
        (module docstring). Raises BackendUnavailable when none of them was answered."""
        by_id = {job.app_id: job for job in jobs}
        self._last = {a: s for a, s in self._last.items() if a in by_id}
        chosen = self._rotation.pick(list(by_id))
        client = await self._client()
        results = await gather_limited(
            [lambda a=a: self._describe(client, by_id[a]) for a in chosen],  # type: ignore[misc]
            self._settings.describe_concurrency,
        )
        out: dict[str, Described] = {}
        failures: list[BackendUnavailable] = []
        for app_id, result in zip(chosen, results, strict=True):
            if isinstance(result, BackendUnavailable):
                failures.append(result)
                out[app_id] = NoAnswer(str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                out[app_id] = result
                if result is not None:
                    self._last[app_id] = result
        if chosen and len(failures) == len(chosen):
            raise failures[0]
        waiting = len(by_id) - len(chosen)
        for app_id in by_id:
            if app_id not in out:
                out[app_id] = self._last.get(app_id) or NoAnswer(
                    f"not described yet: at most {self._settings.describe_budget} describes per "
                    f"poll, and {waiting} other live jobs are waiting their turn"
                )
        return out

    async def _describe(self, client: Any, job: Job) -> AppStatus | None:
        try:
            answer = await self.aws.call(
                client, "describe_training_job", TrainingJobName=job.app_id
            )
        except (InvalidArgument, NotFound):
            # SageMaker answers ValidationException for a name it does not know.
            return None
        role = str(job.native.get("role") or tag_map(answer.get("Tags") or []).get(ROLE_TAG, ""))
        return app_status(answer, role=role or "trainer")

    async def list(self) -> list[AppStatus]:
        """Every training job with txd's scheduler tag, from Search (a page of 100 a call)."""
        client = await self._client()
        expression = {
            "Filters": [{"Name": f"Tags.{SCHEDULER_TAG}", "Operator": "Equals", "Value": NAME}]
        }
        out: list[AppStatus] = []
        token = ""
        for _ in range(SEARCH_PAGES):
            kw = {"NextToken": token} if token else {}
            page = await self.aws.call(
                client,
                "search",
                Resource="TrainingJob",
                SearchExpression=expression,
                MaxResults=SEARCH_PAGE,
                **kw,
            )
            for result in page.get("Results") or []:
                found = result.get("TrainingJob") or {}
                tags = tag_map(found.get("Tags") or [])
                out.append(app_status(found, role=tags.get(ROLE_TAG) or "trainer"))
            token = page.get("NextToken") or ""
            if not token:
                break
        return out

    def log_iter(
        self, job: Job, role: str, k: int, query: LogQuery, ended: Ended
    ) -> AsyncIterator[bytes]:
        """Instance k+1's stream (algo-<k+1>), found by its prefix once SageMaker made it."""
        if role != job.native.get("role") or not 0 <= k < int(job.native.get("instances", 1)):
            raise NotFound(f"{job.app_id} has no replica {role}/{k}")
        if query.stream != Stream.COMBINED:
            raise Unsupported(
                f"{self.name}: CloudWatch keeps a container's stdout and stderr as one stream"
            )
        prefix = f"{job.app_id}/algo-{k + 1}-"

        async def stream_name() -> str:
            client = await self.aws.client("logs")
            try:
                found = await self.aws.call(
                    client,
                    "describe_log_streams",
                    field="logs",
                    logGroupName=LOG_GROUP,
                    logStreamNamePrefix=prefix,
                )
            except NotFound:  # no group yet: no job of this account has logged
                return ""
            streams = found.get("logStreams") or []
            # A restarted instance logs into a new stream: the newest is the current one.
            return (
                str(max(streams, key=lambda s: s.get("creationTime", 0))["logStreamName"])
                if streams
                else ""
            )

        return read_stream(
            self.aws, LOG_GROUP, stream_name, query, ended, poll=self._settings.poll_interval
        )

    # -- control ----------------------------------------------------------------------------

    async def cancel(self, job: Job) -> None:
        """StopTrainingJob. SageMaker refuses it (ValidationException) for a job that has ended
        or that it does not know: that is a no-op here."""
        try:
            await self.aws.call(
                await self._client(), "stop_training_job", TrainingJobName=job.app_id
            )
        except (InvalidArgument, NotFound, FailedPrecondition) as e:
            log.debug("%s: stop %s: %s", self.name, job.app_id, e)

    async def readiness(self) -> str:
        return await self.aws.readiness()

    def backend_calls(self) -> dict[str, int]:
        calls = dict(self.aws.calls)
        calls.update(self._images.calls)
        return calls

    async def aclose(self) -> None:
        await self.aws.aclose()
        await self._images.aclose()


def create_scheduler(session_name: str, **kwargs: Any) -> SageMakerScheduler:
    return SageMakerScheduler(session_name, kwargs.get("settings"))
