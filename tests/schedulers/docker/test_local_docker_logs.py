"""local_docker's logs through a real txd on the real test engine: `--tail` exact on a log of
many engine reads, a replica whose container was removed outside txd, and a follow that rides
out an engine restart, losing and repeating no byte the engine kept. A proxy in front of the
engine (LogProxy) cuts or holds a log read at a chosen message: a follow resumes exactly there,
inside a long line too (whose pieces share one stamp), across an engine restart too."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from docker_testing import BUSYBOX, Engine, make_docker_daemon
from txd.schedulers.workspace.engine import Engine as TxdEngine
from txd.v1 import AppDef, AppState, BindMount, Mount, Role
from txd_testing import TXCTL, Daemon, own_daemon, short_tmpdir

NONE = {"network": "none"}
LINES = 20_000  # about 110 kB per replica: many reads of the engine's stream
# A txd that re-subscribes quickly after an engine outage.
FAST_RESUBSCRIBE = [
    *("--set", "local_docker.poll_interval=0.5"),
    *("--set", "local_docker.engine_timeout=2"),
]


def gated(script: str, gate: Path, replicas: int = 1) -> AppDef:
    """A busybox job running `script`, with the host folder `gate` at /gate."""
    role = Role(
        name="main", image=BUSYBOX, entrypoint="sh", args=["-c", script], num_replicas=replicas
    )
    role.mounts.append(Mount(bind=BindMount(src_path=str(gate), dst_path="/gate")))
    return AppDef(name="logs", roles=[role])


def numbered(n: int) -> bytes:
    return b"".join(b"%d\n" % i for i in range(1, n + 1))


def container(handle: str, k: int = 0) -> str:
    return f"{handle.rsplit('/', 1)[1]}-main-{k}"


@pytest.fixture
def logs_daemon(docker_engine: Engine, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """A txd of the test's own that re-subscribes quickly after an engine outage."""
    d = make_docker_daemon(docker_engine, FAST_RESUBSCRIBE)
    with own_daemon(d, request) as started:
        yield started


async def test_tail_is_exact_on_a_long_log_of_two_replicas(
    docker_client: Any, docker_daemon: Daemon, tmp_path: Path
) -> None:
    """txctl and the Python client, read and followed: the last N lines of each replica."""
    app = gated(f"seq 1 {LINES}; until [ -e /gate/go ]; do sleep 0.05; done; echo end", tmp_path, 2)
    handle = await docker_client.run(app, scheduler="local_docker", cfg=NONE)
    whole = numbered(LINES)
    for k in (0, 1):  # every line is written
        follow = aiter(docker_client.logs(handle, "main", k, follow=True))
        got = b""
        async with asyncio.timeout(30):
            while len(got) < len(whole):
                got += (await anext(follow)).data
        assert got == whole
        await follow.aclose()  # type: ignore[attr-defined]
    out = docker_daemon.txctl("logs", handle, "--tail", "3", check=True).stdout
    assert out == "".join(f"main/{k} {i}\n" for k in (0, 1) for i in range(LINES - 2, LINES + 1))
    one = docker_daemon.txctl("logs", f"{handle}/main/1", "--tail", "2", check=True).stdout
    assert one == f"{LINES - 1}\n{LINES}\n"
    # Followed with a tail: the last 3 lines at once, then what comes next.
    follow = aiter(docker_client.logs(handle, "main", 0, follow=True, tail=3))
    async with asyncio.timeout(30):
        first = (await anext(follow)).data
    assert first == b"".join(b"%d\n" % i for i in range(LINES - 2, LINES + 1))
    (tmp_path / "go").touch()
    async with asyncio.timeout(30):
        assert b"".join([c.data async for c in follow]) == b"end\n"


async def test_a_replica_removed_outside_txd_is_named_and_the_rest_printed(
    docker_client: Any, docker_daemon: Daemon, docker_engine: Engine, tmp_path: Path
) -> None:
    app = gated("echo up; until [ -e /gate/go ]; do sleep 0.05; done; echo done", tmp_path, 3)
    handle = await docker_client.run(app, scheduler="local_docker", cfg=NONE)
    for k in (0, 1, 2):
        follow = aiter(docker_client.logs(handle, "main", k, follow=True))
        async with asyncio.timeout(30):
            assert (await anext(follow)).data == b"up\n"
        await follow.aclose()  # type: ignore[attr-defined]
    # A follow under way when its container goes: it ends, naming the replica.
    async with _txctl_running(docker_daemon, "logs", "-f", handle) as proc:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            for _ in range(3):  # every replica's "up" is printed
                assert (await proc.stdout.readline()).endswith(b" up\n")
        docker_engine.docker("rm", "-f", container(handle, 1))
        (tmp_path / "go").touch()
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
    gone = (
        f"the log of main/1 is gone: its container {container(handle, 1)} was removed outside txd"
    )
    assert proc.returncode == 8, (proc.returncode, out, err)
    assert sorted(out.splitlines()) == [b"main/0 done", b"main/2 done"], out
    assert err.decode() == f"txctl: {gone}; the output is incomplete\n"
    assert (await docker_client.wait(handle, timeout=60)).state in (
        AppState.SUCCEEDED,
        AppState.FAILED,
    )
    # Read afterwards: the others' logs whole, the missing one named, exit 8.
    res = docker_daemon.txctl("logs", handle, check=8)
    assert res.stdout == "main/0 up\nmain/0 done\nmain/2 up\nmain/2 done\n", res.stdout
    assert res.stderr == f"txctl: {gone}; the output is incomplete\n"
    # The Python client: a response that names the replica, beside the others' data.
    said = [(c.role, c.replica, c.unreadable) async for c in docker_client.logs(handle)]
    assert ("main", 1, gone) in said, said
    assert {(r, k) for r, k, u in said if not u} == {("main", 0), ("main", 2)}


async def test_a_follow_rides_out_an_engine_restart_without_losing_or_repeating_bytes(
    logs_daemon: Daemon, docker_engine: Engine, tmp_path: Path
) -> None:
    """The engine stops under a `txctl logs -f` of a job that writes all along (its container
    runs on: live-restore); the job's status goes stale with the cause in words; once the
    engine is back the follow goes on from where it was, and ends with the job. What it printed
    is exactly what the engine kept (`docker logs`)."""
    script = "i=0; until [ -e /gate/go ]; do i=$((i+1)); echo line $i; sleep 0.005; done; echo end"
    async with logs_daemon.client() as c:
        handle = await c.run(gated(script, tmp_path), scheduler="local_docker", cfg=NONE)
        async with _txctl_running(logs_daemon, "logs", "-f", handle) as proc:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                head = await proc.stdout.readline()
            assert head == b"line 1\n"
            docker_engine.stop(keep_containers=True)
            try:
                stale = await _stale_with(c, handle, ("connection refused", "socket does not"))
                assert "is not answering" in stale.stale_msg, stale.stale_msg
                for internal in ("Error(", "TransferEncoding", "Payload"):
                    assert internal not in stale.stale_msg, stale.stale_msg
                assert proc.returncode is None, "the follow ended with the engine"
            finally:
                docker_engine.start()
            (tmp_path / "go").touch()
            async with asyncio.timeout(60):
                rest, err = await proc.communicate()
        out = head + rest
        final = await c.wait(handle, timeout=60)
    assert proc.returncode == 0, (proc.returncode, err)
    assert final.state == AppState.SUCCEEDED and not final.stale_msg, final
    kept = docker_engine.docker("logs", container(handle)).stdout.encode()
    assert out.endswith(b"end\n") and out.count(b"\n") > 10, out[-200:]
    assert out == kept, f"{len(out)} bytes printed, {len(kept)} kept by the engine"


async def test_a_follow_the_engine_leaves_open_ends_with_the_job(
    docker_engine: Engine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Docker 20.10 sometimes leaves `logs -f` of an exited container open
    (docker/docker-py#3084). Here a proxy in front of the engine holds back the end of every
    followed log, as such an engine would: the follow still ends with the job, every byte the
    engine kept printed once."""
    proxy = LogProxy(
        docker_engine.host.removeprefix("unix://"), short_tmpdir() / "d.sock", hold_follow_ends=True
    )
    async with proxy:
        d = make_docker_daemon(docker_engine, ["--set", f"local_docker.docker_host={proxy.url}"])
        with own_daemon(d, request):
            async with d.client() as c:
                script = "i=0; until [ -e /gate/go ]; do i=$((i+1)); echo line $i; sleep 0.01; done"
                handle = await c.run(gated(script, tmp_path), scheduler="local_docker", cfg=NONE)
                async with _txctl_running(d, "logs", "-f", handle) as proc:
                    assert proc.stdout is not None
                    async with asyncio.timeout(30):
                        head = await proc.stdout.readline()
                    (tmp_path / "go").touch()
                    async with asyncio.timeout(30):
                        rest, err = await proc.communicate()
    assert proxy.held, "the proxy held back no followed log's end"
    assert proc.returncode == 0, (proc.returncode, err)
    kept = docker_engine.docker("logs", container(handle)).stdout.encode()
    assert head + rest == kept and kept.startswith(b"line 1\n"), (len(head + rest), len(kept))


async def test_a_follow_whose_read_is_cut_inside_a_long_line_gets_the_rest_of_it(
    docker_engine: Engine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The engine stamps every 16 KiB piece of a long line with the time of its first piece.
    A follow whose read of the engine is cut after the first piece (here by a proxy; found as
    a flake of test_log_iterators_are_independent, whose read the engine ended when the
    container did) resumes with the rest of the line, once: resumed after that stamp, it lost
    the rest."""
    line = b"a" * 100_000 + b"\n"
    script = "head -c 100000 /dev/zero | tr '\\0' a; echo; echo end"
    async with _proxied_daemon(docker_engine, request, cut_after=1) as (d, proxy, c):
        handle = await c.run(gated(script, tmp_path), scheduler="local_docker", cfg=NONE)
        await c.wait(handle, timeout=60)  # the whole log is there: the follow's first read
        out, err = await _txctl_out(d, "logs", "-f", handle)
    assert proxy.cut.is_set(), "the proxy cut no read"
    assert out == line + b"end\n", f"{len(out)} bytes printed: {err!r}"


async def test_a_long_line_on_one_stream_is_resumed_past_later_lines_of_the_other(
    docker_engine: Engine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A progress bar on stderr, a line that takes a while to write, and lines on stdout
    meanwhile: the engine writes the line's later pieces after a stdout line stamped after
    them (they carry the time of its first piece). A follow whose read is cut after that
    stdout line still gets the rest of the bar: resumed after the stdout line's stamp, it
    lost it."""
    half = "head -c 20000 /dev/zero | tr '\\0' p >&2"  # a 16 KiB piece, the rest in the engine
    gate = "until [ -e /gate/{0} ]; do sleep 0.05; done"
    script = f"{half}; {gate.format(1)}; echo x; {gate.format(2)}; {half}; echo >&2"
    async with _proxied_daemon(docker_engine, request, cut_after=2) as (d, proxy, c):
        handle = await c.run(gated(script, tmp_path), scheduler="local_docker", cfg=NONE)
        # Each step written to the log before the next: the engine's order is fixed.
        await _logged(docker_engine, container(handle), stderr=16384)
        (tmp_path / "1").touch()
        await _logged(docker_engine, container(handle), stdout=2)
        (tmp_path / "2").touch()
        await c.wait(handle, timeout=60)
        out, err = await _txctl_out(d, "logs", "-f", handle)
    assert proxy.cut.is_set(), "the proxy cut no read"
    bar = b"p" * 40_000 + b"\n"
    assert out == bar[:16384] + b"x\n" + bar[16384:], (len(out), out[16380:16390], err)


async def test_a_follow_cut_inside_a_long_line_by_an_engine_restart_gets_the_rest_of_it(
    docker_engine: Engine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The engine stops while a follow has read the first piece of a long line and not the
    others it kept (a proxy holds them back), and while the container is still writing the
    line: once it is back, the follow gets the pieces the engine kept, then what it read
    since (the engine restarted stamps it anew), and prints exactly what the engine kept."""
    script = "head -c 100000 /dev/zero | tr '\\0' a; until [ -e /gate/go ]; do sleep 0.05; done"
    script += "; echo b; echo end"
    opts = {"cut_after": 1, "until_engine_stops": True}
    async with _proxied_daemon(docker_engine, request, FAST_RESUBSCRIBE, **opts) as (d, proxy, c):
        handle = await c.run(gated(script, tmp_path), scheduler="local_docker", cfg=NONE)
        await _logged(docker_engine, container(handle), stdout=6 * 16384)
        async with _txctl_running(d, "logs", "-f", handle) as proc:
            async with asyncio.timeout(30):
                await proxy.cut.wait()  # the first piece passed on, the others held
            docker_engine.stop(keep_containers=True)
            docker_engine.start()
            (tmp_path / "go").touch()
            async with asyncio.timeout(60):
                out, err = await proc.communicate()
    assert proc.returncode == 0, (proc.returncode, err)
    kept = docker_engine.docker("logs", container(handle)).stdout.encode()
    assert kept.startswith(b"a" * 6 * 16384) and kept.endswith(b"b\nend\n"), len(kept)
    assert out == kept, f"{len(out)} bytes printed, {len(kept)} kept by the engine"


async def test_a_follow_cut_between_lines_of_two_streams_written_out_of_stamp_order_gets_both(
    docker_engine: Engine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each stream has its own copier in the engine, which stamps a line, then writes it: of
    lines written to both streams at once, one is now and then written after a line of the
    other stamped later. A follow whose read is cut between two such lines gets the second
    too: resumed at the stamp of the first, it lost it."""
    script = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); echo o$i; echo e$i >&2; done"
    async with _proxied_daemon(docker_engine, request, cut_after=None) as (d, proxy, c):
        for _ in range(3):  # the engine reorders a few lines in a thousand: a bounded search
            handle = await c.run(gated(script, tmp_path), scheduler="local_docker", cfg=NONE)
            await c.wait(handle, timeout=120)
            kept = await _messages(docker_engine, container(handle))
            stamps = [stamp for _, stamp in kept]
            late = next((i for i in range(1, len(stamps)) if stamps[i] < stamps[i - 1]), None)
            if late is not None:
                break
        assert late is not None, "the engine wrote no line after a later-stamped one"
        proxy.cut_after = late  # the first read passes the line before it on, and ends
        out, err = await _txctl_out(d, "logs", "-f", handle)
    assert proxy.cut.is_set(), "the proxy cut no read"
    assert out == b"".join(data for data, _ in kept), (len(out), kept[late], err)


@contextlib.asynccontextmanager
async def _proxied_daemon(
    docker_engine: Engine,
    request: pytest.FixtureRequest,
    args: Sequence[str] = (),
    **proxy_opts: Any,
) -> AsyncIterator[tuple[Daemon, LogProxy, Any]]:
    """A txd of the test's own (with these arguments) that reaches the engine through a
    LogProxy(**proxy_opts); with its client."""
    engine = docker_engine.host.removeprefix("unix://")
    async with LogProxy(engine, short_tmpdir() / "d.sock", **proxy_opts) as proxy:
        args = ["--set", f"local_docker.docker_host={proxy.url}", *args]
        with own_daemon(make_docker_daemon(docker_engine, args), request) as d:
            async with d.client() as c:
                yield d, proxy, c


async def _messages(engine: Engine, name: str) -> list[tuple[bytes, int]]:
    """The engine's log of container `name`, as (message, stamp in ns), in the engine's order."""
    reader = TxdEngine(engine.host)
    try:
        read = reader.logs(name, stdout=True, stderr=True, follow=False)
        return [(m.data, m.stamp) async for m in read if m.stamp]
    finally:
        await reader.aclose()


async def _logged(engine: Engine, name: str, *, stdout: int = 0, stderr: int = 0) -> None:
    """Returns once the engine's log of container `name` holds at least these many bytes of
    each stream (bounded)."""
    for _ in range(600):
        logs = await asyncio.to_thread(engine.docker, "logs", name)
        if len(logs.stdout) >= stdout and len(logs.stderr) >= stderr:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the log of {name} has not {stdout} + {stderr} bytes: {logs}")


class LogProxy:
    """A Unix socket in front of the engine's that passes everything on, except that the
    answers to log reads (`GET .../logs?...`) are passed on frame by frame (the engine's
    multiplexed stream), and:

    - `hold_follow_ends`: the end of every followed log is held back: that connection is
      then left open, sending nothing more, until the client closes it;
    - `cut_after` k: the first answer of more than k frames ends after its k-th, its
      connection closed then (or, `until_engine_stops`, once the engine closes its side)."""

    def __init__(
        self,
        engine: str,
        path: Path,
        *,
        hold_follow_ends: bool = False,
        cut_after: int | None = None,
        until_engine_stops: bool = False,
    ) -> None:
        self.engine = engine
        self.path = path
        self.url = f"unix://{path}"
        self.hold_follow_ends = hold_follow_ends
        self.cut_after = cut_after
        self.until_engine_stops = until_engine_stops
        self.held = 0  # followed logs whose end was held back
        self.cut = asyncio.Event()  # set once an answer was cut
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], tuple[Any, ...]] = {}  # their writers

    async def __aenter__(self) -> LogProxy:
        self._server = await asyncio.start_unix_server(self._connection, str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writers in self._connections.values():  # a held connection ends with the proxy
            for w in writers:
                w.close()
        if self._connections:  # each ends once closed (asyncio logs one cancelled as an error)
            await asyncio.wait(list(self._connections), timeout=10)
        await self._server.wait_closed()

    async def _connection(self, client_r: asyncio.StreamReader, client_w: Any) -> None:
        engine_r, engine_w = await asyncio.open_unix_connection(self.engine)
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = (client_w, engine_w)
        asked: asyncio.Queue[bytes] = asyncio.Queue()  # each request's first line, in order
        gone = asyncio.Event()  # the client closed the connection

        async def requests() -> None:
            try:
                while data := await client_r.read(65536):
                    if re.match(rb"[A-Z]+ /", data):  # a new request on this connection
                        asked.put_nowait(data.split(b"\r\n", 1)[0])
                    engine_w.write(data)
                    await engine_w.drain()
            finally:
                asked.put_nowait(b"")  # no more
                gone.set()

        async def answers() -> None:
            try:
                while line := await asked.get():
                    head = await engine_r.readuntil(b"\r\n\r\n")
                    client_w.write(head)
                    if b"transfer-encoding: chunked" not in head.lower():
                        length = re.search(rb"(?i)content-length: *(\d+)", head)
                        client_w.write(await engine_r.readexactly(int(length[1]) if length else 0))
                    elif not await self._body(engine_r, client_w, line, gone):
                        return
            finally:  # the connection ends with its answers
                for w in (client_w, engine_w):
                    w.close()

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(requests())
                group.create_task(answers())
        except* (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (client_w, engine_w):
                w.close()
            del self._connections[task]

    async def _body(
        self, engine_r: asyncio.StreamReader, client_w: Any, line: bytes, gone: asyncio.Event
    ) -> bool:
        """Passes a chunked body on (a log read's frame by frame); whether the connection
        goes on."""
        logs = b"/logs?" in line
        frames = bytearray()
        count = 0
        while size := int((await engine_r.readuntil(b"\r\n")).split(b";")[0], 16):
            chunk = await engine_r.readexactly(size + 2)
            if not logs:
                client_w.write(b"%x\r\n%s" % (size, chunk))
                await client_w.drain()
                continue
            frames += chunk[:-2]
            while len(frames) >= 8 and len(frames) >= (end := 8 + int.from_bytes(frames[4:8])):
                if count == self.cut_after and not self.cut.is_set():
                    self.cut.set()
                    if self.until_engine_stops:
                        await engine_r.read()  # until the engine closes its side
                    return False
                client_w.write(b"%x\r\n%s\r\n" % (end, bytes(frames[:end])))
                del frames[:end]
                count += 1
            await client_w.drain()
        await engine_r.readexactly(2)  # the blank line that ends the body
        if logs and self.hold_follow_ends and b"follow=1" in line:
            self.held += 1
            await gone.wait()
            return False
        client_w.write(b"0\r\n\r\n")
        return True


async def _txctl_out(d: Daemon, *args: str) -> tuple[bytes, bytes]:
    """What `txctl args` printed, on stdout and stderr; it must succeed."""
    proc = await _txctl(d, *args)
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, (proc.returncode, err)
    return out, err


@contextlib.asynccontextmanager
async def _txctl_running(d: Daemon, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`txctl args` under way, killed if it still runs at the end."""
    proc = await _txctl(d, *args)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _txctl(d: Daemon, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *TXCTL,
        "--socket",
        str(d.socket),
        "--no-autostart",
        *args,
        env=d.txctl_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _stale_with(c: Any, handle: str, causes: tuple[str, ...]) -> Any:
    """The job's status once its stale message names one of `causes` (bounded)."""
    status = None
    async with asyncio.timeout(30):
        async for status in c.watch(handle):
            if any(cause in status.stale_msg for cause in causes):
                return status
    raise AssertionError(f"no stale message naming {causes}: {status}")
