"""Workspaces on a real Slurm cluster: the workspace is copied into a directory of its own
before sbatch (on this host, or on the login node over SSH), and the job runs that copy, so a
change the caller makes after submitting does not reach it. The job waits for a release file
the test creates after changing the original: ordered by events, not by time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, Role
from txd_testing import read_logs, unique


def make_workspace(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "main.sh").write_text("echo version-1 in $PWD\n")
    (root / "lib").mkdir()
    (root / "lib" / "helper.sh").write_text("echo helper-1\n")
    (root / "scratch.tmp").write_text("left out\n")
    (root / ".torchxignore").write_text("*.tmp\n")
    return root


def held_app(release: Path) -> AppDef:
    """Runs the workspace's scripts, from its directory, once `release` exists."""
    script = (
        f"while [ ! -e {release} ]; do sleep 0.05; done\n"
        "sh main.sh; sh lib/helper.sh; ls -A -1; echo img_root=$1"
    )
    role = Role(name="main", entrypoint="bash", args=["-c", script, "x", "${img_root}"])
    return AppDef(name="ws", roles=[role])


async def test_job_runs_the_copy_made_at_submission(
    slurm_client: Any, target: Any, jobdir: Path, tmp_path: Path
) -> None:
    ws = make_workspace(tmp_path / "ws")
    release = tmp_path / "release"
    cfg = target(jobdir)
    app = held_app(release)

    dry = await slurm_client.dryrun(app, "slurm", cfg, workspace=str(ws))
    assert dry.workspace.startswith(f"workspace {ws} (3 file(s), ")  # scratch.tmp is ignored
    assert f"would copy it to {jobdir}/txd-workspaces/ws-" in dry.workspace
    assert f"--chdir={jobdir}/txd-workspaces/ws-" in dry.request
    assert not (jobdir / "txd-workspaces").exists()  # a dry run copies nothing
    # Its checks: bash on the job's PATH; the copy's place, which does not exist yet.
    assert "\n#   ok    role main: entrypoint: bash is " in dry.request, dry.request
    assert "/txd-workspaces/ws-" in dry.request.split("#   ok    cfg.job_dir: ")[1]
    assert "\n#   FAIL" not in dry.request

    handle = await slurm_client.run(app, "slurm", cfg, workspace=str(ws))
    # The caller edits the workspace after submitting, before the job reads it.
    (ws / "main.sh").write_text("echo version-2\n")
    (ws / "lib" / "helper.sh").unlink()
    release.touch()
    status = await slurm_client.wait(handle, timeout=60)
    assert AppState.Name(status.state) == "SUCCEEDED", status

    (copy,) = (jobdir / "txd-workspaces").iterdir()
    out = (await read_logs(slurm_client, handle)).decode()
    lines = out.splitlines()
    assert lines[0] == f"version-1 in {copy}"
    assert lines[1] == "helper-1"
    listed = set(lines[2:-1])
    assert {".torchxignore", "lib", "main.sh"} <= listed and "scratch.tmp" not in listed
    assert lines[-1] == f"img_root={copy}"  # role 0's ${img_root} is the copy
    # The job's own files (its logs) are in the copy: it is the job's directory.
    assert any(p.name.startswith("slurm-") for p in copy.iterdir())
    desc = await slurm_client.describe(handle)
    assert desc.cfg["job_dir"].str == str(copy)
    assert desc.app.roles[0].image == str(copy)


async def test_copies_of_a_workspace_that_is_the_job_dir_do_not_nest(
    slurm_client: Any, tmp_path: Path
) -> None:
    """The default job_dir is the caller's directory, which is usually the workspace: the
    copies go inside it, and are never copied themselves."""
    ws = make_workspace(tmp_path / "ws")
    release = tmp_path / "release"
    release.touch()
    handles = []
    for _ in range(2):
        handles.append(
            await slurm_client.run(held_app(release), "slurm", {}, cwd=str(ws), workspace=str(ws))
        )
    for handle in handles:
        status = await slurm_client.wait(handle, timeout=60)
        assert AppState.Name(status.state) == "SUCCEEDED", status
    copies = list((ws / "txd-workspaces").iterdir())
    assert len(copies) == 2
    for copy in copies:
        assert not (copy / "txd-workspaces").exists()
        assert (copy / "main.sh").read_text() == "echo version-1 in $PWD\n"


async def test_a_retried_run_is_the_same_job(
    slurm_client: Any, jobdir: Path, tmp_path: Path
) -> None:
    """The recorded app names the copy, the retry's names none: still the same request."""
    ws = make_workspace(tmp_path / "ws")
    release = tmp_path / "release"
    release.touch()
    cfg = {"job_dir": str(jobdir)}
    rid = unique("ws-retry")
    app = held_app(release)
    first = await slurm_client.run(app, "slurm", cfg, workspace=str(ws), request_id=rid)
    again = await slurm_client.run(app, "slurm", cfg, workspace=str(ws), request_id=rid)
    assert again == first
    assert len(list((jobdir / "txd-workspaces").iterdir())) == 1  # copied once
    assert AppState.Name((await slurm_client.wait(first, timeout=60)).state) == "SUCCEEDED"
