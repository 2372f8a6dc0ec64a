"""What txctl prints, for scripts and for people: --json as the whole of stdout, progress while
waiting (plain lines, or one live line on a terminal, read through a real pty), Ctrl-C, what
cancel and delete say, and --version."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from txd.install import version
from txd_testing import DEFAULT_SIGINT, TXCTL, Gates, first_line, run_python

READ_TIMEOUT = 20.0  # bound on each wait for output below


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[Gates]:
    with Gates(tmp_path) as g:
        yield g


def _txctl_proc(daemon: Any, workdir: Path, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*DEFAULT_SIGINT, *TXCTL, "--socket", str(daemon.socket), "--no-autostart", *args],
        cwd=workdir,
        env=daemon.txctl_env(),
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw},
    )


def _read_line(stream: IO[bytes]) -> bytes:
    """One line, failing the test instead of hanging when none comes."""
    ready, _, _ = select.select([stream], [], [], READ_TIMEOUT)
    assert ready, "no output in time"
    return stream.readline()


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, (out or b"").decode(), (err or b"").decode()


def _sleeper(txctl: Any) -> str:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    return first_line(txctl("run", "utils.sh", "sleep", marker, check=0).stdout)


# -- --json ----------------------------------------------------------------------------------------


def test_run_json_is_one_object(txctl: Any) -> None:
    body = json.loads(txctl("run", "--json", "utils.echo", check=0).stdout)
    assert set(body) == {"handle", "app_id", "scheduler"}
    assert body["handle"] == f"local_cwd://txd/{body['app_id']}"
    assert body["scheduler"] == "local_cwd"


def test_run_json_log_sends_the_logs_to_stderr(txctl: Any) -> None:
    script = "echo out-line; echo err-line >&2"
    proc = txctl("run", "--json", "--log", "utils.sh", "sh", "-c", script, check=0, timeout=15)
    body = json.loads(proc.stdout)  # nothing but the object
    assert body["status"]["state"] == "SUCCEEDED"
    assert "out-line\n" in proc.stderr and "err-line\n" in proc.stderr


def test_cancel_and_delete_say_what_they_did(txctl: Any) -> None:
    handle = _sleeper(txctl)
    body = json.loads(txctl("cancel", "--json", handle, check=0).stdout)
    assert (body["handle"], body["cancelled"]) == (handle, True)
    txctl("wait", handle, check=1)
    body = json.loads(txctl("cancel", "--json", handle, check=0).stdout)
    assert (body["cancelled"], body["status"]["state"]) == (False, "CANCELLED")
    body = json.loads(txctl("delete", "--json", handle, check=0).stdout)
    assert body == {"handle": handle, "deleted": True, "was": "CANCELLED", "cancelled": False}

    done = first_line(txctl("run", "--wait", "utils.echo", check=0).stdout)
    proc = txctl("cancel", done, check=0)
    assert proc.stdout == f"{done} is already SUCCEEDED; nothing to cancel\n"
    assert txctl("delete", done, check=0).stdout == f"deleted {done} (was SUCCEEDED)\n"

    running = _sleeper(txctl)
    proc = txctl("delete", running, check=0)
    assert proc.stdout == f"deleted {running} (was RUNNING, cancelled)\n"


# -- progress --------------------------------------------------------------------------------------


def test_wait_prints_a_plain_line_per_change_when_not_on_a_terminal(
    shared_daemon: Any, txctl: Any, workdir: Path, gates: Gates
) -> None:
    gate = gates.new("plain")
    handle = first_line(
        txctl("run", "utils.sh", "--num_replicas", "2", "sh", "-c", gate.wait, check=0).stdout
    )
    proc = _txctl_proc(shared_daemon, workdir, "wait", handle)
    assert proc.stderr is not None
    first = _read_line(proc.stderr).decode()
    assert first.startswith("RUNNING 0:"), first
    assert first.endswith("  sh: 2 RUNNING\n"), first
    gate.open()
    gate.open()
    rc, out, err = _finish(proc)
    assert rc == 0, err
    lines = err.splitlines()
    assert lines[-1].startswith("SUCCEEDED 0:") and lines[-1].endswith("  sh: 2 SUCCEEDED")
    assert len(lines) == len(set(lines)), "a line was printed without a change"
    assert out.count("state:") == 1 and "state:    SUCCEEDED" in out  # the final status, once


def test_wait_on_a_terminal_shows_one_live_line(
    shared_daemon: Any, txctl: Any, workdir: Path, gates: Gates
) -> None:
    gate = gates.new("tty")
    handle = first_line(txctl("run", "utils.sh", "sh", "-c", gate.wait, check=0).stdout)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = _txctl_proc(shared_daemon, workdir, "wait", handle, stderr=slave)
        os.close(slave)
        slave = -1
        seen = b""
        deadline = time.monotonic() + READ_TIMEOUT
        # The clock ticks once a second with no status change: wait for it to pass 0:01.
        while b"RUNNING 0:01" not in seen and b"RUNNING 0:02" not in seen:
            assert time.monotonic() < deadline, seen
            ready, _, _ = select.select([master], [], [], max(deadline - time.monotonic(), 0))
            if ready:
                seen += os.read(master, 4096)
        gate.open()
        rc, out, _ = _finish(proc)
        while True:  # the rest, up to the pty's EOF (EIO once the child side is closed)
            try:
                data = os.read(master, 4096)
            except OSError:
                break
            if not data:
                break
            seen += data
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert rc == 0
    assert seen.startswith(b"\r\x1b[KRUNNING 0:"), seen
    assert b"  sh: 1 RUNNING" in seen, seen
    assert b"\n" not in seen, "the live line must be redrawn in place"
    assert seen.endswith(b"\r\x1b[K"), "the live line is erased at the end"
    assert out.count("state:") == 1 and "state:    SUCCEEDED" in out


# -- Ctrl-C ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cancel", [False, True])
def test_ctrl_c_on_run_wait(shared_daemon: Any, txctl: Any, workdir: Path, cancel: bool) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    flags = ["--cancel-on-interrupt"] if cancel else []
    proc = _txctl_proc(shared_daemon, workdir, "run", "--wait", *flags, "utils.sh", "sleep", marker)
    assert proc.stdout is not None
    handle = _read_line(proc.stdout).decode().strip()  # submitted; waiting from here on
    proc.send_signal(signal.SIGINT)
    rc, _, err = _finish(proc)
    try:
        assert rc == 130, err
        assert "Traceback" not in err
        last = err.splitlines()[-1]
        if cancel:
            assert last == f"txctl: interrupted: cancelled {handle}"
            assert json.loads(txctl("wait", "--json", handle, check=1).stdout)["state"] == (
                "CANCELLED"
            )
        else:
            assert last == (
                f"txctl: interrupted; {handle} keeps running (stop it with `txctl cancel {handle}`)"
            )
            status = json.loads(txctl("status", "--json", handle, check=0).stdout)
            assert status["state"] == "RUNNING"
    finally:
        txctl("cancel", handle, check=0)


def test_ctrl_c_on_wait(shared_daemon: Any, txctl: Any, workdir: Path) -> None:
    handle = _sleeper(txctl)
    try:
        proc = _txctl_proc(shared_daemon, workdir, "wait", handle)
        assert proc.stderr is not None
        assert _read_line(proc.stderr).startswith(b"RUNNING ")  # it is waiting now
        proc.send_signal(signal.SIGINT)
        rc, _, err = _finish(proc)
        assert rc == 130, err
        assert err.splitlines()[-1] == (
            f"txctl: interrupted; {handle} keeps running (stop it with `txctl cancel {handle}`)"
        )
    finally:
        txctl("cancel", handle, check=0)


# -- --version -------------------------------------------------------------------------------------


def test_version_of_txctl_and_txd() -> None:
    code = (
        "import sys\nfrom txd.client import cli\n"
        "try:\n    cli.main(['--version'])\nexcept SystemExit as e:\n    rc = e.code\n"
        "print('GRPC', 'grpc' in sys.modules)\nsys.exit(rc)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"txctl {version()}\nGRPC False\n"
    proc = run_python("from txd.daemon.main import main; main(['--version'])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"txd {version()}\n"
    daemon = subprocess.run(
        [sys.executable, "-m", "txd.daemon", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert daemon.stdout == f"txd {version()}\n"


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_tests_pass_when_the_suite_starts_with_sigint_ignored(tmp_path: Path) -> None:
    """`nohup scripts/test &` starts pytest with SIGINT ignored, which children inherit (and
    Python then installs no KeyboardInterrupt handler): the Ctrl-C tests must still reach a
    txctl that takes Ctrl-C as a person's terminal would deliver it."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"{__file__}::test_ctrl_c_on_wait",
            f"{Path(__file__).with_name('test_run_cli.py')}::test_logs_follow_interrupted_exits_130",
        ],
        preexec_fn=_ignore_sigint,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout, proc.stdout[-3000:]
