"""The watch door (txd.daemon.watchdoor): Watch streams on `<socket>.watch`, served by the
daemon's own HTTP/2 server (h2) instead of grpcio's. A real daemon, real sockets: the same
statuses, errors and trailers as the socket's Watch; the clients' use of it and their fallback;
the access line and metrics of each call; a deadline and a client slow to take its bytes, spoken
raw with h2's client; the door's socket served again after a removal and left alone where it is
not txd's. What both doors' server does alike (malformed requests, other users) is in
test_h2door.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from h2raw import RawClient, framed
from prometheus_client.parser import text_string_to_metric_families
from txd import defaults
from txd.v1 import AppDef, AppState, Role
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import Daemon, Gates, install_plugin, remove_tree, sh_app, short_tmpdir, until

TIMEOUT = 30
WATCH = "/txd.v1.Runner/Watch"


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_tmpdir("txdt-watch-")
    try:
        yield path
    finally:
        remove_tree(path)


def _daemon(root: Path) -> Daemon:
    return Daemon(root, args=["--log-format", "json", "--log-level", "debug"])


@pytest.fixture
def d(root: Path) -> Iterator[Daemon]:
    daemon = _daemon(root)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.close()


def door(d: Daemon) -> Path:
    return Path(defaults.watch_door(d.socket))


def records(d: Daemon) -> list[dict[str, Any]]:
    return [json.loads(line) for line in d.log().splitlines() if line.startswith("{")]


async def watch_doors(d: Daemon) -> list[tuple[str, str]]:
    """(door, code) of each Watch call's access line: a Where call's answer follows every line
    of a call that has ended (a line is written as its call ends, before its last frame)."""
    async with grpc.aio.insecure_channel(f"unix:{d.socket}") as ch:
        await RunnerStub(ch).Where(pb.WhereRequest(), timeout=TIMEOUT)
    return [
        (r["door"], r["code"])
        for r in records(d)
        if r.get("logger") == "txd.access" and r["method"] == WATCH
    ]


async def outcome(path: Path, request: bytes) -> tuple[list[bytes], Any]:
    """A Watch call at `path` to its end: the messages, then the status (code, details and
    trailing metadata)."""
    async with grpc.aio.insecure_channel(f"unix:{path}") as ch:
        call = ch.unary_stream(WATCH, None, None)(request, timeout=TIMEOUT)
        messages = []
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for msg in call:
                messages.append(msg)
        trailers = sorted((k, v) for k, v in await call.trailing_metadata() or ())
        return messages, (await call.code(), await call.details(), trailers)


def held_job(gates: Gates) -> tuple[Any, Any]:
    gate = gates.new("go")
    return gate, sh_app(f"{gate.wait}; echo done")


def started(d: Daemon, app: Any) -> str:
    """The handle of `app` run on local_cwd, once RUNNING (for the tests that drive the door
    with the blocking raw client)."""

    async def start() -> str:
        async with d.client() as c:
            handle: str = await c.run(app, "local_cwd")
            await running(c, handle)
            return handle

    return asyncio.run(start())


async def running(c: Any, handle: str) -> None:
    async for status in c.watch(handle):
        if status.state == AppState.RUNNING:
            return


# -- the same answers as the socket --------------------------------------------------------


async def test_the_door_answers_as_the_socket(d: Daemon) -> None:
    requests = [
        pb.WatchRequest(app_handle="local_cwd://nosuch/x").SerializeToString(),
        pb.WatchRequest(app_handle="ambig").SerializeToString(),
        # Quoted in the message: percent-encoded in grpc-message, as gRPC says.
        pb.WatchRequest(app_handle="local_cwd://nosuch/é%ü 100%").SerializeToString(),
        b"\x0a\x02\xff\xfe",  # app_handle not UTF-8: INVALID_ARGUMENT naming the field
        b"\xff\xff",  # no message at all
    ]
    with Gates(d.root) as gates:
        gate, app = held_job(gates)
        async with d.client() as c:
            handle = await c.run(app, "local_cwd")
            await running(c, handle)
            request = pb.WatchRequest(app_handle=handle).SerializeToString()
            sent = await _sent(d)
            at_socket = asyncio.ensure_future(outcome(d.socket, request))
            at_door = asyncio.ensure_future(outcome(door(d), request))
            await _until_sent(d, sent + 2)  # both have had their first status
            gate.open()
            assert (await c.wait(handle)).state == AppState.SUCCEEDED
        socket_msgs, socket_end = await at_socket
        door_msgs, door_end = await at_door
    # Both streams start at RUNNING and end with the same terminal status (a change between
    # them, a stale mark on a busy machine say, may reach one stream and not the other).
    for msgs in (door_msgs, socket_msgs):
        states = [pb.WatchResponse.FromString(m).status.state for m in msgs]
        assert states[0] == AppState.RUNNING and states[-1] == AppState.SUCCEEDED, states
    assert door_msgs[-1] == socket_msgs[-1]
    assert door_end == socket_end == (grpc.StatusCode.OK, "", [])
    for request in [*requests, pb.WatchRequest(app_handle=handle).SerializeToString()]:
        by_socket, by_door = await outcome(d.socket, request), await outcome(door(d), request)
        assert by_door == by_socket
    codes = [(await outcome(door(d), r))[1][0] for r in requests]
    assert codes == [
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.INVALID_ARGUMENT,
    ]


async def test_a_stopping_daemon_ends_the_door_streams_as_the_socket_s(root: Path) -> None:
    """A job that outlives the daemon (fakepush's; a local one is stopped with it, and its
    streams end with its last status): its open streams are told the daemon is stopping."""
    install_plugin(root / "site", "fakepush")
    daemon = Daemon(root, env={"PYTHONPATH": str(root / "site")}).start()
    try:
        app = AppDef(name="blk", roles=[Role(name="r", entrypoint="x", args=["block"])])
        async with daemon.client() as c:
            handle = await c.run(app, "fakepush", cwd="/")
        request = pb.WatchRequest(app_handle=handle).SerializeToString()
        sent = await _sent(daemon)
        at_socket = asyncio.ensure_future(outcome(daemon.socket, request))
        at_door = asyncio.ensure_future(outcome(door(daemon), request))
        await _until_sent(daemon, sent + 2)
        assert await asyncio.to_thread(daemon.stop) == 0
        (socket_msgs, socket_end), (door_msgs, door_end) = await at_socket, await at_door
        assert door_end[:2] == (
            grpc.StatusCode.UNAVAILABLE,
            "txd is shutting down; the job goes on without it",
        )
        assert (door_msgs, door_end) == (socket_msgs, socket_end)
        assert not door(daemon).exists()  # removed at the stop
    finally:
        daemon.close()


async def _sent(d: Daemon) -> float:
    """Watch responses sent so far, at either door (grpc_server_msg_sent_total)."""
    async with d.client() as c:
        return _sample(await c.metrics(prometheus=True), "grpc_server_msg_sent_total", "Watch")


async def _until_sent(d: Daemon, n: float) -> None:
    async def enough() -> bool:
        return await _sent(d) >= n

    await until(enough, f"{n:.0f} Watch responses sent")


def _sample(resp: Any, name: str, method: str, **labels: str) -> float:
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            if (
                s.name == name
                and s.labels.get("grpc_method") == method
                and all(s.labels.get(k) == v for k, v in labels.items())
            ):
                return float(s.value)
    return 0.0


# -- clients ---------------------------------------------------------------------------------


async def test_clients_watch_through_the_door_and_fall_back(d: Daemon) -> None:
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        assert [s.state async for s in c.watch(handle)][-1] == AppState.SUCCEEDED
    proc = d.txctl("wait", handle, check=True)
    assert "SUCCEEDED" in proc.stdout
    assert await watch_doors(d) == [("watch", "OK")] * 2
    # A dead daemon's file: nobody listens there (a socket bound, then closed).
    door(d).unlink()
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(door(d)))
    dead.close()
    async with d.client() as c:
        assert [s.state async for s in c.watch(handle)] == [AppState.SUCCEEDED]
    assert (await watch_doors(d))[-1] == ("unix", "OK")
    door(d).unlink()  # none at all
    d.txctl("wait", handle, check=True)
    assert (await watch_doors(d))[-1] == ("unix", "OK")


async def test_door_calls_are_logged_and_counted(d: Daemon) -> None:
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
        kinds = {"grpc_type": "server_stream"}
        names = ["grpc_server_started_total", "grpc_server_msg_sent_total"]
        before = [_sample(await c.metrics(prometheus=True), n, "Watch", **kinds) for n in names]
        request = pb.WatchRequest(app_handle=handle).SerializeToString()
        await outcome(door(d), request)
        await outcome(door(d), pb.WatchRequest(app_handle="nosuch").SerializeToString())
        metrics = await c.metrics(prometheus=True)
    after = [_sample(metrics, n, "Watch", **kinds) for n in names]
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1]
    assert _sample(metrics, "grpc_server_handled_total", "Watch", grpc_code="NotFound") == 1
    lines = [r for r in records(d) if r.get("logger") == "txd.access" and r["door"] == "watch"]
    assert [(r["code"], r["type"], r["received"], r["sent"]) for r in lines] == [
        ("OK", "server_stream", 1, 1),
        ("NOT_FOUND", "server_stream", 1, 0),
    ]


async def test_a_client_that_leaves_ends_its_stream(d: Daemon) -> None:
    with Gates(d.root) as gates:
        _, app = held_job(gates)
        async with d.client() as c:
            handle = await c.run(app, "local_cwd")
            async for status in c.watch(handle):
                if status.state == AppState.RUNNING:
                    break  # the client cancels the call

    async def cancelled() -> bool:
        return await watch_doors(d) == [("watch", "CANCELLED")]

    await until(cancelled, "the stream ended CANCELLED at the door")


# -- gRPC's rules, spoken raw ---------------------------------------------------------------


@pytest.fixture
def raw(d: Daemon) -> Iterator[RawClient]:
    client = RawClient(door(d), WATCH)
    yield client
    client.close()


def test_a_deadline_ends_the_stream_deadline_exceeded(d: Daemon, raw: RawClient) -> None:
    with Gates(d.root) as gates:
        _, app = held_job(gates)

        handle = started(d, app)
        request = framed(pb.WatchRequest(app_handle=handle).SerializeToString())
        t0 = time.monotonic()
        answer = raw.finish(raw.call(request, extra=[(b"grpc-timeout", b"300m")]))
    assert answer.status == (grpc.StatusCode.DEADLINE_EXCEEDED.value[0], "Deadline Exceeded")
    states = [m.status.state for m in answer.messages(pb.WatchResponse.FromString)]
    assert states and set(states) == {AppState.RUNNING}, states  # the job still held
    assert time.monotonic() - t0 >= 0.3


def test_a_client_slow_to_take_gets_every_byte_in_order(d: Daemon) -> None:
    """A stream whose flow-control window is 16 bytes, credit given only once the job has
    ended: the door sends within the window (h2's client would fail the connection on a byte
    past it), waits for credit, then sends the rest, whole messages in order."""
    client = RawClient(door(d), WATCH, window=16, ack=False)
    try:
        with Gates(d.root) as gates:
            gate, app = held_job(gates)

            handle = started(d, app)
            sid = client.call(framed(pb.WatchRequest(app_handle=handle).SerializeToString()))
            part = client.read(sid, lambda a: len(a.data) >= 16)
            assert len(part.data) == 16
            gate.open()

            async def ended() -> None:
                async with d.client() as c:
                    assert (await c.wait(handle)).state == AppState.SUCCEEDED

            asyncio.run(ended())
            client.credit(sid, 1 << 20)
            answer = client.finish(sid)
        assert answer.status == (0, "")
        states = [m.status.state for m in answer.messages(pb.WatchResponse.FromString)]
        assert states == [AppState.RUNNING, AppState.SUCCEEDED]
    finally:
        client.close()


# -- its socket --------------------------------------------------------------------------------


async def test_a_removed_door_is_served_again(d: Daemon) -> None:
    door(d).unlink()

    async def there() -> bool:  # the socket watch checks each second
        return door(d).exists()

    await until(there, "the door served again")
    assert any(
        r["msg"].startswith("the watch door's socket ") and "serving there again" in r["msg"]
        for r in records(d)
    )
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        assert [s.state async for s in c.watch(handle)][-1] == AppState.SUCCEEDED
    assert (await watch_doors(d))[-1] == ("watch", "OK")


async def assert_watched_through_the_socket(d: Daemon) -> None:
    """The client's watch of a job to its end goes through the socket (no door)."""
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        assert [s.state async for s in c.watch(handle)][-1] == AppState.SUCCEEDED
    assert await watch_doors(d) == [("unix", "OK")]


async def test_a_file_that_is_no_stale_socket_is_left_alone(root: Path) -> None:
    daemon = _daemon(root)
    door(daemon).write_text("the user's own file\n")
    try:
        daemon.start()
        await assert_watched_through_the_socket(daemon)
        said = [r["msg"] for r in records(daemon) if r["msg"].startswith("no watch door")]
        assert said == [
            f"no watch door (Watch goes through the socket): {door(daemon)} is a regular "
            "file (yours), which txd never removes"
        ]
        assert daemon.stop() == 0
        assert door(daemon).read_text() == "the user's own file\n"
    finally:
        daemon.close()


async def test_no_watch_door_where_its_path_is_too_long_for_a_socket(root: Path) -> None:
    daemon = _daemon(root)
    # 101 bytes: a Unix socket's path may have 107; the door's, 6 more, may not.
    daemon.socket = root / ("s" * (102 - len(str(root)) - len("/.sock")) + ".sock")
    assert len(str(daemon.socket)) == 102
    try:
        daemon.start()
        await assert_watched_through_the_socket(daemon)
        assert any(r["msg"].startswith("no watch door") for r in records(daemon))
        assert daemon.stop() == 0
    finally:
        daemon.close()
