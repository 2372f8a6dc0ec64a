"""txctl --host ssh://... from the laptop, through the tunnel, against real sshd login nodes."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ssh_testing import REMOTE_TXCTL, USER, USER2, SshCluster
from txd_testing import PidWatch, open_to_others

HANDLE = re.compile(r"local_cwd://txd/\S+")
NO_DAEMON = 3
HOST = ("--host", "ssh://login1")


def _tunnel_dir(cluster: SshCluster) -> Path:
    (folder,) = (cluster.laptop / "run" / "txd" / "tunnels").iterdir()
    return folder


def _pid(path: Path) -> int:
    return int(path.read_text())


def _handle(out: str) -> str:
    m = HANDLE.search(out)
    assert m, out
    return m.group(0)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result
    return result.stdout


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no output in time"
    return proc.stdout.readline()


def test_a_job_run_from_the_laptop_is_followed_and_cancelled(ssh_cluster: SshCluster) -> None:
    first = ssh_cluster.laptop_txctl(*HOST, "run", "utils.sh", "sh", "-c", "echo up; sleep 600")
    handle = _handle(_ok(first))
    # The daemon was started on login1 by this first command, and said so as locally.
    assert re.search(
        r"^txctl: started txd \(pid \d+\) on /tmp/txd-\d+/txd.sock on login1$", first.stderr, re.M
    ), first.stderr
    folder = _tunnel_dir(ssh_cluster)
    tunnel, master = _pid(folder / "tunnel.pid"), _pid(folder / "ssh.pid")
    # The job runs in login1's daemon (its socket in login1's own /tmp), not on the laptop.
    assert handle in _ok(ssh_cluster.node("login1").txctl("list"))
    assert "RUNNING" in _ok(ssh_cluster.laptop_txctl(*HOST, "status", handle))
    env = ssh_cluster.laptop_env()
    with subprocess.Popen(
        [REMOTE_TXCTL, *HOST, "logs", "-f", handle],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as follow:
        assert _first_line(follow, 30).strip().endswith("up")
        assert ssh_cluster.laptop_txctl(*HOST, "cancel", handle).returncode == 0
        _, err = follow.communicate(timeout=30)
        assert follow.returncode == 0, err
    waited = ssh_cluster.laptop_txctl(*HOST, "wait", handle)
    assert waited.returncode == 1 and "CANCELLED" in waited.stdout, waited
    # Every command after the first went through the same tunnel and ssh connection.
    assert (_pid(folder / "tunnel.pid"), _pid(folder / "ssh.pid")) == (tunnel, master)


def test_the_relay_serves_when_the_server_refuses_socket_forwarding(
    ssh_cluster_no_forwarding: SshCluster,
) -> None:
    cluster = ssh_cluster_no_forwarding
    run = cluster.laptop_txctl(*HOST, "run", "--wait", "utils.echo", "--msg", "relayed")
    handle = _handle(_ok(run))
    assert "SUCCEEDED" in run.stdout
    assert "relayed" in _ok(cluster.laptop_txctl(*HOST, "logs", handle))
    assert "by relay (dial-stdio)" in (_tunnel_dir(cluster) / "tunnel.log").read_text()


def test_a_login_script_that_prints_is_a_clear_error_in_time(ssh_cluster: SshCluster) -> None:
    (ssh_cluster.home / ".bashrc").write_text("echo 'Welcome to the cluster!'\n")
    start = time.monotonic()
    result = ssh_cluster.laptop_txctl(*HOST, "list", timeout=90)
    assert time.monotonic() - start < 60
    assert result.returncode == NO_DAEMON, result
    assert "printed 'Welcome to the cluster!' before txd's marker line" in result.stderr
    assert "~/.bashrc" in result.stderr


def test_a_missing_remote_txctl_is_named(ssh_cluster: SshCluster) -> None:
    env = ssh_cluster.laptop_env(TXD_REMOTE_COMMAND="/opt/nowhere/txctl")
    result = ssh_cluster.laptop_txctl(*HOST, "list", env=env)
    assert result.returncode == NO_DAEMON, result
    assert "the remote command on login1 failed" in result.stderr
    assert "`/opt/nowhere/txctl` is not found on login1" in result.stderr
    assert "--remote-command" in result.stderr


def test_ssh_failing_is_named_with_its_own_message(ssh_cluster: SshCluster) -> None:
    result = ssh_cluster.laptop_txctl("--host", "ssh://nobody@login1", "list")
    assert result.returncode == NO_DAEMON, result
    assert "ssh to ssh://nobody@login1 failed: " in result.stderr
    assert "Permission denied" in result.stderr


def test_another_user_is_refused_the_first_users_daemon(ssh_cluster: SshCluster) -> None:
    login1 = ssh_cluster.node("login1")
    _ok(login1.txctl("list"))  # the first user's daemon, started there
    theirs = login1.ssh("echo /tmp/txd-$(id -u)/txd.sock").stdout.strip()
    _ok(
        ssh_cluster.laptop_txctl(
            "host", "add", "theirs", f"ssh://{USER2}@login1", "--socket", theirs
        )
    )
    result = ssh_cluster.laptop_txctl("--host", "theirs", "list")
    assert result.returncode == NO_DAEMON, result
    assert "the daemon on login1 cannot be reached" in result.stderr
    assert "permission denied" in result.stderr


def test_the_state_dir_the_remote_txctl_makes_is_its_users_alone(ssh_cluster: SshCluster) -> None:
    """The home is one others may read (0755, as on many clusters): the state dir the remote
    txctl's autostart makes in it is 0700 and its files 0600, so the second user, logged in
    over ssh, reads neither the job store nor the job's log, and user nobody reads nothing."""
    secret = "API_KEY=txdt-7c2e4f"
    _ok(ssh_cluster.laptop_txctl(*HOST, "run", "--wait", "utils.echo", "--msg", secret))
    state = ssh_cluster.home / ".local" / "state" / "txd"
    files = [p for p in state.rglob("*") if p.is_file()]
    assert sum(secret.encode() in p.read_bytes() for p in files) >= 2  # the store, the log
    assert open_to_others(state) == []
    login1 = ssh_cluster.node("login1")
    theirs = f"~{USER}/.local/state/txd"
    read = login1.ssh(f"ls {theirs}; cat {theirs}/jobs.db", user=USER2)
    assert read.stdout == "", read
    assert read.stderr.count("Permission denied") == 2, read


def test_the_tunnel_socket_is_private_and_a_foreign_file_is_kept(ssh_cluster: SshCluster) -> None:
    _ok(ssh_cluster.laptop_txctl(*HOST, "list"))
    folder = _tunnel_dir(ssh_cluster)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    sock = folder / "txd.sock"
    assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    with PidWatch([_pid(folder / "tunnel.pid")]) as watch:
        os.kill(next(iter(watch.fds)), 15)
        assert watch.wait(30) == []
    sock.write_text("not the tunnel's\n")
    result = ssh_cluster.laptop_txctl(*HOST, "list")
    assert result.returncode == NO_DAEMON, result
    assert f"{sock} is not a socket: refusing to use or remove it" in result.stderr
    assert sock.read_text() == "not the tunnel's\n"


def test_an_idle_tunnel_exits_and_the_next_command_brings_it_back(
    ssh_cluster: SshCluster,
) -> None:
    env = ssh_cluster.laptop_env(TXD_TUNNEL_IDLE="2")
    _ok(ssh_cluster.laptop_txctl(*HOST, "list", env=env))
    folder = _tunnel_dir(ssh_cluster)
    first = _pid(folder / "tunnel.pid")
    with PidWatch([first, _pid(folder / "ssh.pid")]) as watch:
        assert watch.wait(30) == []  # both gone by themselves
    assert not (folder / "txd.sock").exists()
    _ok(ssh_cluster.laptop_txctl(*HOST, "list", env=env))
    assert _pid(folder / "tunnel.pid") != first


@pytest.mark.parametrize("victim", ["ssh.pid", "tunnel.pid"])
def test_ssh_killed_mid_follow_is_a_clear_error(ssh_cluster: SshCluster, victim: str) -> None:
    """With reconnecting off (--reconnect-timeout 0; test_resume_ssh.py has it on)."""
    script = "for i in $(seq 1 600); do echo line $i; sleep 0.2; done"
    handle = _handle(_ok(ssh_cluster.laptop_txctl(*HOST, "run", "utils.sh", "sh", "-c", script)))
    folder = _tunnel_dir(ssh_cluster)
    with subprocess.Popen(
        [REMOTE_TXCTL, *HOST, "--reconnect-timeout", "0", "logs", "-f", handle],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ssh_cluster.laptop_env(),
    ) as follow:
        assert _first_line(follow, 30).strip().endswith("line 1")
        os.kill(_pid(folder / victim), 9)
        _, err = follow.communicate(timeout=30)
    assert follow.returncode == NO_DAEMON, err
    assert f"ssh tunnel {folder / 'txd.sock'} to ssh://login1" in err
    # The next command starts a new tunnel; the job went on on login1.
    assert "RUNNING" in _ok(ssh_cluster.laptop_txctl(*HOST, "status", handle))


def test_saved_endpoints_and_txd_host(ssh_cluster: SshCluster) -> None:
    _ok(ssh_cluster.laptop_txctl("host", "add", "c1", "ssh://login1", "--command", REMOTE_TXCTL))
    _ok(ssh_cluster.laptop_txctl("host", "use", "c1"))
    listed = _ok(ssh_cluster.laptop_txctl("host", "list"))
    assert re.search(r"^\* c1\s+ssh://login1", listed, re.M), listed
    handle = _handle(_ok(ssh_cluster.laptop_txctl("run", "utils.echo", "--msg", "x")))
    assert handle in _ok(ssh_cluster.node("login1").txctl("list"))
    _ok(ssh_cluster.laptop_txctl("host", "use", "local"))
    assert "* local" in _ok(ssh_cluster.laptop_txctl("host", "list"))
    assert handle in _ok(
        ssh_cluster.laptop_txctl("list", env=ssh_cluster.laptop_env(TXD_HOST="c1"))
    )
    bad = ssh_cluster.laptop_txctl("--host", "c2", "list")
    assert bad.returncode == 2 and "unknown host 'c2'" in bad.stderr, bad


def test_the_python_client_with_no_address_goes_where_txctl_does(
    ssh_cluster: SshCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client() takes $TXD_HOST, else the endpoint `txctl host use` chose, as txctl does
    (before, it went to the local socket whatever they said)."""
    from txd.client import Client, UnavailableError

    for key, value in ssh_cluster.laptop_env().items():
        monkeypatch.setenv(key, value)
    handle = _handle(_ok(ssh_cluster.laptop_txctl("--host", "ssh://login1", "run", "utils.echo")))
    monkeypatch.setenv("TXD_HOST", "ssh://login1")
    with Client() as client:
        assert [s.app_handle for s in client.list()] == [handle]
    monkeypatch.delenv("TXD_HOST")
    _ok(ssh_cluster.laptop_txctl("host", "add", "c1", "ssh://login1"))
    _ok(ssh_cluster.laptop_txctl("host", "use", "c1"))
    with Client() as client:
        assert [s.app_handle for s in client.list()] == [handle]
    _ok(ssh_cluster.laptop_txctl("host", "use", "local"))
    with Client() as client, pytest.raises(UnavailableError, match="No such file"):
        client.list()  # the laptop's own daemon: there is none


def test_the_python_client_by_address(
    ssh_cluster: SshCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from txd.client import Client

    for key, value in ssh_cluster.laptop_env().items():
        monkeypatch.setenv(key, value)
    with Client("ssh://login1") as client:
        assert client.list() == []
    with Client(host="ssh://nobody@login1") as client:
        with pytest.raises(Exception, match="ssh to ssh://nobody@login1 failed") as info:
            client.list()
        assert type(info.value).__name__ == "UnavailableError"


def test_an_open_stream_keeps_an_idle_tunnel_up(ssh_cluster: SshCluster) -> None:
    env = ssh_cluster.laptop_env(TXD_TUNNEL_IDLE="1")
    script = "for i in $(seq 1 20); do echo line $i; sleep 0.2; done"
    run = ssh_cluster.laptop_txctl(*HOST, "run", "--log", "utils.sh", "sh", "-c", script, env=env)
    # Four seconds of output through a tunnel whose idle time is one: all of it arrived.
    assert run.returncode == 0, run
    lines = [line for line in run.stdout.splitlines() if line.startswith("line ")]
    assert lines == [f"line {i}" for i in range(1, 21)], run.stdout


def test_a_dead_remote_daemon_is_started_again_through_a_live_tunnel(
    ssh_cluster: SshCluster,
) -> None:
    handle = _handle(_ok(ssh_cluster.laptop_txctl(*HOST, "run", "utils.echo", "--msg", "a")))
    folder = _tunnel_dir(ssh_cluster)
    tunnel = _pid(folder / "tunnel.pid")
    (daemon,) = ssh_cluster.node("login1").daemon_pids()
    with PidWatch([daemon]) as watch:
        os.kill(daemon, 9)
        assert watch.wait(30) == []
    # The same tunnel finds the daemon gone, has the remote txctl start one, and the command
    # goes through, as a local txctl starts a daemon when none answers.
    listed = ssh_cluster.laptop_txctl(*HOST, "list")
    assert listed.returncode == 0 and handle in listed.stdout, listed
    assert _pid(folder / "tunnel.pid") == tunnel
    (again,) = ssh_cluster.node("login1").daemon_pids()
    assert again != daemon


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.05)


def test_a_second_command_while_the_first_ones_tunnel_fails_gets_its_own_answer(
    ssh_cluster: SshCluster,
) -> None:
    """Two commands start a tunnel at once; the first one's fails (slowly: its remote command
    sleeps, then exits 1). The second, told `busy` by the folder's lock, used to wait for a
    socket that never came (START + QUERY timeouts: 180 s) and then say only that another
    tunnel "does not serve"; it now starts its own once the first has exited, and says why
    that one fails, as the first command does."""
    env = ssh_cluster.laptop_env(TXD_REMOTE_COMMAND="sleep 6; false")
    cmd = [REMOTE_TXCTL, *HOST, "list"]
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
    with subprocess.Popen(cmd, **popen) as first:  # type: ignore[call-overload]
        tunnels = ssh_cluster.laptop / "run" / "txd" / "tunnels"
        # The first command's tunnel holds the folder's lock (it writes its pid once it does).
        _until(lambda: any(tunnels.glob("*/tunnel.pid")), 30, "tunnel holding its lock")
        start = time.monotonic()
        second = ssh_cluster.laptop_txctl(*HOST, "list", env=env, timeout=60)
        _, first_err = first.communicate(timeout=30)
    assert first.returncode == NO_DAEMON, first_err
    why = "`sleep 6; false remote-socket` exited with 1"
    assert why in first_err, first_err
    assert second.returncode == NO_DAEMON, second
    assert why in second.stderr, second.stderr
    assert time.monotonic() - start < 40


def test_a_command_while_an_idle_tunnel_exits_gets_a_new_tunnel(ssh_cluster: SshCluster) -> None:
    """An idle tunnel used to stop its ssh master first and keep accepting on txd.sock until
    that master had exited: a command arriving meanwhile was handed a socket that could no
    longer serve. The master is stopped (SIGSTOP) here to hold that moment open; the command
    must go through a new tunnel, the old one gone (its master killed when SIGTERM does not
    end it)."""
    env = ssh_cluster.laptop_env(TXD_TUNNEL_IDLE="2")
    _ok(ssh_cluster.laptop_txctl(*HOST, "list", env=env))
    folder = _tunnel_dir(ssh_cluster)
    tunnel, master = _pid(folder / "tunnel.pid"), _pid(folder / "ssh.pid")
    with PidWatch([tunnel, master]) as watch:
        os.kill(master, signal.SIGSTOP)
        try:
            log = folder / "tunnel.log"
            _until(lambda: "stopping: idle" in log.read_text(), 30, "idle exit")
            listed = ssh_cluster.laptop_txctl(*HOST, "list", env=env, timeout=60)
            assert listed.returncode == 0, listed
            assert watch.wait(30) == []
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(master, signal.SIGCONT)
    assert _pid(folder / "tunnel.pid") != tunnel


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_ctrl_c_or_hangup_of_the_command_that_started_the_tunnel_leaves_it_up(
    ssh_cluster: SshCluster, sig: signal.Signals
) -> None:
    """The tunnel and its ssh master run in the process group of the command that started
    them (ssh may prompt on its terminal). A Ctrl-C on that command once the tunnel serves
    (`logs -f`, the first command of the day, stopped by hand), or its terminal closed (a
    hangup of the foreground group), used to reach them too: the tunnel stopped and the signal
    killed the master, so the next command logged in again (one more MFA prompt) and other
    terminals' streams through it were cut."""
    login1 = ssh_cluster.node("login1")
    script = "for i in $(seq 1 600); do echo line $i; sleep 0.2; done"
    handle = _handle(_ok(login1.txctl("run", "utils.sh", "sh", "-c", script)))
    with subprocess.Popen(
        [REMOTE_TXCTL, *HOST, "logs", "-f", handle],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ssh_cluster.laptop_env(),
        start_new_session=True,  # a shell job's process group: the terminal's Ctrl-C hits all
    ) as follow:
        assert _first_line(follow, 30).strip().endswith("line 1")
        folder = _tunnel_dir(ssh_cluster)
        tunnel, master = _pid(folder / "tunnel.pid"), _pid(folder / "ssh.pid")
        os.killpg(follow.pid, sig)
        follow.communicate(timeout=30)
    assert follow.returncode != 0  # the follow itself did stop
    assert "RUNNING" in _ok(ssh_cluster.laptop_txctl(*HOST, "status", handle))
    assert (_pid(folder / "tunnel.pid"), _pid(folder / "ssh.pid")) == (tunnel, master)
    os.kill(tunnel, 0)
    os.kill(master, 0)


def test_an_ssh_command_that_cannot_run_is_named(ssh_cluster: SshCluster) -> None:
    """TXD_SSH_COMMAND naming no program raised FileNotFoundError in the tunnel, which said
    nothing on its ready pipe: the command said only "the tunnel ... exited; see tunnel.log"."""
    env = ssh_cluster.laptop_env(TXD_SSH_COMMAND="/opt/nowhere/ssh -F cfg")
    result = ssh_cluster.laptop_txctl(*HOST, "list", env=env)
    assert result.returncode == NO_DAEMON, result
    assert "ssh to ssh://login1 failed: cannot run /opt/nowhere/ssh" in result.stderr, result
    assert "No such file or directory" in result.stderr


def test_a_runtime_dir_with_odd_characters(ssh_cluster: SshCluster) -> None:
    """ssh expands %-tokens in a control path and in -L's socket paths: a `%` in the runtime
    dir (so in the tunnel's folder) had ssh look for its master's socket elsewhere, and every
    command failed; one in the remote daemon's socket refused the forward (relay instead)."""
    run = ssh_cluster.laptop / "run dir 100% (x) 'q' ~a %d"
    run.mkdir(mode=0o700)
    env = ssh_cluster.laptop_env(XDG_RUNTIME_DIR=str(run))
    socket = "/tmp/odd 100%d/txd.sock"
    _ok(ssh_cluster.laptop_txctl("host", "add", "odd", "ssh://login1", "--socket", socket, env=env))
    _ok(ssh_cluster.laptop_txctl("--host", "odd", "list", env=env))
    (log,) = run.glob("txd/tunnels/*/tunnel.log")
    assert f"ssh://login1:{socket} by forwarding" in log.read_text()
    _ok(ssh_cluster.laptop_txctl("--host", "odd", "list", env=env))  # the same tunnel again


def test_the_master_of_a_killed_tunnel_is_ended_by_the_next_one(ssh_cluster: SshCluster) -> None:
    """A tunnel killed (SIGKILL, an OOM kill, a crash) leaves its ssh master running, with
    nobody to end it: it stayed logged in, for as long as the server answered its keepalives,
    once per such death. The next tunnel in that folder ends it through its control socket."""
    _ok(ssh_cluster.laptop_txctl(*HOST, "list"))
    folder = _tunnel_dir(ssh_cluster)
    tunnel, master = _pid(folder / "tunnel.pid"), _pid(folder / "ssh.pid")
    with PidWatch([tunnel]) as watch:
        os.kill(tunnel, signal.SIGKILL)
        assert watch.wait(30) == []
    with PidWatch([master]) as watch:
        _ok(ssh_cluster.laptop_txctl(*HOST, "list"))  # a new tunnel, and master
        assert watch.wait(30) == []
    assert _pid(folder / "ssh.pid") != master
