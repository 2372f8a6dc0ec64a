"""Clients that resume instead of failing, against real daemons over real sockets: `txctl wait`
and `txctl logs -f` across a kill -9 and restart of the daemon, a log follow across a dropped
connection (a relay between client and daemon killed and started again) while the job writes
on, a client that gives up after its bounded time, and the Logs RPC's per-replica offsets.

local_cwd's replicas cannot outlive their daemon (it holds their pipes), so across a kill -9
the job ends FAILED and its log ends where the daemon stopped; across a dropped connection the
daemon and the job go on, and the follow must deliver every byte written meanwhile, once.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import grpc
import pytest
from txd.client import AsyncClient, InvalidArgumentError
from txd.client._errors import from_rpc_error
from txd.v1 import AppState, Stream
from txd.v1 import runner_pb2 as pb
from txd_testing import TXCTL, Daemon, Gate, Gates, PidWatch, py_app, sh_app

TIMEOUT = 60.0
LINES = 4000


def known_line(i: int) -> bytes:
    return f"{i:06d} {'abcdefghij' * 5}\n".encode()


def known_bytes(n: int = LINES) -> bytes:
    return b"".join(known_line(i) for i in range(n))


def printer(n: int = LINES, pause: float = 0.001) -> Any:
    """A job printing known_bytes(n), a line at a time, for a few seconds."""
    code = (
        "import sys, time\n"
        f"for i in range({n}):\n"
        "    sys.stdout.write(f\"{i:06d} {'abcdefghij' * 5}\\n\"); sys.stdout.flush()\n"
        f"    time.sleep({pause})\n"
    )
    return py_app(code, name="printer")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Txctl:
    """A txctl run in the background, its stdout in a file, its stderr read line by line."""

    def __init__(self, d: Daemon, out: Path, *args: str, socket: Path | None = None) -> None:
        self.out = out
        self.err_lines: list[str] = []
        with open(out, "wb") as f:
            self.proc = subprocess.Popen(
                [*TXCTL, "--socket", str(socket or d.socket), "--no-autostart", *args],
                stdout=f,
                stderr=subprocess.PIPE,
                env=d.txctl_env(),
                cwd=d.home,
            )
        assert self.proc.stderr is not None
        self._err: IO[bytes] = self.proc.stderr

    def until_stderr(self, text: str) -> str:
        """Reads stderr up to the first line holding `text` (bounded: the pipe ends when
        txctl exits, and the test's timeout ends the rest)."""
        for line in self.err_lines:
            if text in line:
                return line
        while raw := self._err.readline():
            line = raw.decode(errors="replace")
            self.err_lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"txctl never said {text!r}; stderr:\n{''.join(self.err_lines)}")

    def until_output(self, size: int) -> None:
        """Returns once stdout holds at least `size` bytes (bounded by TIMEOUT)."""
        deadline = time.monotonic() + TIMEOUT
        while self.out.stat().st_size < size:
            assert self.proc.poll() is None, f"txctl exited early: {self.finish()}"
            assert time.monotonic() < deadline, "no output"
            time.sleep(0.01)

    def finish(self) -> tuple[int, bytes, str]:
        """(exit code, stdout, whole stderr) once txctl exits."""
        rest = self._err.read().decode(errors="replace")
        self.err_lines.append(rest)
        code = self.proc.wait(TIMEOUT)
        return code, self.out.read_bytes(), "".join(self.err_lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._err.close()


class Relay:
    """A Unix socket relay between clients and the daemon, run as a process of its own: kill
    it and every connection through it drops at once while the daemon and its jobs go on."""

    CODE = """
import asyncio, sys
listen, target = sys.argv[1], sys.argv[2]

async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    finally:
        w.close()

async def serve(r1, w1):
    r2, w2 = await asyncio.open_unix_connection(target)
    await asyncio.gather(pipe(r1, w2), pipe(r2, w1), return_exceptions=True)

async def main():
    server = await asyncio.start_unix_server(serve, listen)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""

    def __init__(self, listen: Path, target: Path) -> None:
        self.listen, self.target = listen, target
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Relay:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.CODE, str(self.listen), str(self.target)],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == b"ready\n"
        return self

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()


@pytest.fixture
def relay(daemon: Daemon) -> Iterator[Relay]:
    r = Relay(daemon.root / "relay.sock", daemon.socket)
    try:
        yield r.start()
    finally:
        r.kill()


async def _full_log(d: Daemon, handle: str) -> bytes:
    async with d.client() as c:
        return b"".join([chunk.data async for chunk in c.logs(handle)])


async def test_wait_rides_out_a_kill9_and_restart(daemon: Daemon, tmp_path: Path) -> None:
    async with daemon.client() as c:
        handle = await c.run(sh_app("sleep 300"), "local_cwd")
    wait = Txctl(daemon, tmp_path / "out", "wait", handle)
    try:
        wait.until_stderr("RUNNING")  # its Watch is open
        daemon.kill()
        lost = wait.until_stderr("connection to the daemon lost")
        assert f"during the watch of {handle}; reconnecting" in lost, lost
        daemon.restart()
        code, out, err = wait.finish()
    finally:
        wait.kill()
    assert "reconnected; the watch of" in err, err
    # The restarted daemon stopped the replica its predecessor left: the final status printed
    # is the one the daemon holds now.
    async with daemon.client() as c:
        final = await c.status(handle)
    assert final.state in (AppState.CANCELLED, AppState.FAILED), final
    assert f"  state:    {AppState.Name(final.state)}\n" in out.decode(), out
    assert code != 0, (code, err)
    assert err.count("reconnecting") == 1, err


async def test_logs_follow_survives_a_kill9_byte_for_byte(daemon: Daemon, tmp_path: Path) -> None:
    async with daemon.client() as c:
        handle = await c.run(printer(), "local_cwd")
    follow = Txctl(daemon, tmp_path / "out", "logs", "-f", handle)
    try:
        follow.until_output(len(known_bytes(300)))
        daemon.kill()
        follow.until_stderr("connection to the daemon lost")
        daemon.restart()
        code, out, err = follow.finish()
    finally:
        follow.kill()
    assert code == 0, err
    assert "reconnected; the log read of" in err, err
    full = await _full_log(daemon, handle)
    # Every byte the daemon kept, once: the same checksum; and what the job printed, in order.
    assert sha(out) == sha(full), (len(out), len(full))
    assert len(out) >= len(known_bytes(300)) and known_bytes().startswith(out), out[-200:]


async def _follow_across_a_cut(
    daemon: Daemon, relay: Relay, tmp_path: Path, script: str, gate: Gate, shown: bytes, *args: str
) -> tuple[int, bytes, str]:
    """`txctl logs -f ARGS` of a job running `script`, through the relay: once `shown` is out,
    the relay is killed; the job goes past `gate` and ends while nobody follows; then the relay
    comes back and the follow finishes. Its exit code, stdout and stderr."""
    async with daemon.client() as c:
        handle = await c.run(sh_app(script), "local_cwd")
        follow = Txctl(daemon, tmp_path / "out", "logs", "-f", *args, handle, socket=relay.listen)
        try:
            follow.until_output(len(shown))
            relay.kill()
            follow.until_stderr("connection to the daemon lost")
            gate.open()  # the rest is written while nobody follows
            assert (await c.wait(handle, timeout=TIMEOUT)).state == AppState.SUCCEEDED
            relay.start()
            return follow.finish()
        finally:
            follow.kill()


async def test_logs_follow_resumes_at_its_byte_across_a_dropped_connection(
    daemon: Daemon, relay: Relay, tmp_path: Path
) -> None:
    """The job writes half its log while the follow is cut off: all of it arrives, once."""
    with Gates(tmp_path) as gates:
        gate = gates.new("second-half")
        half = known_bytes(LINES // 2)
        script = f"cat {tmp_path / 'first'}; {gate.wait}; cat {tmp_path / 'second'}"
        (tmp_path / "first").write_bytes(half)
        (tmp_path / "second").write_bytes(known_bytes()[len(half) :])
        code, out, err = await _follow_across_a_cut(daemon, relay, tmp_path, script, gate, half)
    assert code == 0, err
    assert "reconnected" in err, err
    assert sha(out) == sha(known_bytes()), (len(out), len(known_bytes()))


async def test_a_tail_follow_says_it_cannot_resume_at_a_byte(
    daemon: Daemon, relay: Relay, tmp_path: Path
) -> None:
    """`logs -f --tail 2` cut off while the job writes: after the reconnect it asks only for
    what comes next (tail 0), and says that lines written meanwhile may be missing."""
    with Gates(tmp_path) as gates:
        gate = gates.new("rest")
        script = f"echo a; echo b; echo c; {gate.wait}; echo written-while-cut-off"
        code, out, err = await _follow_across_a_cut(
            daemon, relay, tmp_path, script, gate, b"b\nc\n", "--tail", "2"
        )
    assert code == 0, err
    assert out == b"b\nc\n", out  # the tail shown; nothing shown twice
    assert "with tail cannot resume at a byte" in err and "may be missing" in err, err


async def test_python_client_resumes_each_replica_at_its_byte(
    daemon: Daemon, relay: Relay, tmp_path: Path
) -> None:
    """Two replicas, cut off mid-way: each replica's bytes arrive whole, in order, once; and
    the client's watch, opened through the same relay, goes on to the final status."""
    with Gates(tmp_path) as gates:
        gate = gates.new("rest")
        (tmp_path / "first").write_bytes(known_bytes(1000))
        (tmp_path / "second").write_bytes(known_bytes()[len(known_bytes(1000)) :])
        script = f"cat {tmp_path / 'first'}; {gate.wait}; cat {tmp_path / 'second'}"
        async with daemon.client() as direct:
            handle = await direct.run(sh_app(script, replicas=2), "local_cwd")
            got: dict[str, bytes] = {"r/0": b"", "r/1": b""}
            statuses: list[int] = []
            async with AsyncClient(relay.listen, reconnect=TIMEOUT) as c:
                logs = c.logs(handle, follow=True)
                watch = c.watch(handle)
                statuses.append((await anext(watch)).state)
                async for chunk in logs:  # until both replicas sent their first part
                    got[f"r/{chunk.replica}"] += chunk.data
                    if all(len(v) >= len(known_bytes(1000)) for v in got.values()):
                        break
                relay.kill()

                async def read_logs() -> None:
                    async for chunk in logs:
                        got[f"r/{chunk.replica}"] += chunk.data

                async def read_watch() -> None:
                    statuses.extend([s.state async for s in watch])

                async def finish_then_reconnect() -> None:
                    gate.open()
                    gate.open()
                    state = (await direct.wait(handle, timeout=TIMEOUT)).state
                    assert state == AppState.SUCCEEDED
                    relay.start()

                # Both streams reconnect at once, through one client: neither may cut the
                # other's new connection.
                async with asyncio.timeout(TIMEOUT):
                    await asyncio.gather(read_logs(), read_watch(), finish_then_reconnect())
    assert got == {"r/0": known_bytes(), "r/1": known_bytes()}, {k: len(v) for k, v in got.items()}
    assert statuses[-1] == AppState.SUCCEEDED, statuses


async def test_run_log_rides_out_a_dropped_connection(
    daemon: Daemon, relay: Relay, tmp_path: Path
) -> None:
    """`run --log` (the follow, then the wait) through a connection cut while the job prints."""
    script = "i=0; while [ $i -lt 300 ]; do echo line-$i; i=$((i+1)); sleep 0.01; done"
    run = Txctl(
        daemon,
        tmp_path / "out",
        "run",
        "--log",
        "utils.sh",
        "sh",
        "-c",
        script,
        socket=relay.listen,
    )
    try:
        run.until_output(200)
        relay.kill()
        run.until_stderr("connection to the daemon lost")
        relay.start()
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 0, err
    assert "reconnected" in err, err
    lines = out.decode().splitlines()
    assert [x for x in lines if x.startswith("line-")] == [f"line-{i}" for i in range(300)]
    assert "  state:    SUCCEEDED" in lines, lines[-8:]  # the wait's final status


def test_autostart_brings_the_daemon_back_for_a_wait(daemon: Daemon, tmp_path: Path) -> None:
    """Without --no-autostart, txctl starts the daemon again itself after a kill -9."""
    from txd.client import Client
    from txd.client._daemon import serving_record

    with Client(daemon.socket) as c:
        handle = c.run(sh_app("sleep 300"), "local_cwd")
    out = tmp_path / "out"
    args = ["--socket", str(daemon.socket), "--state-dir", str(daemon.state_dir), "wait", handle]
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [*TXCTL, *args], stdout=f, stderr=subprocess.PIPE, env=daemon.txctl_env()
        )
    started = None
    try:
        assert proc.stderr is not None
        while b"RUNNING" not in (line := proc.stderr.readline()):  # its Watch is open
            assert line, "txctl ended before the job ran"
        daemon.kill()
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        started = serving_record(daemon.state_dir)
        if started is not None:  # the daemon txctl started: not the fixture's to stop
            with PidWatch([started[0]]) as watch:
                os.kill(started[0], signal.SIGTERM)
                assert watch.wait(30) == []
    stderr = err.decode()
    assert started is not None and f"txctl: started txd (pid {started[0]})" in stderr, stderr
    assert "reconnected; the watch of" in stderr, stderr
    assert "  state:    " in out.read_text() and proc.returncode != 0, (out.read_text(), stderr)


async def test_a_client_that_cannot_reconnect_gives_up_in_bounded_time(
    daemon: Daemon, tmp_path: Path
) -> None:
    async with daemon.client() as c:
        handle = await c.run(sh_app("sleep 300"), "local_cwd")
    wait = Txctl(daemon, tmp_path / "out", "--reconnect-timeout", "1.5", "wait", handle)
    try:
        wait.until_stderr("RUNNING")
        daemon.kill()
        wait.until_stderr("reconnecting")
        lost_at = time.monotonic()
        code, out, err = wait.finish()
        took = time.monotonic() - lost_at
    finally:
        wait.kill()
    assert code == 3, (code, err)  # NO_DAEMON
    assert f"the connection to the daemon was lost during the watch of {handle}" in err, err
    assert "no reconnect succeeded within 1.5 s (--reconnect-timeout" in err, err
    assert "last try: no txd daemon answers on" in err, err  # what failed, named
    assert took < TIMEOUT, took
    assert out == b""


async def test_reconnect_timeout_zero_fails_at_once(daemon: Daemon, tmp_path: Path) -> None:
    async with daemon.client() as c:
        handle = await c.run(sh_app("sleep 300"), "local_cwd")
    wait = Txctl(daemon, tmp_path / "out", "--reconnect-timeout", "0", "wait", handle)
    try:
        wait.until_stderr("RUNNING")
        daemon.kill()
        code, _, err = wait.finish()
    finally:
        wait.kill()
    assert code == 3 and "reconnecting" not in err, (code, err)


def test_a_bad_reconnect_timeout_is_named(daemon: Daemon) -> None:
    bad = daemon.txctl("--reconnect-timeout", "-1", "list")
    assert bad.returncode == 2 and "reconnect total must be a number of seconds >= 0" in bad.stderr
    env = daemon.txctl_env(TXD_RECONNECT_TIMEOUT="soon")
    bad = daemon.txctl("list", env=env)
    assert bad.returncode == 2, bad
    assert "TXD_RECONNECT_TIMEOUT='soon' is not a number of seconds" in bad.stderr, bad.stderr


# -- the Logs RPC's offsets -------------------------------------------------------------------


async def _read(c: Any, req: pb.LogsRequest) -> dict[str, bytes]:
    """A raw Logs call (the client's logs() sets offsets itself), its errors as the client's."""
    out: dict[str, bytes] = {}
    try:
        async for chunk in c.stub.Logs(req, timeout=TIMEOUT):
            key = f"{chunk.role}/{chunk.replica}"
            out[key] = out.get(key, b"") + chunk.data
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None
    return out


async def test_offsets_skip_what_was_delivered_per_replica(client: Any) -> None:
    script = "i=0; while [ $i -lt 300 ]; do echo out $i; echo err $i >&2; i=$((i+1)); done"
    handle = await client.run(sh_app(script, replicas=2), "local_cwd")
    assert (await client.wait(handle, timeout=TIMEOUT)).state == AppState.SUCCEEDED
    await client.connect()
    for extra in ({}, {"regex": "7"}, {"streams": Stream.STDERR}):
        whole = await _read(client, pb.LogsRequest(app_handle=handle, **extra))
        at = {"r/0": 1234, "r/1": 17}
        offsets = [pb.ReplicaOffset(role="r", replica=k, offset=at[f"r/{k}"]) for k in (0, 1)]
        resumed = await _read(client, pb.LogsRequest(app_handle=handle, offsets=offsets, **extra))
        assert resumed == {k: v[at[k] :] for k, v in whole.items() if v[at[k] :]}, extra
        # One replica listed: the other starts at its first byte; past the end: nothing.
        one = [pb.ReplicaOffset(role="r", replica=1, offset=len(whole["r/1"]) + 5)]
        resumed = await _read(client, pb.LogsRequest(app_handle=handle, offsets=one, **extra))
        assert resumed.get("r/1", b"") == b"" and resumed["r/0"] == whole["r/0"], extra


async def test_bad_offsets_are_invalid_arguments(client: Any) -> None:
    handle = await client.run(sh_app("echo hi", replicas=2), "local_cwd")
    assert (await client.wait(handle, timeout=TIMEOUT)).state == AppState.SUCCEEDED

    async def refused(field: str, **kw: Any) -> str:
        with pytest.raises(InvalidArgumentError) as err:
            await _read(client, pb.LogsRequest(app_handle=handle, **kw))
        assert err.value.field == field, (err.value.field, err.value.message)
        return err.value.message

    def at(role: str, k: int, n: int) -> pb.ReplicaOffset:
        return pb.ReplicaOffset(role=role, replica=k, offset=n)

    await client.connect()
    assert "must be >= 0" in await refused("offsets[0].offset", offsets=[at("r", 0, -1)])
    msg = await refused("offsets[0]", offsets=[at("x", 0, 1)])
    assert "replica x/0 is not one this request reads" in msg
    msg = await refused("offsets[0]", offsets=[at("r", 1, 1)], replica=0)
    assert "replica r/1 is not one this request reads" in msg
    assert "listed twice" in await refused("offsets[1]", offsets=[at("r", 0, 1), at("r", 0, 2)])
    assert "tail" in await refused("offsets", offsets=[at("r", 0, 1)], tail=3)


def test_relay_is_ready_and_killable(tmp_path: Path) -> None:
    """The relay the tests use drops its connections when killed (so the tests above cut a
    connection, not something else)."""
    r = Relay(tmp_path / "l.sock", tmp_path / "nothing.sock").start()
    assert os.path.exists(r.listen)
    r.kill()
    assert r.proc is not None and r.proc.returncode == -signal.SIGKILL
