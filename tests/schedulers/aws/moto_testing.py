"""moto's server for the AWS tests (importable as `moto_testing`).

- `Moto`: `moto_server` as a subprocess on 127.0.0.1, stopped by pid. Its environment names the
  tests' Docker engine (DOCKER_HOST) and host networking (MOTO_DOCKER_NETWORK_MODE=host), so
  Batch jobs really run as containers there (moto's "docker mode"); a job definition's image
  is a local image tag (docker_testing.BUSYBOX, PYTHON). `reset()` forgets every resource.
- `aws_env()`: the fake credentials and region every client of moto (txd too) uses.
- `client(moto, service)`: an aioboto3 client on moto, for the tests' own calls.
- `make_queue(moto)`: an UNMANAGED compute environment and a job queue on it.
- `put_lines(moto, group, stream, lines)`: writes log events, as AWS's log agent would.
- `make_batch_daemon(endpoint)`: a txd whose aws_batch talks to moto (or a proxy before it).

moto 5.2.5's gaps (tests/schedulers/aws document where each one is worked around): all nodes of a
multi-node job log into one stream, AWS_BATCH_JOB_NODE_INDEX and friends are not set (the server
is started through moto_batch_nodes, which sets them as Batch does), logs reach CloudWatch
only after a container exits (with each line stripped of surrounding blanks), retryStrategy
is ignored, describe_jobs has no exitCode.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aioboto3
from aiobotocore.config import AioConfig
from txd_testing import REPO, Daemon, short_tmpdir, unique

REGION = "us-east-1"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
LOG_GROUP = "/aws/batch/job"
# Events per put_log_events (AWS takes up to 10,000 and 1 MiB; aiohttp warns past 1 MiB).
PUT_BATCH = 2000


def aws_env() -> dict[str, str]:
    """moto accepts any credentials; these keep every client (and txd) off real AWS ones."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }


def _free_port() -> int:
    out = subprocess.run(
        [str(REPO / "scripts" / "free-ports"), "1"], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[0])


def _moto_server() -> list[str]:
    """moto_server, with Batch's node variables on multi-node jobs (moto_batch_nodes)."""
    return [sys.executable, str(Path(__file__).with_name("moto_batch_nodes.py"))]


@dataclass
class Moto:
    """A running moto_server. `url` is its endpoint (http://127.0.0.1:PORT)."""

    docker_host: str
    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @classmethod
    def start_new(cls, docker_host: str, log_path: Path) -> Moto:
        moto = cls(docker_host, log_path)
        moto.start()
        return moto

    def start(self) -> None:
        """Starts moto_server (on the same port again after a stop) and waits until it
        answers."""
        self.port = self.port or _free_port()
        self.env = {
            **os.environ,
            **aws_env(),
            "DOCKER_HOST": self.docker_host,
            "MOTO_DOCKER_NETWORK_MODE": "host",
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*_moto_server(), "-H", "127.0.0.1", "-p", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited {self.proc.returncode}:\n{self.log()}")
            try:
                self.api("GET", "/moto-api/data.json")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto_server did not answer:\n{self.log()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stops moto_server by pid (SIGTERM, then SIGKILL), with the threads running its
        Batch jobs; their containers stay on the engine until their own end."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_TIMEOUT)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except FileNotFoundError:
            return ""

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read().decode()
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def reset(self) -> None:
        """Forgets every resource (moto stops the threads of live Batch jobs)."""
        self.api("POST", "/moto-api/reset")


def client(moto: Moto, service: str) -> Any:
    """An aioboto3 client context manager on moto (no retries: a test sees every answer)."""
    session = aioboto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    return session.client(
        service, endpoint_url=moto.url, config=AioConfig(retries={"max_attempts": 1})
    )


@dataclass
class Queue:
    name: str
    arn: str
    compute_environment: str


async def make_queue(moto: Moto, prefix: str = "txdq") -> Queue:
    """An UNMANAGED compute environment (moto runs its jobs on DOCKER_HOST) and a job queue."""
    name = unique(prefix)
    async with client(moto, "iam") as iam, client(moto, "batch") as batch:
        role = await iam.create_role(
            RoleName=unique("txd-batch-role"), AssumeRolePolicyDocument="{}"
        )
        ce = await batch.create_compute_environment(
            computeEnvironmentName=f"{name}-ce",
            type="UNMANAGED",
            state="ENABLED",
            serviceRole=role["Role"]["Arn"],
        )
        q = await batch.create_job_queue(
            jobQueueName=name,
            state="ENABLED",
            priority=1,
            computeEnvironmentOrder=[
                {"order": 1, "computeEnvironment": ce["computeEnvironmentArn"]}
            ],
        )
    return Queue(name, q["jobQueueArn"], ce["computeEnvironmentArn"])


async def put_lines(
    moto: Moto,
    group: str,
    stream: str,
    lines: Sequence[str],
    *,
    start_ms: int | None = None,
) -> None:
    """Writes one log event per line (creating the group and stream when missing), at
    consecutive milliseconds from `start_ms` (default: now)."""
    t0 = start_ms if start_ms is not None else int(time.time() * 1000)
    async with client(moto, "logs") as logs:
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            await logs.create_log_group(logGroupName=group)
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            await logs.create_log_stream(logGroupName=group, logStreamName=stream)
        for start in range(0, len(lines), PUT_BATCH):
            await logs.put_log_events(
                logGroupName=group,
                logStreamName=stream,
                logEvents=[
                    {"timestamp": t0 + i, "message": line}
                    for i, line in enumerate(lines[start : start + PUT_BATCH], start)
                ],
            )


def make_batch_daemon(endpoint: str, poll: float = 0.2, docker_host: str = "") -> Daemon:
    """A txd (not started) whose aws_batch scheduler talks to `endpoint` (moto, or a proxy in
    front of it) with moto's credentials, polling every `poll` seconds, and builds workspace
    images on `docker_host`."""
    args = [
        "--set",
        f"aws_batch.docker_host={docker_host}",
        "--set",
        f"aws_batch.endpoint_url={endpoint}",
        "--set",
        f"aws_batch.region={REGION}",
        "--poll-interval",
        f"aws_batch={poll}",
    ]
    return Daemon(short_tmpdir("txdd-aws-"), env=aws_env(), args=args)


class AwsBackendDown:
    """The contract harnesses' backend_down for an AWS scheduler (mixed in before Harness):
    while it lasts, the scheduler's `aws` sends to a closed port on 127.0.0.1. A harness
    sets `self.unreachable = []` in its __init__; close() closes what was made."""

    unreachable: list[Any]

    def backend_down(self, sched: Any) -> contextlib.AbstractContextManager[None]:
        from txd.schedulers.aws.client import Aws, AwsSettings

        @contextlib.contextmanager
        def down() -> Any:
            real = sched.aws
            nowhere = AwsSettings(region=REGION, endpoint_url="http://127.0.0.1:9")
            sched.aws = Aws(nowhere, sched.name)
            self.unreachable.append(sched.aws)
            try:
                yield
            finally:
                sched.aws = real

        return down()

    async def close(self) -> None:
        for aws in self.unreachable:
            await aws.aclose()
