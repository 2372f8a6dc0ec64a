"""Where the slurm and lsf schedulers run their commands: on this host, or on a login node over
SSH. Both look the same to a scheduler: `run` a command to completion, or `stream` a command's
stdout while it runs (`tail -F` of a log file).

Failures that mean "the backend cannot be reached" become BackendUnavailable (gRPC UNAVAILABLE)
with a message naming the command and the host: a missing command, a host that does not answer,
refused authentication, a command that outlives its timeout. A command that runs and exits
non-zero is not an error here; the caller reads its exit status and stderr.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import os
import shlex
import signal
import warnings
from asyncio.subprocess import DEVNULL, PIPE
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from txd.schedulers.errors import BackendUnavailable
from txd.schedulers.jobumask import user_umask
from txd.schedulers.options import opt

if TYPE_CHECKING:
    import asyncssh


def import_asyncssh() -> ModuleType:
    """asyncssh, imported without cryptography's DSA deprecation warning: asyncssh (2.24) still
    defines its DSA key classes at import, where no DSA key is ever used, and cryptography 51
    warns then. Nobody running txd can act on that warning, and the tests turn it into an
    error."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DSA is deprecated")
        import asyncssh
    return asyncssh


# A scheduler command (sbatch, squeue, scancel ...) that takes longer than this is stuck
# (the default of the slurm and lsf setting `command_timeout`).
COMMAND_TIMEOUT = 60.0
# A command fed a stream (a workspace unpacked by tar) may take as long as the stream.
FEED_TIMEOUT = 600.0
CONNECT_TIMEOUT = 10.0
# How long a streamed command gets to end after its stdin is closed, before it is killed.
STOP_GRACE = 2.0
# Host.stream reads up to this many bytes at a time: a shorter read took all there was
# (hpc.logs says "caught up" after one).
CHUNK = 64 * 1024
# The shell's "command not found" exit status (POSIX).
NOT_FOUND = 127


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")

    def error(self) -> str:
        """The command's complaint, for messages: its stderr, else its stdout, else the code."""
        said = (self.stderr or self.stdout).decode(errors="replace").strip()
        return said or f"exit status {self.returncode}"


@dataclass(frozen=True)
class SshTarget:
    """A login node. Unset fields come from ~/.ssh/config, then asyncssh's defaults."""

    host: str
    user: str | None = None
    port: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


@dataclass
class SshOpts:
    """Run options shared by the schedulers that drive a login node (slurm, lsf)."""

    ssh_host: str | None = opt(
        None,
        "run the scheduler's commands on this login node over SSH (a Host from ~/.ssh/config "
        "works); unset: on the daemon's host",
    )
    ssh_user: str | None = opt(None, "SSH user (default: ~/.ssh/config, then your user name)")
    ssh_port: int | None = opt(None, "SSH port (default: ~/.ssh/config, then 22)")
    ssh_key: str | None = opt(None, "private key file (default: ~/.ssh/config, then ssh's own)")

    def ssh_target(self) -> SshTarget | None:
        if not self.ssh_host:
            return None
        return SshTarget(self.ssh_host, self.ssh_user, self.ssh_port, self.ssh_key)


def target_to_native(target: SshTarget | None) -> dict[str, Any] | None:
    """How a job's login node is kept in its native facts (`native["ssh"]`)."""
    return None if target is None else dataclasses.asdict(target)


def target_from_native(value: Mapping[str, Any] | None) -> SshTarget | None:
    return None if value is None else SshTarget(**value)


class Host(abc.ABC):
    """Runs commands somewhere. `calls` counts the commands started, by program name: the
    backend-call counter the daemon reports and tests and benchmarks read. `timeout` is how
    long a command may run (`run`) before it is killed and the backend counted as stuck."""

    label: str

    def __init__(self, timeout: float = COMMAND_TIMEOUT) -> None:
        self.calls: Counter[str] = Counter()
        self.timeout = timeout

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Result:
        """Runs argv to completion. Raises BackendUnavailable if it cannot run or does not end
        within `timeout` seconds (default: the host's).

        `env` replaces the environment on this host; a login node gives every command the
        environment its SSH server sets up, and `env` is ignored there.
        """
        self.calls[argv[0]] += 1
        timeout = self.timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(timeout):
                result = await self._run(tuple(argv), input, env)
        except TimeoutError:
            raise BackendUnavailable(
                f"`{shlex.join(argv)}` on {self.label} did not finish within {timeout:g} s"
            ) from None
        if result.returncode == NOT_FOUND and b"not found" in result.stderr:
            raise self._missing(argv)
        return result

    async def feed(
        self, argv: Sequence[str], chunks: AsyncIterable[bytes], *, timeout: float = FEED_TIMEOUT
    ) -> Result:
        """Runs argv with `chunks` streamed to its stdin (a tar to unpack on a login node), as
        they come: never all in memory. A command that exits before reading them all ends
        the feeding; its exit status tells. Raises BackendUnavailable as `run` does; an
        exception from `chunks` propagates, and the command is ended."""
        self.calls[argv[0]] += 1
        try:
            async with asyncio.timeout(timeout):
                result = await self._feed(tuple(argv), chunks)
        except TimeoutError:
            raise BackendUnavailable(
                f"`{shlex.join(argv)}` on {self.label} did not finish within {timeout:g} s"
            ) from None
        if result.returncode == NOT_FOUND and b"not found" in result.stderr:
            raise self._missing(argv)
        return result

    async def stream(self, argv: Sequence[str]) -> AsyncIterator[bytes]:
        """The command's stdout in chunks as it is written. Its stdin stays open until the
        iteration stops, then is closed: a command that runs until told to stop must end on
        that EOF (on this host it is killed soon after anyway). Its stderr is dropped."""
        self.calls[argv[0]] += 1
        async for chunk in self._stream(tuple(argv)):
            yield chunk

    def _missing(self, argv: Sequence[str]) -> BackendUnavailable:
        return missing_command(argv[0], self.label)

    @abc.abstractmethod
    async def _run(
        self, argv: tuple[str, ...], input: bytes | None, env: Mapping[str, str] | None
    ) -> Result: ...

    @abc.abstractmethod
    def _stream(self, argv: tuple[str, ...]) -> AsyncIterator[bytes]: ...

    async def _feed(self, argv: tuple[str, ...], chunks: AsyncIterable[bytes]) -> Result:
        raise NotImplementedError(f"{type(self).__name__} cannot feed a command's stdin")

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Releases connections. Safe to call twice."""


def missing_command(program: str, where: str) -> BackendUnavailable:
    return BackendUnavailable(
        f"{program}: command not found on {where}; is the scheduler's client installed and on "
        "PATH there?"
    )


class LocalHost(Host):
    label = "this host"

    async def _run(
        self, argv: tuple[str, ...], input: bytes | None, env: Mapping[str, str] | None
    ) -> Result:
        proc = await self._start(argv, env, stdin=PIPE if input is not None else DEVNULL)
        try:
            stdout, stderr = await proc.communicate(input)
        finally:
            await _reap(proc, 0)  # cancelled (a timeout): kill it at once
        assert proc.returncode is not None
        return Result(argv, proc.returncode, stdout, stderr)

    async def _stream(self, argv: tuple[str, ...]) -> AsyncIterator[bytes]:
        proc = await self._start(argv, None, stdin=PIPE, stderr=DEVNULL)
        assert proc.stdout is not None and proc.stdin is not None
        try:
            while chunk := await proc.stdout.read(CHUNK):
                yield chunk
        finally:
            proc.stdin.close()  # the EOF a follow waits for
            await _reap(proc, STOP_GRACE)

    async def _feed(self, argv: tuple[str, ...], chunks: AsyncIterable[bytes]) -> Result:
        proc = await self._start(argv, None, stdin=PIPE)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stdin = proc.stdin

        async def pump() -> None:
            try:
                async for chunk in chunks:
                    stdin.write(chunk)
                    await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the command stopped reading: its exit status says why
            finally:
                stdin.close()

        try:
            _, stdout, stderr = await asyncio.gather(pump(), proc.stdout.read(), proc.stderr.read())
            await proc.wait()
        finally:
            await _reap(proc, 0)
        assert proc.returncode is not None
        return Result(argv, proc.returncode, stdout, stderr)

    async def _start(
        self, argv: tuple[str, ...], env: Mapping[str, str] | None, stdin: int, stderr: int = PIPE
    ) -> asyncio.subprocess.Process:
        try:
            # A group of its own, which _reap ends as a whole.
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin,
                stdout=PIPE,
                stderr=stderr,
                env=env,
                start_new_session=True,
                umask=user_umask(),  # sbatch and bsub hand it to the job
            )
        except FileNotFoundError:
            raise self._missing(argv) from None


async def _reap(proc: asyncio.subprocess.Process, grace: float) -> None:
    """Waits up to `grace` seconds for the process to exit, then kills it with every process
    of its group (children of a wrapper script would hold its pipes open, and asyncio's wait
    waits for them: a timeout would not end a hung command); always reaps it and closes its
    pipes (a child of the command, such as a tail, may hold them a moment longer, and
    asyncio's Process has no public close)."""
    try:
        if proc.returncode is None and grace > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await proc.wait()
    finally:
        if proc.returncode is None:
            # Not reaped yet, so its pid (its group's id) cannot name another process.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                proc.kill()
            await asyncio.shield(proc.wait())
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()


class SshHost(Host):
    """A login node reached over SSH with asyncssh. One connection, opened on first use and
    opened again after it drops, carries every command as its own channel."""

    def __init__(self, target: SshTarget, timeout: float = COMMAND_TIMEOUT) -> None:
        super().__init__(timeout)
        self.target = target
        self.label = f"login node {target}"
        self._conn: asyncssh.SSHClientConnection | None = None
        self._connecting = asyncio.Lock()

    async def _connection(self) -> asyncssh.SSHClientConnection:
        asyncssh = import_asyncssh()

        async with self._connecting:
            if self._conn is not None:
                return self._conn
            kw: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT}
            if self.target.user:
                kw["username"] = self.target.user
            if self.target.port:
                kw["port"] = self.target.port
            if self.target.key:
                kw["client_keys"] = [self.target.key]
            try:
                conn = await asyncssh.connect(self.target.host, **kw)
            except (OSError, asyncssh.Error, TimeoutError) as e:
                raise BackendUnavailable(f"cannot reach {self.label}: {_reason(e)}") from None
            self._conn = conn
            return conn

    def _drop(self, conn: asyncssh.SSHClientConnection) -> None:
        if self._conn is conn:
            self._conn = None
            conn.close()

    async def _run(
        self, argv: tuple[str, ...], input: bytes | None, env: Mapping[str, str] | None
    ) -> Result:
        asyncssh = import_asyncssh()

        conn = await self._connection()
        try:
            done = await conn.run(shlex.join(argv), input=input, encoding=None)
        except (OSError, asyncssh.Error) as e:
            self._drop(conn)
            raise BackendUnavailable(f"lost {self.label}: {_reason(e)}") from None
        stdout = done.stdout if isinstance(done.stdout, bytes) else b""
        stderr = done.stderr if isinstance(done.stderr, bytes) else b""
        # None: the remote side closed the channel without an exit status (killed by signal).
        code = done.exit_status if done.exit_status is not None else -1
        return Result(argv, code, stdout, stderr)

    async def _stream(self, argv: tuple[str, ...]) -> AsyncIterator[bytes]:
        asyncssh = import_asyncssh()

        conn = await self._connection()
        try:
            proc = await conn.create_process(shlex.join(argv), encoding=None)
        except (OSError, asyncssh.Error) as e:
            self._drop(conn)
            raise BackendUnavailable(f"lost {self.label}: {_reason(e)}") from None
        try:
            while chunk := await proc.stdout.read(CHUNK):
                yield chunk
        finally:
            with contextlib.suppress(OSError, asyncssh.Error):
                proc.stdin.write_eof()
            proc.close()

    async def _feed(self, argv: tuple[str, ...], chunks: AsyncIterable[bytes]) -> Result:
        asyncssh = import_asyncssh()

        conn = await self._connection()
        try:
            proc = await conn.create_process(shlex.join(argv), encoding=None)
        except (OSError, asyncssh.Error) as e:
            self._drop(conn)
            raise BackendUnavailable(f"lost {self.label}: {_reason(e)}") from None

        async def pump() -> None:
            try:
                async for chunk in chunks:
                    proc.stdin.write(chunk)
                    await proc.stdin.drain()
            except (OSError, asyncssh.Error):
                pass  # the command stopped reading: its exit status says why
            finally:
                with contextlib.suppress(OSError, asyncssh.Error):
                    proc.stdin.write_eof()

        try:
            _, stdout, stderr = await asyncio.gather(pump(), proc.stdout.read(), proc.stderr.read())
            done = await proc.wait()
        except (OSError, asyncssh.Error) as e:
            self._drop(conn)
            raise BackendUnavailable(f"lost {self.label}: {_reason(e)}") from None
        finally:
            proc.close()
        code = done.exit_status if done.exit_status is not None else -1
        return Result(argv, code, bytes(stdout), bytes(stderr))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await self._conn.wait_closed()
            self._conn = None


def _reason(e: BaseException) -> str:
    return str(e) or type(e).__name__


class Hosts:
    """The hosts a scheduler talks to, one per login node (plus this host), kept open; each
    gives a command `timeout` seconds."""

    def __init__(self, timeout: float = COMMAND_TIMEOUT) -> None:
        self._hosts: dict[SshTarget | None, Host] = {}
        self.timeout = timeout

    def get(self, target: SshTarget | None) -> Host:
        host = self._hosts.get(target)
        if host is None:
            host = self._hosts[target] = (
                LocalHost(self.timeout) if target is None else SshHost(target, self.timeout)
            )
        return host

    def calls(self) -> dict[str, int]:
        """Commands started so far on every host, by program name."""
        total: Counter[str] = Counter()
        for host in self._hosts.values():
            total.update(host.calls)
        return dict(total)

    async def close(self) -> None:
        for host in self._hosts.values():
            await host.close()
        self._hosts.clear()
