"""txctl's exit codes and error lines, each cause driven for real through a real txd: a backend
that is not there, no daemon, a call's deadline, a request over the daemon's size limit, a
component that raises, config values, usage errors."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd_testing import (
    TXCTL,
    Daemon,
    clean_env,
    first_line,
    no_traceback,
    remove_tree,
    short_tmpdir,
)

# Without LSF's commands on the daemon's PATH (none is installed here: checked below).
NO_LSF_PATH = "/usr/bin:/bin"


@pytest.fixture(scope="module")
def no_lsf_daemon() -> Iterator[Any]:
    assert shutil.which("bhosts", path=NO_LSF_PATH) is None
    root = short_tmpdir()
    d = Daemon(root, env={"PATH": NO_LSF_PATH}).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(root)


def test_a_backend_that_is_not_there_exits_4_naming_it(no_lsf_daemon: Any) -> None:
    """The daemon answered; LSF did not. Not exit 3, not the daemon socket; `run` and the other
    commands agree."""
    run = no_lsf_daemon.txctl("run", "-s", "lsf", "utils.echo", check=4)
    no_traceback(run)
    assert "txctl: error: lsf backend unavailable: bhosts: command not found on this host" in (
        run.stderr
    )
    assert "daemon socket" not in run.stderr
    listed = no_lsf_daemon.txctl("list", "--backend", "-s", "lsf", check=4)
    no_traceback(listed)
    assert "lsf backend unavailable: bjobs: command not found on this host" in listed.stderr
    assert "daemon socket" not in listed.stderr


async def test_the_python_client_tells_backend_trouble_apart(no_lsf_daemon: Any) -> None:
    from txd.client import BackendUnavailableError, UnavailableError
    from txd.v1 import AppDef, Role

    app = AppDef(name="x", roles=[Role(name="r", image="alpine", entrypoint="true")])
    async with no_lsf_daemon.client() as c:
        with pytest.raises(BackendUnavailableError) as err:
            await c.run(app, "lsf")
    assert err.value.backend == "lsf"
    assert isinstance(err.value, UnavailableError) and err.value.code == "UNAVAILABLE"
    assert "bhosts: command not found" in err.value.message


def test_the_python_client_says_no_daemon_answers_and_why() -> None:
    """Where nothing took the connection to a local socket, the client's UnavailableError
    says so and what to do, not gRPC's words ("failed to connect to all addresses; ...");
    a daemon's own UNAVAILABLE (a backend, a shutdown) keeps its words (the test above)."""
    from txd.client import Client, UnavailableError

    root = short_tmpdir()
    try:
        missing, stale = root / "none.sock", root / "stale.sock"
        with socket.socket(socket.AF_UNIX) as s:  # a socket file nobody listens on
            s.bind(str(stale))
        start = "start the daemon with `txd`, or any txctl command does"
        for path, why in ((missing, "No such file or directory"), (stale, "Connection refused")):
            with Client(str(path)) as c, pytest.raises(UnavailableError) as err:
                c.status("x")
            assert err.value.message == f"no txd daemon answers on {path}: {why}; {start}"
    finally:
        remove_tree(root)


def test_lsf_dryrun_needs_no_lsf(no_lsf_daemon: Any) -> None:
    proc = no_lsf_daemon.txctl("run", "--dryrun", "-s", "lsf", "utils.echo", check=0)
    assert "=== SCHEDULER REQUEST (lsf) ===" in proc.stdout
    assert '-m "<rank0-host>"' in proc.stdout  # picked from bhosts only when submitted
    assert "bsub -P echo-" in proc.stdout
    assert "docker run --name=echo-" in proc.stdout


def test_no_daemon_exits_3_naming_the_socket(tmp_path: Path) -> None:
    root = short_tmpdir()
    try:
        sock = root / "none.sock"
        env = clean_env(HOME=str(root), XDG_RUNTIME_DIR=str(root), XDG_STATE_HOME=str(root))
        proc = subprocess.run(
            [*TXCTL, "--socket", str(sock), "--no-autostart", "status", "local_cwd://txd/x-y"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 3, proc.stderr
        no_traceback(proc)
        assert f"no txd daemon answers on {sock}" in proc.stderr
    finally:
        remove_tree(root)


async def test_a_call_past_its_timeout_exits_5(shared_daemon: Any, workdir: Path) -> None:
    """Deleting a job that ignores SIGTERM takes the daemon its drain grace (2 s: SIGKILL
    then), far more than --timeout 0.3."""
    script = "trap '' TERM; echo ready; exec sleep 600"
    handle = first_line(
        shared_daemon.txctl("run", "utils.sh", "sh", "-c", script, cwd=workdir, check=0).stdout
    )
    async with shared_daemon.client() as c:  # the trap is set once "ready" is written
        async with asyncio.timeout(20):
            async for chunk in c.logs(handle, follow=True):
                if b"ready" in chunk.data:
                    break
    proc = shared_daemon.txctl("--timeout", "0.3", "delete", handle, check=5)
    no_traceback(proc)
    assert "no answer within --timeout 0.3 s" in proc.stderr
    # The daemon still stops the job: a caller that gave up does not cancel that.
    waited = shared_daemon.txctl("wait", "--json", handle, check=1)
    assert '"state": "CANCELLED"' in waited.stdout


def test_a_request_over_the_size_limit_exits_6(txctl: Any, workdir: Path) -> None:
    (workdir / "big.py").write_text(
        "from txd.v1 import AppDef, Role\n\n\n"
        "def big() -> AppDef:\n"
        '    arg = "x" * 5_000_000  # over gRPC\'s 4 MiB default limit on received messages\n'
        '    return AppDef(name="big", roles=[Role(name="r", entrypoint="true", args=[arg])])\n'
    )
    proc = txctl("run", "big.py:big", check=6)
    no_traceback(proc)
    assert "the daemon refused the request: " in proc.stderr
    assert "larger than max" in proc.stderr


# -- components --------------------------------------------------------------------------------

BOOM = """\
from txd.v1 import AppDef, Role


def lookup(key: str) -> str:
    return {"a": "1"}[key]


def boom(key: str = "b") -> AppDef:
    return AppDef(name="b", roles=[Role(name="r", entrypoint=lookup(key))])


def refuse() -> AppDef:
    raise ValueError("no such dataset")
"""


@pytest.mark.parametrize("debug", ["", "1"])
def test_an_exception_in_a_component_is_the_users_error(
    shared_daemon: Any, workdir: Path, debug: str
) -> None:
    (workdir / "comp.py").write_text(BOOM)
    env = shared_daemon.txctl_env(TXD_DEBUG=debug)
    proc = shared_daemon.txctl("run", "comp.py:boom", cwd=workdir, env=env, check=2)
    where = f"(at {workdir / 'comp.py'}:5)"  # the innermost frame in the user's file
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"txctl: error: component comp.py:boom raised KeyError: 'b' {where}"
    assert "internal error" not in proc.stderr
    if debug:
        assert "Traceback" in proc.stderr and 'comp.py", line 5, in lookup' in proc.stderr
    else:
        no_traceback(proc)
    proc = shared_daemon.txctl("run", "comp.py:refuse", cwd=workdir, env=env, check=2)
    last = proc.stderr.strip().splitlines()[-1]
    where = f"(at {workdir / 'comp.py'}:13)"
    assert last == f"txctl: error: component comp.py:refuse: no such dataset {where}"


# -- config files --------------------------------------------------------------------------------


def test_a_bad_config_value_names_its_file_and_line(shared_daemon: Any, workdir: Path) -> None:
    home = workdir / "home"
    home.mkdir()
    (home / ".txdconfig").write_text("# defaults\n[local_cwd]\nbogus = 1\n")
    env = shared_daemon.txctl_env()
    env["HOME"] = str(home)
    proc = shared_daemon.txctl("run", "utils.echo", cwd=workdir, env=env, check=2)
    no_traceback(proc)
    assert "txctl: error: ~/.txdconfig:3: [local_cwd] bogus = 1: unknown option" in proc.stderr
    (home / ".txdconfig").unlink()
    (workdir / ".torchxconfig").write_text("[local_cwd]\nlog_dir = /tmp\n\nprepend_cwd = maybe\n")
    proc = shared_daemon.txctl("run", "utils.echo", cwd=workdir, env=env, check=2)
    no_traceback(proc)
    where = f"{workdir / '.torchxconfig'}:4: [local_cwd] prepend_cwd = maybe: expected a bool"
    assert f"txctl: error: {where}" in proc.stderr
    proc = shared_daemon.txctl(
        "run", "-c", "prepend_cwd=true,bogus=2", "utils.echo", cwd=workdir, env=env, check=2
    )
    no_traceback(proc)
    assert "txctl: error: -c bogus=2: unknown option" in proc.stderr


# -- usage -----------------------------------------------------------------------------------------


def test_an_unknown_flag_shows_its_subcommands_usage(txctl: Any) -> None:
    proc = txctl("logs", "local_cwd://txd/x-y", "--bogus", check=2)
    assert proc.stderr.startswith("usage: txctl logs "), proc.stderr
    assert "txctl logs: error: unrecognized arguments: --bogus" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [["run", "-s", "slrum", "utils.echo"], ["runopts", "slrum"], ["list", "-s", "slrum"]],
)
def test_a_mistyped_scheduler_gets_a_suggestion(txctl: Any, args: list[str]) -> None:
    proc = txctl(*args, check=2)
    no_traceback(proc)
    assert "unknown scheduler 'slrum'" in proc.stderr
    assert "did you mean 'slurm'?" in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["list", "--backend"], "--backend needs a scheduler: pass -s SCHEDULER"),
        (["wait", "--wait-timeout", "-1", "local_cwd://txd/x-y"], "expected a number of seconds"),
        (["run", "--cancel-on-interrupt", "utils.echo"], "needs --wait or --log"),
    ],
)
def test_usage_errors_need_no_daemon(args: list[str], needle: str) -> None:
    """Exit 2 with the subcommand's usage, even with no daemon to ask."""
    proc = subprocess.run(
        [*TXCTL, "--socket", "/nonexistent/txd.sock", "--no-autostart", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"usage: txctl {args[0]} "), proc.stderr
    assert needle in proc.stderr


def test_help_documents_exit_codes_and_txd_debug() -> None:
    proc = subprocess.run([*TXCTL, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    text = textwrap.dedent(proc.stdout)
    for line in (
        "  3    no daemon answers on the socket",
        "  4    the daemon answered but the scheduler's backend did not",
        "  5    the call took longer than --timeout",
        "  7    --wait-timeout ran out; the job goes on",
        "  TXD_DEBUG         1: print an error's traceback too (the exit code stays)",
    ):
        assert line in text, line
