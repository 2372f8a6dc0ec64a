"""One daemon per state dir across hosts (txd.daemon.serving), with real daemons: each "host" is
a daemon in a UTS namespace of its own (its own hostname, by `unshare --uts`), all of them
sharing one state dir as login nodes share a home directory."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_testing import (
    PERIOD,
    REFUSED,
    Host,
    beat,
    on_host,
    record,
    stale,
    unshare_works,
    until,
)
from txd.daemon import jobstore, serving
from txd_testing import PidWatch, clean_env, log_alarms, remove_tree, short_tmpdir

pytestmark = pytest.mark.skipif(not unshare_works(), reason="needs unshare --uts")


@pytest.fixture
def cluster() -> Iterator[tuple[Path, Host, Host]]:
    root = short_tmpdir("txcl-")
    state = root / "home" / "state"
    hosts = (Host(root, "login1", state), Host(root, "login2", state))
    try:
        yield state, *hosts
    finally:
        for h in hosts:
            h.daemon.close()
        for h in hosts:
            assert not log_alarms(h.daemon.log()), h.daemon.log()
        remove_tree(root)


def _fake_record(state: Path, host: str, heartbeat: float, period: float = 30.0) -> None:
    state.mkdir(parents=True, exist_ok=True)
    rec = {
        "host": host,
        "ssh": f"{host}.example",
        "socket": f"/run/user/1000/txd/{host}.sock",
        "pid": 4242,
        "version": "0",
        "started": heartbeat,
        "heartbeat": heartbeat,
        "period": period,
        "state": "serving",
        "id": f"id-{host}",
    }
    (state / serving.RECORD).write_text(json.dumps(rec))


def test_the_record_names_the_serving_host_and_beats(cluster: tuple[Path, Host, Host]) -> None:
    state, login1, login2 = cluster
    d = login1.daemon.start()
    first = record(state)
    assert (first["host"], first["ssh"], first["socket"]) == ("login1", "login1", str(d.socket))
    assert (first["pid"], first["state"], first["period"]) == (d.pid, "serving", PERIOD)
    assert first["started"] == first["heartbeat"]
    until(lambda: record(state)["heartbeat"] != first["heartbeat"])
    assert record(state)["id"] == first["id"]
    assert (state / serving.RECORD).stat().st_mode & 0o777 == 0o600
    assert d.stop() == 0
    last = record(state)
    assert last["state"] == "stopped" and last["id"] == first["id"]
    # A clean exit frees the state dir for another host at once, without any wait.
    login2.daemon.start()
    assert "took over" not in login2.daemon.log()
    assert record(state)["host"] == "login2"


def test_a_fresh_record_of_another_host_means_busy_whatever_the_lock(
    cluster: tuple[Path, Host, Host],
) -> None:
    """Lustre's localflock: the other host's lock is invisible here; its heartbeat is not."""
    state, _, login2 = cluster
    _fake_record(state, "login9", time.time())
    held = "4242\n/run/user/1000/txd/txd.sock\n"  # what login9's daemon wrote in its lock file
    (state / serving.LOCK).write_text(held)
    with pytest.raises(RuntimeError) as refused:
        login2.daemon.start()
    text = str(refused.value)
    assert "on another host (host login9 (ssh login9.example)" in text, text
    assert "txctl --host ssh://login9.example" in text, text
    assert record(state)["host"] == "login9"  # untouched
    assert (state / serving.LOCK).read_text() == held  # untouched too
    assert not (state / jobstore.FILE_NAME).exists()  # the job store never opened
    # txctl on that host goes there by ssh instead of starting a second daemon (an ssh that
    # records its arguments and fails here; tests/remote has real ones).
    out = login2.txctl("list", autostart=True)
    assert out.returncode == 3, out
    assert "host login9" in out.stderr and "does not answer over ssh" in out.stderr, out.stderr
    assert "login9.example" in (state.parent.parent / "ssh-args").read_text().split()
    assert not login2.daemon.socket.exists()


def test_txctl_says_the_serving_host_does_not_answer_and_when_a_takeover_is_possible(
    cluster: tuple[Path, Host, Host],
) -> None:
    """Issue 33 item 7: a record that still beats, of a host whose ssh is refused (that host
    down). Before: "reaching it over ssh", then ssh's own words. Now one line: who serves, that
    it does not answer, and in how many seconds a daemon here may take over; no ssh text."""
    state, _, login2 = cluster
    _fake_record(state, "login9", time.time() - 10, period=10.0)  # stale at 30 s: in 20 s
    out = login2.txctl("list", autostart=True)
    assert out.returncode == 3, out
    said = out.stderr.splitlines()
    assert len(said) == 1, out.stderr
    m = re.fullmatch(
        r"txctl: error: txd serves this state dir on host login9 \(last heartbeat 1\ds ago\), "
        r"but it does not answer over ssh \(ssh://login9\.example\); if that host or its txd "
        r"is down, a daemon here can take the state dir over in (\d+)s, once the heartbeat is "
        r"30s old: run the command again then",
        said[0],
    )
    assert m is not None and 0 < int(m[1]) <= 20, said[0]  # 20 s at most: less as it runs
    assert REFUSED not in out.stderr and "Connection refused" not in out.stderr
    assert not login2.daemon.socket.exists()  # and nothing started here


_CLIENT = """
from txd.client import Client, UnavailableError
try:
    with Client() as c:
        c.list()
except UnavailableError as e:
    print(e.message)
"""


def test_the_python_client_says_the_serving_host_does_not_answer(
    cluster: tuple[Path, Host, Host],
) -> None:
    """The same for Client() with no address, which follows the record as txctl does: its
    error names the host, that it does not answer, and when a takeover is possible; nothing
    on stderr says it is reaching that host (before: that line, then ssh's words)."""
    state, _, login2 = cluster
    _fake_record(state, "login9", time.time() - 10, period=10.0)
    d = login2.daemon
    env = d.txctl_env(
        TXD_STATE_DIR=str(state), TXD_SOCKET=str(d.socket), TXD_SSH_COMMAND=str(login2.fake_ssh())
    )
    out = subprocess.run(
        [*on_host("login2"), sys.executable, "-c", _CLIENT],
        capture_output=True, text=True, env=env, cwd=d.home, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out
    assert out.stdout.startswith("txd serves this state dir on host login9 (last heartbeat 1"), (
        out.stdout
    )
    assert "but it does not answer over ssh (ssh://login9.example)" in out.stdout, out.stdout
    assert REFUSED not in out.stdout + out.stderr
    assert "reaching it" not in out.stderr, out.stderr


def test_txctl_names_no_pid_of_another_host_from_the_lock_file(
    cluster: tuple[Path, Host, Host],
) -> None:
    """Issue 33 item 7: login1's daemon holds the state dir's lock file (its pid, its socket
    path, the same path as login2's: one $XDG_RUNTIME_DIR layout on every login node) and is
    stalled, its pid alive in a pid namespace login2 shares. Before, login2's txctl took that
    pid for one of its own host, waited for it to bind its socket again, then told the user to
    `kill` it. The record names login1: txctl says that host stopped beating, and names no pid."""
    state, login1, login2 = cluster
    login1.daemon.socket = login2.daemon.socket  # the same path on both hosts
    d1 = login1.daemon.start()
    lock = (state / serving.LOCK).read_text()
    assert lock.startswith(f"{d1.pid}\n{login2.daemon.socket}\n"), lock
    os.kill(d1.pid, signal.SIGSTOP)
    try:
        login2.daemon.socket.unlink()  # no daemon answers on login2's socket
        until(lambda: stale(state))
        out = login2.txctl("list")  # --no-autostart: tells what is going on, starts nothing
    finally:
        os.kill(d1.pid, signal.SIGCONT)
    assert out.returncode == 3, out
    said = out.stderr.splitlines()
    assert len(said) == 1, out.stderr
    assert said[0].startswith("txctl: error: the txd of host login1 stopped beating "), said
    assert "without --no-autostart, txctl takes the state dir" in said[0], said
    assert "kill" not in out.stderr and str(d1.pid) not in out.stderr, out.stderr


def test_txctl_takes_over_from_a_stalled_host_without_contradicting_itself(
    cluster: tuple[Path, Host, Host],
) -> None:
    """The same, on node-local locks (Lustre's localflock) and with autostart: before, txctl
    said it takes the state dir over here, then at once refused, telling the user to `kill`
    login1's pid. Now the daemon it starts takes the state dir over, as it said."""
    state, login1, login2 = cluster
    login1.daemon.socket = login2.daemon.socket
    d1 = login1.daemon.start()
    os.kill(d1.pid, signal.SIGSTOP)
    try:
        login2.daemon.socket.unlink()
        until(lambda: stale(state))
        out = login2.txctl("list", autostart=True, localflock=True)
    finally:
        os.kill(d1.pid, signal.SIGCONT)
    taker = record(state)
    try:
        assert out.returncode == 0, out
        said = out.stderr.splitlines()
        assert said[0].startswith("txctl: the txd of host login1 stopped beating "), said
        assert "over here" in said[0], said
        assert not any("error" in line for line in said), said
        assert "kill" not in out.stderr and str(d1.pid) not in out.stderr, out.stderr
        assert taker["host"] == "login2", taker
        assert d1.proc is not None and d1.proc.wait(timeout=30) == 0  # it saw the takeover
    finally:
        if taker["host"] == "login2":  # txctl started it: stop it here
            with PidWatch([int(taker["pid"])]) as watch:  # type: ignore[call-overload]
                os.kill(int(taker["pid"]), signal.SIGTERM)  # type: ignore[call-overload]
                assert watch.wait(30) == []


def test_a_tunnel_to_a_host_without_a_daemon_is_not_told_to_start_txd(
    cluster: tuple[Path, Host, Host],
) -> None:
    """The remote end of an ssh tunnel opened with --no-autostart (`txctl remote-socket` on
    the serving host): its user is on another host, where "start one with `txd`" is wrong."""
    _, _, login2 = cluster
    out = login2.txctl("remote-socket")
    assert out.returncode == 3, out
    assert "`txd`" not in out.stderr, out.stderr
    assert f"no txd daemon answers on {login2.daemon.socket} on host login2" in out.stderr
    assert "opened with --no-autostart" in out.stderr, out.stderr


def test_kill_9_then_another_host_takes_over_and_knows_every_job(
    cluster: tuple[Path, Host, Host],
) -> None:
    state, login1, login2 = cluster
    login1.daemon.start()
    done = login1.txctl("run", "--wait", "utils.echo", "--msg", "hello")
    assert done.returncode == 0, done
    running = login1.txctl("run", "utils.sh", "sleep", "600")
    assert running.returncode == 0, running
    handles = [done.stdout.split()[0], running.stdout.split()[0]]
    status = login1.txctl("status", handles[1])
    assert "RUNNING" in status.stdout, status
    replica = json.loads(
        sqlite3.connect(state / jobstore.FILE_NAME)
        .execute("SELECT native FROM jobs WHERE handle = ?", (handles[1],))
        .fetchone()[0]
    )["replicas"][0]["pid"]
    login1.daemon.kill()

    # While its heartbeat is fresh (as if just written: the clock decides nothing here), login2
    # is refused, naming login1: txctl there goes to login1 by ssh (refused here: host down).
    beat(state, time.time() + 60)
    refused = login2.txctl("list", autostart=True)
    assert refused.returncode == 3, refused
    assert "serves this state dir on host login1 (last heartbeat" in refused.stderr
    assert "but it does not answer over ssh (ssh://login1)" in refused.stderr
    beat(state, time.time() - 60)  # and now long stopped
    listed = login2.txctl("list", "--json", autostart=True)
    assert listed.returncode == 0, listed
    assert "stopped beating" in listed.stderr and "taking the state dir" in listed.stderr
    taker = int(record(state)["pid"])  # type: ignore[call-overload]
    try:
        _taken_over(state, handles, listed.stdout, login2)
    finally:
        with PidWatch([taker]) as watch:  # txctl started it: stop it here
            os.kill(taker, signal.SIGTERM)
            assert watch.wait(30) == []
    assert "took over the state dir" in (state / "txd.log").read_text()
    # login1's replica is another host's process: left alone, never killed by its pid here.
    with PidWatch([replica]) as watch:
        assert watch.running() == [replica]
        os.killpg(replica, signal.SIGKILL)
        assert watch.wait(30) == []


def _taken_over(state: Path, handles: list[str], listed: str, login2: Host) -> None:
    jobs = {j["app_handle"]: j for j in json.loads(listed)}
    assert set(handles) <= set(jobs)
    assert jobs[handles[0]]["state"] == "SUCCEEDED"
    lost = login2.txctl("status", "--json", handles[1])
    lost_status = json.loads(lost.stdout)
    assert lost_status["state"] == "FAILED", lost_status
    assert "ran on host login1" in lost_status["msg"], lost_status
    rec = record(state)
    assert rec["host"] == "login2" and rec["state"] == "serving"


def test_a_stalled_daemon_taken_over_stops_without_writing(
    cluster: tuple[Path, Host, Host],
) -> None:
    state, login1, _ = cluster
    login2 = Host(state.parent.parent, "login2", state, localflock=True)
    d1 = login1.daemon.start()
    os.kill(d1.pid, signal.SIGSTOP)  # a paused process, a hung file system: no heartbeat
    try:
        until(lambda: stale(state))
        login2.daemon.start()
    finally:
        os.kill(d1.pid, signal.SIGCONT)
    taker = record(state)
    assert taker["host"] == "login2"
    assert d1.proc is not None
    assert d1.proc.wait(timeout=30) == 0  # on its next heartbeat it sees the new record
    assert "another txd took this state dir over (host login2" in d1.log()
    assert record(state) == {**taker, "heartbeat": record(state)["heartbeat"]}
    assert login2.txctl("list").returncode == 0
    login2.daemon.close()


def test_a_daemon_taken_over_writes_nothing_of_what_it_had_queued(
    cluster: tuple[Path, Host, Host],
) -> None:
    """Issue 33 item 6, on node-local locks: login1's daemon is stopped, login2 takes over and
    records login1's running job lost, the job's process ends meanwhile (its exit and its last
    output wait in login1's stopped daemon), and then login1's daemon runs again. Before, it
    wrote SUCCEEDED over the taker's FAILED in the same second it logged that it stops: two
    ends for one job. Now its store is fenced (the taker's epoch), and it writes nothing."""
    state, login1, _ = cluster
    login2 = Host(state.parent.parent, "login2", state, localflock=True)
    try:
        _queued_writes_fenced(state, login1, login2)
    finally:
        login2.daemon.close()


def _queued_writes_fenced(state: Path, login1: Host, login2: Host) -> None:
    d1 = login1.daemon.start()
    go = login1.daemon.home / "go"
    # Ends (with a last line of output) once `go` exists; bounded: 600 tries of 0.1 s.
    (login1.daemon.home / "job.sh").write_text(
        'for i in $(seq 600); do [ -e go ] && break; sleep 0.1; done; echo "$1"\n'
    )
    ran = login1.txctl("run", "utils.sh", "sh", "job.sh", "last-words")
    assert ran.returncode == 0, ran
    handle = ran.stdout.split()[0]
    until(lambda: "RUNNING" in login1.txctl("status", handle).stdout)
    db = state / jobstore.FILE_NAME
    with contextlib.closing(sqlite3.connect(db)) as c:
        native = c.execute("SELECT native FROM jobs WHERE handle = ?", (handle,)).fetchone()[0]
    replica = json.loads(native)["replicas"][0]["pid"]
    os.kill(d1.pid, signal.SIGSTOP)
    try:
        until(lambda: stale(state))
        login2.daemon.start()  # ready once it has recorded login1's jobs lost
        lost = json.loads(login2.txctl("status", "--json", handle).stdout)
        assert lost["state"] == "FAILED" and "ran on host login1" in lost["msg"], lost
        with PidWatch([replica]) as watch:
            go.touch()
            assert watch.wait(30) == []  # exited: its exit and output wait for login1's daemon
        before = _state_files(state)
    finally:
        os.kill(d1.pid, signal.SIGCONT)
    assert d1.proc is not None and d1.proc.wait(timeout=30) == 0
    assert "another txd took this state dir over (host login2" in d1.log(), d1.log()
    events = login2.txctl("events", "--since", "1h", "--json", "--handle", handle)
    assert events.returncode == 0, events
    states = [
        json.loads(line).get("status", {}).get("state") for line in events.stdout.splitlines()
    ]
    ends = [s for s in states if s in ("SUCCEEDED", "FAILED", "CANCELLED")]
    assert ends == ["FAILED"], events.stdout
    assert _state_files(state) == before  # the job store, the logs: nothing written
    assert json.loads(login2.txctl("status", "--json", handle).stdout)["state"] == "FAILED"


def _state_files(state: Path) -> dict[str, object]:
    """What the daemons write in the state dir, besides the serving record: the job store's
    rows, and every log file's bytes."""
    with contextlib.closing(sqlite3.connect(state / jobstore.FILE_NAME)) as c:
        tables = {
            t: c.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
            for t in ("jobs", "events", "meta")
        }
    logs = {
        str(p): p.read_bytes() for p in sorted(state.rglob("*")) if p.suffix in (".log", ".idx")
    }
    return {**tables, **logs}


def test_a_stalled_daemons_late_write_does_not_unseat_the_taker(
    cluster: tuple[Path, Host, Host],
) -> None:
    """The stalled daemon read its own record, then stalled past the takeover, then wrote its
    beat over the taker's record (the write that a fence must stop). The taker writes its own
    again and serves on; before, it read that record as a takeover of its own and stopped."""
    state, login1, _ = cluster
    login2 = Host(state.parent.parent, "login2", state, localflock=True)
    try:
        _late_write(state, login1, login2)
    finally:
        login2.daemon.close()  # not the fixture's: closed here, also when the test fails


def _late_write(state: Path, login1: Host, login2: Host) -> None:
    d1 = login1.daemon.start()
    first = record(state)
    os.kill(d1.pid, signal.SIGSTOP)
    try:
        until(lambda: stale(state))
        d2 = login2.daemon.start()
    finally:
        os.kill(d1.pid, signal.SIGCONT)
    taker = record(state)
    assert (taker["host"], taker["epoch"]) == ("login2", first["epoch"] + 1)
    assert d1.proc is not None and d1.proc.wait(timeout=30) == 0
    # login1's late beat lands now: its own record, a later heartbeat.
    late = {**first, "heartbeat": time.time()}
    (state / serving.RECORD).write_text(json.dumps(late))
    until(lambda: record(state)["id"] == taker["id"])  # written back at login2's next beat
    assert "a late write of the txd this one took the state dir over from (host login1" in (
        d2.log()
    )
    assert d2.running()
    assert login2.txctl("list").returncode == 0


_RACER = """
import json, sys, time
from pathlib import Path
from txd.daemon import serving
serving.fcntl.flock = lambda fd, op: None  # each host's flock sees only itself (localflock)
state, host, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
(go.parent / f"ready-{host}").touch()
while not go.exists():
    time.sleep(0.005)
try:
    s = serving.acquire(state, Path("/nonexistent/" + host), host=host)
except serving.Busy as e:
    print(json.dumps({"won": False, "why": str(e)}))
else:
    print(json.dumps({"won": True, "id": s.record.id}))
"""


def _race(state: Path, go: Path, racers: int) -> list[dict[str, Any]]:
    """Runs `racers` hosts' acquire() at once on `state` (each its own process, released
    together once all are at the barrier: their imports done, a race, not a queue); what each
    got, in host order."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(state), f"login{k}", str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
            text=True,
        )
        for k in range(1, racers + 1)
    ]
    until(lambda: len(list(go.parent.glob("ready-*"))) == racers, 60)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    return results


@pytest.mark.parametrize("racers", [2, 4])
def test_hosts_racing_to_take_over_end_with_one_winner(racers: int) -> None:
    root = short_tmpdir("txrace-")
    state, go = root / "state", root / "go"
    _fake_record(state, "login9", time.time() - 60, period=0.2)
    results = _race(state, go, racers)
    winners = [r for r in results if r["won"]]
    assert len(winners) == 1, results
    assert record(state)["id"] == winners[0]["id"]
    for r in results:
        if not r["won"]:
            assert "taking the state dir over" in r["why"] or "over first" in r["why"], r
    assert not list(state.glob(f"{serving.CLAIM_PREFIX}*"))  # the winner cleared the claims
    remove_tree(root)


@pytest.mark.parametrize("before", ["none", "stopped"])
def test_hosts_starting_at_once_on_a_free_state_dir_end_with_one_winner(before: str) -> None:
    """No record, or one that says `stopped` (every clean exit leaves one): hosts starting at
    once, their flocks blind to each other (localflock), each read no serving record and each
    wrote its own (before: 4 of 4 won, so 4 daemons opened the one job store until their
    heartbeats saw another record). Now one wins, by the same O_EXCL claim as a takeover, and
    the others are busy, naming the winner."""
    root = short_tmpdir("txstart-")
    state, go = root / "state", root / "go"
    if before == "stopped":
        _fake_record(state, "login9", time.time() - 60)
        rec = json.loads((state / serving.RECORD).read_text())
        (state / serving.RECORD).write_text(json.dumps({**rec, "state": "stopped"}))
    results = _race(state, go, 4)
    winners = [r for r in results if r["won"]]
    assert len(winners) == 1, results
    won = record(state)
    assert won["id"] == winners[0]["id"]
    for r in results:
        if not r["won"]:
            assert f"on another host (host {won['host']}," in r["why"], r
    assert not list(state.glob(f"{serving.CLAIM_PREFIX}*"))
    remove_tree(root)


def test_an_abandoned_claim_does_not_block_a_takeover() -> None:
    root = short_tmpdir("txclaim-")
    state = root / "state"
    _fake_record(state, "login9", time.time() - 60, period=0.2)
    claim = state / f"{serving.CLAIM_PREFIX}id-login9"
    claim.write_text(json.dumps({"host": "login7", "pid": 1, "time": time.time() - 60, "id": "x"}))
    s = serving.acquire(state, root / "sock", host="login2")
    try:
        assert record(state)["id"] == s.record.id
        assert s.took_over_from == "login9"
    finally:
        s.close()
    assert record(state)["state"] == "stopped"
    # A recent claim means another host is taking over right now: busy, naming it.
    _fake_record(state, "login9", time.time() - 60, period=0.2)
    claim.write_text(json.dumps({"host": "login7", "pid": 1, "time": time.time(), "id": "y"}))
    with pytest.raises(serving.Busy, match="host login7 is taking the state dir over"):
        serving.acquire(state, root / "sock", host="login2")
    remove_tree(root)


def test_a_claim_of_a_dead_process_of_this_host_does_not_hold_a_restart() -> None:
    """Every start takes a claim now (hosts starting at once): one left by a daemon of this
    host killed half-way through its start must not hold the next start for the claims'
    minute, as a live claimant's does."""
    root = short_tmpdir("txdead-")
    state = root / "state"
    state.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    claim = state / f"{serving.CLAIM_PREFIX}none"
    left = {"host": "login2", "pid": dead.pid, "time": time.time(), "id": "z"}
    claim.write_text(json.dumps(left))
    s = serving.acquire(state, root / "sock", host="login2")
    s.close()
    assert record(state)["host"] == "login2"
    # A live one of this host (this very test) still holds it.
    _fake_record(state, "login9", time.time() - 60)
    rec = json.loads((state / serving.RECORD).read_text())
    (state / serving.RECORD).write_text(json.dumps({**rec, "state": "stopped"}))
    mine = {"host": "login2", "pid": os.getpid(), "time": time.time(), "id": "y"}
    (state / f"{serving.CLAIM_PREFIX}id-login9").write_text(json.dumps(mine))
    with pytest.raises(serving.Busy, match="another txd is starting"):
        serving.acquire(state, root / "sock", host="login2")
    remove_tree(root)


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A tmpfs of the test's own (remounted read-only by the test)."""
    if os.geteuid() != 0:
        pytest.skip("mounts a tmpfs")
    path = short_tmpdir("txro-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(path)],
                   check=True, capture_output=True, timeout=10)  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10, check=False)


def _remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)],
                   check=True, capture_output=True, timeout=10)  # fmt: skip


def _fill(fs: Path) -> Path:
    """Fills the file system up: the next write of a record fails with ENOSPC."""
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        for _ in range(2048):  # bounded: more than the 1 MiB there is, in 1 KiB steps
            f.write(b"x" * 1024)
    return filler


def test_a_full_file_system_is_said_once_and_the_heartbeat_recovers(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="txd.daemon.serving")
    state = small_fs / "state"
    s = serving.acquire(state, small_fs / "sock", host="login1")
    try:
        filler = _fill(small_fs)
        assert s.beat() and s.beat()  # still ours: the daemon goes on serving
        errors = [r for r in caplog.records if "cannot write the serving record" in r.message]
        assert len(errors) == 1, errors
        assert "No space left on device" in errors[0].message
        assert "take this state dir over once the record is 15s old" in errors[0].message
        assert record(state)["heartbeat"] < s.record.heartbeat
        filler.unlink()
        assert s.beat()
        assert any("is written again" in r.message for r in caplog.records)
        assert record(state)["heartbeat"] == s.record.heartbeat
        assert [p.name for p in state.iterdir() if p.name.startswith(".")] == []  # no leftovers
    finally:
        s.close()


def test_a_read_only_state_dir_is_refused_with_why(small_fs: Path) -> None:
    state = small_fs / "state"
    state.mkdir()
    _remount(small_fs, "ro")
    try:
        with pytest.raises(serving.Busy, match=r"cannot use the state dir .*: Read-only file sys"):
            serving.acquire(state, small_fs / "sock", host="login2")
    finally:
        _remount(small_fs, "rw")


@pytest.mark.parametrize("fs", ["network", "local"])
def test_the_job_store_needs_no_shared_memory_on_a_network_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fs: str
) -> None:
    """WAL either way (file format 2 in the header); on a network file system its index stays
    in the daemon's memory (no -shm file), the daemon's connection holding SQLite's lock."""
    monkeypatch.setenv(jobstore.STATE_FS_ENV, fs)
    store = jobstore.JobStore.in_state_dir(tmp_path)
    try:
        shm = tmp_path / f"{jobstore.FILE_NAME}-shm"
        assert shm.exists() == (fs == "local")
        other = sqlite3.connect(tmp_path / jobstore.FILE_NAME, timeout=0)
        try:
            if fs == "network":
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    other.execute("SELECT count(*) FROM jobs").fetchone()
            else:
                assert other.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
        finally:
            other.close()
    finally:
        store.close()
    data = (tmp_path / jobstore.FILE_NAME).read_bytes()
    assert (data[18], data[19]) == (2, 2)
    # And it opens again, its check included, with no -shm made.
    store = jobstore.JobStore.in_state_dir(tmp_path)
    try:
        assert (tmp_path / f"{jobstore.FILE_NAME}-shm").exists() == (fs == "local")
    finally:
        store.close()


def test_the_file_system_type_is_read_from_mountinfo() -> None:
    assert jobstore.fs_type(Path("/proc/self")) == "proc"
    assert jobstore.on_network_fs(Path("/proc")) is False


def _untrusted(state: Path, login2: Host, change: str) -> subprocess.CompletedProcess[str]:
    _fake_record(state, "login9", time.time())
    if change == "writable":
        (state / serving.RECORD).chmod(0o666)
    else:
        rec = record(state)
        (state / serving.RECORD).write_text(json.dumps({**rec, "ssh": change}))
    out = login2.txctl("list", autostart=True)
    assert not (state.parent.parent / "ssh-args").exists()  # ssh never ran
    return out


@pytest.mark.parametrize("change", ["writable", "-oProxyCommand=touch /tmp/x", "a b"])
def test_txctl_does_not_follow_a_record_others_could_have_written(
    cluster: tuple[Path, Host, Host], change: str
) -> None:
    state, _, login2 = cluster
    out = _untrusted(state, login2, change)
    assert out.returncode == 3, out
    want = "is not yours alone" if change == "writable" else "names no usable ssh host"
    assert want in out.stderr and "remove it" in out.stderr, out.stderr


def test_the_ssh_name_is_the_daemons_choice_and_checked(cluster: tuple[Path, Host, Host]) -> None:
    state, login1, _ = cluster
    login1.daemon.args += ["--ssh-name", "me@login1.example"]
    login1.daemon.start()
    assert record(state)["ssh"] == "me@login1.example"
    bad = subprocess.run(
        [sys.executable, "-m", "txd.daemon", "--ssh-name=-oProxyCommand=x"],
        capture_output=True, text=True, timeout=30, env=clean_env(), check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "expected a host name for ssh" in bad.stderr, bad


def test_a_takeover_that_fails_to_start_puts_the_dead_hosts_record_back(
    cluster: tuple[Path, Host, Host],
) -> None:
    """Until a daemon has settled the dead host's jobs, the record must keep naming that host:
    the next daemon then still knows its local_cwd jobs ran elsewhere (not pids to look for
    here)."""
    state, _, login2 = cluster
    _fake_record(state, "login9", time.time() - 60, period=0.2)
    before = record(state)
    (state / jobstore.FILE_NAME).write_bytes(b"not a database, " * 64)
    with pytest.raises(RuntimeError, match="not a txd job store"):
        login2.daemon.start()
    assert "watching it" in login2.daemon.log()  # it did take the record over first
    assert record(state) == {**before, "python": "", "epoch": 0}  # as read back: fields it lacked
    assert not list(state.glob(f"{serving.CLAIM_PREFIX}*"))
    (state / jobstore.FILE_NAME).unlink()  # the teardown reads the job store
