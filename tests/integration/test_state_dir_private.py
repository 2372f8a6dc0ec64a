"""The state dir of a `txd` started by hand is its user's alone (0700, every file 0600, user
nobody reads nothing of it, job logs included), one found open to others is tightened at start
with one WARNING saying what changed, and the user's jobs still get the umask txd was started
with (its own is private). txctl's, the Python client's and the Runner's autostarts:
test_autostart.py; another user's --state-dir: test_access.py; the systemd unit:
test_user_manager.py; over ssh: tests/remote/test_ssh_host.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from txd_testing import Daemon, first_line, open_to_others, remove_tree, short_tmpdir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to be user nobody")

SECRET = "API_KEY=txdt-5e1d0a"
TIGHTENED = "was open to other users: took group and other access off"


@pytest.fixture
def d() -> Iterator[Daemon]:
    """A daemon started under umask 022 (a login shell's), its folder in a home others may
    read (0755, as on many clusters)."""
    root = short_tmpdir("txdt-priv-")
    os.chmod(root, 0o755)
    previous = os.umask(0o022)
    daemon = Daemon(root)
    daemon.socket = root / "run" / "txd.sock"  # a folder of its own: the home is open
    try:
        yield daemon
    finally:
        daemon.close()
        os.umask(previous)
        remove_tree(root)


def _run(d: Daemon, *command: str) -> str:
    """The output of a utils.sh job run to its end."""
    handle = first_line(d.txctl("run", "--wait", "utils.sh", "--", *command, check=True).stdout)
    return d.txctl("logs", handle, check=True).stdout


def test_txd_started_by_hand_keeps_its_state_dir_private(d: Daemon) -> None:
    d.start()
    assert _run(d, "echo", SECRET) == f"{SECRET}\n"
    files = [p for p in d.state_dir.rglob("*") if p.is_file()]
    assert sum(SECRET.encode() in p.read_bytes() for p in files) >= 2  # the store, the log
    assert open_to_others(d.state_dir) == []
    assert TIGHTENED not in d.log()


def test_a_state_dir_open_to_others_is_tightened_once(d: Daemon) -> None:
    """An older txd's state dir (folders 0755, files 0644, as umask 022 made them), job logs
    included: the next start takes group and other access off everything, saying so in one
    WARNING line; the start after that has nothing to say."""
    d.start()
    _run(d, "echo", SECRET)
    d.stop()
    for folder, _, names in os.walk(d.state_dir):
        os.chmod(folder, 0o755)
        for name in names:
            os.chmod(Path(folder, name), 0o644)
    loosened = 1 + sum(len(dirs) + len(names) for _, dirs, names in os.walk(d.state_dir))
    assert open_to_others(d.state_dir) != []  # the check sees it

    d.restart()
    warned = [line for line in d.log().splitlines() if TIGHTENED in line]
    assert len(warned) == 1, d.log()
    assert " txd WARNING txd.daemon.statedir: the state dir " in warned[0]
    assert f"{d.state_dir} {TIGHTENED} . (was 0755), " in warned[0]
    assert warned[0].endswith(f" and {loosened - 5} more"), warned[0]
    assert open_to_others(d.state_dir) == []
    d.stop()
    d.restart()
    assert [line for line in d.log().splitlines() if TIGHTENED in line] == warned


def test_jobs_get_the_umask_txd_was_started_with(d: Daemon) -> None:
    """The daemon's umask is 077; a job's is the one txd was started with, as if started from
    the user's shell: a file it makes is as open as it would be there."""
    d.start()
    assert _run(d, "umask") == "0022\n"
    made = d.home / "made-by-the-job"
    _run(d, "touch", str(made))
    assert made.stat().st_mode & 0o777 == 0o644
    d.stop()
    os.umask(0o027)
    d.restart()
    assert _run(d, "umask") == "0027\n"
