"""TorchX's experiment trackers through txd: `txctl run --parent_run_id` and the trackers named
in the config files reach the job's `torchx.tracker` as TorchX's Runner hands them over, and
`txctl tracker list` reads back what the job recorded. The tracker is TorchX's own fsspec
tracker writing to a folder, inside a real job, through a real daemon."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from txd import install
from txd_testing import clean_env, first_line, run_python

REPORT = (
    "from torchx.tracker import app_run_from_env\n"
    "run = app_run_from_env()\n"
    "run.add_metadata(step=3, loss=0.5)\n"
    "run.add_artifact('ckpt', '/ckpt/1', {'epoch': 1})\n"
)


def _env(**extra: str) -> dict[str, str]:
    """The test's environment with none of TorchX's tracking variables (a developer's own
    would change the answers), this Python first on the PATH (the job's `python` has torchx)."""
    env = {k: v for k, v in clean_env().items() if not k.startswith("TORCHX_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


@pytest.fixture
def tracked(workdir: Path, tmp_path: Path) -> Path:
    """A .txdconfig naming TorchX's fsspec tracker, which stores into tmp_path/store."""
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "fsspec.cfg").write_text(f"protocol=file\nroot_path={store}\n")
    (workdir / ".txdconfig").write_text(
        f"[torchx:tracker]\nfsspec =\n\n[tracker:fsspec]\nconfig = {tmp_path / 'fsspec.cfg'}\n"
    )
    return store


def test_the_job_reports_to_the_configured_tracker_under_its_parent_run(
    shared_daemon: Any, workdir: Path, tracked: Path
) -> None:
    def txctl(*args: str, check: int = 0) -> Any:
        return shared_daemon.txctl(*args, cwd=workdir, env=_env(), check=check)

    proc = txctl("run", "--parent_run_id", "exp-7", "--wait", "utils.python", "-c", REPORT)
    handle = first_line(proc.stdout)
    other = first_line(txctl("run", "--wait", "utils.python", "-c", REPORT).stdout)

    listed = json.loads(txctl("tracker", "list", "jobs", "--json").stdout)
    assert sorted(listed["jobs"]) == sorted([handle, other])  # in the store's own order
    by_parent = txctl("tracker", "list", "jobs", "--parent-run-id", "exp-7").stdout
    assert by_parent == f"JOB ID\n{handle}\n"
    assert txctl("tracker", "list", "metadata", handle).stdout == (
        "ID    VALUE\nstep  3\nloss  0.5\n"
    )
    assert json.loads(txctl("tracker", "list", "metadata", handle, "--json").stdout) == {
        "metadata": {"step": 3, "loss": 0.5}
    }
    assert txctl("tracker", "list", "artifacts", handle).stdout == (
        'ARTIFACT  PATH     METADATA\nckpt      /ckpt/1  {"epoch": 1}\n'
    )
    none = txctl("tracker", "list", "artifacts", "--artifact", "other", handle, "--json")
    assert json.loads(none.stdout) == {"artifacts": []}

    # What TorchX's own reader finds in the store: the job under its handle, its parent run.
    from torchx.tracker.backend.fsspec import FsspecTracker

    store = FsspecTracker(__import__("fsspec").filesystem("file"), str(tracked))
    assert [s.source_run_id for s in store.sources(handle)] == ["exp-7"]
    assert list(store.sources(other)) == []


def test_the_dryrun_shows_the_tracking_variables_and_the_environment_wins(
    shared_daemon: Any, workdir: Path, tracked: Path
) -> None:
    (workdir / "two.py").write_text(
        "from txd.v1 import AppDef, Role\n"
        "def two() -> AppDef:\n"
        "    return AppDef(name='two', roles=[\n"
        "        Role(name='a', entrypoint='true', env={'TORCHX_PARENT_RUN_ID': 'own'}),\n"
        "        Role(name='b', entrypoint='true')])\n"
    )

    def role_env(*flags: str, **env: str) -> list[dict[str, str]]:
        proc = shared_daemon.txctl(
            "run", "--dryrun", "--json", *flags, "two.py:two", cwd=workdir, env=_env(**env)
        )
        assert proc.returncode == 0, proc.stderr
        roles = json.loads(proc.stdout)["app"]["roles"]
        return [{k: v for k, v in r["env"].items() if k != "TORCHX_JOB_ID"} for r in roles]

    config = str(tracked.parent / "fsspec.cfg")
    from_config = {"TORCHX_TRACKERS": "fsspec", "TORCHX_TRACKER_FSSPEC_CONFIG": config}
    # Every role, over the role's own value, as TorchX's Runner sets them.
    flagged = {"TORCHX_PARENT_RUN_ID": "exp-1", **from_config}
    assert role_env("--parent_run_id", "exp-1") == [flagged, flagged]
    # No parent run: the role keeps its own.
    assert role_env() == [{"TORCHX_PARENT_RUN_ID": "own", **from_config}, from_config]
    # The submitter's environment wins over the flag and the config files.
    environ = {
        "TORCHX_PARENT_RUN_ID": "from-env",
        "TORCHX_TRACKERS": "fsspec,mine",
        "TORCHX_TRACKER_FSSPEC_CONFIG": "f.cfg",
        "TORCHX_TRACKER_MINE_CONFIG": "m.cfg",
    }
    assert role_env("--parent_run_id", "exp-1", **environ) == [environ, environ]


def test_tracker_list_says_what_is_missing(shared_daemon: Any, workdir: Path) -> None:
    def refused(*args: str, **env: str) -> str:
        proc = shared_daemon.txctl(*args, cwd=workdir, env=_env(**env), check=2)
        assert proc.stdout == ""
        return str(proc.stderr)

    assert refused("tracker", "list", "jobs") == (
        "txctl: error: no tracker configured: name one in a [torchx:tracker] section of "
        ".txdconfig (or .torchxconfig), its config in [tracker:NAME] config = ..., or set "
        "TORCHX_TRACKERS\n"
    )
    assert refused("tracker", "list", "jobs", TORCHX_TRACKERS="nosuch") == (
        "txctl: error: no tracker of nosuch is installed (neither an entry point of the group "
        "torchx.tracker nor a module of that name)\n"
    )
    # fsspec's tracker without its config file: the factory's own reason.
    assert refused("tracker", "list", "jobs", TORCHX_TRACKERS="fsspec").startswith(
        "txctl: error: tracker fsspec cannot start: "
    )
    lineage = shared_daemon.txctl("tracker", "list", "lineage", "x", cwd=workdir, env=_env())
    assert lineage.returncode == 2 and "invalid choice: 'lineage'" in lineage.stderr

    # Without torchx in txctl's Python: one line saying how to install it.
    proc = run_python(
        "import sys\nsys.modules['torchx'] = None\nfrom txd.client.cli import main\n"
        "sys.exit(main(['tracker', 'list', 'jobs']))\n",
        env=_env(TORCHX_TRACKERS="fsspec"),
        cwd=workdir,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "txctl: error: the trackers are TorchX's plugins: install torchx in this Python "
        f"({install.command('torchx')})\n"
    )
