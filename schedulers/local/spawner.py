"""local_cwd's process spawner: replicas are started by a small helper process, not by the
daemon itself, so that a fork/exec never blocks the daemon's event loop.

Python holds the GIL while a child it forks runs up to its exec (vfork: the parent waits), so
a spawner thread would block the loop as surely; under load that wait is milliseconds per
replica. The helper (`python -m txd.schedulers.local.spawner FD`, in a session of its own) gets
each request on a SOCK_SEQPACKET socket: the argv, environment and directory, with the write
ends of the replica's stdout and stderr pipes (SCM_RIGHTS); the daemon keeps the read ends. The
helper starts the replica (its own session, as before), answers its pid or the OSError, and
reports each exit code as it reaps it.

Replicas are the helper's children: they outlive txctl as before, and when the daemon dies the
helper sees the socket close and exits at once, leaving them running for the next daemon's
crash recovery (local.recovery, TXD_LOCAL_REPLICA) exactly as before; a request still queued
when the daemon died is dropped, never started behind the next daemon's back. Should the helper die
while the daemon lives, its replicas' exit codes are lost: the daemon awaits their ends through
pidfds and starts a new helper for the next spawn.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from txd.schedulers.jobumask import user_umask

log = logging.getLogger(__name__)

CHUNK = 32 << 10  # bytes of a request per packet (SEQPACKET keeps each whole)
MORE, LAST = b"M", b"E"  # each packet's first byte: the request goes on / ends here
STOP_TIMEOUT = 5.0  # seconds to wait for the helper to exit once its socket is closed
EXEC_SETTLE = 1.0  # at most this long for a started process's argv to show (_until_exec_done)


class SpawnerLost(OSError):
    """The helper exited (or was killed) while the daemon lives."""


# -- the daemon's side ------------------------------------------------------------------------


class Spawner:
    """The daemon's handle on the helper process. `on_exit(pid, returncode)` is called on the
    loop for every replica that ends (returncode None: unknown, the helper was lost)."""

    def __init__(self, on_exit: Callable[[int, int | None], None]) -> None:
        self._on_exit = on_exit
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[int]] = {}
        self._live: set[int] = set()  # pids started and not yet reported ended
        self._send_lock = asyncio.Lock()
        self._writable: asyncio.Future[None] | None = None
        self._inbox = b""

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # a terminal's Ctrl-C to the daemon is not for it
                umask=user_umask(),  # the replicas' (the daemon's own is private)
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable)
        self._sock = ours
        return ours

    async def spawn(
        self, args: Sequence[str], env: Mapping[str, str], cwd: str, stdout: int, stderr: int
    ) -> int:
        """Starts a process in a session of its own with `stdout` and `stderr` (pipe write ends,
        which the caller closes after) as its output; returns its pid. Raises the OSError that
        starting it raised."""
        sock = self._sock or self._start()
        self._next_id += 1
        rid = self._next_id
        body = json.dumps({"id": rid, "args": list(args), "env": dict(env), "cwd": cwd}).encode()
        reply = asyncio.get_running_loop().create_future()
        self._pending[rid] = reply
        try:
            async with self._send_lock:
                await self._send(sock, body, [stdout, stderr])
        except BaseException:
            self._pending.pop(rid, None)
            raise
        return await reply

    async def _send(self, sock: socket.socket, body: bytes, fds: list[int]) -> None:
        chunks = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
        for k, chunk in enumerate(chunks):
            packet = (LAST if k == len(chunks) - 1 else MORE) + chunk
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if k == 0 else []
            while True:
                try:
                    sock.sendmsg([packet], anc)
                    break
                except BlockingIOError:
                    await self._wait_writable(sock)
                except OSError as e:  # the helper is gone
                    raise SpawnerLost(e.errno, f"txd's process spawner is gone: {e}") from e

    async def _wait_writable(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._writable = loop.create_future()
        loop.add_writer(sock.fileno(), self._writable.set_result, None)
        try:
            await self._writable
        finally:
            loop.remove_writer(sock.fileno())
            self._writable = None

    def _readable(self) -> None:
        assert self._sock is not None
        while True:
            try:
                packet = self._sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                packet = b""
            if not packet:
                self._lost()
                return
            self._message(json.loads(packet))

    def _message(self, msg: dict[str, Any]) -> None:
        if "exit" in msg:
            pid = msg["exit"]
            self._live.discard(pid)
            self._on_exit(pid, msg["rc"])
            return
        reply = self._pending.pop(msg["id"], None)
        if "pid" in msg:
            self._live.add(msg["pid"])  # before anyone awaits: its exit may come next
            if reply is not None and not reply.done():
                reply.set_result(msg["pid"])
        elif reply is not None and not reply.done():
            reply.set_exception(OSError(msg["errno"], msg["error"], *msg.get("filename", [])))

    def _lost(self) -> None:
        """The helper is gone: pending spawns fail, live replicas are awaited by pidfd (their
        exit codes went with it), and the next spawn starts a new helper."""
        self._close_socket()
        self._reap()
        log.error(
            "txd's process spawner exited; the exit codes of %d replicas are lost", len(self._live)
        )
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(SpawnerLost(errno.EPIPE, "txd's process spawner exited"))
        self._pending.clear()
        live, self._live = self._live, set()
        for pid in live:
            _await_end(pid, self._on_exit)

    def _close_socket(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)  # its sendmsg then fails: SpawnerLost

    def _reap(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(STOP_TIMEOUT)
            self._proc = None

    def close(self) -> None:
        """Ends the helper (its replicas run on; shutdown has stopped them before)."""
        self._close_socket()
        self._reap()


def _await_end(pid: int, on_exit: Callable[[int, int | None], None]) -> None:
    """Calls on_exit(pid, None) once the process `pid` (no child of ours) has ended."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # already gone
        loop.call_soon(on_exit, pid, None)
        return

    def ended() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        on_exit(pid, None)

    loop.add_reader(fd, ended)


# -- the helper's side ------------------------------------------------------------------------


def main(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the daemon is gone
        _serve(sock)


def _serve(sock: socket.socket) -> None:
    daemon = os.getppid()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that it wakes us
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    children: dict[int, subprocess.Popen[bytes]] = {}
    parts: list[bytes] = []
    fds: list[int] = []
    while True:
        for key, _ in sel.select():
            if key.fileobj is sock:
                try:
                    packet, anc, _, _ = sock.recvmsg(
                        CHUNK + 1, socket.CMSG_SPACE(8), socket.MSG_CMSG_CLOEXEC
                    )
                except ConnectionResetError:
                    packet = b""
                if not packet:
                    return  # the daemon is gone: the replicas run on, as they did under it
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds += array.array("i", data[: len(data) - len(data) % 4])
                parts.append(packet[1:])
                if os.getppid() != daemon:
                    # The daemon died with requests still queued here: a process started
                    # now could start after the next daemon looked for its leftovers.
                    return
                if packet[:1] == LAST:
                    _spawn(sock, json.loads(b"".join(parts)), fds, children)
                    parts, fds = [], []
            else:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_r, 4096):
                        pass
                _reap(sock, children)


def _spawn(
    sock: socket.socket,
    req: dict[str, Any],
    fds: list[int],
    children: dict[int, subprocess.Popen[bytes]],
) -> None:
    try:
        out, err = fds
        proc = subprocess.Popen(
            req["args"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=req["cwd"],
            env=req["env"],
            start_new_session=True,
        )
    except OSError as e:
        reply: dict[str, Any] = {"id": req["id"], "errno": e.errno, "error": e.strerror or str(e)}
        if e.filename is not None:
            reply["filename"] = [os.fsdecode(e.filename)]
    except Exception as e:  # a malformed request: say so rather than die
        reply = {"id": req["id"], "errno": errno.EINVAL, "error": f"{type(e).__name__}: {e}"}
    else:
        children[proc.pid] = proc
        _until_exec_done(proc.pid)
        reply = {"id": req["id"], "pid": proc.pid}
    finally:
        for fd in fds:
            os.close(fd)
    sock.sendall(json.dumps(reply).encode())


def _until_exec_done(pid: int) -> None:
    """Returns once the new program's arguments (and environment) show in /proc, or the
    process has exited. Popen returns once the exec closed its close-on-exec pipe, a moment
    before the kernel has set up the new image's argv and environ: a caller told "started" that
    looks at /proc then (crash recovery reads TXD_LOCAL_REPLICA there) would find nothing.
    Bounded: EXEC_SETTLE seconds."""
    deadline = time.monotonic() + EXEC_SETTLE
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read(1):
                    return
            # A process that already exited shows no argv either: no need to wait (WNOWAIT:
            # left for _reap).
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return
        except OSError:
            return
        os.sched_yield()


def _reap(sock: socket.socket, children: dict[int, subprocess.Popen[bytes]]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rc = os.waitstatus_to_exitcode(status)
        if (proc := children.pop(pid, None)) is not None:
            proc.returncode = rc  # reaped: Popen must not wait for it again
        sock.sendall(json.dumps({"exit": pid, "rc": rc}).encode())


if __name__ == "__main__":
    main(int(sys.argv[1]))
