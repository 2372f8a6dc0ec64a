"""`logs --tail N` (the last N lines of each replica, then, following, what comes next) and
`txctl logs HANDLE/ROLE/K`, through a real daemon; and the log file reader starting from the
file's end for a tail."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.client import InvalidArgumentError
from txd.schedulers.api import LogQuery
from txd.schedulers.logfiles import LogSource, LogWriter, data_path, read_log, tail_offset
from txd.v1 import AppState, Stream
from txd_testing import TXCTL, Gates, first_line, read_logs, read_logs_by_replica, sh_app

NUMBERS = "i=1; while [ $i -le 100 ]; do echo $i; i=$((i+1)); done"


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[Gates]:
    with Gates(tmp_path) as g:
        yield g


async def _done(client: Any, script: str, replicas: int | None = None) -> str:
    handle = await client.run(sh_app(script, replicas=replicas))
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    return handle


async def test_tail_is_the_last_lines_of_each_replica(client: Any) -> None:
    handle = await _done(client, NUMBERS)
    assert await read_logs(client, handle, tail=3) == b"98\n99\n100\n"
    assert await read_logs(client, handle, tail=0) == b""
    assert await read_logs(client, handle, tail=1000) == await read_logs(client, handle)
    # After the other filters: the last lines that match.
    assert await read_logs(client, handle, tail=2, regex="^1") == b"19\n100\n"
    # Per replica, as kubectl logs --tail is per container.
    two = await _done(client, "for x in a b c; do echo $x; done; echo err >&2", replicas=2)
    assert await read_logs_by_replica(client, two, tail=2) == {
        "r/0": b"c\nerr\n",
        "r/1": b"c\nerr\n",
    }
    assert await read_logs_by_replica(client, two, tail=1, streams="stdout") == {
        "r/0": b"c\n",
        "r/1": b"c\n",
    }
    # A last line without a newline counts as a line.
    partial = await _done(client, "echo one; echo two; printf three")
    assert await read_logs(client, partial, tail=2) == b"two\nthree"
    with pytest.raises(InvalidArgumentError, match="tail"):
        await read_logs(client, handle, tail=-1)


async def _until_written(client: Any, handle: str, end: bytes) -> None:
    """Returns once the job's log ends with `end` (the tail is taken from what is written when
    the reader catches up, as `tail -f` does: wait until the job wrote all before the gate)."""
    seen = b""
    async with asyncio.timeout(20):
        async for chunk in client.logs(handle, follow=True):
            seen += chunk.data
            if seen.endswith(end):
                return
    raise AssertionError(f"the log ended without {end!r}")


async def test_follow_with_tail_shows_the_tail_then_follows(client: Any, gates: Gates) -> None:
    gate = gates.new("more")
    handle = await client.run(sh_app(f"{NUMBERS}; {gate.wait}; echo after"))
    await _until_written(client, handle, b"\n100\n")
    got = b""
    async with asyncio.timeout(20):
        async for chunk in client.logs(handle, follow=True, tail=2):
            got += chunk.data
            if got == b"99\n100\n":  # the tail came while the job still runs
                gate.open()
    assert got == b"99\n100\nafter\n"


def test_txctl_logs_tail_and_handle_role_replica(txctl: Any, workdir: Path) -> None:
    handle = first_line(
        txctl("run", "--wait", "utils.echo", "--msg", "hi", "--num_replicas", "2", check=0).stdout
    )
    app_id = handle.rsplit("/", 1)[1]
    # `torchx log` form: HANDLE/ROLE/K and HANDLE/ROLE, and ID/ROLE/K for a short id.
    assert txctl("logs", f"{handle}/echo/1", check=0).stdout == "hi\n"
    assert txctl("logs", f"{app_id}/echo/0", check=0).stdout == "hi\n"
    assert txctl("logs", f"{handle}/echo", check=0).stdout == "echo/0 hi\necho/1 hi\n"
    assert txctl("logs", handle, "echo/1", check=0).stdout == "hi\n"
    assert "names the role already" in txctl("logs", f"{handle}/echo", "echo/1", check=2).stderr
    assert "bad replica 'x'" in txctl("logs", f"{app_id}/echo/x", check=2).stderr
    assert "has no role 'nope'" in txctl("logs", f"{handle}/nope", check=2).stderr

    numbers = first_line(txctl("run", "--wait", "utils.sh", "sh", "-c", NUMBERS, check=0).stdout)
    assert txctl("logs", "--tail", "2", numbers, check=0).stdout == "99\n100\n"
    assert "expected a whole number >= 0" in txctl("logs", "--tail", "-3", numbers, check=2).stderr


async def test_txctl_logs_follow_with_tail(
    shared_daemon: Any, client: Any, workdir: Path, gates: Gates
) -> None:
    gate = gates.new("more")
    proc = shared_daemon.txctl(
        "run", "utils.sh", "sh", "-c", f"{NUMBERS}; {gate.wait}; echo after", check=0, cwd=workdir
    )
    handle = first_line(proc.stdout)
    await _until_written(client, handle, b"\n100\n")
    follow = await asyncio.create_subprocess_exec(
        *TXCTL, "--socket", str(shared_daemon.socket), "--no-autostart", "logs", "-f",
        "--tail", "1", handle,
        stdout=asyncio.subprocess.PIPE, cwd=workdir, env=shared_daemon.txctl_env(),
    )  # fmt: skip
    try:
        assert follow.stdout is not None
        async with asyncio.timeout(20):
            assert await follow.stdout.readline() == b"100\n"  # while the job runs
            gate.open()
            assert await follow.stdout.read() == b"after\n"
            assert await follow.wait() == 0
    finally:
        if follow.returncode is None:
            follow.kill()
            await follow.wait()


async def test_tail_reads_the_log_file_from_its_end(tmp_path: Path) -> None:
    """The reader starts where the last lines begin, so it never sends the rest of a big
    log (the daemon then keeps exactly N lines, whoever sent them)."""
    base = tmp_path / "r0"
    writer = LogWriter(base)
    lines = [f"line {i}\n".encode() for i in range(200_000)]  # 2.6 MB, 40 chunks
    writer.write(Stream.STDOUT, b"".join(lines))
    writer.close()
    path = data_path(base)
    size = path.stat().st_size
    assert tail_offset(path, 3) == size - len(b"".join(lines[-3:]))
    assert tail_offset(path, 0) == size
    assert tail_offset(path, 10**9) == 0
    assert tail_offset(tmp_path / "missing.log", 3) == 0
    src = LogSource(base, None, lambda: True)
    got = b"".join([c async for c in read_log(src, LogQuery(tail=3))])
    assert got == b"".join(lines[-3:])
    partial = tmp_path / "p.log"
    partial.write_bytes(b"a\nb\nc")
    assert tail_offset(partial, 1) == 2  # one line early: "b\nc", the daemon keeps "c"
