"""The watch door (txd.daemon.watchdoor): Watch streams on `<socket>.watch`, served by the
daemon's own HTTP/2 server (h2) instead of grpcio's. A real daemon, real sockets: the same
statuses, errors and trailers as the socket's Watch; the clients' use of it and their fallback;
the access line and metrics of each call; gRPC's rules a client may break (deadline, flow
control, malformed requests) spoken raw with h2's client; the door's socket served again after
a removal, left alone where it is not txd's, and closed to other users."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest
from prometheus_client.parser import text_string_to_metric_families
from txd import defaults
from txd.v1 import AppDef, AppState, Role
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import (
    Daemon,
    Gates,
    closed_to_nobody,
    install_plugin,
    remove_tree,
    sh_app,
    short_tmpdir,
    until,
)

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


async def test_other_methods_are_not_served_at_the_door(d: Daemon) -> None:
    async with grpc.aio.insecure_channel(f"unix:{door(d)}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await RunnerStub(ch).Status(pb.StatusRequest(app_handle="x"), timeout=TIMEOUT)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert e.value.details() == (
        "/txd.v1.Runner/Status is not served at the watch door (only /txd.v1.Runner/Watch): "
        "call the daemon's socket"
    )


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


@dataclass
class Answer:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    ended: bool = False

    @property
    def status(self) -> tuple[int, str]:
        end = self.trailers or self.headers  # a trailers-only answer has them in its headers
        return int(end[b"grpc-status"]), end.get(b"grpc-message", b"").decode()

    def messages(self) -> list[pb.WatchResponse]:
        out, rest = [], bytes(self.data)
        while rest:
            size = int.from_bytes(rest[1:5], "big")
            out.append(pb.WatchResponse.FromString(rest[5 : 5 + size]))
            rest = rest[5 + size :]
        return out


class RawClient:
    """An HTTP/2 client connection to the door, framed by h2, with nothing of gRPC's client
    library in the way: it sends what a test makes it send and acknowledges data only if told
    (`ack`); `window` is its streams' initial flow-control window."""

    def __init__(self, path: Path, window: int | None = None, ack: bool = True) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(str(path))
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.h2.initiate_connection()
        if window is not None:
            self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.ack = ack
        self.answers: dict[int, Answer] = {}
        self._flush()

    def call(
        self,
        body: bytes,
        *,
        method: str = WATCH,
        verb: bytes = b"POST",
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> int:
        sid = self.h2.get_next_available_stream_id()
        headers = [
            (b":method", verb),
            (b":scheme", b"http"),
            (b":path", method.encode()),
            (b":authority", b"localhost"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            *(extra or []),
        ]
        self.h2.send_headers(sid, headers)
        self.h2.send_data(sid, body, end_stream=True)
        self.answers[sid] = Answer()
        self._flush()
        return sid

    def read(self, sid: int, until: Any) -> Answer:
        """Takes frames until `until(answer)` holds for stream `sid`."""
        answer = self.answers[sid]
        while not until(answer):
            data = self.sock.recv(65536)
            assert data, "the door closed the connection"
            for event in self.h2.receive_data(data):
                got = self.answers.get(getattr(event, "stream_id", 0))
                if got is None:
                    continue
                if isinstance(event, h2.events.ResponseReceived):
                    got.headers = dict(event.headers)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.DataReceived):
                    got.data += event.data or b""
                    if self.ack:
                        self.h2.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                elif isinstance(event, h2.events.TrailersReceived):
                    got.trailers = dict(event.headers)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.StreamEnded):
                    got.ended = True
            self._flush()
        return answer

    def finish(self, sid: int) -> Answer:
        return self.read(sid, lambda a: a.ended)

    def credit(self, sid: int, n: int) -> None:
        self.h2.increment_flow_control_window(n, stream_id=sid)
        self.h2.increment_flow_control_window(n)
        self._flush()

    def _flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def close(self) -> None:
        self.sock.close()


def assert_served(d: Daemon) -> None:
    """A new connection to the door gets its call answered (NOT_FOUND for no job)."""
    client = RawClient(door(d))
    try:
        request = pb.WatchRequest(app_handle="nosuch").SerializeToString()
        answer = client.finish(client.call(framed(request)))
        assert answer.status[0] == grpc.StatusCode.NOT_FOUND.value[0]
    finally:
        client.close()


def framed(message: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(message).to_bytes(4, "big") + message


@pytest.fixture
def raw(d: Daemon) -> Iterator[RawClient]:
    client = RawClient(door(d))
    yield client
    client.close()


def test_requests_that_break_grpc_s_rules_get_a_status_naming_the_fault(
    d: Daemon, raw: RawClient
) -> None:
    good = pb.WatchRequest(app_handle="nosuch").SerializeToString()
    cases = [
        (framed(good)[:-1], {}, (3, "the request is not one length-prefixed gRPC message")),
        (framed(good, flag=1), {}, (12, "compressed requests are not accepted")),
        (
            framed(good),
            {"verb": b"GET"},
            (3, "a gRPC call is a POST of content-type application/grpc"),
        ),
        (
            framed(good),
            {"extra": [(b"grpc-timeout", b"soon")]},
            (3, "grpc-timeout b'soon' is not a timeout"),
        ),
    ]
    for body, kw, want in cases:
        answer = raw.finish(raw.call(body, **kw))
        assert answer.status == want
        assert answer.messages() == []
    # The connection still serves a good call after them.
    answer = raw.finish(raw.call(framed(good)))
    assert answer.status[0] == grpc.StatusCode.NOT_FOUND.value[0]


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # + SETTINGS


@pytest.mark.parametrize(
    ("sent", "goaway"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False),  # no HTTP/2 at all: closed
        (PREFACE + bytes.fromhex("000001000000000000") + b"x", True),  # DATA on stream 0
    ],
)
def test_bytes_that_break_http2_close_that_connection_only(
    d: Daemon, sent: bytes, goaway: bool
) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(TIMEOUT)
        s.connect(str(door(d)))
        s.sendall(sent)
        got = b""
        while chunk := s.recv(65536):  # until the door closes the connection
            got += chunk
    frames = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    frames.initiate_connection()
    ended = [e for e in frames.receive_data(got) if isinstance(e, h2.events.ConnectionTerminated)]
    if goaway:  # a protocol error within HTTP/2 is told (GOAWAY) before the close
        assert [e.error_code for e in ended] == [h2.errors.ErrorCodes.PROTOCOL_ERROR]
    else:
        assert ended == []
    assert_served(d)  # another connection is


def test_a_deadline_ends_the_stream_deadline_exceeded(d: Daemon, raw: RawClient) -> None:
    with Gates(d.root) as gates:
        _, app = held_job(gates)

        handle = started(d, app)
        request = framed(pb.WatchRequest(app_handle=handle).SerializeToString())
        t0 = time.monotonic()
        answer = raw.finish(raw.call(request, extra=[(b"grpc-timeout", b"300m")]))
    assert answer.status == (grpc.StatusCode.DEADLINE_EXCEEDED.value[0], "Deadline Exceeded")
    states = [m.status.state for m in answer.messages()]
    assert states and set(states) == {AppState.RUNNING}, states  # the job still held
    assert time.monotonic() - t0 >= 0.3


def test_a_client_slow_to_take_gets_every_byte_in_order(d: Daemon) -> None:
    """A stream whose flow-control window is 16 bytes, credit given only once the job has
    ended: the door sends within the window (h2's client would fail the connection on a byte
    past it), waits for credit, then sends the rest, whole messages in order."""
    client = RawClient(door(d), window=16, ack=False)
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
        states = [m.status.state for m in answer.messages()]
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


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_refused_even_where_the_folder_lets_them_in(d: Daemon) -> None:
    """The folder keeps other users out; where someone opens it, the door still checks the
    peer's uid (SO_PEERCRED) and closes the connection before a byte of HTTP/2."""
    assert closed_to_nobody(door(d))
    assert_served(d)  # the user's own still are
