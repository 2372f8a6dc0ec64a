"""txctl against a real daemon: run / status / describe / list / wait / cancel / delete /
logs / runopts / schedulers / builtins, JSON output, exit codes, and one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from txd_testing import (
    DEFAULT_SIGINT,
    HANDLE_RE,
    TXCTL,
    Gates,
    PidWatch,
    clean_env,
    first_line,
    group_members,
    no_traceback,
    pids_with_marker,
    proc_stat,
    run_python,
    short_tmpdir,
)


def _handle(proc: subprocess.CompletedProcess[str], name: str) -> str:
    line = first_line(proc.stdout)
    assert re.fullmatch(HANDLE_RE.format(name=name), line), proc.stdout
    return line


# -- run ----------------------------------------------------------------------------------------


def test_run_prints_handle_as_first_line(txctl: Any) -> None:
    proc = txctl("run", "utils.echo", "--msg", "hi", check=True)
    assert proc.stdout.splitlines() == [_handle(proc, "echo")]


def test_run_handle_works_with_head_in_a_shell(shared_daemon: Any, workdir: Path) -> None:
    """The `H=$(txctl run ... | head -1)` pattern, in a real shell."""
    cmd = " ".join([*TXCTL, "--socket", str(shared_daemon.socket), "--no-autostart"])
    script = (
        f"H=$({cmd} run utils.echo --msg from-shell | head -1) && "
        f'{cmd} wait "$H" >/dev/null && {cmd} logs "$H" && echo "handle=$H"'
    )
    proc = subprocess.run(
        ["sh", "-c", script],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=shared_daemon.txctl_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "from-shell"
    assert re.fullmatch("handle=" + HANDLE_RE.format(name="echo"), lines[1])


def test_run_wait_exit_zero_on_success(txctl: Any) -> None:
    proc = txctl("run", "--wait", "utils.echo", "--msg", "ok", check=0)
    _handle(proc, "echo")
    assert "SUCCEEDED" in proc.stdout


def test_run_wait_exit_one_on_failure(txctl: Any) -> None:
    proc = txctl("run", "--wait", "utils.sh", "exit", "3", check=1)
    handle = _handle(proc, "sh")
    assert "FAILED" in proc.stdout
    status = json.loads(txctl("status", "--json", handle, check=0).stdout)
    assert status["state"] == "FAILED"
    assert status["roles"][0]["replicas"][0]["exit_code"] == 3
    assert status["roles"][0]["replicas"][0]["state"] == "FAILED"
    assert "exited with 3" in status["msg"]


def test_run_wait_json(txctl: Any) -> None:
    """With --json the whole of stdout is one JSON object."""
    body = json.loads(txctl("run", "--wait", "--json", "utils.echo", check=0).stdout)
    assert re.fullmatch(HANDLE_RE.format(name="echo"), body["handle"])
    assert body["handle"] == f"local_cwd://txd/{body['app_id']}"
    assert body["scheduler"] == "local_cwd"
    assert body["status"]["state"] == "SUCCEEDED"
    assert body["status"]["app_handle"] == body["handle"]


def _txctl_log(txctl: Any) -> Any:
    """`run --log` ends with the job: a short bound, so a hang fails fast."""
    return lambda *args, **kw: txctl(*args, timeout=15, **kw)


def test_run_log_shows_output(txctl: Any) -> None:
    txctl_log = _txctl_log(txctl)
    proc = txctl_log(
        "run", "--log", "utils.sh", "--", "sh", "-c", "echo line-one; echo line-two >&2", check=0
    )
    _handle(proc, "sh")
    assert "line-one\n" in proc.stdout
    assert "line-two\n" in proc.stdout
    assert proc.stdout.index("line-one") < proc.stdout.index("SUCCEEDED")


def test_run_log_failing_job_exits_one(txctl: Any) -> None:
    txctl_log = _txctl_log(txctl)
    proc = txctl_log("run", "--log", "utils.sh", "sh", "-c", "echo dying; exit 4", check=1)
    assert "dying\n" in proc.stdout
    assert "FAILED" in proc.stdout


def test_run_log_several_replicas_prefixes_lines(txctl: Any) -> None:
    txctl_log = _txctl_log(txctl)
    proc = txctl_log("run", "--log", "utils.echo", "--msg", "hey", "--num_replicas", "2", check=0)
    assert "echo/0 hey\n" in proc.stdout
    assert "echo/1 hey\n" in proc.stdout


def test_run_python_and_binary_builtins(txctl: Any) -> None:
    proc = txctl(
        "run",
        "--wait",
        "utils.python",
        "--c",
        "import sys; print('py', sys.argv[1:])",
        "a",
        "b",
        check=0,
    )
    assert txctl("logs", first_line(proc.stdout), check=0).stdout == "py ['a', 'b']\n"
    proc = txctl(
        "run", "--wait", "utils.binary", "--entrypoint", "printf", "%s-%s\\n", "x", "y", check=0
    )
    assert txctl("logs", first_line(proc.stdout), check=0).stdout == "x-y\n"


def test_run_dryrun_submits_nothing(txctl: Any) -> None:
    before = json.loads(txctl("list", "--json", check=0).stdout)
    proc = txctl("run", "--dryrun", "utils.echo", "--msg", "dry", check=0)
    assert "=== SCHEDULER REQUEST (local_cwd) ===" in proc.stdout
    assert "'dry'" in proc.stdout
    proc = txctl("run", "--dryrun", "--json", "utils.echo", "--msg", "dry", check=0)
    body = json.loads(proc.stdout)
    assert body["scheduler"] == "local_cwd"
    assert body["app"]["roles"][0]["args"] == ["dry"]
    after = json.loads(txctl("list", "--json", check=0).stdout)
    assert [a["app_handle"] for a in after] == [a["app_handle"] for a in before]


def test_run_cfg_log_dir(txctl: Any, workdir: Path) -> None:
    logs = workdir / "mylogs"
    proc = txctl(
        "run",
        "--wait",
        "-c",
        f"log_dir={logs},prepend_cwd=true",
        "utils.echo",
        "--msg",
        "in-log-dir",
        check=0,
    )
    handle = _handle(proc, "echo")
    app_id = handle.rsplit("/", 1)[1]
    assert (logs / "txd" / app_id / "echo.0.log").read_bytes() == b"in-log-dir\n"
    desc = json.loads(txctl("describe", "--json", handle, check=0).stdout)
    assert desc["cfg"]["log_dir"] == {"str": str(logs)}
    assert desc["cfg"]["prepend_cwd"] == {"bool": True}


# -- status / describe / list / wait --------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(shared_daemon: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A job that succeeded: its handle."""
    cwd = tmp_path_factory.mktemp("finished")
    proc = shared_daemon.txctl("run", "--wait", "utils.echo", "--msg", "done-job", cwd=cwd, check=0)
    return first_line(proc.stdout)


def test_status_text_and_json(txctl: Any, finished: str) -> None:
    text = txctl("status", finished, check=0).stdout
    assert text.splitlines()[0] == finished
    assert re.search(r"^\s+state:\s+SUCCEEDED$", text, re.M)
    assert re.search(r"^\s+echo/0: SUCCEEDED exit=0", text, re.M)
    data = json.loads(txctl("status", "--json", finished, check=0).stdout)
    assert data["state"] == "SUCCEEDED"
    assert data["app_handle"] == finished
    assert data["scheduler"] == "local_cwd"
    assert data["name"] == "echo"
    assert data["roles"][0]["replicas"][0]["state"] == "SUCCEEDED"
    assert data["roles"][0]["replicas"][0]["exit_code"] == 0


def test_describe_text_and_json(txctl: Any, finished: str) -> None:
    text = txctl("describe", finished, check=0).stdout
    assert "app: echo" in text
    assert "entrypoint: echo" in text
    assert '["done-job"]' in text
    assert "SUCCEEDED" in text
    data = json.loads(txctl("describe", "--json", finished, check=0).stdout)
    role = data["app"]["roles"][0]
    assert role["entrypoint"] == "echo"
    assert role["args"] == ["done-job"]
    assert role["num_replicas"] == 1
    assert data["status"]["state"] == "SUCCEEDED"
    assert "prepend_cwd" in data["cfg"]


def test_list_text_json_newest_first(txctl: Any, finished: str) -> None:
    later = first_line(txctl("run", "--wait", "utils.echo", check=0).stdout)
    text = txctl("list", check=0).stdout
    assert text.splitlines()[0].split() == ["HANDLE", "NAME", "STATE", "CREATED"]
    assert re.search(rf"^{re.escape(finished)}\s+echo\s+SUCCEEDED\s", text, re.M)
    data = json.loads(txctl("list", "--json", check=0).stdout)
    handles = [a["app_handle"] for a in data]
    assert handles.index(later) < handles.index(finished)
    assert {a["state"] for a in data} <= {
        "SUBMITTED",
        "PENDING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "CANCELLED",
        "UNKNOWN",
    }
    by_sched = json.loads(txctl("list", "--json", "-s", "local_cwd", check=0).stdout)
    assert finished in [a["app_handle"] for a in by_sched]


def test_list_backend_local_cwd(txctl: Any) -> None:
    """local_cwd claims `list`: it lists the apps whose processes run now (defect 3)."""
    handle = first_line(txctl("run", "utils.sh", "sleep", "600", check=0).stdout)
    try:
        data = json.loads(txctl("list", "--backend", "-s", "local_cwd", "--json", check=0).stdout)
        mine = [a for a in data if a["app_handle"] == handle]
        assert len(mine) == 1 and mine[0]["state"] == "RUNNING", data
    finally:
        txctl("cancel", handle, check=0)
    txctl("wait", handle, check=1)
    data = json.loads(txctl("list", "--backend", "-s", "local_cwd", "--json", check=0).stdout)
    assert handle not in [a["app_handle"] for a in data]


def test_list_unknown_scheduler(txctl: Any) -> None:
    proc = txctl("list", "-s", "nosuchsched", check=2)
    no_traceback(proc)
    assert "nosuchsched" in proc.stderr


def test_wait_exit_codes(txctl: Any, finished: str) -> None:
    assert "SUCCEEDED" in txctl("wait", finished, check=0).stdout
    data = json.loads(txctl("wait", "--json", finished, check=0).stdout)
    assert data["state"] == "SUCCEEDED"
    failed = first_line(txctl("run", "utils.sh", "exit", "7", check=0).stdout)
    proc = txctl("wait", failed, check=1)
    assert "FAILED" in proc.stdout
    assert "exit=7" in proc.stdout


def test_wait_timeout(txctl: Any) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    handle = first_line(txctl("run", "utils.sh", "sleep", marker, check=0).stdout)
    try:
        proc = txctl("wait", "--wait-timeout", "0.3", handle, check=7)
        assert proc.stderr.strip().splitlines()[-1] == (
            f"txctl: error: {handle} still not done after 0.3 s (it goes on)"
        )
        assert "Traceback" not in proc.stderr and "interrupted" not in proc.stderr
        assert json.loads(txctl("status", "--json", handle, check=0).stdout)["state"] == "RUNNING"
    finally:
        txctl("cancel", handle, check=0)
        txctl("wait", handle)


# -- cancel / delete ----------------------------------------------------------------------------


def test_cancel_sleep_job(txctl: Any) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    handle = first_line(txctl("run", "utils.sh", "sleep", marker, check=0).stdout)
    pids = pids_with_marker(marker)
    assert pids, "the job's process was not found right after run returned"
    stat = proc_stat(pids[0])
    assert stat is not None
    pgid = stat[2]
    members = group_members(pgid)
    assert set(pids) <= set(members)
    with PidWatch(members) as watch:
        proc = txctl("cancel", handle, check=0)
        assert handle in proc.stdout and "cancel requested" in proc.stdout
        proc = txctl("wait", "--json", handle, check=1)
        data = json.loads(proc.stdout)
        assert data["state"] == "CANCELLED"
        # Terminal means every process of the group has ended (not just the leader).
        assert watch.wait(2.0) == [], "processes of the cancelled job still run"
    assert group_members(pgid) == []
    # Cancelling again is a no-op that says so.
    proc = txctl("cancel", handle, check=0)
    assert proc.stdout == f"{handle} is already CANCELLED; nothing to cancel\n"
    assert json.loads(txctl("status", "--json", handle, check=0).stdout)["state"] == "CANCELLED"


def test_delete_then_status_is_not_found(txctl: Any) -> None:
    handle = first_line(txctl("run", "--wait", "utils.echo", check=0).stdout)
    txctl("delete", handle, check=0)
    proc = txctl("status", handle, check=2)
    no_traceback(proc)
    assert "no job" in proc.stderr and handle in proc.stderr
    assert handle not in txctl("list", check=0).stdout
    no_traceback(txctl("logs", handle, check=2))
    no_traceback(txctl("delete", handle, check=2))


def test_delete_running_job_stops_it(txctl: Any) -> None:
    marker = f"60.{uuid.uuid4().int % 10**9}"
    handle = first_line(txctl("run", "utils.sh", "sleep", marker, check=0).stdout)
    pids = pids_with_marker(marker)
    assert pids
    with PidWatch(pids) as watch:
        txctl("delete", handle, check=0)
        assert watch.wait(5.0) == []
    no_traceback(txctl("status", handle, check=2))


# -- logs ---------------------------------------------------------------------------------------


def test_logs_cli_options(txctl: Any) -> None:
    handle = first_line(
        txctl(
            "run", "--wait", "utils.sh", "sh", "-c", "echo out1; echo err1 >&2; echo out2", check=0
        ).stdout
    )
    assert txctl("logs", handle, "--streams", "stdout", check=0).stdout == "out1\nout2\n"
    assert txctl("logs", handle, "--streams", "stderr", check=0).stdout == "err1\n"
    assert sorted(txctl("logs", handle, check=0).stdout.splitlines()) == ["err1", "out1", "out2"]
    assert txctl("logs", handle, "--regex", "2$", check=0).stdout == "out2\n"
    assert txctl("logs", handle, "sh/0", "--regex", "^out", check=0).stdout == "out1\nout2\n"
    assert txctl("logs", handle, "-f", "--streams", "stdout", check=0).stdout == "out1\nout2\n"
    # Times: epoch seconds and relative ages.
    assert txctl("logs", handle, "--since", "0", "--streams", "stderr", check=0).stdout == "err1\n"
    assert txctl("logs", handle, "--since", "1d", "--streams", "stderr", check=0).stdout == "err1\n"
    assert txctl("logs", handle, "--until", "1d", check=0).stdout == ""


def test_logs_cli_several_replicas_prefix(txctl: Any) -> None:
    handle = first_line(
        txctl(
            "run",
            "--wait",
            "utils.sh",
            "--num_replicas",
            "3",
            "--",
            "sh",
            "-c",
            "echo a; echo b",
            check=0,
        ).stdout
    )
    out = txctl("logs", handle, check=0).stdout
    assert sorted(out.splitlines()) == sorted(
        f"sh/{k} {line}" for k in range(3) for line in ("a", "b")
    )
    # Per replica, lines keep their order.
    for k in range(3):
        assert [ln for ln in out.splitlines() if ln.startswith(f"sh/{k} ")] == [
            f"sh/{k} a",
            f"sh/{k} b",
        ]
    # One replica: no prefix.
    assert txctl("logs", handle, "sh/1", check=0).stdout == "a\nb\n"
    # One role with several replicas: still prefixed.
    assert "sh/2 b\n" in txctl("logs", handle, "sh", check=0).stdout


def test_logs_cli_several_replicas_unfinished_last_lines(txctl: Any) -> None:
    """A last line without a newline is printed at the end of the stream, under its prefix and
    ended with a newline, so two replicas' last lines never share a line. One replica: the
    bytes as written."""
    job = ["utils.sh", "--num_replicas", "2", "--", "printf", "a\\nb-${replica_id}"]
    handle = first_line(txctl("run", "--wait", *job, check=0).stdout)
    out = txctl("logs", handle, check=0).stdout
    assert sorted(out.splitlines(keepends=True)) == [
        "sh/0 a\n",
        "sh/0 b-0\n",
        "sh/1 a\n",
        "sh/1 b-1\n",
    ], out
    assert txctl("logs", handle, "sh/1", check=0).stdout == "a\nb-1"


def test_logs_cli_errors(txctl: Any, finished: str) -> None:
    for args, needle in (
        ([finished, "nosuchrole"], "nosuchrole"),
        ([finished, "echo/7"], "7"),
        ([finished, "echo/x"], "bad replica"),
        ([finished, "--since", "yesterday-ish"], "bad time"),
        ([finished, "--regex", "("], "regex"),
    ):
        proc = txctl("logs", *args, check=2)
        no_traceback(proc)
        assert needle in proc.stderr, (args, proc.stderr)


def test_logs_follow_interrupted_exits_130(shared_daemon: Any, workdir: Path) -> None:
    """Ctrl-C during `logs -f`: exit 130, no traceback, and a word that the job goes on."""
    handle = first_line(
        shared_daemon.txctl(
            "run", "utils.sh", "sh", "-c", "echo first; exec sleep 60", cwd=workdir, check=0
        ).stdout
    )
    proc = subprocess.Popen(
        [
            *DEFAULT_SIGINT,
            *TXCTL,
            "--socket",
            str(shared_daemon.socket),
            "--no-autostart",
            "logs",
            "-f",
            handle,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=shared_daemon.txctl_env(),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"first\n"  # streaming: it is waiting for more now
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(30)
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
        shared_daemon.txctl("cancel", handle, check=0)
    assert rc == 130, err
    assert "Traceback" not in err
    assert err == (
        f"txctl: interrupted; {handle} keeps running (stop it with `txctl cancel {handle}`)\n"
    )


# Loaded by txctl (PYTHONPATH): at its exit, once gRPC is imported, a channel to a path too
# long for a Unix socket makes gRPC's C core log an error line of its own; and what txctl left
# in GRPC_VERBOSITY is told on stderr.
GRPC_NOISE = """\
import atexit, os, sys

def _noise():
    import grpc
    print(f"GRPC_VERBOSITY={os.environ.get('GRPC_VERBOSITY')}", file=sys.stderr, flush=True)
    channel = grpc.insecure_channel("unix:/tmp/" + "x" * 200)
    try:
        grpc.channel_ready_future(channel).result(timeout=0.2)
    except grpc.FutureTimeoutError:
        pass

atexit.register(_noise)
"""


@pytest.mark.parametrize("asked", [None, "ERROR"])
def test_grpc_s_own_log_lines_stay_off_stderr_unless_asked(
    shared_daemon: Any, tmp_path: Path, asked: str | None
) -> None:
    """gRPC's C-core lines are not txctl's: off by default, on with GRPC_VERBOSITY, and the
    setting is not passed on."""
    (tmp_path / "sitecustomize.py").write_text(GRPC_NOISE)
    extra = {"PYTHONPATH": str(tmp_path)}
    if asked is not None:
        extra["GRPC_VERBOSITY"] = asked
    proc = shared_daemon.txctl("list", env=shared_daemon.txctl_env(**extra), check=True)
    assert f"GRPC_VERBOSITY={asked}" in proc.stderr  # what txctl's children would inherit
    core = [line for line in proc.stderr.splitlines() if "parse_address" in line]
    assert bool(core) == (asked is not None), proc.stderr


def test_logs_into_closed_pipe_is_not_an_error(shared_daemon: Any, workdir: Path) -> None:
    """`txctl logs H | head -1` on a big log: exit 0 and no traceback."""
    handle = first_line(
        shared_daemon.txctl(
            "run", "--wait", "utils.sh", "seq", "200000", cwd=workdir, check=0
        ).stdout
    )
    proc = subprocess.Popen(
        [*TXCTL, "--socket", str(shared_daemon.socket), "--no-autostart", "logs", handle],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=shared_daemon.txctl_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"1\n"
    proc.stdout.close()
    rc = proc.wait(30)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert rc == 0, err
    assert "Traceback" not in err and "Exception" not in err, err


async def _follow_until(stream: Any, key: tuple[str, int], suffix: bytes) -> None:
    """Reads a follow stream until replica `key`'s output so far ends with suffix."""
    seen = b""
    async for chunk in stream:
        if (chunk.role, chunk.replica) == key:
            seen += chunk.data
            if seen.endswith(suffix):
                return
    raise AssertionError(f"the logs ended before {key} printed {suffix!r}: {seen!r}")


@pytest.mark.parametrize("command", ["logs -f", "run --log"])
async def test_several_replicas_half_line_keeps_its_prefix(
    shared_daemon: Any, workdir: Path, tmp_path: Path, command: str
) -> None:
    """Issue 7: replica 0 prints half a line, replica 1 a whole line, then replica 0 the rest
    of its line. Each line is printed whole, under the prefix of the replica that wrote it."""
    script = workdir / "job.sh"
    base = [*TXCTL, "--socket", str(shared_daemon.socket), "--no-autostart"]
    job = ["utils.sh", "--num_replicas", "2", "--", "sh", str(script), "${replica_id}"]
    handle = ""
    with Gates(tmp_path) as gates:
        part, whole, rest = gates.new("part"), gates.new("whole"), gates.new("rest")
        script.write_text(
            'if [ "$1" = 0 ]; then\n'
            f"  echo start; {part.wait}; printf part-; {rest.wait}; echo rest\n"
            f"else\n  {whole.wait}; echo whole\nfi\n"
        )
        if command == "logs -f":
            handle = first_line(shared_daemon.txctl("run", *job, cwd=workdir, check=0).stdout)
            argv = [*base, "logs", "-f", handle]
        else:
            argv = [*base, "run", "--log", *job]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=shared_daemon.txctl_env(),
        )
        assert proc.stdout is not None and proc.stderr is not None
        try:
            async with asyncio.timeout(30), shared_daemon.client() as c:
                if command == "run --log":
                    handle = (await proc.stdout.readline()).decode().rstrip("\n")
                # txctl's Logs call is in, and streaming.
                assert await proc.stdout.readline() == b"sh/0 start\n"
                part.open()
                # Once the daemon sends "part-" to one follower it has sent it to all (they
                # wake on the same write), so txctl gets it before replica 1 writes a byte.
                await _follow_until(c.logs(handle, follow=True), ("sh", 0), b"part-")
                whole.open()
                assert await proc.stdout.readline() == b"sh/1 whole\n"
                rest.open()
                out = await proc.stdout.read()
                err = await proc.stderr.read()
                rc = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            if handle:
                shared_daemon.txctl("cancel", handle, cwd=workdir)
    assert rc == 0, err
    assert err == b""
    if command == "logs -f":
        assert out == b"sh/0 part-rest\n"
    else:
        assert out.startswith(b"sh/0 part-rest\n" + handle.encode() + b"\n  state:    SUCCEEDED\n")


# -- schedulers, runopts, builtins ----------------------------------------------------------------


def test_runopts(txctl: Any) -> None:
    text = txctl("runopts", "local_cwd", check=0).stdout
    assert text.startswith("local_cwd:")
    for name in ("log_dir", "prepend_cwd", "auto_set_cuda_visible_devices"):
        assert name in text
    assert "prepend_cwd (bool, default: false)" in text
    data = json.loads(txctl("runopts", "--json", "local_cwd", check=0).stdout)
    opts = {o["name"]: o for o in data["local_cwd"]}
    assert opts["prepend_cwd"]["type"] == "BOOL"
    assert opts["log_dir"]["type"] == "STR"
    assert "local_cwd:" in txctl("runopts", check=0).stdout
    proc = txctl("runopts", "nosuchsched", check=2)
    no_traceback(proc)
    assert "nosuchsched" in proc.stderr


def test_schedulers(txctl: Any) -> None:
    text = txctl("schedulers", check=0).stdout
    assert re.search(r"^local_cwd \(default\)  ready: processes on this host", text, re.M), text
    assert re.search(r"^ +can: logs, log_follow, ", text, re.M), text
    assert max(map(len, text.splitlines())) <= 80, text  # fits an 80-column terminal
    data = json.loads(txctl("schedulers", "--json", check=0).stdout)
    assert data["default_scheduler"] == "local_cwd"
    local = next(s for s in data["schedulers"] if s["name"] == "local_cwd")
    caps = local["capabilities"]
    for cap in (
        "logs",
        "log_follow",
        "log_since_until",
        "log_streams",
        "cancel",
        "delete",
        "list",
        "describe",
        "push_status",
    ):
        assert caps[cap] is True, cap


def test_builtins(txctl: Any) -> None:
    names = txctl("builtins", check=0).stdout.split()
    for name in ("utils.echo", "utils.sh", "utils.python", "utils.binary", "dist.ddp"):
        assert name in names
    assert json.loads(txctl("builtins", "--json", check=0).stdout)["builtins"] == names


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["status", "local_cwd://txd/nosuchjob-bcdfg"], "no job"),
        (["describe", "local_cwd://txd/nosuchjob-bcdfg"], "no job"),
        (["wait", "local_cwd://txd/nosuchjob-bcdfg"], "no job"),
        (["cancel", "local_cwd://txd/nosuchjob-bcdfg"], "no job"),
        (["logs", "local_cwd://txd/nosuchjob-bcdfg"], "no job"),
        (["status", "not-a-known-id"], "no job 'not-a-known-id'"),
        (["status", "local_cwd://no-app-id"], "app_handle"),
        (["run", "utils.ecoh"], "did you mean utils.echo"),
        (["run", "utils.echo", "--nosuchflag", "1"], "nosuchflag"),
        (["run", "-c", "bogus=1", "utils.echo"], "-c bogus=1: unknown option"),
        (["run", "-c", "prepend_cwd=maybe", "utils.echo"], "-c prepend_cwd=maybe: expected"),
        (["run", "-c", "novalue", "utils.echo"], "KEY=VALUE"),
        (["run", "-s", "nosuchsched", "utils.echo"], "nosuchsched"),
        (["run", "utils.sh", "--h", "gpu.smal", "true"], "gpu.smal"),
        (["run", "utils.binary", "--entrypoint", "no-such-program-txd"], "no-such-program-txd"),
        (["run", "nosuchfile.py:main"], "nosuchfile.py"),
    ],
)
def test_errors_are_one_line_exit_two(txctl: Any, args: list[str], needle: str) -> None:
    proc = txctl(*args, check=2)
    no_traceback(proc)
    assert needle in proc.stderr
    assert proc.stdout == ""


def test_no_autostart_without_daemon_exits_three(workdir: Path) -> None:
    root = short_tmpdir()
    try:
        sock = root / "none.sock"
        env = clean_env(HOME=str(root), XDG_RUNTIME_DIR=str(root), XDG_STATE_HOME=str(root))
        proc = subprocess.run(
            [*TXCTL, "--socket", str(sock), "--no-autostart", "list"],
            capture_output=True,
            text=True,
            cwd=workdir,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 3, proc.stderr
        no_traceback(proc)
        assert str(sock) in proc.stderr
        # The environment variable refuses autostart as well, and TXD_SOCKET picks the socket.
        proc = subprocess.run(
            [*TXCTL, "status", "local_cwd://txd/x-y"],
            capture_output=True,
            text=True,
            cwd=workdir,
            timeout=60,
            env={**env, "TXD_NO_AUTOSTART": "1", "TXD_SOCKET": str(sock)},
        )
        assert proc.returncode == 3, proc.stderr
        no_traceback(proc)
        assert str(sock) in proc.stderr
        # A component error is reported before any daemon is needed.
        proc = subprocess.run(
            [*TXCTL, "--socket", str(sock), "--no-autostart", "run", "utils.ech"],
            capture_output=True,
            text=True,
            cwd=workdir,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        no_traceback(proc)
        assert "utils.echo" in proc.stderr  # the suggestion
        assert not list(root.glob("**/txd.log")), "a daemon was started"
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def test_txd_socket_env_is_used(shared_daemon: Any, finished: str, workdir: Path) -> None:
    env = shared_daemon.txctl_env(TXD_SOCKET=str(shared_daemon.socket), TXD_NO_AUTOSTART="1")
    proc = subprocess.run(
        [*TXCTL, "status", finished],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "SUCCEEDED" in proc.stdout


def test_status_imports_no_daemon_or_backend(shared_daemon: Any, finished: str) -> None:
    """`txctl status` loads gRPC, protobuf, txd.v1 and the read door's wire (txd.readwire)
    only: no daemon, scheduler or backend."""
    code = (
        "import sys\n"
        "from txd.client import cli\n"
        "rc = cli.main(sys.argv[1:])\n"
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in ('txd', 'asyncssh',"
        " 'kubernetes_asyncio', 'aioboto3', 'aiodocker', 'anyio', 'sqlite3', 'grpc_health',"
        " 'grpc_reflection'))\n"
        "print('MODULES', ' '.join(mods))\n"
        "sys.exit(rc)\n"
    )
    proc = run_python(
        code,
        "--socket",
        str(shared_daemon.socket),
        "--no-autostart",
        "status",
        finished,
        env=shared_daemon.txctl_env(),
    )
    assert proc.returncode == 0, proc.stderr
    mods = proc.stdout.rsplit("MODULES", 1)[1].split()
    # (grpc itself probes the top-level grpc_health / grpc_reflection packages on import.)
    bad = [
        m
        for m in mods
        if m not in ("grpc_health", "grpc_reflection")
        and not (
            m == "txd"
            or m.startswith(
                ("txd.client", "txd.v1", "txd.cfgvalue", "txd.defaults", "txd.readwire")
            )
        )
    ]
    assert bad == [], bad
    assert "txd.client.components" not in mods


def test_help_needs_no_daemon_and_no_grpc() -> None:
    code = (
        "import sys\nfrom txd.client import cli\n"
        "try:\n    cli.main(['--help'])\nexcept SystemExit as e:\n    rc = e.code\n"
        "print('GRPC', 'grpc' in sys.modules)\nsys.exit(rc)\n"
    )
    proc = run_python(code, env=clean_env(TXD_SOCKET="/nonexistent/txd.sock"))
    assert proc.returncode == 0, proc.stderr
    assert "usage: txctl" in proc.stdout
    assert proc.stdout.strip().endswith("GRPC False")


def test_cli_module_entrypoint(shared_daemon: Any, finished: str) -> None:
    """`python -m txd.client.cli` is the same CLI."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "txd.client.cli",
            "--socket",
            str(shared_daemon.socket),
            "--no-autostart",
            "status",
            "--json",
            finished,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=shared_daemon.txctl_env(),
        cwd=os.getcwd(),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "SUCCEEDED"
