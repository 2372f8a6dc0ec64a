"""sd_notify: a real txd told to notify a datagram socket this test listens on (as systemd's
user manager does for a `Type=notify` unit) sends READY=1 only once its socket serves,
STOPPING=1 when its shutdown begins, and keeps NOTIFY_SOCKET from its jobs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from txd.client import AsyncClient
from txd.daemon.sdnotify import ENV, Notifier
from txd.v1 import AppState
from txd_testing import (
    clean_env,
    kill_recorded_replicas,
    py_app,
    read_logs,
    remove_tree,
    sh_app,
    short_tmpdir,
)

WAIT = 30.0  # a bound on each wait for a datagram, never the result


class Listener:
    """A datagram socket as systemd's notify socket: file-system or abstract; with
    SO_PASSCRED, so each datagram says which pid sent it."""

    def __init__(self, root: Path, abstract: bool) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        if abstract:
            name = f"txd-test-notify-{uuid.uuid4().hex}"
            self.sock.bind("\0" + name)
            self.env_value = "@" + name
        else:
            path = root / "notify"
            self.sock.bind(str(path))
            self.env_value = str(path)

    def receive(self, timeout: float = WAIT) -> tuple[dict[str, str], int]:
        """The next datagram's fields and the sender's pid."""
        self.sock.settimeout(timeout)
        data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        pid = -1
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", payload[:12])[0]
        fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
        return fields, pid

    def close(self) -> None:
        self.sock.close()


class Notified:
    """A `python -m txd.daemon` started with NOTIFY_SOCKET and no --ready-fd: systemd's way."""

    def __init__(self, root: Path, abstract: bool) -> None:
        self.root = root
        self.listener = Listener(root, abstract)
        self.socket = root / "txd.sock"
        self.state_dir = root / "state"
        self.log_path = root / "txd.log"
        env = clean_env(NOTIFY_SOCKET=self.listener.env_value, HOME=str(root))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "txd.daemon",
                    "--socket",
                    str(self.socket),
                    "--state-dir",
                    str(self.state_dir),
                    "--grace",
                    "3",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                cwd=root,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        kill_recorded_replicas(self.state_dir)
        self.listener.close()


@pytest.fixture(params=["path", "abstract"])
def notified(request: pytest.FixtureRequest) -> Iterator[Notified]:
    root = short_tmpdir("txdt-notify-")
    d = Notified(root, abstract=request.param == "abstract")
    try:
        yield d
    finally:
        d.close()
        remove_tree(root)


def _health_now(socket_path: Path) -> int:
    """One Health check that does not wait for the socket to come up: it answers at once or
    fails."""
    with grpc.insecure_channel(f"unix:{socket_path}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(), timeout=5, wait_for_ready=False)
        return int(response.status)


async def test_ready_only_once_serving_then_stopping_before_exit(notified: Notified) -> None:
    fields, sender = notified.listener.receive()
    # At the moment READY arrives, the daemon answers on its socket, without a retry.
    assert _health_now(notified.socket) == health_pb2.HealthCheckResponse.SERVING
    assert fields.get("READY") == "1", fields
    assert sender == notified.proc.pid
    assert fields["MAINPID"] == str(notified.proc.pid)
    assert str(notified.socket) in fields["STATUS"], fields
    assert notified.proc.poll() is None

    # A job that ignores SIGTERM keeps the shutdown busy for --grace seconds, so the daemon
    # is still there when STOPPING=1 must already have been sent.
    async with AsyncClient(notified.socket) as client:
        app = sh_app("trap '' TERM; echo up; while :; do sleep 0.1; done", name="stubborn")
        handle = await client.run(app, "local_cwd", cwd=str(notified.root))
        async with asyncio.timeout(WAIT):
            async for chunk in client.logs(handle, follow=True):
                if b"up" in chunk.data:
                    break
    notified.proc.send_signal(signal.SIGTERM)
    fields, sender = notified.listener.receive()
    assert notified.proc.poll() is None, "txd exited before it said STOPPING=1"
    assert fields.get("STOPPING") == "1", fields
    assert sender == notified.proc.pid
    assert notified.proc.wait(WAIT) == 0, notified.log()
    assert "Traceback" not in notified.log()


async def test_jobs_do_not_inherit_notify_socket(notified: Notified) -> None:
    fields, _ = notified.listener.receive()
    assert fields.get("READY") == "1"
    code = "import os; print('NOTIFY_SOCKET=' + repr(os.environ.get('NOTIFY_SOCKET')))"
    async with AsyncClient(notified.socket) as client:
        # env={}: the job gets the daemon's own environment (what a remote client sends); with
        # an env of the client's, that one.
        own = await client.run(py_app(code), "local_cwd", cwd=str(notified.root), env={})
        mine = await client.run(
            py_app(code), "local_cwd", cwd=str(notified.root), env={"FROM": "client"}
        )
        for handle in (own, mine):
            status = await client.wait(handle, timeout=WAIT)
            assert status.state == AppState.SUCCEEDED, status
            out = await read_logs(client, handle)
            assert b"NOTIFY_SOCKET=None" in out, out


def test_unreachable_socket_is_not_fatal(tmp_path: Path) -> None:
    """Without NOTIFY_SOCKET (txctl's autostart, a shell) the notifier is silent; a socket
    nobody listens on is logged, never raised."""
    assert Notifier("").ready("x") is False
    gone = Notifier(str(tmp_path / "nobody-listens"))
    assert gone.ready("x") is False
    assert gone.stopping() is False


def test_notifier_takes_the_variable_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "@txd-test-removed")
    assert Notifier().address == "@txd-test-removed"
    assert ENV not in os.environ


def test_autostarted_daemon_does_not_notify_txctls_service() -> None:
    """A txctl run by a notify service of its own (NOTIFY_SOCKET set) starts a txd that does
    not speak for that service. txd notifies before it answers its --ready-fd pipe, so by the
    time spawn() returns "ready" a datagram would be there already."""
    from txd.client._daemon import spawn

    root = short_tmpdir("txdt-notify-")
    listener = Listener(root, abstract=False)
    listener.sock.setblocking(False)
    env = clean_env(NOTIFY_SOCKET=listener.env_value, HOME=str(root))
    proc, line = spawn(root / "txd.sock", root / "state", root / "txd.log", env=env, cwd=root)
    try:
        assert line == "ready", (root / "txd.log").read_text()
        with pytest.raises(BlockingIOError):
            listener.sock.recv(4096)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(WAIT)
        listener.close()
        remove_tree(root)
