"""aws_batch and aws_sagemaker under a daemon at --log-level DEBUG, text and JSON: a job's env
value and a run option's value reach AWS (moto), never the daemon's log (docs/security.md).
botocore logs every request's body and every response's at DEBUG: a SubmitJob's environment,
a DescribeJobs answer's, a GetLogEvents answer's lines.

The options: aws_batch's job_role_arn (in RegisterJobDefinition's body: an account's id and a
role's name, the nearest aws_batch has to a secret) and aws_sagemaker's environment (KEY:value
pairs in CreateTrainingJob's body: where a secret for the job would go)."""

from __future__ import annotations

import pytest
from docker_testing import BUSYBOX
from moto_testing import Moto, Queue, make_batch_daemon
from sagemaker_standin import StandIn
from test_aws_sagemaker import CFG, _daemon, trainer
from txd.v1 import Resource
from txd_testing import LOG_FORMATS, debug_log, own_daemon, run_with_secrets, secret_app, sentinel

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_batch_debug_log_holds_no_env_or_option_value(
    fmt: str, moto: Moto, batch_queue: Queue, request: pytest.FixtureRequest
) -> None:
    env_secret, opt_secret = sentinel("env"), sentinel("opt")
    d = make_batch_daemon(moto.url, docker_host=moto.docker_host)
    d.args += debug_log(fmt)
    app = secret_app(env_secret, image=BUSYBOX, resource=Resource(cpu=1, mem_mb=128))
    cfg = {
        "queue": batch_queue.name,
        "job_role_arn": f"arn:aws:iam::123456789012:role/{opt_secret}",
    }
    with own_daemon(d, request):
        secrets = [env_secret, opt_secret]
        await run_with_secrets(d, "aws_batch", app, cfg, secrets, env_secret)


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_sagemaker_debug_log_holds_no_env_or_option_value(
    fmt: str, standin: StandIn, request: pytest.FixtureRequest
) -> None:
    env_secret, opt_secret = sentinel("env"), sentinel("opt")
    d = _daemon(standin)
    d.args += debug_log(fmt)
    app = trainer(0)  # moto runs nothing: the stand-in ends it with exit 0; no logs to read
    app.roles[0].env["TXD_T_SECRET"] = env_secret
    cfg = {**CFG, "environment": {"TXD_T_OPTION": opt_secret}}
    with own_daemon(d, request):
        secrets = [env_secret, opt_secret]
        await run_with_secrets(d, "aws_sagemaker", app, cfg, secrets, None)
