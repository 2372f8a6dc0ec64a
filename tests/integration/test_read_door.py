"""The read door (txd.daemon.readdoor, readserver): Status served on `<socket>.read` by a process
the daemon starts, outside the event loop that takes every other call. A real daemon, real
sockets: the same answers and errors as the socket's, an answer while the loop is held, the
access line of each call, the clients' use of it and their fallback to the socket, the process
started again when it dies and ended with the daemon, the door closed while the store fails."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from txd import defaults
from txd.client import DeadlineExceededError, NotFoundError
from txd.v1 import AppState
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import (
    Daemon,
    Gates,
    closed_to_nobody,
    remove_tree,
    sh_app,
    short_tmpdir,
    wait_ended,
)

TIMEOUT = 30

# Loaded by the daemon (PYTHONPATH): on SIGUSR2 its main thread, the event loop's, writes a line
# to the fifo `held` and then blocks reading the fifo `release`: the loop takes nothing until
# the test writes a line there.
HOLD = """\
import os, signal

def _hold(signum, frame):
    folder = os.environ["TXD_TEST_HOLD"]
    with open(os.path.join(folder, "held"), "w") as f:
        f.write("held\\n")
    with open(os.path.join(folder, "release")) as f:
        f.readline()

if os.environ.get("TXD_TEST_HOLD"):
    signal.signal(signal.SIGUSR2, _hold)
"""


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_tmpdir("txdt-read-")
    try:
        yield path
    finally:
        remove_tree(path)


def _daemon(root: Path, **env: str) -> Daemon:
    return Daemon(root, env=env, args=["--log-format", "json", "--log-level", "debug"])


@pytest.fixture
def d(root: Path) -> Iterator[Daemon]:
    daemon = _daemon(root)
    try:
        daemon.start()
        door_opened(daemon)
        yield daemon
    finally:
        daemon.close()


def door(d: Daemon) -> Path:
    return Path(defaults.read_door(d.socket))


def logged(d: Daemon, start: str, times: int = 1) -> str:
    """The message of the `times`th line of the daemon's log that starts with `start`, once
    written: the daemon says it is ready before its door's task has run."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = [r["msg"] for r in records(d) if r["msg"].startswith(start)]
        if len(found) >= times:
            return found[times - 1]
        time.sleep(0.02)
    raise AssertionError(f"no line {start!r} ({times}) within {TIMEOUT} s:\n{d.log()}")


def door_opened(d: Daemon, times: int = 1) -> int:
    """The pid of the read door's process once it serves (the `times`th time)."""
    return int(logged(d, "read door on ", times).rsplit("pid ", 1)[1].rstrip(")"))


def records(d: Daemon) -> list[dict[str, Any]]:
    return [json.loads(line) for line in d.log().splitlines() if line.startswith("{")]


def access(d: Daemon) -> list[dict[str, Any]]:
    return [r for r in records(d) if r.get("logger") == "txd.access"]


async def status_doors(d: Daemon) -> list[tuple[str, str]]:
    """(door, code) of each Status call's access line. The read door writes its line before
    it answers, the socket's server before it answers; a Where call's answer follows them."""
    async with grpc.aio.insecure_channel(f"unix:{d.socket}") as ch:
        await RunnerStub(ch).Where(pb.WhereRequest(), timeout=TIMEOUT)
    return [(r["door"], r["code"]) for r in access(d) if r["method"].endswith("/Status")]


# The door's wire, as txd.v1.ReadReply documents it (written here from the documentation, not
# taken from txd.readwire): a preface, then frames of a 4-byte big-endian length and a message.
PREFACE = b"txd-read/1\n"


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    return await reader.readexactly(size)


async def at_door(d: Daemon, *requests: bytes, preface: bytes = PREFACE) -> list[pb.ReadReply]:
    """The door's replies to `requests` (serialized StatusRequests), sent at once on one
    connection, read until as many came or the door closed the connection."""
    reader, writer = await asyncio.open_unix_connection(str(door(d)))
    try:
        writer.write(preface + b"".join(frame(r) for r in requests))
        replies = []
        with contextlib.suppress(asyncio.IncompleteReadError):
            async with asyncio.timeout(TIMEOUT):
                for _ in requests:
                    replies.append(pb.ReadReply.FromString(await read_frame(reader)))
        return replies
    finally:
        writer.close()


def request(handle: str) -> bytes:
    return pb.StatusRequest(app_handle=handle).SerializeToString()


async def both(d: Daemon, raw: bytes) -> tuple[Any, Any]:
    """The outcome of a Status request (its serialized bytes) on the main socket and at the
    read door, alike: the response's bytes, or the error's code, message and rich details."""
    async with grpc.aio.insecure_channel(f"unix:{d.socket}") as ch:
        call = ch.unary_unary("/txd.v1.Runner/Status")  # bytes as they are, either way
        try:
            main: Any = await call(raw, timeout=TIMEOUT)
        except grpc.aio.AioRpcError as e:
            rich = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin", b"")
            main = (e.code().value[0], e.details(), rich)
    [reply] = await at_door(d, raw)
    if reply.HasField("status"):
        read: Any = reply.status.SerializeToString()
    else:
        read = (reply.error.code, reply.error.message, reply.error.status_details)
    return main, read


async def test_the_read_door_answers_as_the_main_socket(d: Daemon) -> None:
    assert stat.S_ISSOCK(door(d).stat().st_mode)
    assert stat.S_IMODE(door(d).stat().st_mode) == 0o600
    with Gates(d.root) as gates:
        gate = gates.new("run")
        async with d.client() as c:
            done = await c.run(sh_app("echo done"), "local_cwd")
            assert (await c.wait(done)).state == AppState.SUCCEEDED  # in the store only
            running = await c.run(sh_app(gate.wait), "local_cwd")  # followed in the cache
            app_id = running.rsplit("/", 1)[1]
            huge = "x" * (defaults.MAX_REQUEST_BYTES + 1)
            asks = [done, running, app_id, app_id[:-3], "nosuch", "local_cwd://", "\x00", huge]
            raws = [request(ask) for ask in asks] + [b"\xff\xff"]  # and no message at all
            answers = [await both(d, raw) for raw in raws]
            gate.open()
            assert (await c.wait(running)).state == AppState.SUCCEEDED
    for raw, (main, read) in zip(raws, answers, strict=True):
        assert read == main, raw[:40]
    wire = [a[1] for a in answers]
    assert pb.StatusResponse.FromString(wire[0]).status.state == AppState.SUCCEEDED
    assert pb.StatusResponse.FromString(wire[1]).status.state == AppState.RUNNING
    assert wire[2] == wire[3] == wire[1]
    assert wire[4][0] == grpc.StatusCode.NOT_FOUND.value[0]
    assert wire[7][0] == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    for bad in [*wire[5:7], wire[8]]:
        assert bad[0] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert bad[2], "the field, machine-readably"
    assert "request: not a valid txd.v1.StatusRequest message" in wire[8][1]
    assert (await status_doors(d)).count(("read", "OK")) == 4
    assert (await status_doors(d)).count(("unix", "OK")) == 4


async def test_the_wire_answers_in_order_and_closes_on_what_it_cannot_take(d: Daemon) -> None:
    """Requests sent at once on one connection are answered in order. A connection that
    starts otherwise (an older client's gRPC) is closed unanswered, and gRPC's client says
    UNAVAILABLE, on which it asks the socket; a request over the limit is answered
    RESOURCE_EXHAUSTED and its connection closed, the request's bytes left unread."""
    async with d.client() as c:
        first = await c.run(sh_app("true"), "local_cwd")
        second = await c.run(sh_app("false"), "local_cwd")
        await c.wait(first)
        await c.wait(second)
    replies = await at_door(d, request(second), request("nosuch"), request(first))
    assert [r.WhichOneof("answer") for r in replies] == ["status", "error", "status"]
    assert replies[0].status.status.state == AppState.FAILED
    assert replies[1].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert replies[2].status.status.state == AppState.SUCCEEDED
    assert await at_door(d, request(first), preface=b"txd-read/9\n") == []
    async with grpc.aio.insecure_channel(f"unix:{door(d)}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await RunnerStub(ch).Status(pb.StatusRequest(app_handle=first), timeout=TIMEOUT)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    reader, writer = await asyncio.open_unix_connection(str(door(d)))
    try:
        writer.write(PREFACE + struct.pack(">I", defaults.MAX_REQUEST_BYTES + 1) + b"x" * 100)
        async with asyncio.timeout(TIMEOUT):
            error = pb.ReadReply.FromString(await read_frame(reader)).error
            assert await reader.read() == b""  # closed
    finally:
        writer.close()
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert error.message == (
        f"SERVER: Received message larger than max ({defaults.MAX_REQUEST_BYTES + 1} vs. "
        f"{defaults.MAX_REQUEST_BYTES})"
    )
    assert [r.status.status.state for r in await at_door(d, request(first))] == [
        AppState.SUCCEEDED
    ]  # and the door serves on


async def test_the_read_door_answers_while_the_event_loop_is_held(root: Path) -> None:
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(HOLD)
    for name in ("held", "release"):
        os.mkfifo(root / name)
    daemon = _daemon(root, PYTHONPATH=str(root / "site"), TXD_TEST_HOLD=str(root))
    try:
        daemon.start()
        door_opened(daemon)
        async with daemon.client() as c:
            handle = await c.run(sh_app("echo done"), "local_cwd")
            assert (await c.wait(handle)).state == AppState.SUCCEEDED
        release = os.open(root / "release", os.O_RDWR)  # the daemon's open never blocks
        try:
            held = os.open(root / "held", os.O_RDWR)
            try:
                os.kill(daemon.pid, signal.SIGUSR2)
                assert select.select([held], [], [], TIMEOUT)[0], "the loop was not held"
                assert os.read(held, 5) == b"held\n"  # the loop is held from here on
            finally:
                os.close(held)
            async with grpc.aio.insecure_channel(f"unix:{daemon.socket}") as main_ch:
                main = asyncio.ensure_future(
                    RunnerStub(main_ch).Status(pb.StatusRequest(app_handle=handle), timeout=60)
                )
                async with daemon.client() as c:
                    assert (await c.status(handle)).state == AppState.SUCCEEDED
                assert not main.done()  # the main socket's call waits for the loop
                os.write(release, b"go\n")
                assert (await main).status.state == AppState.SUCCEEDED
        finally:
            os.close(release)
    finally:
        daemon.close()


async def test_read_door_calls_are_logged(d: Daemon) -> None:
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
        for _ in range(3):
            await c.status(handle)
        with pytest.raises(NotFoundError, match="no job"):
            await c.status("nosuch")
    await status_doors(d)  # every line written
    reads = [r for r in access(d) if r["door"] == "read"]
    assert [(r["method"], r["code"]) for r in reads] == [
        *[("/txd.v1.Runner/Status", "OK")] * 3,
        ("/txd.v1.Runner/Status", "NOT_FOUND"),
    ]
    assert all(r["type"] == "unary" and r["ms"] >= 0 for r in reads)


async def test_read_door_calls_count_in_the_metrics(d: Daemon) -> None:
    """The daemon's gRPC server metrics count the door's calls as the socket's: Status's series
    move by the door's calls (told by its process a quarter second at a time) and the socket's."""
    status = {"grpc_service": "txd.v1.Runner", "grpc_type": "unary", "grpc_method": "Status"}
    series = [
        ("grpc_server_started_total", {}),
        ("grpc_server_msg_received_total", {}),
        ("grpc_server_msg_sent_total", {}),
        ("grpc_server_handling_seconds_count", {}),
        ("grpc_server_handled_total", {"grpc_code": "OK"}),
        ("grpc_server_handled_total", {"grpc_code": "NotFound"}),
    ]

    async def counts(c: Any) -> list[float]:
        text = (await c.metrics(prometheus=True)).text
        found = {
            (x.name, frozenset(x.labels.items())): x.value
            for f in text_string_to_metric_families(text)
            for x in f.samples
        }
        return [
            found.get((name, frozenset({**status, **labels}.items())), 0.0)
            for name, labels in series
        ]

    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
        before = await counts(c)
        replies = await at_door(d, request(handle), request(handle), request("nosuch"))
        assert [r.WhichOneof("answer") for r in replies] == ["status", "status", "error"]
        async with grpc.aio.insecure_channel(f"unix:{d.socket}") as ch:
            await RunnerStub(ch).Status(pb.StatusRequest(app_handle=handle), timeout=TIMEOUT)
        # started, received, sent, timed, OK, NotFound
        want = [b + m for b, m in zip(before, [4, 4, 3, 4, 3, 1], strict=True)]
        got = await counts(c)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TIMEOUT):  # the door tells its calls every 0.25 s
                while got != want:
                    await asyncio.sleep(0.05)
                    got = await counts(c)
        assert got == want


async def test_clients_fall_back_to_the_main_socket(d: Daemon) -> None:
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
        assert (await c.status(handle)).state == AppState.SUCCEEDED
        assert (await status_doors(d))[-1] == ("read", "OK")
        # A dead daemon's file: nobody listens there (a socket bound, then closed).
        door(d).unlink()
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(str(door(d)))
        dead.close()
        # This client's connection goes on to the door it reached; a new one (of its own:
        # gRPC shares a process's connections to one path) falls back.
        assert (await c.status(handle)).state == AppState.SUCCEEDED
        assert (await status_doors(d))[-1] == ("read", "OK")
    async with d.client(own_connection=True) as c:
        assert (await c.status(handle)).state == AppState.SUCCEEDED
        assert (await status_doors(d))[-1] == ("unix", "OK")
    proc = d.txctl("status", handle, check=True)
    assert "SUCCEEDED" in proc.stdout
    assert (await status_doors(d))[-1] == ("unix", "OK")
    door(d).unlink()  # none at all
    async with d.client() as c:
        assert (await c.status(handle)).state == AppState.SUCCEEDED
    assert (await status_doors(d))[-1] == ("unix", "OK")


async def test_a_door_that_does_not_answer_in_time_is_a_deadline_exceeded(d: Daemon) -> None:
    """The client's timeout covers the door's answer (its process stopped here): the call
    fails DEADLINE_EXCEEDED, as it would at the socket, and the next one is answered there."""
    pid = door_opened(d)
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
    async with d.client(timeout=0.5) as c:
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(DeadlineExceededError, match="Deadline Exceeded"):
                await c.status(handle)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert (await c.status(handle)).state == AppState.SUCCEEDED
    assert (await status_doors(d))[-1] == ("read", "OK")


@pytest.mark.parametrize("other", ["grpc", "empty frames"])
async def test_a_door_on_another_wire_sends_the_client_to_the_socket(d: Daemon, other: str) -> None:
    """An older daemon's read door (gRPC) at the door's path, or a server that answers frames
    that are no ReadReply: each call of the client is answered by the socket (the door's file
    is looked at again at each, as after any door that gave no answer: the daemon may have
    been started again meanwhile)."""
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
    door(d).unlink()
    async with contextlib.AsyncExitStack() as stack:
        if other == "grpc":
            old = grpc.aio.server()
            old.add_generic_rpc_handlers(
                [grpc.method_handlers_generic_handler("txd.v1.Runner", {})]  # answers nothing
            )
            old.add_insecure_port(f"unix:{door(d)}")
            await old.start()
            stack.push_async_callback(old.stop, None)
        else:

            async def empty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                with contextlib.suppress(ConnectionError):
                    while await reader.read(4096):
                        writer.write(frame(b""))  # a message of no field: no answer
                writer.close()

            server = await asyncio.start_unix_server(empty, str(door(d)))
            stack.push_async_callback(server.wait_closed)
            stack.callback(server.close)
        async with d.client() as c:
            for _ in range(2):
                assert (await c.status(handle)).state == AppState.SUCCEEDED
    assert [door for door, _ in await status_doors(d)] == ["unix", "unix"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
async def test_another_user_is_refused_even_where_the_folder_lets_them_in(d: Daemon) -> None:
    """The folder keeps other users out; where someone opens it, the door still checks the
    peer's uid (SO_PEERCRED) and closes the connection without an answer."""
    sent = PREFACE + frame(request("nosuch"))
    assert await asyncio.to_thread(closed_to_nobody, door(d), sent)
    [reply] = await at_door(d, request("nosuch"))  # the user's own are answered
    assert reply.error.code == grpc.StatusCode.NOT_FOUND.value[0]


async def test_txctl_status_goes_through_the_read_door(d: Daemon) -> None:
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
    proc = d.txctl("status", handle, check=True)
    assert "SUCCEEDED" in proc.stdout
    assert (await status_doors(d)) == [("read", "OK")]


async def test_the_door_process_is_started_again_and_ends_with_the_daemon(d: Daemon) -> None:
    """...and a client's connection to the process that died is made again to the new one."""
    first = door_opened(d)
    async with d.client() as c:
        handle = await c.run(sh_app("echo done"), "local_cwd")
        await c.wait(handle)
        assert (await c.status(handle)).state == AppState.SUCCEEDED  # connected to `first`
        os.kill(first, signal.SIGKILL)
        wait_ended(first, TIMEOUT)
        second = door_opened(d, times=2)  # a new process, on the same path
        assert second != first
        assert "read door's process ended (exit -9): starting it again" in d.log()
        assert (await c.status(handle)).state == AppState.SUCCEEDED
    assert (await status_doors(d))[-2:] == [("read", "OK")] * 2
    d.kill()  # the daemon dies without a word: the door's process ends too
    wait_ended(second, TIMEOUT)


async def test_a_removed_door_is_served_again(root: Path) -> None:
    """The door's file removed alone (a tmp cleaner), then the socket's whole folder with both
    files (logind at the user's last logout): each time a new process serves the door again,
    once the daemon serves on its own path, and Status goes through it."""
    d = _daemon(root)
    d.socket = root / "run" / "txd.sock"  # a folder of its own, which the test removes
    try:
        d.start()
        first = door_opened(d)
        async with d.client() as c:
            handle = await c.run(sh_app("echo done"), "local_cwd")
            await c.wait(handle)
        door(d).unlink()
        second = door_opened(d, times=2)
        wait_ended(first, TIMEOUT)
        assert f"the read door's socket {door(d)} was removed or replaced" in d.log()
        shutil.rmtree(d.socket.parent)
        third = door_opened(d, times=3)
        wait_ended(second, TIMEOUT)
        assert len({first, second, third}) == 3
        async with d.client() as c:
            assert (await c.status(handle)).state == AppState.SUCCEEDED
        assert (await status_doors(d))[-1] == ("read", "OK")
        assert "read door's process ended" not in d.log()  # not counted as a failure
    finally:
        d.close()


def test_sigterm_ends_the_door_process_at_once(d: Daemon) -> None:
    """SIGTERM keeps its default action in the door's process, however many arrive (the
    daemon's stop and the kernel's parent-death signal may both come): a Python handler that
    set an Event the main thread waited on deadlocked on the Event's lock when a second signal
    arrived inside the first (a door outlived its SIGKILLed daemon so, found after a CI run)."""
    first = door_opened(d)
    with open(f"/proc/{first}/status") as f:
        caught = int(next(x for x in f if x.startswith("SigCgt:")).split()[1], 16)
    assert not caught & (1 << (signal.SIGTERM - 1)), "the door catches SIGTERM"
    fd = os.pidfd_open(first)  # signals go to that process, never to a pid reused after it
    try:
        for _ in range(50):
            try:
                signal.pidfd_send_signal(fd, signal.SIGTERM)
            except ProcessLookupError:  # it ended (and was reaped) within the burst
                break
    finally:
        os.close(fd)
    wait_ended(first, TIMEOUT)
    assert door_opened(d, times=2) != first


def test_a_stale_socket_is_replaced_and_a_stop_removes_the_door(root: Path) -> None:
    daemon = _daemon(root)
    dead = socket.socket(socket.AF_UNIX)  # a crashed daemon's: nobody listens
    dead.bind(defaults.read_door(daemon.socket))
    dead.close()
    try:
        daemon.start()
        door_opened(daemon)
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(door(daemon)))  # served again
        assert daemon.stop() == 0
        assert not door(daemon).exists()
    finally:
        daemon.close()


async def test_a_file_that_is_no_stale_socket_is_left_alone(root: Path) -> None:
    daemon = _daemon(root)
    door(daemon).write_text("the user's own file\n")
    try:
        daemon.start()
        assert logged(daemon, "no read door: ").endswith("which txd never removes")
        assert door(daemon).read_text() == "the user's own file\n"
        async with daemon.client() as c:  # Status through the main socket
            handle = await c.run(sh_app("echo done"), "local_cwd")
            assert (await c.wait(handle)).state == AppState.SUCCEEDED
            assert (await c.status(handle)).state == AppState.SUCCEEDED
        assert (await status_doors(daemon)) == [("unix", "OK")]
        assert daemon.stop() == 0
        assert door(daemon).read_text() == "the user's own file\n"
    finally:
        daemon.close()


async def test_no_read_door_for_a_store_on_a_network_file_system(root: Path) -> None:
    daemon = _daemon(root, TXD_STATE_FS="network")
    try:
        daemon.start()
        logged(daemon, "no read door: the job store is on a network file system")
        assert not door(daemon).exists()
        async with daemon.client() as c:
            handle = await c.run(sh_app("echo done"), "local_cwd")
            assert (await c.wait(handle)).state == AppState.SUCCEEDED
            assert (await c.status(handle)).state == AppState.SUCCEEDED
        assert (await status_doors(daemon)) == [("unix", "OK")]
    finally:
        daemon.close()


async def test_no_read_door_where_its_path_is_too_long_for_a_socket(root: Path) -> None:
    daemon = _daemon(root)
    # 105 bytes: a Unix socket's path may have 107; the door's, 5 more, may not.
    daemon.socket = root / ("s" * (105 - len(str(root)) - len("/.sock")) + ".sock")
    assert len(str(daemon.socket)) == 105
    try:
        daemon.start()
        assert "cannot serve on" in logged(daemon, "no read door: ")
        async with daemon.client() as c:
            handle = await c.run(sh_app("echo done"), "local_cwd")
            assert (await c.wait(handle)).state == AppState.SUCCEEDED
            assert (await c.status(handle)).state == AppState.SUCCEEDED
        assert (await status_doors(daemon)) == [("unix", "OK")]
        assert daemon.stop() == 0
        assert "read door's process ended" not in daemon.log()  # refused once, not retried
    finally:
        daemon.close()
