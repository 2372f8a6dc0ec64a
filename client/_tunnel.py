"""The SSH tunnel to a remote daemon: one background process per endpoint, over the user's ssh.

`ensure(endpoint)` returns the local Unix socket of the endpoint's tunnel, starting the tunnel
when none listens (as txctl starts a local daemon: a ready pipe says when it serves, or why it
will not). The tunnel, `python -m txd.client._tunnel`, lives in a folder of its own,
<runtime dir>/tunnels/<key>/ (0700): it

1. starts an ssh master connection (`ssh -M -S ctl -N`: the user's keys, agent, ProxyJump and
   MFA prompt, once), which tells it is up by a LocalCommand that prints a marker;
2. runs `<remote txctl> remote-socket` on the host through that connection: the remote txctl
   starts the daemon there when none runs, exactly as a local txctl does, and prints the
   marker line then the daemon's socket;
3. asks the master to forward fwd.sock to that socket (`-O forward -L`) and checks it with an
   HTTP/2 preface; a server that refuses stream-local forwarding closes it at once, and then
   each connection goes through `<remote txctl> dial-stdio` instead (the relay), which starts
   with the marker line;
4. listens on txd.sock (0600), copying each connection to fwd.sock (or a relay), and exits
   when no connection has been open for the endpoint's idle time, when its ssh master exits
   (connections then close: the client says the connection was lost), or on SIGTERM.

Whatever a login script prints before the marker is an error naming the host and the line,
within a timeout; never a hang. Errors name the hop that failed: ssh, remote (the remote
command), daemon, local (this machine's tunnel folder).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from txd import defaults
from txd.client._daemon import _read_line, connect_error, is_listening
from txd.client._endpoint import Endpoint

MARKER = "--txd-remote-v1--"
START_TIMEOUT = 120.0  # the ssh login may wait for a password or an MFA prompt
QUERY_TIMEOUT = 60.0  # remote-socket: a remote daemon's start included
RELAY_TIMEOUT = 30.0  # a relay's marker line
PROBE_TIMEOUT = 15.0
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
CHUNK = 256 * 1024
_GROUP_SIGNALS = (signal.SIGINT, signal.SIGHUP)  # what a terminal sends its foreground group
KILL_AFTER = 5.0  # seconds an ssh master has to exit on SIGTERM
START_ATTEMPTS = 3  # tunnel processes one client starts while others hold the folder's lock


class TunnelError(Exception):
    """The tunnel cannot serve: `hop` is ssh, remote, daemon or local."""

    def __init__(self, hop: str, message: str) -> None:
        super().__init__(message)
        self.hop = hop


def tunnel_dir(ep: Endpoint) -> Path:
    key = json.dumps([ep.url, ep.command, ep.socket, list(ep.ssh)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return defaults.runtime_dir() / "tunnels" / digest


def _private_dir(path: Path) -> None:
    """Creates `path` (and its parents) 0700; refuses one that is not this user's or that
    others can enter."""
    for p in (path.parent.parent, path.parent, path):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise TunnelError("local", f"cannot create {p}: {e.strerror}") from None
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise TunnelError("local", f"{p} is not a folder of this user's; refusing to use it")
        if p == path and st.st_mode & 0o077:
            raise TunnelError(
                "local", f"{p} is open to other users (mode {st.st_mode & 0o777:o}, want 700)"
            )


def _check_own_socket(path: Path) -> bool:
    """True when `path` is this user's socket (a tunnel's, maybe stale); False when absent.
    Raises TunnelError for anything else there, which is never unlinked."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        what = "another user's" if st.st_uid != os.getuid() else "not a socket"
        raise TunnelError(
            "local", f"{path} is {what}: refusing to use or remove it (remove it yourself)"
        )
    return True


def ensure(ep: Endpoint, *, autostart: bool = True, notes: list[str] | None = None) -> Path:
    """The tunnel's socket for `ep`, the tunnel started when none listens. Raises
    TunnelError. What the remote txctl said it did (`started txd (pid N) on PATH`) is
    appended to `notes`, with the host's name."""
    d = tunnel_dir(ep)
    _private_dir(d)
    sock = d / "txd.sock"
    for _ in range(START_ATTEMPTS):
        if _check_own_socket(sock) and connect_error(sock) is None:
            return sock
        line = _start(ep, d, autostart)
        if line != "busy":
            break
        # Another tunnel process holds the folder's lock: one starting, which serves or fails
        # and exits, or one exiting. Once it has exited, this client starts one itself (and
        # so gets its own answer, the reason included, rather than waiting for a socket that
        # will never come).
        if _served_or_gone(sock, d / "tunnel.lock", START_TIMEOUT + QUERY_TIMEOUT):
            return sock
    else:
        raise TunnelError("local", f"another tunnel to {ep.url} started but does not serve")
    if line.startswith("ready"):
        note = line.removeprefix("ready").strip()
        if note and notes is not None:
            notes.append(f"{note} on {ep.host}")
        return sock
    hop, _, message = line.partition(": ")
    if hop.startswith("error "):
        raise TunnelError(hop[len("error ") :], message)
    raise TunnelError("local", f"the tunnel to {ep.url} exited; see {d / 'tunnel.log'}")


def _start(ep: Endpoint, d: Path, autostart: bool) -> str:
    """Starts a tunnel process in folder `d`; the line it writes on its ready pipe."""
    read_end, write_end = os.pipe()
    try:
        with open(d / "tunnel.log", "ab") as log:
            starter = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "txd.client._tunnel",
                    "--ready-fd",
                    str(write_end),
                    "--dir",
                    str(d),
                    "--endpoint",
                    json.dumps({**asdict(ep), "autostart": autostart}),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                # The client's process group and terminal: ssh may prompt on the terminal
                # (password, MFA), which a background process group could not (SIGTTIN), and
                # a Ctrl-C while it starts stops it too. Once it serves, it and its master
                # ignore the Ctrl-C and hangup that group may still get (Tunnel.serve).
                close_fds=True,
            )
        os.close(write_end)
        write_end = -1
        starter.wait()  # it forks the tunnel and exits: the tunnel is no child of this process
        return _read_line(read_end, START_TIMEOUT + QUERY_TIMEOUT + PROBE_TIMEOUT)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def _served_or_gone(sock: Path, lock: Path, timeout: float) -> bool:
    """True once `sock` listens; False once no process holds the tunnel folder's `lock` (the
    tunnel that held it exited without serving). Raises TunnelError after `timeout` s."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if is_listening(sock):
                return True
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False
            if time.monotonic() > deadline:
                raise TunnelError(
                    "local", f"the tunnel process holding {lock} has not served in {timeout:g} s"
                )
            time.sleep(0.05)
    finally:
        os.close(fd)


def describe(err: TunnelError, ep: Endpoint) -> str:
    """One line for the user, naming the hop."""
    where = {
        "ssh": f"ssh to {ep.label()} failed",
        "remote": f"the remote command on {ep.host} failed",
        "daemon": f"the daemon on {ep.host} cannot be reached",
        "local": "the local tunnel cannot start",
    }.get(err.hop, err.hop)
    return f"{where}: {err}"


# -- the tunnel process --------------------------------------------------------------------


class Tunnel:
    def __init__(self, ep: Endpoint, folder: Path, autostart: bool) -> None:
        self.ep = ep
        self.dir = folder
        self.autostart = autostart
        self.ctl = folder / "ctl"
        self.fwd = folder / "fwd.sock"
        self.sock = folder / "txd.sock"
        self.master: asyncio.subprocess.Process | None = None
        self.relay = False
        self.remote_socket = ""
        self.started = ""  # the remote txctl's "started txd (pid N) on PATH", if it did
        self.active = 0
        self.idle_timer: asyncio.TimerHandle | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.requery_lock = asyncio.Lock()
        self.generation = 0  # how many times the remote daemon's socket was asked again
        self.server: asyncio.Server | None = None

    def _ssh(self, *args: str) -> list[str]:
        return [*self.ep.ssh, "-S", _no_tokens(str(self.ctl)), *args]

    def _spec(self, remote: str) -> str:
        """-L's LOCAL:REMOTE, fwd.sock to the remote daemon's socket."""
        return f"{_no_tokens(str(self.fwd))}:{_no_tokens(remote)}"

    async def start(self) -> None:
        """Steps 1 to 3 of the module's docstring; raises TunnelError."""
        await self._end_orphan_master()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.ctl)  # a dead master's (this tunnel holds the folder's lock)
        ssh_err = self.dir / "ssh.log"
        err = os.open(ssh_err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # The master ignores SIGINT and SIGHUP (an ignored signal stays so across exec; ssh
        # keeps it): it lives in the starting command's process group, whose Ctrl-C or hangup
        # must not end it once it serves. One while it starts still does: this process's
        # handler terminates it.
        handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _GROUP_SIGNALS}
        try:
            self.master = await asyncio.create_subprocess_exec(
                *self._ssh(
                    "-M",
                    "-N",
                    "-o",
                    "ControlMaster=yes",
                    "-o",
                    "ControlPersist=no",
                    "-o",
                    "ExitOnForwardFailure=yes",
                    "-o",
                    "ServerAliveInterval=15",
                    "-o",
                    "ServerAliveCountMax=3",
                    "-o",
                    "PermitLocalCommand=yes",
                    "-o",
                    f"LocalCommand=echo {MARKER}",
                    *self.ep.ssh_target(),
                ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        except OSError as e:  # no such program (TXD_SSH_COMMAND), not executable
            raise TunnelError("ssh", f"cannot run {self.ep.ssh[0]}: {e.strerror}") from None
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            os.close(err)
        assert self.master.stdout is not None
        try:
            line = await asyncio.wait_for(self.master.stdout.readline(), START_TIMEOUT)
        except TimeoutError:
            self.master.kill()
            raise TunnelError("ssh", f"no login within {START_TIMEOUT:g} s") from None
        if line.strip() != MARKER.encode():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.master.wait(), 10)
            raise TunnelError("ssh", _last_line(ssh_err.read_bytes()) or "ssh exited")
        (self.dir / "ssh.pid").write_text(f"{self.master.pid}\n")
        self.remote_socket = await self._query()
        await self._forward()

    async def _end_orphan_master(self) -> None:
        """A tunnel that was killed (SIGKILL, a crash) left its master running, logged in,
        with nobody to end it: one that still answers on the control socket is told to exit.
        (This tunnel holds the folder's lock: no live tunnel owns that master.)"""
        try:
            is_socket = stat.S_ISSOCK(os.lstat(self.ctl).st_mode)
        except FileNotFoundError:
            return
        if not is_socket or connect_error(self.ctl) is not None:
            return
        _log("ending the ssh master a killed tunnel left running")
        proc = await asyncio.create_subprocess_exec(
            *self._ssh("-O", "exit", *self.ep.ssh_target()),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await asyncio.wait_for(proc.wait(), PROBE_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def _query(self) -> str:
        """The remote daemon's socket, from `remote-socket` (which starts the daemon)."""
        sub = "remote-socket" if self.autostart else "--no-autostart remote-socket"
        cmd = self.ep.remote(sub)
        proc = await asyncio.create_subprocess_exec(
            *self._ssh("-o", "ControlMaster=no", *self.ep.ssh_target(), cmd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), QUERY_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise TunnelError(
                "remote",
                f"`{cmd}` did not answer within {QUERY_TIMEOUT:g} s (a login script waiting "
                "for input?)",
            ) from None
        before, marker, after = out.partition(MARKER.encode() + b"\n")
        if before:
            raise TunnelError("remote", _noise(self.ep, before))
        code = proc.returncode
        if code == 255 and not marker:
            raise TunnelError("ssh", _last_line(err) or "ssh exited with 255")
        if code == 127 or (not marker and b"not found" in err):
            raise TunnelError(
                "remote",
                f"`{self.ep.command}` is not found on {self.ep.host} ({_last_line(err)}); "
                "set the remote txctl with --remote-command, TXD_REMOTE_COMMAND or "
                "`txctl host add NAME URL --command PATH`",
            )
        if code != 0 or not marker:
            why = _last_line(err) or f"`{cmd}` exited with {code}"
            raise TunnelError("daemon", why.removeprefix("txctl: error: "))
        for line in err.decode(errors="replace").splitlines():
            if line.startswith("txctl: started txd"):
                self.started = line.removeprefix("txctl: ").strip()
        return after.decode().strip()

    async def _forward(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.fwd)
        proc = await asyncio.create_subprocess_exec(
            *self._ssh(
                "-O", "forward", "-L", self._spec(self.remote_socket), *self.ep.ssh_target()
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT)
        if proc.returncode == 0 and await self._probe():
            return
        self.relay = True
        _log(f"stream-local forwarding refused ({_last_line(err)}): relaying through dial-stdio")
        await self._ssh_control("cancel", self.remote_socket)

    async def _probe(self) -> bool:
        """True when a gRPC server answers an HTTP/2 preface through fwd.sock."""
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.fwd))
        except OSError:
            return False
        try:
            writer.write(_H2_PREFACE)
            await writer.drain()
            return bool(await asyncio.wait_for(reader.read(9), PROBE_TIMEOUT))
        except (OSError, TimeoutError):
            return False
        finally:
            writer.close()

    async def serve(self, ready_fd: int) -> None:
        if _check_own_socket(self.sock):
            os.unlink(self.sock)  # a dead tunnel's: this one holds the folder's lock
        old = os.umask(0o177)
        try:
            self.server = await asyncio.start_unix_server(
                self._connection, path=str(self.sock), limit=CHUNK
            )
        finally:
            os.umask(old)
        _ready(ready_fd, f"ready {self.started}".strip())
        # Serving: a Ctrl-C or hangup of the command that started this tunnel (still in its
        # process group, `logs -f` say) is that command's, not this shared tunnel's; the
        # relays and queries started from now on inherit the ignored signals too.
        for sig in _GROUP_SIGNALS:
            asyncio.get_running_loop().remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
        mode = "relay (dial-stdio)" if self.relay else "forwarding"
        _log(f"serving {self.sock} -> {self.ep.url}:{self.remote_socket} by {mode}")
        self._arm_idle()
        assert self.master is not None
        code = await self.master.wait()
        _log(f"ssh master exited ({code}); closing")
        self._close_listener()
        for w in list(self.writers):
            w.close()

    def stop(self, why: str) -> None:
        """Stops accepting first, then ends the ssh master (and so the tunnel): a command that
        comes meanwhile finds no socket and starts a new tunnel, which waits for this one's
        lock, instead of being accepted here and dropped. A master that SIGTERM does not end
        within KILL_AFTER seconds is killed: until it is gone this tunnel holds the folder."""
        _log(f"stopping: {why}")
        self._close_listener()
        if self.master is not None and self.master.returncode is None:
            self.master.terminate()
            asyncio.get_running_loop().call_later(KILL_AFTER, self._kill_master)

    def _kill_master(self) -> None:
        if self.master is not None and self.master.returncode is None:
            _log(f"ssh master still running {KILL_AFTER:g} s after SIGTERM: killing it")
            self.master.kill()

    def _close_listener(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.sock)  # this tunnel's: it holds the folder's lock

    def _arm_idle(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = asyncio.get_running_loop().call_later(
            self.ep.idle, self.stop, f"idle for {self.ep.idle:g} s"
        )

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.active += 1
        self.writers.add(writer)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        relay: asyncio.subprocess.Process | None = None
        try:
            if self.relay:
                relay, up_r, up_w = await self._open_relay()
            else:
                up_r, up_w = await self._open_forwarded(writer)
            self.writers.add(up_w)
            try:
                await asyncio.gather(_pump(reader, up_w), _pump(up_r, writer))
            finally:
                self.writers.discard(up_w)
        except (OSError, TunnelError, TimeoutError) as e:
            _log(f"connection failed: {e}")
        finally:
            writer.close()
            self.writers.discard(writer)
            if relay is not None and relay.returncode is None:
                relay.kill()
                await relay.wait()
            self.active -= 1
            if self.active == 0:
                self._arm_idle()

    async def _open_forwarded(
        self, client: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the remote daemon through the forward, its first bytes (the
        server's HTTP/2 SETTINGS, sent at once) already passed to `client`. When the channel
        closes before them (the daemon is gone: killed, or its socket removed), the remote
        txctl is asked again, which starts a daemon as a local txctl would, and the
        connection is tried once more: the client sees nothing of it."""
        for attempt in (1, 2):
            up_r, up_w = await asyncio.open_unix_connection(str(self.fwd), limit=CHUNK)
            first = await asyncio.wait_for(up_r.read(CHUNK), QUERY_TIMEOUT)
            if first:
                client.write(first)
                return up_r, up_w
            up_w.close()
            if attempt == 1:
                await self._requery()
        raise TunnelError("daemon", f"nothing answers on {self.ep.host}:{self.remote_socket}")

    async def _requery(self) -> None:
        """Once for any number of connections that found the daemon gone at once."""
        generation = self.generation
        async with self.requery_lock:
            if generation != self.generation:
                return  # another connection has just done it
            _log(f"no daemon answers on {self.remote_socket}: asking {self.ep.host} again")
            path = await self._query()
            if path != self.remote_socket:
                await self._ssh_control("cancel", self.remote_socket)
                self.remote_socket = path
                await self._forward()
            self.generation += 1

    async def _ssh_control(self, action: str, remote: str) -> int:
        proc = await asyncio.create_subprocess_exec(
            *self._ssh("-O", action, "-L", self._spec(remote), *self.ep.ssh_target()),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return await asyncio.wait_for(proc.wait(), PROBE_TIMEOUT)

    async def _open_relay(
        self,
    ) -> tuple[asyncio.subprocess.Process, asyncio.StreamReader, asyncio.StreamWriter]:
        cmd = self.ep.remote("dial-stdio")
        proc = await asyncio.create_subprocess_exec(
            *self._ssh("-o", "ControlMaster=no", "-T", *self.ep.ssh_target(), cmd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            limit=CHUNK,
        )
        assert proc.stdout is not None and proc.stdin is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), RELAY_TIMEOUT)
        except TimeoutError:
            proc.kill()
            raise TunnelError(
                "remote", f"`{cmd}` printed no marker within {RELAY_TIMEOUT:g} s"
            ) from None
        if line != MARKER.encode() + b"\n":
            proc.kill()
            raise TunnelError("remote", _noise(self.ep, line) if line else f"`{cmd}` exited")
        # The process's stdin as a StreamWriter: what _pump writes to.
        return proc, proc.stdout, proc.stdin


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copies until EOF, then closes the writer (gRPC never half-closes a connection)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


def _noise(ep: Endpoint, before: bytes) -> str:
    first = before.decode(errors="replace").strip().splitlines()
    return (
        f"{ep.host} printed {first[0][:200] if first else before[:200]!r} before txd's marker "
        "line: a login script (~/.bashrc, ~/.profile) writes to stdout in non-interactive "
        "sessions; make it print only when interactive (e.g. `[[ $- == *i* ]] || return` at "
        "the top of ~/.bashrc)"
    )


def _no_tokens(path: str) -> str:
    """`path` as ssh reads a control path or a forwarded socket's: with %-tokens expanded, so
    a `%` of its own is written `%%`."""
    return path.replace("%", "%%")


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} tunnel[{os.getpid()}]: {message}", flush=True)


def _ready(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, line.encode() + b"\n")
        os.close(fd)


async def _amain(ep: Endpoint, folder: Path, autostart: bool, ready_fd: int) -> int:
    tunnel = Tunnel(ep, folder, autostart)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, tunnel.stop, signal.Signals(sig).name)
    try:
        await tunnel.start()
    except TunnelError as e:
        _log(f"error {e.hop}: {e}")
        _ready(ready_fd, f"error {e.hop}: {e}")
        tunnel.stop("could not start")
        return 1
    except Exception as e:  # unforeseen: said on the pipe, and the ssh master not left behind
        _log("".join(traceback.format_exception(e)).rstrip())
        _ready(ready_fd, f"error local: {type(e).__name__}: {e} (see {folder / 'tunnel.log'})")
        tunnel.stop("could not start")
        return 1
    await tunnel.serve(ready_fd)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m txd.client._tunnel")
    p.add_argument("--ready-fd", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--endpoint", required=True)
    args = p.parse_args(argv)
    if os.fork() > 0:  # the client reaps this parent at once; the tunnel is the child
        os._exit(0)
    fields = json.loads(args.endpoint)
    autostart = bool(fields.pop("autostart", True))
    ep = Endpoint(**{**fields, "ssh": tuple(fields["ssh"])})
    folder = Path(args.dir)
    lock = os.open(folder / "tunnel.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _log("another tunnel of this folder holds its lock: leaving it to that one")
        _ready(args.ready_fd, "busy")
        return 0
    pidfile = folder / "tunnel.pid"
    pidfile.write_text(f"{os.getpid()}\n")
    try:
        return asyncio.run(_amain(ep, folder, autostart, args.ready_fd))
    finally:
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()


if __name__ == "__main__":
    sys.exit(main())
