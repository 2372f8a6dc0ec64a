"""aws_client.Aws.call's retry policy, against moto through a proxy that answers 429
TooManyRequestsException or 500: throttling retried with full-jitter exponential backoff (waits
drawn up to base * 2^try, at most cap), each request counted, then BackendUnavailable naming
the cause; an AWS failure (5xx) retried the same way only for a call safe to repeat."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from aws_proxy import AwsProxy
from moto_testing import REGION, aws_env
from txd.schedulers.aws import client as aws_client
from txd.schedulers.aws.client import Aws, AwsSettings
from txd.schedulers.errors import BackendUnavailable


@pytest.fixture
async def aws(proxy: AwsProxy, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Aws]:
    for key, value in aws_env().items():
        monkeypatch.setenv(key, value)
    a = Aws(AwsSettings(region=REGION, endpoint_url=proxy.url), "aws_batch")
    try:
        yield a
    finally:
        await a.aclose()


async def test_throttling_is_retried_with_bounded_jittered_backoff(
    aws: Aws, proxy: AwsProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    bounds: list[float] = []

    def uniform(low: float, high: float) -> float:
        bounds.append(high)
        return random.Random(0).uniform(low, high) / 1000  # keep the test fast

    monkeypatch.setattr(aws_client.random, "uniform", uniform)
    aws.cap = 1.0
    batch = await aws.client("batch")
    proxy.throttle("describejobs", aws.tries - 1)
    assert (await aws.call(batch, "describe_jobs", jobs=["x"]))["jobs"] == []
    assert bounds == [0.2, 0.4, 0.8, 1.0]  # base * 2^try, capped
    assert aws.calls["describe_jobs"] == proxy.calls["describejobs"] == aws.tries

    proxy.throttle("describejobs", aws.tries)
    with pytest.raises(BackendUnavailable, match=r"AWS is throttling txd.*after 5 tries"):
        await aws.call(batch, "describe_jobs", jobs=["x"])
    assert proxy.calls["describejobs"] == 2 * aws.tries


async def test_an_aws_failure_is_retried_only_where_a_repeat_is_safe(
    aws: Aws, proxy: AwsProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aws_client.random, "uniform", lambda low, high: 0.0)
    batch = await aws.client("batch")
    proxy.fail("describejobs", 2)
    assert (await aws.call(batch, "describe_jobs", jobs=["x"]))["jobs"] == []
    assert proxy.calls["describejobs"] == 3
    # A second submit could start the job twice: the failure is the caller's to see.
    proxy.fail("submitjob", 1)
    with pytest.raises(BackendUnavailable, match=r"AWS failed \(ServerException\)"):
        await aws.call(batch, "submit_job", jobName="j", jobQueue="q", jobDefinition="d")
    assert proxy.calls["submitjob"] == 1
