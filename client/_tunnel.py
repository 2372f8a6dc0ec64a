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

Every ssh it runs after the master goes through the master (never a login of its own, which
would prompt, or outlive the master), and none is started once it stops. Stopping is bounded:
each child is killed by pid, the master KILL_AFTER s after its SIGTERM, and a thread ends the
process STOP_DEADLINE s after the stop began, whatever its event loop is doing (a task
cancelled inside asyncio's subprocess code can wait forever: CPython issue 125502). The
folder's lock file records the holder's pid and until when it may hold the lock without
serving (its start, its stop); a client that finds it held past that ends it (SIGKILL) and
starts a new tunnel rather than waiting for one that will not serve.

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
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

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
STOP_DEADLINE = KILL_AFTER + 2.0  # seconds a stopping tunnel has to exit, then it is ended
START_DEADLINE = START_TIMEOUT + QUERY_TIMEOUT + 3 * PROBE_TIMEOUT  # every step of start()
HOLDER_SLACK = 2.0  # seconds past its own deadline before a client ends a tunnel process
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
        if _served_or_gone(sock, d / "tunnel.lock", START_TIMEOUT + QUERY_TIMEOUT, notes):
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


def _served_or_gone(sock: Path, lock: Path, timeout: float, notes: list[str] | None = None) -> bool:
    """True once `sock` listens; False once no process holds the tunnel folder's `lock` (the
    tunnel that held it exited without serving, or was ended here: one still holding it past
    the deadline it recorded is wedged, and is killed). Raises TunnelError after `timeout` s."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    ended: set[int] = set()
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
            pid, until = _holder(fd)
            late = time.time() - until if until is not None else 0.0
            if pid and pid not in ended and late > HOLDER_SLACK:
                ended.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                if notes is not None:
                    notes.append(
                        f"ended tunnel process {pid}, which held {lock} {late:.0f} s past its "
                        f"deadline without serving (see {lock.with_name('tunnel.log')})"
                    )
            if time.monotonic() > deadline:
                raise TunnelError(
                    "local",
                    f"the tunnel process {pid or '(unknown pid)'} holding {lock} has not served "
                    f"in {timeout:g} s (see {lock.with_name('tunnel.log')})",
                )
            time.sleep(0.05)
    finally:
        os.close(fd)


def _holder(fd: int) -> tuple[int, float | None]:
    """(pid, until) of the process holding a tunnel folder's lock, as it recorded them in the
    lock file (until: None while it serves); (0, None) when it has recorded nothing yet."""
    try:
        record = json.loads(os.pread(fd, 256, 0))
        until = record["until"]
        return int(record["pid"]), None if until is None else float(until)
    except (OSError, ValueError, TypeError, KeyError):
        return 0, None


def _record_holder(fd: int, until: float | None) -> None:
    """This process holds the lock (open on `fd`): its pid and deadline, for _holder."""
    data = json.dumps({"pid": os.getpid(), "until": until}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


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
    def __init__(self, ep: Endpoint, folder: Path, autostart: bool, lock_fd: int) -> None:
        self.ep = ep
        self.dir = folder
        self.autostart = autostart
        self.lock_fd = lock_fd  # the folder's lock, held: where the deadline is recorded
        self.ctl = folder / "ctl"
        self.fwd = folder / "fwd.sock"
        self.sock = folder / "txd.sock"
        self.master: asyncio.subprocess.Process | None = None
        self.children: set[asyncio.subprocess.Process] = set()  # every ssh running, master too
        self.stopping = ""  # why, once stop() has begun
        self.stopped = asyncio.Event()
        self.watchdog: threading.Timer | None = None
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

    def _through_master(self, *args: str) -> list[str]:
        """An ssh session over the master. With the master gone, ssh would log in by itself
        (a prompt, and a session nothing ends); the proxy command that fails at once makes
        that login fail instead."""
        return self._ssh(
            "-o", "ControlMaster=no", "-o", "ProxyCommand=false", *self.ep.ssh_target(), *args
        )

    def _spec(self, remote: str) -> str:
        """-L's LOCAL:REMOTE, fwd.sock to the remote daemon's socket."""
        return f"{_no_tokens(str(self.fwd))}:{_no_tokens(remote)}"

    def hold_until(self, seconds: float | None, what: str) -> None:
        """Records in the lock file until when this process may hold it without serving (None:
        it serves), for the clients waiting on it (_served_or_gone), and keeps to it: a thread
        ends the process then, whatever its event loop is doing."""
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        _record_holder(self.lock_fd, None if seconds is None else time.time() + seconds)
        if seconds is not None:
            self.watchdog = threading.Timer(seconds, self._give_up, (what, seconds))
            self.watchdog.daemon = True
            self.watchdog.start()

    def _give_up(self, what: str, seconds: float) -> None:
        """The watchdog thread's: nothing of the event loop is awaited here."""
        _log(f"{what} not done in {seconds:g} s: killing what this tunnel started and exiting")
        for proc in list(self.children):
            _kill(proc)
        _exit(self.dir, self.lock_fd, 1)

    async def _spawn(self, *args: str, **kwargs: Any) -> asyncio.subprocess.Process:
        """A child process, which stop() kills; refused once the tunnel stops."""
        if self.stopping:
            raise self._stopped()
        proc = await asyncio.create_subprocess_exec(*args, **kwargs)
        self.children.add(proc)
        if self.stopping:  # stop() came while it started: its sweep missed this one
            self._release(proc)
            raise self._stopped()
        return proc

    def _stopped(self) -> TunnelError:
        return TunnelError("ssh", f"the tunnel to {self.ep.url} stopped: {self.stopping}")

    def _release(self, proc: asyncio.subprocess.Process) -> None:
        """Done with a child: killed if it still runs (never awaited: the child watcher reaps
        it)."""
        _kill(proc)
        self.children.discard(proc)

    async def _run(self, args: list[str], timeout: float) -> tuple[int | None, bytes, bytes]:
        """Runs a short ssh command to its end: (exit code, stdout, stderr). Raises
        TimeoutError after `timeout` s, the command killed."""
        proc = await self._spawn(
            *args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        finally:
            self._release(proc)
        if self.stopping:  # killed by stop(): what it said is of no use
            raise self._stopped()
        return proc.returncode, out, err

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
            self.master = await self._spawn(
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
        master = self.master
        master_exited = asyncio.ensure_future(master.wait())
        master_exited.add_done_callback(
            lambda _: self.stop(f"ssh master exited ({master.returncode})")
        )
        assert master.stdout is not None
        try:
            line = await asyncio.wait_for(master.stdout.readline(), START_TIMEOUT)
        except TimeoutError:
            raise TunnelError("ssh", f"no login within {START_TIMEOUT:g} s") from None
        if line.strip() != MARKER.encode():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(master_exited), 10)
            raise TunnelError("ssh", _last_line(ssh_err.read_bytes()) or "ssh exited")
        (self.dir / "ssh.pid").write_text(f"{master.pid}\n")
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
        with contextlib.suppress(TimeoutError):
            await self._run(self._ssh("-O", "exit", *self.ep.ssh_target()), PROBE_TIMEOUT)

    async def _query(self) -> str:
        """The remote daemon's socket, from `remote-socket` (which starts the daemon)."""
        sub = "remote-socket" if self.autostart else "--no-autostart remote-socket"
        cmd = self.ep.remote(sub)
        try:
            code, out, err = await self._run(self._through_master(cmd), QUERY_TIMEOUT)
        except TimeoutError:
            raise TunnelError(
                "remote",
                f"`{cmd}` did not answer within {QUERY_TIMEOUT:g} s (a login script waiting "
                "for input?)",
            ) from None
        before, marker, after = out.partition(MARKER.encode() + b"\n")
        if before:
            raise TunnelError("remote", _noise(self.ep, before))
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
        code, _, err = await self._run(
            self._ssh("-O", "forward", "-L", self._spec(self.remote_socket), *self.ep.ssh_target()),
            PROBE_TIMEOUT,
        )
        if code == 0 and await self._probe():
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
        if self.stopping:  # a signal as it started
            raise self._stopped()
        if _check_own_socket(self.sock):
            os.unlink(self.sock)  # a dead tunnel's: this one holds the folder's lock
        old = os.umask(0o177)
        try:
            self.server = await asyncio.start_unix_server(
                self._connection, path=str(self.sock), limit=CHUNK
            )
        finally:
            os.umask(old)
        self.hold_until(None, "serving")
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
        await self.stopped.wait()

    def stop(self, why: str) -> None:
        """Stops accepting first: a command that comes meanwhile finds no socket and starts a
        new tunnel, which waits for this one's lock, instead of being accepted here and
        dropped. Then every child but the master is killed and every connection closed; the
        master is asked to exit (SIGTERM; finish() kills it after KILL_AFTER s). From here the
        process has STOP_DEADLINE s to exit."""
        if self.stopping:
            return
        self.stopping = why
        _log(f"stopping: {why}")
        self.hold_until(STOP_DEADLINE, "stopping")
        self._close_listener()
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        for proc in list(self.children):
            if proc is not self.master:
                self._release(proc)
        for w in list(self.writers):
            w.close()
        if self.master is not None:
            _kill(self.master, signal.SIGTERM)
        self.stopped.set()

    async def finish(self) -> None:
        """After stop(): waits for the master, killed if SIGTERM has not ended it in
        KILL_AFTER s."""
        master = self.master
        if master is None or master.returncode is not None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(master.wait(), KILL_AFTER)
        if master.returncode is None:
            _log(f"ssh master still running {KILL_AFTER:g} s after SIGTERM: killing it")
            _kill(master)

    def _close_listener(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.sock)  # this tunnel's: it holds the folder's lock

    def _arm_idle(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.stopping:
            return
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
            if relay is not None:
                self._release(relay)
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

    async def _ssh_control(self, action: str, remote: str) -> int | None:
        code, _, _ = await self._run(
            self._ssh("-O", action, "-L", self._spec(remote), *self.ep.ssh_target()),
            PROBE_TIMEOUT,
        )
        return code

    async def _open_relay(
        self,
    ) -> tuple[asyncio.subprocess.Process, asyncio.StreamReader, asyncio.StreamWriter]:
        cmd = self.ep.remote("dial-stdio")
        proc = await self._spawn(
            *self._through_master("-T", cmd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            limit=CHUNK,
        )
        assert proc.stdout is not None and proc.stdin is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), RELAY_TIMEOUT)
        except TimeoutError:
            self._release(proc)
            raise TunnelError(
                "remote", f"`{cmd}` printed no marker within {RELAY_TIMEOUT:g} s"
            ) from None
        if line != MARKER.encode() + b"\n":
            self._release(proc)
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


async def _amain(ep: Endpoint, folder: Path, autostart: bool, ready_fd: int, lock: int) -> int:
    tunnel = Tunnel(ep, folder, autostart, lock)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, tunnel.stop, signal.Signals(sig).name)
    tunnel.hold_until(START_DEADLINE, "starting")
    try:
        await tunnel.start()
        await tunnel.serve(ready_fd)
        return 0
    except TunnelError as e:
        _log(f"error {e.hop}: {e}")
        _ready(ready_fd, f"error {e.hop}: {e}")
        return 1
    except Exception as e:  # unforeseen: said on the pipe, and the ssh master not left behind
        _log("".join(traceback.format_exception(e)).rstrip())
        _ready(ready_fd, f"error local: {type(e).__name__}: {e} (see {folder / 'tunnel.log'})")
        return 1
    finally:
        tunnel.stop("could not start" if tunnel.server is None else "done")
        await tunnel.finish()


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
    _record_holder(lock, time.time() + START_DEADLINE)  # at once: the last holder's is stale
    (folder / "tunnel.pid").write_text(f"{os.getpid()}\n")
    code = 1
    try:
        # Not asyncio.run: its cancelling and awaiting of the tasks left (a connection's, in
        # asyncio's subprocess code) can hang (CPython issue 125502). Everything this tunnel
        # started has been killed when _amain returns.
        code = asyncio.new_event_loop().run_until_complete(
            _amain(ep, folder, autostart, args.ready_fd, lock)
        )
    finally:
        _exit(folder, lock, code)


def _kill(proc: asyncio.subprocess.Process, sig: int = signal.SIGKILL) -> None:
    """Signals a child by pid, unless it has been reaped."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)


def _exit(folder: Path, lock: int, code: int) -> NoReturn:
    """Ends the tunnel process, from its main thread or its watchdog's: its pid file and
    lock record removed, nothing awaited."""
    with contextlib.suppress(FileNotFoundError):
        (folder / "tunnel.pid").unlink()
    with contextlib.suppress(OSError):
        os.ftruncate(lock, 0)
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
