"""The side doors' HTTP/2 server (txd.daemon.h2door), at both doors of a real daemon: the watch
door (Watch, on the daemon's event loop) and the read door (Status, in a process of its own).
Each breaks gRPC's and HTTP/2's rules as no gRPC client would, spoken raw with h2's client: the
call gets a status naming the fault, bytes that are no HTTP/2 close that connection only, other
methods are refused naming the door, and another user's connection is closed before a byte."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from h2raw import RawClient, framed
from txd import defaults
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import Daemon, remove_tree, short_tmpdir

TIMEOUT = 30


@dataclass(frozen=True)
class Door:
    name: str
    path: Callable[[str], str]  # the door's file, from the daemon's socket
    method: str  # the one method it serves
    request: Any  # that method's request message


DOORS = [
    Door("watch", defaults.watch_door, "/txd.v1.Runner/Watch", pb.WatchRequest),
    Door("read", defaults.read_door, "/txd.v1.Runner/Status", pb.StatusRequest),
]


@pytest.fixture(params=DOORS, ids=[door.name for door in DOORS])
def door(request: pytest.FixtureRequest) -> Door:
    chosen: Door = request.param
    return chosen


@pytest.fixture
def d() -> Iterator[Daemon]:
    root = short_tmpdir("txdt-h2door-")
    daemon = Daemon(root, args=["--log-format", "json", "--log-level", "debug"])
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.close()
        remove_tree(root)


def path(d: Daemon, door: Door) -> Path:
    """The door's file, once it takes connections (the read door's process starts after the
    daemon says it is ready)."""
    where = Path(door.path(str(d.socket)))

    def takes() -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(where))
            except OSError:
                return False
            return True

    deadline = time.monotonic() + TIMEOUT
    while not takes():  # bounded: the process is up within a second or two
        assert time.monotonic() < deadline, f"the {door.name} door took no connection"
        time.sleep(0.02)
    return where


def assert_served(d: Daemon, door: Door) -> None:
    """A new connection to the door gets its call answered (NOT_FOUND for no job)."""
    client = RawClient(path(d, door), door.method)
    try:
        answer = client.finish(
            client.call(framed(door.request(app_handle="nosuch").SerializeToString()))
        )
        assert answer.status[0] == grpc.StatusCode.NOT_FOUND.value[0]
    finally:
        client.close()


async def test_other_methods_are_not_served_at_the_door(d: Daemon, door: Door) -> None:
    async with grpc.aio.insecure_channel(f"unix:{path(d, door)}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await RunnerStub(ch).Where(pb.WhereRequest(), timeout=TIMEOUT)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert e.value.details() == (
        f"/txd.v1.Runner/Where is not served at the {door.name} door (only {door.method}): "
        "call the daemon's socket"
    )


def test_requests_that_break_grpc_s_rules_get_a_status_naming_the_fault(
    d: Daemon, door: Door
) -> None:
    good = door.request(app_handle="nosuch").SerializeToString()
    limit = defaults.MAX_REQUEST_BYTES
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
        # Refused on its length prefix, as grpcio's server words it at the daemon's socket.
        (
            (limit + 1).to_bytes(5, "big"),
            {},
            (8, f"SERVER: Received message larger than max ({limit + 1} vs. {limit})"),
        ),
    ]
    raw = RawClient(path(d, door), door.method)
    try:
        for body, kw, want in cases:
            answer = raw.finish(raw.call(body, **kw))
            assert answer.status == want
            assert answer.data == b""
        # The connection still serves a good call after them.
        answer = raw.finish(raw.call(framed(good)))
        assert answer.status[0] == grpc.StatusCode.NOT_FOUND.value[0]
    finally:
        raw.close()


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # + SETTINGS


@pytest.mark.parametrize(
    ("sent", "goaway"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False),  # no HTTP/2 at all: closed
        (PREFACE + bytes.fromhex("000001000000000000") + b"x", True),  # DATA on stream 0
    ],
)
def test_bytes_that_break_http2_close_that_connection_only(
    d: Daemon, door: Door, sent: bytes, goaway: bool
) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(TIMEOUT)
        s.connect(str(path(d, door)))
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
    assert_served(d, door)  # another connection is


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_refused_even_where_the_folder_lets_them_in(d: Daemon, door: Door) -> None:
    """The folder keeps other users out; where someone opens it, the door still checks the
    peer's uid (SO_PEERCRED) and closes the connection before a byte of HTTP/2."""
    where = path(d, door)
    folder = where.parent
    mode = stat.S_IMODE(folder.stat().st_mode)
    os.chmod(folder, 0o711)
    os.chmod(where, 0o666)
    try:
        pid = os.fork()
        if pid == 0:  # the child: nobody
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(TIMEOUT)
                    s.connect(str(where))
                    try:
                        got = s.recv(100)
                    except ConnectionResetError:
                        got = b""
                    code = 0 if got == b"" else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0  # closed, nothing sent
    finally:
        os.chmod(folder, mode)
        os.chmod(where, 0o600)
    assert_served(d, door)  # the user's own still are
