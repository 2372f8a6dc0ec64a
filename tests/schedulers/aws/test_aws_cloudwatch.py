"""schedulers/aws/cloudwatch.py and aws_api.Aws against moto's CloudWatch Logs: paging, since/until,
regex, follow (ending only once the job is over and a read after that found nothing new), a
stream that does not exist yet, and error mapping."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from moto_testing import Moto, put_lines
from txd.schedulers.api import LogQuery
from txd.schedulers.aws import cloudwatch
from txd.schedulers.aws.client import Aws, AwsSettings
from txd.schedulers.errors import BackendUnavailable, InvalidArgument, NotFound
from txd_testing import unique

GROUP = "/txd/test"


@pytest.fixture
async def aws(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Aws]:
    from moto_testing import aws_env

    for k, v in aws_env().items():
        monkeypatch.setenv(k, v)
    a = Aws(AwsSettings(region="us-east-1", endpoint_url=moto.url), "test")
    try:
        yield a
    finally:
        await a.aclose()


async def _read(aws: Aws, stream: str, query: LogQuery, ended: asyncio.Event) -> list[bytes]:
    async def wait_ended() -> None:
        await ended.wait()

    return [
        c async for c in cloudwatch.read_stream(aws, GROUP, stream, query, wait_ended, poll=0.05)
    ]


async def test_reads_every_page_in_chunks(moto: Moto, aws: Aws) -> None:
    stream = unique("s")
    lines = [f"line {i}" for i in range(25_000)]  # three get_log_events pages
    await put_lines(moto, GROUP, stream, lines, start_ms=int(time.time() * 1000) - 60_000)
    done = asyncio.Event()
    done.set()
    chunks = await _read(aws, stream, LogQuery(), done)
    assert b"".join(chunks) == "".join(f"{line}\n" for line in lines).encode()
    assert len(chunks) < 100  # chunks of many lines, not a message per line
    assert aws.calls["get_log_events"] == 4  # three pages and the one answering the same token


async def test_since_until_regex(moto: Moto, aws: Aws) -> None:
    stream = unique("s")
    t0 = int(time.time() * 1000) - 60_000  # AWS refuses events over 14 days old
    await put_lines(moto, GROUP, stream, ["a1", "b2", "a3", "b4", "a5"], start_ms=t0)
    done = asyncio.Event()
    done.set()
    since = dt.datetime.fromtimestamp((t0 + 1) / 1000, dt.UTC)
    until = dt.datetime.fromtimestamp((t0 + 4) / 1000, dt.UTC)
    got = await _read(aws, stream, LogQuery(since=since, until=until), done)
    assert b"".join(got) == b"b2\na3\nb4\n"
    got = await _read(aws, stream, LogQuery(regex="^a"), done)
    assert b"".join(got) == b"a1\na3\na5\n"


async def test_follow_ends_after_the_job_and_a_last_read(moto: Moto, aws: Aws) -> None:
    stream = unique("s")
    ended = asyncio.Event()
    chunks: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def wait_ended() -> None:
        await ended.wait()

    async def follow() -> None:
        query = LogQuery(follow=True)
        async for c in cloudwatch.read_stream(aws, GROUP, stream, query, wait_ended, poll=0.05):
            chunks.put_nowait(c)
        chunks.put_nowait(None)

    async def next_data() -> bytes | None:
        while (c := await chunks.get()) == b"":  # caught-up marks
            pass
        return c

    # Each of the follow's get_log_events calls, as it returns.
    calls: asyncio.Queue[str] = asyncio.Queue()
    call = aws.call

    async def counted(client: Any, op: str, **kw: Any) -> Any:
        try:
            return await call(client, op, **kw)
        finally:
            calls.put_nowait(op)

    aws.call = counted  # type: ignore[method-assign]
    task = asyncio.create_task(follow())
    # The stream does not exist yet: the follow asks again and again, and goes on.
    for _ in range(3):
        assert await asyncio.wait_for(calls.get(), 10) == "get_log_events"
    assert not task.done()
    await put_lines(moto, GROUP, stream, ["one", "two"])
    assert await asyncio.wait_for(next_data(), 10) == b"one\ntwo\n"
    await put_lines(moto, GROUP, stream, ["three"])  # written as the job ends
    ended.set()
    assert await asyncio.wait_for(next_data(), 10) == b"three\n"
    assert await asyncio.wait_for(next_data(), 10) is None
    await task


async def test_missing_stream(aws: Aws) -> None:
    live = asyncio.Event()
    assert await _read(aws, unique("nope"), LogQuery(), live) == []  # nothing yet
    over = asyncio.Event()
    over.set()
    with pytest.raises(NotFound, match="no log stream"):
        await _read(aws, unique("nope"), LogQuery(), over)


async def test_errors_are_txds(aws: Aws) -> None:
    batch = await aws.client("batch")
    with pytest.raises(InvalidArgument, match=r"cfg\.queue: submit_job: "):
        await aws.call(
            batch,
            "submit_job",
            field="cfg.queue",
            jobName="x-y-z",
            jobQueue="no-such-queue",
            jobDefinition="no-such-def",
        )
    down = Aws(AwsSettings(region="us-east-1", endpoint_url="http://127.0.0.1:9"), "test")
    try:
        with pytest.raises(BackendUnavailable, match=r"test: cannot reach http://127.0.0.1:9"):
            await down.call(await down.client("batch"), "describe_jobs", jobs=["x"])
    finally:
        await down.aclose()
