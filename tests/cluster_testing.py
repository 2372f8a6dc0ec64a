"""Login nodes on one machine, for the tests of one daemon per state dir across hosts
(txd.daemon.serving): each "host" runs its daemon and txctl in a UTS namespace of its own (its
own hostname, by `unshare --uts`), all sharing one state dir as login nodes share a home."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from txd.daemon import serving
from txd_testing import TXCTL, Daemon

PERIOD = 0.3  # the daemons' heartbeat here: a dead host is stale after 0.9 s
REFUSED = "ssh: connect to host login9.example port 22: Connection refused"  # the fake ssh's


def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        [*on_host("probe"), "true"], capture_output=True, timeout=30, check=False
    )
    return probe.returncode == 0


def on_host(name: str) -> list[str]:
    """A command prefix running its arguments (same pid) under the hostname `name`."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-current-user"]
    return ["unshare", *user, "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name]


# A prefix for `python -m txd.daemon ...` (see txd_testing.Daemon) that runs the same daemon
# with flock a no-op: on one machine the hosts' flocks would see each other, as they do not on
# Lustre mounted with localflock, where only the serving record tells hosts apart.
_LOCALFLOCK = [
    "sh",
    "-c",
    'py=$1; shift 3; exec "$py" -c "$0" "$@"',
    "import fcntl, runpy; fcntl.flock = lambda fd, op: None; "
    "runpy.run_module('txd.daemon', run_name='__main__')",
]


class Host:
    """A login node: its own socket and log, the shared state dir."""

    def __init__(
        self,
        root: Path,
        name: str,
        state_dir: Path,
        localflock: bool = False,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        (root / name).mkdir(exist_ok=True)
        self.daemon = Daemon(
            root / name,
            args=["--heartbeat", str(PERIOD), *args],
            env=env,
            prefix=[*on_host(name), *(_LOCALFLOCK if localflock else [])],
        )
        self.daemon.state_dir = state_dir

    def fake_ssh(self) -> Path:
        """The hosts' ssh: records its arguments in <root>/ssh-args and fails as ssh to a host
        that is down does (REFUSED)."""
        root = self.daemon.root.parent
        fake_ssh = root / "fake-ssh"
        if not fake_ssh.exists():
            fake_ssh.write_text(
                f'#!/bin/sh\necho "$@" >> {root}/ssh-args\necho "{REFUSED}" >&2\nexit 255\n'
            )
            fake_ssh.chmod(0o755)
        return fake_ssh

    def txctl(
        self,
        *args: str,
        autostart: bool = False,
        env: dict[str, str] | None = None,
        localflock: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """txctl on this host. Its ssh (to another host serving the state dir) is fake_ssh():
        nothing leaves loopback here (tests/remote has real sshd login nodes). `localflock`:
        the daemon it starts (and txctl) has flock a no-op, as _LOCALFLOCK."""
        d = self.daemon
        if localflock:
            site = d.root.parent / "localflock"
            site.mkdir(exist_ok=True)
            (site / "sitecustomize.py").write_text(
                "import fcntl\nfcntl.flock = lambda fd, op: None\n"
            )
            path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
            env = {**(env or {}), "PYTHONPATH": path}
        fake_ssh = self.fake_ssh()
        (d.root / "xdg-run").mkdir(mode=0o700, exist_ok=True)  # the tunnel's runtime folder
        env = d.txctl_env(
            TXD_STATE_DIR=str(d.state_dir), TXD_SSH_COMMAND=str(fake_ssh), **(env or {})
        )
        flags = [] if autostart else ["--no-autostart"]
        return subprocess.run(
            [*on_host(self.name), *TXCTL, "--socket", str(d.socket), *flags, *args],
            capture_output=True,
            encoding="utf-8",
            cwd=d.home,
            env=env,
            timeout=60,
            check=False,
        )


def record(state: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((state / serving.RECORD).read_bytes())
    return data


def beat(state: Path, at: float) -> None:
    """Rewrites the serving record's heartbeat as written at `at` (atomically, 0600, as the
    daemon writes it): a dead daemon's record made fresh or stale without waiting on a clock."""
    data = record(state)
    data["heartbeat"] = at
    tmp = state / f"{serving.RECORD}.test"
    tmp.write_text(json.dumps(data))
    tmp.chmod(0o600)
    os.replace(tmp, state / serving.RECORD)


def until(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def stale(state: Path) -> bool:
    rec = record(state)
    return time.time() - float(rec["heartbeat"]) > 3 * float(rec["period"])  # type: ignore[arg-type]
