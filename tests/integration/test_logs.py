"""Logs through the client: follow, regex, streams, exact bytes (non-UTF-8, `\\r`, very long
lines), since/until, role/replica selection, chunking, and slow readers.

Where the order of writes matters, the job blocks on gates (txd_testing.Gate) between them and
the test opens the next gate once it has seen the previous write arrive.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from txd.client import InvalidArgumentError, NotFoundError
from txd.v1 import AppDef, AppState, Role
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import Gate, Gates, py_app, read_logs, read_logs_by_replica, sh_app


async def _run_done(client: Any, app: AppDef) -> str:
    handle = await client.run(app)
    status = await client.wait(handle, timeout=30)
    assert status.state == AppState.SUCCEEDED, status
    return handle


async def _write_bytes_app(client: Any, payload: bytes, stream: str = "stdout") -> str:
    code = f"import sys; sys.{stream}.buffer.write({payload!r}); sys.{stream}.flush()"
    return await _run_done(client, py_app(code))


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[Gates]:
    with Gates(tmp_path) as g:
        yield g


def _gated(writes: list[str], gates: Gates) -> tuple[str, list[Gate]]:
    """A script running the shell commands `writes` with a gate between each two."""
    between = [gates.new(str(i)) for i in range(len(writes) - 1)]
    steps = [c for w, g in zip(writes, between, strict=False) for c in (w, g.wait)]
    return "; ".join([*steps, writes[-1]]), between


async def _step_through(
    client: Any, handle: str, expected: list[bytes], between: list[Gate]
) -> None:
    """Follows the logs of a one-replica job from _gated: each write must arrive as a chunk of
    its own, equal to the next of `expected`, before the test opens the gate to the next write;
    the stream must end after the last, as the job does."""
    got: list[bytes] = []
    async with asyncio.timeout(20):
        async for chunk in client.logs(handle, follow=True):
            assert (chunk.role, chunk.replica) == ("r", 0)
            got.append(chunk.data)
            assert got == expected[: len(got)], "each write arrives alone, when written"
            if len(got) <= len(between):
                # The job waits at this gate: what came so far was streamed, not read at its end.
                assert (await client.status(handle)).state == AppState.RUNNING
                between[len(got) - 1].open()
    assert got == expected


# -- follow ---------------------------------------------------------------------------------------


async def test_follow_streams_lines_while_running(client: Any, gates: Gates) -> None:
    """Each line arrives on its own while the job runs, and the stream ends with the job."""
    script, between = _gated([f"echo line {i}" for i in range(1, 5)], gates)
    handle = await client.run(sh_app(script))
    await _step_through(client, handle, [f"line {i}\n".encode() for i in range(1, 5)], between)
    assert (await client.status(handle)).state == AppState.SUCCEEDED


async def test_follow_of_short_jobs_always_ends(client: Any) -> None:
    """A follow started with the job ends when the job ends, every time (no lost wake-up)."""
    handles = [
        await client.run(sh_app(f"echo job{i}; sleep 0.{i}; echo err{i} >&2; exit {i % 2}"))
        for i in range(8)
    ]

    async def follow(i: int, handle: str) -> bytes:
        async with asyncio.timeout(8):
            return await read_logs(client, handle, follow=True, streams="stdout")

    results = await asyncio.gather(
        *(follow(i, h) for i, h in enumerate(handles)), return_exceptions=True
    )
    hung = [h for h, r in zip(handles, results, strict=True) if isinstance(r, TimeoutError)]
    assert hung == [], f"{len(hung)} of {len(handles)} follows never ended after the job did"
    for i, data in enumerate(results):
        assert data == f"job{i}\n".encode()


async def test_follow_several_replicas_gets_everything(client: Any) -> None:
    app = sh_app(
        "for i in 1 2 3; do echo r$REPLICA-$i; sleep 0.1; done",
        replicas=3,
        env={"REPLICA": "${replica_id}"},
    )
    handle = await client.run(app)
    async with asyncio.timeout(8):
        got = await read_logs_by_replica(client, handle, follow=True)
    assert got == {f"r/{k}": b"".join(f"r{k}-{i}\n".encode() for i in (1, 2, 3)) for k in range(3)}
    assert (await client.status(handle)).state == AppState.SUCCEEDED


async def test_follow_of_finished_job_ends_at_once(client: Any) -> None:
    handle = await _run_done(client, sh_app("echo done"))
    async with asyncio.timeout(5):
        assert await read_logs(client, handle, follow=True) == b"done\n"


# -- selection ----------------------------------------------------------------------------------


async def test_regex(client: Any) -> None:
    handle = await _run_done(client, sh_app("for i in 1 2 3 4 5 13; do echo line $i; done"))
    assert await read_logs(client, handle, regex=r"^line [13]$") == b"line 1\nline 3\n"
    assert await read_logs(client, handle, regex="3") == b"line 3\nline 13\n"
    assert await read_logs(client, handle, regex="nomatch") == b""


async def test_regex_on_final_line_without_newline(client: Any) -> None:
    handle = await _run_done(client, sh_app("printf 'abc\\nxyz'"))
    assert await read_logs(client, handle) == b"abc\nxyz"
    assert await read_logs(client, handle, regex="xyz") == b"xyz"
    assert await read_logs(client, handle, regex="abc") == b"abc\n"


async def test_invalid_regex(client: Any) -> None:
    handle = await _run_done(client, sh_app("true"))
    with pytest.raises(InvalidArgumentError, match="regex"):
        await read_logs(client, handle, regex="(")


async def test_streams(client: Any, gates: Gates) -> None:
    """stdout and stderr apart, and combined in the order written: each write was seen to
    arrive before the next was let through."""
    writes = ["echo out1", "echo err1 >&2", "echo out2", "echo err2 >&2"]
    script, between = _gated(writes, gates)
    handle = await client.run(sh_app(script))
    combined = b"out1\nerr1\nout2\nerr2\n"
    await _step_through(client, handle, combined.splitlines(keepends=True), between)
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    assert await read_logs(client, handle, streams="stdout") == b"out1\nout2\n"
    assert await read_logs(client, handle, streams="stderr") == b"err1\nerr2\n"
    assert await read_logs(client, handle, streams="combined") == combined
    assert await read_logs(client, handle) == combined  # combined is the default


async def test_regex_with_streams(client: Any) -> None:
    handle = await _run_done(client, sh_app("echo keep-out; echo drop; echo keep-err >&2"))
    assert await read_logs(client, handle, regex="keep", streams="stderr") == b"keep-err\n"
    assert await read_logs(client, handle, regex="keep", streams="stdout") == b"keep-out\n"


async def test_since_until(client: Any, gates: Gates) -> None:
    gate = gates.new("late")
    handle = await client.run(sh_app(f"echo early; {gate.wait}; echo late"))
    between = None
    async with asyncio.timeout(20):
        async for chunk in client.logs(handle, follow=True):
            # "early" was read before now, and "late" cannot be written before the gate opens.
            assert chunk.data == b"early\n"
            between = dt.datetime.now(dt.UTC)
            # A log's times are kept to the millisecond (schedulers/logfiles.py): a line read
            # within 1 ms of the one before shares its time. Let the clock pass that before
            # "late" may be written, so the two lines' times are told apart as documented.
            await asyncio.sleep(0.002)
            gate.open()
            break
        assert (await client.wait(handle, timeout=20)).state == AppState.SUCCEEDED
    assert between is not None
    assert await read_logs(client, handle, since=between) == b"late\n"
    assert await read_logs(client, handle, until=between) == b"early\n"
    assert await read_logs(client, handle, since=between, until=between) == b""
    assert (
        await read_logs(
            client,
            handle,
            since=between - dt.timedelta(seconds=60),
            until=between + dt.timedelta(seconds=60),
        )
        == b"early\nlate\n"
    )
    # A naive datetime is local time.
    naive = between.astimezone().replace(tzinfo=None)
    assert await read_logs(client, handle, since=naive) == b"late\n"
    assert (
        await read_logs(client, handle, since=between, streams="stdout", regex="late") == b"late\n"
    )


async def test_role_and_replica_selection(client: Any) -> None:
    app = AppDef(
        name="tworoles",
        roles=[
            Role(
                name="a",
                entrypoint="sh",
                args=["-c", "echo $WHO"],
                num_replicas=2,
                env={"WHO": "a-${replica_id}"},
            ),
            Role(
                name="b",
                entrypoint="sh",
                args=["-c", "echo $WHO; echo b-err >&2"],
                env={"WHO": "b-${replica_id}"},
            ),
        ],
    )
    handle = await _run_done(client, app)
    assert await read_logs_by_replica(client, handle) == {
        "a/0": b"a-0\n",
        "a/1": b"a-1\n",
        "b/0": b"b-0\nb-err\n",
    }
    assert await read_logs_by_replica(client, handle, role="a") == {
        "a/0": b"a-0\n",
        "a/1": b"a-1\n",
    }
    assert await read_logs_by_replica(client, handle, role="a", replica=1) == {"a/1": b"a-1\n"}
    assert await read_logs_by_replica(client, handle, replica=0) == {
        "a/0": b"a-0\n",
        "b/0": b"b-0\nb-err\n",
    }
    assert await read_logs_by_replica(client, handle, role="b", streams="stderr") == {
        "b/0": b"b-err\n"
    }
    # Several replicas (LogsRequest.replicas, torchx log's ROLE/0,2), of each role read.
    assert await read_logs_by_replica(client, handle, role="a", replica=[1, 0]) == {
        "a/0": b"a-0\n",
        "a/1": b"a-1\n",
    }
    assert await read_logs_by_replica(client, handle, replica=[0]) == {
        "a/0": b"a-0\n",
        "b/0": b"b-0\nb-err\n",
    }
    with pytest.raises(NotFoundError, match="nosuch"):
        await read_logs(client, handle, role="nosuch")
    with pytest.raises(NotFoundError):
        await read_logs(client, handle, role="a", replica=2)
    with pytest.raises(NotFoundError):
        await read_logs(client, handle, role="b", replica=-1)
    with pytest.raises(NotFoundError, match=r"has replicas 0\.\.1, not 2"):
        await read_logs(client, handle, role="a", replica=[0, 2])
    with pytest.raises(InvalidArgumentError, match="replicas: replica 1 is listed twice"):
        await read_logs(client, handle, role="a", replica=[1, 0, 1])
    both = pb.LogsRequest(app_handle=handle, replica=0, replicas=[1])
    async with grpc.aio.insecure_channel(f"unix:{client.target}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            async for _ in RunnerStub(ch).Logs(both, timeout=30):
                pass
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "replicas: give replica or replicas, not both"


async def test_unknown_handle(client: Any) -> None:
    with pytest.raises(NotFoundError):
        await read_logs(client, "local_cwd://txd/nosuch-bcdfgh")


# -- exact bytes ----------------------------------------------------------------------------------


async def test_non_utf8_bytes_arrive_exactly(client: Any) -> None:
    payload = b"\xff\xfe\x00ok\n\xc3\x28 bad utf8 \x80\n"
    handle = await _write_bytes_app(client, payload)
    assert await read_logs(client, handle) == payload
    assert await read_logs(client, handle, regex="ok") == b"\xff\xfe\x00ok\n"


async def test_carriage_return_progress_arrives_exactly(client: Any) -> None:
    payload = b"progress 10%\rprogress 50%\rprogress 100%\ndone\r\n"
    handle = await _write_bytes_app(client, payload, stream="stderr")
    assert await read_logs(client, handle) == payload
    assert await read_logs(client, handle, streams="stderr") == payload
    assert await read_logs(client, handle, streams="stdout") == b""


async def test_very_long_line_arrives_intact(client: Any) -> None:
    code = (
        "import sys; w = sys.stdout.buffer; w.write(b'x' * 1_000_000); w.flush(); "
        "w.write(b'\\n'); w.write(b'short\\n')"
    )
    handle = await _run_done(client, py_app(code))
    data = await read_logs(client, handle)
    assert data == b"x" * 1_000_000 + b"\nshort\n"
    assert await read_logs(client, handle, regex="^x+$") == b"x" * 1_000_000 + b"\n"
    assert await read_logs(client, handle, regex="short") == b"short\n"


async def test_chunks_hold_many_lines(client: Any) -> None:
    handle = await _run_done(client, sh_app("seq 1 20000"))
    chunks = [c.data async for c in client.logs(handle)]
    assert b"".join(chunks) == b"".join(f"{i}\n".encode() for i in range(1, 20001))
    assert len(chunks) <= 10, f"{len(chunks)} messages for 20000 lines: not chunked"


async def test_filtered_reads_are_chunked_too(client: Any) -> None:
    """Lines written one by one, ms apart and alternating streams, give the index a record per
    line; reading one stream, a regex or a time range still sends many lines per message."""
    code = (
        "import sys, time\n"
        "for i in range(400):\n"
        "    out = sys.stdout if i % 2 else sys.stderr\n"
        "    out.write(f'line {i}\\n'); out.flush()\n"
        "    end = time.monotonic() + 0.0012\n"
        "    while time.monotonic() < end: pass\n"
    )
    handle = await _run_done(client, py_app(code))
    lines = [f"line {i}\n".encode() for i in range(400)]
    odd, everything = b"".join(lines[1::2]), b"".join(lines)
    cases: list[tuple[dict[str, Any], bytes]] = [
        ({"streams": "stdout"}, odd),
        ({"regex": "[13579]$"}, odd),
        ({"since": dt.datetime(2000, 1, 1, tzinfo=dt.UTC)}, everything),
    ]
    for kw, expected in cases:
        chunks = [c.data async for c in client.logs(handle, **kw)]
        if "since" in kw:
            # Both pipes: their lines interleave in the order the daemon read them, which a
            # loaded machine may swap; each stream's own order is exact.
            got = b"".join(chunks).splitlines()
            assert sorted(got) == sorted(expected.splitlines())
            assert [x for x in got if int(x.split()[1]) % 2] == odd.splitlines()
        else:
            assert b"".join(chunks) == expected, kw
        assert len(chunks) <= 3, f"{len(chunks)} messages for {kw}: not chunked"


# -- slow readers -------------------------------------------------------------------------------


async def test_stalled_reader_does_not_block_job_or_grow_daemon(
    client: Any, shared_daemon: Any
) -> None:
    """A follower that stops reading neither slows the job nor makes the daemon buffer."""
    n, size = 40_000, 1024  # 40 MiB of output
    code = (
        "import sys\nw = sys.stdout.buffer\nline = b'y' * 1023 + b'\\n'\n"
        f"for _ in range({n}):\n    w.write(line)\n"
    )
    rss_before = shared_daemon.rss_kib()
    handle = await client.run(py_app(code))
    stream = client.logs(handle, follow=True)
    first = await anext(stream)  # then stall: read nothing while the job writes
    try:
        status = await client.wait(handle, timeout=30)
        assert status.state == AppState.SUCCEEDED
        growth_mib = (shared_daemon.rss_kib() - rss_before) / 1024
        assert growth_mib < 32, f"daemon RSS grew {growth_mib:.0f} MiB for a stalled reader"
        digest = hashlib.sha256(first.data)
        total = len(first.data)
        async with asyncio.timeout(30):
            async for chunk in stream:
                digest.update(chunk.data)
                total += len(chunk.data)
    finally:
        await stream.aclose()
    assert total == n * size
    assert digest.hexdigest() == hashlib.sha256((b"y" * 1023 + b"\n") * n).hexdigest()


async def test_abandoned_follow_does_not_hold_the_job(client: Any, gates: Gates) -> None:
    gate = gates.new("two")
    handle = await client.run(sh_app(f"echo one; {gate.wait}; echo two"))
    stream = client.logs(handle, follow=True)
    async with asyncio.timeout(20):
        assert (await anext(stream)).data == b"one\n"
    await stream.aclose()  # the reader goes away mid-stream
    gate.open()
    assert (await client.wait(handle, timeout=20)).state == AppState.SUCCEEDED
    assert await read_logs(client, handle) == b"one\ntwo\n"


def test_sync_client_logs(shared_daemon: Any) -> None:
    from txd.client import Client

    with Client(shared_daemon.socket) as c:
        handle = c.run(py_app("print('sync', flush=True)"))
        assert c.wait(handle, timeout=30).state == AppState.SUCCEEDED
        assert b"".join(chunk.data for chunk in c.logs(handle)) == b"sync\n"
        states = [s.state for s in c.watch(handle)]
        assert states == [AppState.SUCCEEDED]
