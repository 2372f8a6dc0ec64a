"""Each install the docs give, made as they say in a fresh venv from the committed lock, yields a
txctl whose autostarted daemon (from that venv) answers; and (in the bare install) the hint for a
missing extra is a command that installs it, not a package index name that belongs to another
project ("txd" on the index is another project's)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from txd_testing import PidWatch, clean_env, remove_tree, short_tmpdir

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup"


class Venv:
    """A venv made by `scripts/setup --venv`, with a state and runtime dir of its own."""

    def __init__(self, root: Path, extras: str) -> None:
        self.path = root / f"venv-{extras}"
        run = root / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        self.env = clean_env(XDG_RUNTIME_DIR=str(run), XDG_STATE_HOME=str(root / "state"))
        setup(self.path, extras)

    def txctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.path / "bin" / "txctl", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.path / "bin" / "python", "-c", code], capture_output=True, text=True, timeout=60
        )

    def daemon_pid(self) -> int:
        where = self.txctl("where", "--json")
        assert where.returncode == 0, where.stderr
        pid: int = json.loads(where.stdout)["pid"]
        return pid

    def stop(self) -> None:
        where = self.txctl("where", "--json")
        if where.returncode != 0:
            return
        pid = json.loads(where.stdout)["pid"]
        with PidWatch([pid]) as watch:
            os.kill(pid, signal.SIGTERM)
            assert watch.wait(30) == []


def setup(venv: Path, extras: str) -> None:
    proc = subprocess.run(
        [SETUP, "--venv", venv, extras], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_tmpdir("txdt-inst-")
    try:
        yield path
    finally:
        remove_tree(path)


def unusable(venv: Venv) -> dict[str, str]:
    """Each scheduler the daemon cannot load, with its reason."""
    proc = venv.txctl("schedulers", "--json")
    assert proc.returncode == 0, proc.stderr
    return {
        s["name"]: s["load_error"] for s in json.loads(proc.stdout)["schedulers"] if s["load_error"]
    }


@pytest.mark.slow
@pytest.mark.timeout(900)  # a venv from the lock: a minute or more on a busy machine
@pytest.mark.parametrize("extras", ["none", "torchx", "all"])
def test_a_documented_install_autostarts_a_daemon_from_its_own_venv(
    root: Path, extras: str
) -> None:
    venv = Venv(root, extras)
    try:
        listed = venv.txctl("list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == []
        # Installed compiled: with PYTHONDONTWRITEBYTECODE (as on this project's machines) an
        # uncompiled grpc costs every txctl call 0.1 s.
        cached = venv.python(
            "import grpc, importlib.util as u; print(u.cache_from_source(grpc.__file__))"
        )
        assert Path(cached.stdout.strip()).is_file(), cached
        exe = Path(f"/proc/{venv.daemon_pid()}/cmdline").read_bytes().split(b"\0")[0]
        assert Path(os.fsdecode(exe)).parent == venv.path / "bin"
        if extras == "none":
            missing_extras_hint_installs_it(venv)
        if extras == "torchx":
            proc = venv.python("import torchx.specs, txd.client.runner")
            assert proc.returncode == 0, proc.stderr
        if extras == "all":
            assert unusable(venv) == {}
            proc = venv.python(
                "from txd.client.dashboard import missing_extra; print(missing_extra())"
            )
            assert proc.stdout == "None\n", proc.stderr
    finally:
        venv.stop()


def missing_extras_hint_installs_it(venv: Venv) -> None:
    reason = unusable(venv)["local_docker"]
    command = f"{SETUP} --venv {venv.path} docker"
    assert reason == f"No module named 'aiodocker': {command} installs it"
    subprocess.run(shlex.split(command), check=True, capture_output=True, timeout=900)
    # The running daemon imports it at the next use, as it does any package installed since.
    assert "local_docker" not in unusable(venv)
