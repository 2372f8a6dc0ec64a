"""local_docker's logs through a real txd on the real test engine: `--tail` exact on a log of
many engine reads, a replica whose container was removed outside txd, and a follow that rides
out an engine restart, losing and repeating no byte the engine kept."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_testing import BUSYBOX, Engine, make_docker_daemon
from txd.v1 import AppDef, AppState, BindMount, Mount, Role
from txd_testing import TXCTL, Daemon, own_daemon, short_tmpdir

NONE = {"network": "none"}
LINES = 20_000  # about 110 kB per replica: many reads of the engine's stream


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
    d = make_docker_daemon(
        docker_engine,
        ["--set", "local_docker.poll_interval=0.5", "--set", "local_docker.engine_timeout=2"],
    )
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
    proc = await _txctl(docker_daemon, "logs", "-f", handle)
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            for _ in range(3):  # every replica's "up" is printed
                assert (await proc.stdout.readline()).endswith(b" up\n")
        docker_engine.docker("rm", "-f", container(handle, 1))
        (tmp_path / "go").touch()
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
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
        proc = await _txctl(logs_daemon, "logs", "-f", handle)
        try:
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
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
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
    proxy = HoldFollowEnds(docker_engine.host.removeprefix("unix://"), short_tmpdir() / "d.sock")
    async with proxy:
        d = make_docker_daemon(docker_engine, ["--set", f"local_docker.docker_host={proxy.url}"])
        with own_daemon(d, request):
            async with d.client() as c:
                script = "i=0; until [ -e /gate/go ]; do i=$((i+1)); echo line $i; sleep 0.01; done"
                handle = await c.run(gated(script, tmp_path), scheduler="local_docker", cfg=NONE)
                proc = await _txctl(d, "logs", "-f", handle)
                try:
                    assert proc.stdout is not None
                    async with asyncio.timeout(30):
                        head = await proc.stdout.readline()
                    (tmp_path / "go").touch()
                    async with asyncio.timeout(30):
                        rest, err = await proc.communicate()
                finally:
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
    assert proxy.held, "the proxy held back no followed log's end"
    assert proc.returncode == 0, (proc.returncode, err)
    kept = docker_engine.docker("logs", container(handle)).stdout.encode()
    assert head + rest == kept and kept.startswith(b"line 1\n"), (len(head + rest), len(kept))


class HoldFollowEnds:
    """A Unix socket in front of the engine's that passes everything on, except the end of a
    followed log (the last chunk of a `GET .../logs?...follow=1` answer): that connection is
    then left open, sending nothing more, until the client closes it."""

    def __init__(self, engine: str, path: Path) -> None:
        self.engine = engine
        self.path = path
        self.url = f"unix://{path}"
        self.held = 0
        self._server: asyncio.Server | None = None
        self._clients: set[Any] = set()

    async def __aenter__(self) -> HoldFollowEnds:
        self._server = await asyncio.start_unix_server(self._connection, str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._clients:  # a held connection ends with the proxy
            w.close()
        await self._server.wait_closed()

    async def _connection(self, client_r: asyncio.StreamReader, client_w: Any) -> None:
        self._clients.add(client_w)
        engine_r, engine_w = await asyncio.open_unix_connection(self.engine)
        following = False

        async def requests() -> None:
            nonlocal following
            while data := await client_r.read(65536):
                if data.startswith(b"GET "):  # a new request on this connection
                    line = data.split(b"\r\n", 1)[0]
                    following = b"/logs?" in line and b"follow=1" in line
                engine_w.write(data)
                await engine_w.drain()

        async def answers() -> None:
            while data := await engine_r.read(65536):
                if following and data.endswith(b"0\r\n\r\n"):
                    client_w.write(data[:-5])  # the answer never ends
                    self.held += 1
                    await client_r.read()  # until the client closes
                    return
                client_w.write(data)
                await client_w.drain()

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(requests())
                group.create_task(answers())
        except* (ConnectionError, OSError):
            pass
        finally:
            for w in (client_w, engine_w):
                w.close()


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
