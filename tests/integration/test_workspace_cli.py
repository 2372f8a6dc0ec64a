"""`txctl run --workspace` and the clients' `workspace=` through a real daemon, on schedulers
without workspace support (the docker and slurm tests cover the ones with it): the default,
turning it off, a bad path, and what dryrun says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from txd.client import InvalidArgumentError
from txd.v1 import AppDef, Role
from txd_testing import no_traceback

IGNORED = "workspace ignored: local_cwd has no workspace support"


def test_dryrun_says_the_workspace_is_ignored(txctl: Any) -> None:
    # Default: the working directory, as TorchX.
    out = txctl("run", "--dryrun", "utils.echo", check=0).stdout
    assert f"=== WORKSPACE ===\n{IGNORED}\n" in out
    off = txctl("run", "--dryrun", "--workspace", "", "utils.echo", check=0).stdout
    assert "WORKSPACE" not in off and "=== SCHEDULER REQUEST (local_cwd) ===" in off
    data = json.loads(txctl("run", "--dryrun", "--json", "utils.echo", check=0).stdout)
    assert data["workspace"] == IGNORED


def test_a_workspace_that_is_no_directory_is_refused(txctl: Any, workdir: Path) -> None:
    (workdir / "file").write_text("")
    for args in (["--workspace", "missing"], ["--workspace", "file", "--dryrun"]):
        proc = txctl("run", *args, "utils.echo", check=2)
        no_traceback(proc)
        name = args[1]
        assert proc.stderr.strip().endswith(
            f"workspace: {str(workdir / name)!r} is not an existing directory"
        ), proc.stderr


def test_config_names_the_default_workspace(txctl: Any, workdir: Path) -> None:
    (workdir / ".txdconfig").write_text("[cli:run]\nworkspace = from-config\n")
    proc = txctl("run", "--dryrun", "utils.echo", check=2)
    assert f"{str(workdir / 'from-config')!r} is not an existing directory" in proc.stderr
    (workdir / "from-config").mkdir()
    assert IGNORED in txctl("run", "--dryrun", "utils.echo", check=0).stdout
    # The command line wins over the file.
    assert "WORKSPACE" not in txctl("run", "--dryrun", "--workspace", "", "utils.echo").stdout


async def test_python_client_workspace(client: Any, tmp_path: Path) -> None:
    app = AppDef(name="w", roles=[Role(name="r", entrypoint="true")])
    assert (await client.dryrun(app)).workspace == ""  # None: no workspace, as TorchX's Runner
    assert (await client.dryrun(app, workspace=str(tmp_path))).workspace == IGNORED
    with pytest.raises(InvalidArgumentError) as caught:
        await client.run(app, workspace=str(tmp_path / "nope"))
    assert caught.value.violations[0][0] == "workspace"


def test_schedulers_show_the_workspace_capability(txctl: Any) -> None:
    data = json.loads(txctl("schedulers", "--json", check=0).stdout)
    caps = {s["name"]: s.get("capabilities", {}) for s in data["schedulers"]}
    assert caps["slurm"].get("workspace") is True
    assert not caps["local_cwd"].get("workspace")
