"""Helpers for the integration tests: a real `txd` process, `txctl` runs, /proc inspection.

Importable from test modules as `txd_testing` (tests/ is on pytest's `pythonpath`). Nothing here
sleeps to wait: readiness comes through the daemon's --ready-fd pipe, process exits through
Popen.wait or pidfds, job ends through the Wait RPC.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, AppStatus, Role

REPO = Path(__file__).resolve().parent.parent
_VENV_TXCTL = Path(sys.executable).parent / "txctl"
TXCTL: list[str] = (
    [str(_VENV_TXCTL)] if _VENV_TXCTL.exists() else [sys.executable, "-m", "txd.client.cli"]
)
HANDLE_RE = r"local_cwd://txd/{name}-[a-z0-9]+"
START_TIMEOUT = 30.0
# Set in the shared daemon's environment only: a job must not see it unless the caller has it.
DAEMON_ONLY_VAR = "TXD_TEST_DAEMON_ONLY"
STOP_TIMEOUT = 30.0


# A command prefix for a child the test sends SIGINT: it runs with SIGINT's default disposition,
# which a suite started with SIGINT ignored (`nohup scripts/test &`) would otherwise pass down,
# and under which Python installs no KeyboardInterrupt handler. A prefix, not a Popen
# preexec_fn: that makes Popen fork this process, which has gRPC loaded, and gRPC's fork
# handlers then ran its poller in the child, whose "epoll_wait error: Bad file descriptor" line
# reached the child's stderr before the exec (10 ms after the fork, in a CI run).
DEFAULT_SIGINT = ("env", "--default-signal=INT")


def short_tmpdir(prefix: str = "txdt-") -> Path:
    """A directory with a short path: Unix socket paths are limited to 107 bytes. Whatever is
    left of it when this process exits is removed then (a test that fails half-way, or one that
    only needed the path, leaves nothing in /tmp)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    _made.append(path)
    return path


_made: list[Path] = []
_maker = os.getpid()


@atexit.register
def _remove_made() -> None:
    if os.getpid() == _maker:  # not in a forked child, whose parent still uses them
        for path in _made:
            shutil.rmtree(path, ignore_errors=True)


def unique(prefix: str) -> str:
    """An app name nobody else uses, so a test can count its own jobs in `list`."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the txd variables that would redirect clients or
    configure daemons (a user's own txd.toml is never read: XDG_CONFIG_HOME points nowhere)."""
    drop = ("TXD_SOCKET", "TXD_NO_AUTOSTART", "TXD_CONFIG", "TXD_HOST", "TXD_TOKEN")
    drop += ("TXD_TOKEN_FILE", "TXD_CA", "TXD_CLIENT_CERT", "TXD_CLIENT_KEY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["XDG_CONFIG_HOME"] = "/nonexistent/txd-tests"
    env.update(extra)
    return env


# -- apps -------------------------------------------------------------------------------------


def sh_app(
    script: str,
    name: str = "t",
    role: str = "r",
    replicas: int | None = None,
    env: dict[str, str] | None = None,
) -> AppDef:
    """One role running `sh -c script`."""
    r = Role(name=role, entrypoint="sh", args=["-c", script], env=env or {})
    if replicas is not None:
        r.num_replicas = replicas
    return AppDef(name=name, roles=[r])


def py_app(code: str, name: str = "py", role: str = "py") -> AppDef:
    """One role running `python -c code` with this interpreter."""
    return AppDef(name=name, roles=[Role(name=role, entrypoint=sys.executable, args=["-c", code])])


def repeated_statuses(statuses: Sequence[AppStatus]) -> list[int]:
    """Indices of the statuses (of a Watch) equal to the one before but for `updated`, the time
    of the last state change (so a pair equal as a whole counts too)."""
    out = []
    for i in range(1, len(statuses)):
        a, b = AppStatus(), AppStatus()
        a.CopyFrom(statuses[i - 1])
        b.CopyFrom(statuses[i])
        a.ClearField("updated")
        b.ClearField("updated")
        if a == b:
            out.append(i)
    return out


async def read_logs(client: Any, handle: str, **kw: Any) -> bytes:
    """Every byte a Logs call returns, joined."""
    return b"".join([chunk.data async for chunk in client.logs(handle, **kw)])


async def read_logs_by_replica(client: Any, handle: str, **kw: Any) -> dict[str, bytes]:
    """Logs as {"role/k": bytes}."""
    out: dict[str, bytes] = {}
    async for chunk in client.logs(handle, **kw):
        key = f"{chunk.role}/{chunk.replica}"
        out[key] = out.get(key, b"") + chunk.data
    return out


# -- watching a job ---------------------------------------------------------------------------

STEP_TIMEOUT = 30.0  # Watched.next


class Watched:
    """Every status a Watch of a job sends (`sent`), and a way to wait for the next one that
    says something (see `watching`)."""

    def __init__(self) -> None:
        self.sent: list[AppStatus] = []
        self._queue: asyncio.Queue[AppStatus | None] = asyncio.Queue()

    async def next(
        self, what: str, pred: Callable[[AppStatus], bool], timeout: float = STEP_TIMEOUT
    ) -> AppStatus:
        """The next status sent for which pred holds; AssertionError naming `what` when the
        watch ends first, TimeoutError after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            while (status := await self._queue.get()) is not None:
                if pred(status):
                    return status
        raise AssertionError(f"the watch ended before {what}: {self.sent}")


@contextlib.asynccontextmanager
async def watching(client: Any, handle: str) -> AsyncIterator[Watched]:
    """Watches the job in a task for as long as the block lasts."""
    w = Watched()

    async def pump() -> None:
        try:
            async for status in client.watch(handle):
                w.sent.append(status)
                w._queue.put_nowait(status)
        finally:
            w._queue.put_nowait(None)

    task = asyncio.create_task(pump())
    try:
        yield w
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def is_stale(s: AppStatus) -> bool:
    return s.HasField("stale_since")


def is_fresh_running(s: AppStatus) -> bool:
    return s.state == AppState.RUNNING and not is_stale(s)


# -- /proc ------------------------------------------------------------------------------------


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, start ticks) of a process, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def is_running(pid: int, start_ticks: int | None = None) -> bool:
    """True when pid exists, is not a zombie (PID 1 here reaps orphans lazily), and, when
    start_ticks is given, is the same process (not a reused pid)."""
    st = proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    return start_ticks is None or st[3] == start_ticks


def descendants(pid: int) -> list[int]:
    """Every live process below pid (children, grandchildren ...)."""
    children: dict[int, list[int]] = {}
    for p in all_pids():
        st = proc_stat(p)
        if st is not None and st[0] not in ("Z", "X"):
            children.setdefault(st[1], []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    out = []
    for p in all_pids():
        st = proc_stat(p)
        if st is not None and st[2] == pgid and st[0] not in ("Z", "X"):
            out.append(p)
    return out


def pids_with_marker(marker: str) -> list[int]:
    """Live processes whose command line contains marker (a unique string in a job's args)."""
    needle = marker.encode()
    out = []
    for p in all_pids():
        if p == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline and is_running(p):
            out.append(p)
    return out


class PidWatch:
    """Holds pidfds on a set of processes from now on, so a later check cannot be fooled by a
    reused pid; wait() blocks in select() until they have all exited (a zombie has exited:
    PID 1 here reaps orphans lazily)."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.fds: dict[int, int] = {}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                self.fds[pid] = os.pidfd_open(pid)

    def __enter__(self) -> PidWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def wait(self, timeout: float) -> list[int]:
        pending = dict(self.fds)
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select(list(pending.values()), [], [], max(left, 0))
            if not ready:
                break
            pending = {p: fd for p, fd in pending.items() if fd not in ready}
        return sorted(pending)

    def running(self) -> list[int]:
        """Those not yet exited, without waiting."""
        return self.wait(0)


def wait_ended(pid: int, timeout: float) -> None:
    """Returns once process `pid` (not ours to wait for) has ended; fails after `timeout` s."""
    with PidWatch([pid]) as watch:
        assert not watch.wait(timeout), f"process {pid} still runs"


def recorded_replicas(state_dir: Path) -> list[dict[str, Any]]:
    """Every replica local_cwd recorded in the job store under state_dir (pid, start_ticks ...:
    the job's `native` facts)."""
    out = []
    db = state_dir / "jobs.db"
    if not db.exists():
        return out
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for (native,) in conn.execute("SELECT native FROM jobs WHERE scheduler = 'local_cwd'"):
            with contextlib.suppress(ValueError, KeyError):
                out.extend(json.loads(native)["replicas"])
    return out


def kill_recorded_replicas(state_dir: Path) -> list[int]:
    """Safety net for teardown: SIGKILL any replica group recorded under state_dir that is
    still the same process. Returns the pids it had to kill."""
    killed = []
    for rep in recorded_replicas(state_dir):
        pid, ticks = rep.get("pid"), rep.get("start_ticks")
        if pid and ticks is not None and is_running(pid, ticks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


# -- the daemon -------------------------------------------------------------------------------


class Daemon:
    """A real `python -m txd.daemon` on a socket and state dir of its own, started as txctl
    starts one (txd.client._daemon.spawn): in its own session, ready when it says so on its
    --ready-fd pipe.
    """

    def __init__(
        self,
        root: Path,
        grace: float = 2.0,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        prefix: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.args = list(args)
        self.prefix = list(prefix)  # a command that execs its arguments (keeps the pid)
        self.env = clean_env(**(env or {}))
        self.socket = root / "txd.sock"
        self.state_dir = root / "state"
        self.log_path = root / "txd.log"
        self.grace = grace
        self.proc: subprocess.Popen[bytes] | None = None
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)

    # lifecycle

    def start(self) -> Daemon:
        from txd.client._daemon import spawn

        assert self.proc is None or self.proc.poll() is not None, "already running"
        # EOF (the daemon died) or the timeout ends the wait as surely as "ready" does.
        self.proc, line = spawn(
            self.socket,
            self.state_dir,
            self.log_path,
            args=["--grace", str(self.grace), *self.args],
            prefix=self.prefix,
            env=self.env,
            cwd=self.root,
            timeout=START_TIMEOUT,
        )
        if line != "ready":
            rc = self.proc.poll()
            if rc is None:
                self.proc.kill()
                self.proc.wait()
            raise RuntimeError(
                f"txd did not become ready (got {line!r}, exit code {rc}):\n{self.log()}"
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Sends sig and waits for the daemon to exit; returns its exit code."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"txd did not exit within {timeout}s of signal {sig}:\n{self.log()}"
            ) from None

    def kill(self) -> int:
        """SIGKILL: a crash, as far as the daemon can tell."""
        return self.stop(signal.SIGKILL)

    def restart(self) -> Daemon:
        """Starts again on the same socket and state dir (the previous process must be gone)."""
        assert not self.running(), "stop or kill the daemon first"
        return self.start()

    def close(self) -> None:
        """Teardown: stops the daemon if needed and ends any replica it left behind."""
        if self.running():
            with contextlib.suppress(AssertionError):
                self.stop(signal.SIGTERM)
        kill_recorded_replicas(self.state_dir)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    # clients

    def client(self, **kw: Any) -> Any:
        from txd.client import AsyncClient

        return AsyncClient(self.socket, **kw)

    def txctl_env(self, **extra: str) -> dict[str, str]:
        return clean_env(
            HOME=str(self.home),
            XDG_STATE_HOME=str(self.root / "xdg-state"),
            XDG_RUNTIME_DIR=str(self.root / "xdg-run"),
            **extra,
        )

    def txctl(
        self,
        *args: str,
        input: str | None = None,
        check: bool | int | None = None,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> subprocess.CompletedProcess[str]:
        """Runs `txctl --socket <ours> --no-autostart *args`. check=True or an int asserts
        the exit code."""
        proc = subprocess.run(
            [*TXCTL, "--socket", str(self.socket), "--no-autostart", *args],
            input=input,
            capture_output=True,
            encoding="utf-8",
            errors="surrogateescape",
            cwd=cwd or self.home,
            env=env if env is not None else self.txctl_env(),
            timeout=timeout,
        )
        if check is not None and check is not False:
            want = 0 if check is True else check
            assert proc.returncode == want, (
                f"txctl {' '.join(args)}: exit {proc.returncode}, wanted {want}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc


# Lines in a daemon's log that mean a bug, whatever the test checked.
LOG_ALARMS = (
    "Traceback",
    "Task exception was never retrieved",
    "internal error",
    "Fatal Python error",  # the interpreter itself failed (the daemon's or its read door's)
)


def log_alarms(log: str) -> list[str]:
    """The lines of a daemon's log that mean a bug."""
    return [line for line in log.splitlines() if any(a in line for a in LOG_ALARMS)]


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    """Asserts an error was reported as one `txctl: error: ...` line and nothing else."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("txctl: error: "), proc.stderr


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def call_failed(request: Any) -> bool:
    """Whether the running test failed (or never got to its call): tests/conftest.py records
    each phase's report on the item as `rep_<phase>`. A fixture that checks a daemon's log
    passes over a test that failed already."""
    rep = getattr(request.node, "rep_call", None)
    return rep is None or bool(rep.failed)


@contextlib.contextmanager
def own_daemon(d: Daemon, request: Any) -> Iterator[Daemon]:
    """`d` started for one test, then stopped and its folder removed; a test that passed still
    fails if the daemon logged a traceback or an internal error."""
    try:
        yield d.start()
    finally:
        d.close()
        log = d.log()
        remove_tree(d.root)
        if call_failed(request):  # shown beside the failure: what the daemon saw
            print(f"the daemon's log ({d.root}):\n{log[-20_000:]}")
    assert call_failed(request) or not log_alarms(log), "the daemon logged errors:\n" + log


def run_python(
    code: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


async def until(check: Callable[[], Awaitable[object]], what: str, timeout: float = 30.0) -> None:
    """Waits, reading the daemon's state through `check()`, until it returns true (bounded:
    an AssertionError naming `what` after `timeout` seconds)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                if await check():
                    return
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not {what} within {timeout} s") from None


__all__: Sequence[str] = [
    "DAEMON_ONLY_VAR",
    "HANDLE_RE",
    "REPO",
    "TXCTL",
    "Daemon",
    "PidWatch",
    "all_pids",
    "clean_env",
    "descendants",
    "first_line",
    "group_members",
    "is_running",
    "kill_recorded_replicas",
    "no_traceback",
    "pids_with_marker",
    "proc_stat",
    "py_app",
    "read_logs",
    "read_logs_by_replica",
    "recorded_replicas",
    "remove_tree",
    "repeated_statuses",
    "run_python",
    "sh_app",
    "short_tmpdir",
    "unique",
    "until",
]


PLUGIN = Path(__file__).resolve().parent / "plugins" / "txd_fakepoll.py"


def install_plugin(site: Path, name: str = "fakepoll", *needs: str, metadata: str = "") -> None:
    """A minimal installed distribution of the test scheduler tests/plugins/txd_<name>.py:
    the module (and the plugin modules it imports, `needs`), and a dist-info with its entry
    point `<name> = txd_<name>:create_scheduler` (and `metadata`'s lines in its METADATA)."""
    site.mkdir(parents=True, exist_ok=True)
    for module in (name, *needs):
        shutil.copy(PLUGIN.with_name(f"txd_{module}.py"), site / f"txd_{module}.py")
    info = site / f"txd_{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: txd-{name}\nVersion: 0.1\n{metadata}"
    )
    (info / "entry_points.txt").write_text(
        f"[txd.schedulers]\n{name} = txd_{name}:create_scheduler\n"
    )


# -- gates: a job waits, the test decides when it goes on -------------------------------------


class Gate:
    """A named pipe a job blocks on until the test opens the gate: the job runs `gate.wait`
    (`read _ < path`), which sleeps in the kernel, without polling, until a line arrives.

    The test holds the pipe open for reading and writing from the start, so the job's open of
    it never blocks, and a line written before the job reads stays in the pipe until it does.
    Each open() lets one wait through. close() gives a job still waiting EOF, which also lets
    it go: a failed test leaves no job blocked for ever."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._fd = os.open(path, os.O_RDWR)

    @property
    def wait(self) -> str:
        """The shell command that waits for the gate."""
        return f"read _ < {shlex.quote(str(self.path))}"

    def open(self) -> None:
        os.write(self._fd, b"\n")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Gates:
    """Makes gates in a directory and closes them all at the end of a `with` block."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._gates: list[Gate] = []

    def new(self, name: str) -> Gate:
        gate = Gate(self.directory / f"gate-{name}")
        self._gates.append(gate)
        return gate

    def __enter__(self) -> Gates:
        return self

    def __exit__(self, *exc: object) -> None:
        for gate in self._gates:
            gate.close()


def recorded_native(state_dir: Path, handle: str) -> dict[str, Any]:
    """The native facts the daemon under state_dir recorded for a job."""
    with contextlib.closing(sqlite3.connect(state_dir / "jobs.db")) as conn:
        [(native,)] = conn.execute("SELECT native FROM jobs WHERE handle = ?", (handle,))
    out: dict[str, Any] = json.loads(native)
    return out


def job_replicas(state_dir: Path, handle: str) -> list[dict[str, Any]]:
    """The replicas local_cwd recorded for one job under state_dir (pid, start_ticks ...)."""
    replicas: list[dict[str, Any]] = recorded_native(state_dir, handle)["replicas"]
    return replicas


__all__ = [*__all__, "Gate", "Gates", "job_replicas", "recorded_native"]
__all__ = [*__all__, "Watched", "is_fresh_running", "is_stale", "watching"]


# -- native requests --------------------------------------------------------------------------

_UNIQUE_SUFFIX = "[bcdfghjklmnpqrstvwxz][bcdfghjklmnpqrstvwxz012345679]{11}"  # api.make_unique


def unique_names(text: str, name: str) -> set[str]:
    """The names make_unique gave `name` that `text` holds."""
    return set(re.findall(rf"{re.escape(name)}-{_UNIQUE_SUFFIX}", text))


def with_name_of(dryrun_text: str, kept: str, name: str) -> str:
    """A DryRun's native request with its random job name (make_unique's `name-xxxx`) replaced
    by the one in `kept`: DryRun names each request anew, so this is the text the DryRun would
    have shown had it drawn the submitted job's name. A request with no drawn name (an sbatch
    script: Slurm numbers the job) is returned as it is."""
    drawn, submitted = unique_names(dryrun_text, name), unique_names(kept, name)
    if not drawn and not submitted:
        return dryrun_text
    ((drawn_name,), (submitted_name,)) = (drawn, submitted)
    return dryrun_text.replace(drawn_name, submitted_name)


def native_request_rows(state_dir: Path) -> set[str]:
    """The handles of the jobs whose native request the job store holds."""
    path = state_dir / "jobs.db"
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
        return {row[0] for row in db.execute("SELECT handle FROM native_requests")}


__all__ = [*__all__, "native_request_rows", "unique_names", "with_name_of"]


# -- other users ------------------------------------------------------------------------------


NOBODY = 65534  # user nobody's uid, and group nogroup's gid


def as_nobody(action: Callable[[], str]) -> str | None:
    """What `action` returns when run by user nobody (uid and gid 65534, no other group) in a
    forked child of this process, or None when it raised. `action` must do little more than
    system calls: this process may have threads. Needs root."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            data = action().encode()
            while data:
                data = data[os.write(write_end, data) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with open(read_end, "rb") as f:
        said = f.read()
    _, status = os.waitpid(pid, 0)
    return said.decode() if os.waitstatus_to_exitcode(status) == 0 else None


def closed_to_nobody(path: Path, send: bytes = b"", timeout: float = 30.0) -> bool:
    """Whether a process of user nobody (uid 65534) that connects to the Unix socket `path`,
    its folder and file opened to others for the while, and sends `send`, sees the connection
    closed with nothing sent back. Needs root."""
    folder = path.parent
    modes = stat.S_IMODE(folder.stat().st_mode), stat.S_IMODE(path.stat().st_mode)
    os.chmod(folder, 0o711)
    os.chmod(path, 0o666)

    def attempt() -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            try:
                s.sendall(send)  # the server may have closed at once: EPIPE
                got = s.recv(100)
            except (BrokenPipeError, ConnectionResetError):
                got = b""
            return "closed" if got == b"" else "answered"

    try:
        return as_nobody(attempt) == "closed"
    finally:
        os.chmod(folder, modes[0])
        os.chmod(path, modes[1])


def open_to_others(root: Path) -> list[str]:
    """What of the folder `root` (a state dir) is open to other users: each folder under it
    (itself included) not 0700 and each file not 0600, with its mode; and what user nobody
    reads of it: its listing, any file, as they are and again with every folder opened (0711)
    for the while, so that each file's own mode is put to the test. [] when it is all the
    owner's. The folders above `root` must let nobody through (as a world-readable home does),
    or nothing would be tried: an AssertionError says so. Needs root."""
    folders, files = [root], []
    for folder, dirs, names in os.walk(root):
        folders += [Path(folder, d) for d in dirs]
        files += [Path(folder, n) for n in names if not Path(folder, n).is_symlink()]
    found = [
        f"{path} is {stat.S_IMODE(path.lstat().st_mode):04o}"
        for paths, want in ((folders, 0o700), (files, 0o600))
        for path in paths
        if stat.S_IMODE(path.lstat().st_mode) != want
    ]
    assert as_nobody(lambda: str(os.stat(root).st_uid)) is not None, (
        f"uid {NOBODY} cannot reach {root} at all: open the folders above it for the test"
    )

    def reads(listing: bool) -> list[str]:
        def attempt() -> str:
            read = [f"listed {root}"] if listing and _lists(root) else []
            return "\n".join(read + [f"read {f}" for f in files if _reads(f)])

        said = as_nobody(attempt)
        assert said is not None, f"uid {NOBODY} could not try to read {root}"
        return said.splitlines()

    found += reads(listing=True)
    modes = {folder: stat.S_IMODE(folder.stat().st_mode) for folder in folders}
    try:
        for folder in folders:
            os.chmod(folder, 0o711)
        found += [f"{line} (folders opened)" for line in reads(listing=False)]
    finally:
        for folder, mode in modes.items():
            os.chmod(folder, mode)
    return found


def _lists(folder: Path) -> bool:
    try:
        os.listdir(folder)
    except PermissionError:
        return False
    return True


def _reads(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except PermissionError:
        return False
    return True


__all__ = [*__all__, "as_nobody", "closed_to_nobody", "open_to_others"]


# -- secrets and the daemon's log -------------------------------------------------------------

# The formats a test of what the daemon's log holds runs it in, each at DEBUG (docs/daemon.md).
LOG_FORMATS = ("text", "json")


def debug_log(fmt: str) -> list[str]:
    """A daemon's arguments for its most talkative log, in `fmt`."""
    return ["--log-level", "DEBUG", "--log-format", fmt]


def sentinel(where: str) -> str:
    """A value that no log line holds by chance, standing for a secret put `where`."""
    return f"txdsecret-{where}-{uuid.uuid4().hex}"


def secret_app(env_secret: str, **role: Any) -> AppDef:
    """An app of one role (`role`: more of its fields) whose env holds `env_secret` and which
    prints it."""
    echo = Role(name="r", entrypoint="sh", args=["-c", 'echo "$TXD_T_SECRET"'], **role)
    echo.env["TXD_T_SECRET"] = env_secret
    return AppDef(name="t", roles=[echo])


async def submit_with_secrets(
    client: Any, scheduler: str, app: AppDef, cfg: dict[str, Any], secrets: Sequence[str]
) -> str:
    """Runs `app`; returns its handle once each secret is seen in the backend's request (the
    native request the daemon kept), so that the request did carry them."""
    handle: str = await client.run(app, scheduler, cfg)
    native = (await client.describe(handle, native=True)).native.text
    for secret in secrets:
        assert secret in native, (secret, native)
    return handle


def assert_log_keeps(d: Daemon, secrets: Sequence[str]) -> None:
    """Stops `d` and checks that no secret is anywhere in its whole log (and that it logged no
    traceback or internal error)."""
    assert d.stop() == 0
    log = d.log()
    assert "/txd.v1.Runner/Run OK" in log, log  # the access lines: the log at DEBUG, or JSON
    assert not log_alarms(log), log
    leaks = [line[:2000] for line in log.splitlines() if any(s in line for s in secrets)]
    assert not leaks, "\n".join(leaks)


async def run_with_secrets(
    d: Daemon,
    scheduler: str,
    app: AppDef,
    cfg: dict[str, Any],
    secrets: Sequence[str],
    echoed: str | None,
    timeout: float = 60,
) -> None:
    """Runs `app` on `d`, a started daemon, until it succeeds (submit_with_secrets); reads its
    logs back, which must hold `echoed` (None: a backend that runs nothing, whose logs are not
    read); then assert_log_keeps."""
    async with d.client() as c:
        handle = await submit_with_secrets(c, scheduler, app, cfg, secrets)
        final = await c.wait(handle, timeout=timeout)
        assert final.state == AppState.SUCCEEDED, final
        if echoed is not None:
            assert echoed.encode() in await read_logs(c, handle)
    assert_log_keeps(d, secrets)


__all__ = [*__all__, "LOG_FORMATS", "assert_log_keeps", "debug_log", "run_with_secrets"]
__all__ = [*__all__, "secret_app", "sentinel", "submit_with_secrets"]
