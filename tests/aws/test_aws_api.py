"""aws_api.Aws.call's throttling policy, against moto through a proxy that answers 429
TooManyRequestsException: retried with full-jitter exponential backoff (waits drawn up to
base * 2^try, at most cap), each request counted, then BackendUnavailable naming the cause."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from aws_proxy import AwsProxy
from moto_testing import REGION, aws_env
from txd.schedulers import aws_api
from txd.schedulers.aws_api import Aws, AwsSettings
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

    monkeypatch.setattr(aws_api.random, "uniform", uniform)
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
