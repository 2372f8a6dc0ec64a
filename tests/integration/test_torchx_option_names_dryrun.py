"""TorchX's option names through a real txd: a slurm dry run given TorchX's dashed mail
options, and TorchX's `quiet`, ignored with a note where TorchX has it and unknown where it has
not (issue 20, gap 2). No Slurm is needed: the checks before queueing are turned off, so the
dry run asks nothing of a cluster; no Docker engine either (a local_docker dry run without a
workspace asks nothing of one)."""

from __future__ import annotations

from typing import Any


def test_slurm_dry_run_takes_torchx_mail_names(shared_daemon: Any) -> None:
    res = shared_daemon.txctl(
        "run", "-s", "slurm", "--dryrun",
        "-cfg", "mail-user=me@example.org,mail-type=END,precheck=False",
        "utils.echo", "--msg", "hi",
        check=True,
    )  # fmt: skip
    script = res.stdout.splitlines()
    assert "#SBATCH --mail-user=me@example.org" in script, res.stdout
    assert "#SBATCH --mail-type=END" in script, res.stdout


def test_quiet_is_ignored_only_where_torchx_has_it(shared_daemon: Any) -> None:
    ok = shared_daemon.txctl(
        "run", "-s", "local_docker", "--dryrun", "--workspace", "",
        "-cfg", "quiet=True", "utils.echo", "--msg", "hi",
        check=True,
    )  # fmt: skip
    assert "txctl: option 'quiet' is ignored on local_docker: TorchX's switch" in ok.stderr
    assert "quiet" not in ok.stdout, ok.stdout
    # TorchX's slurm has no `quiet`: an unknown option there, as in TorchX
    bad = shared_daemon.txctl(
        "run", "-s", "slurm", "--dryrun", "-cfg", "quiet=True,precheck=False", "utils.echo",
        check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "-c quiet=True: unknown option (valid options: " in bad.stderr, bad.stderr


def test_sagemaker_git_config_is_refused_saying_why(shared_daemon: Any) -> None:
    res = shared_daemon.txctl(
        "run", "-s", "aws_sagemaker", "--dryrun", "--workspace", "",
        "-cfg", "role=arn:aws:iam::123456789012:role/r,git_config=repo:https://x/y.git",
        "utils.echo",
        check=False,
    )  # fmt: skip
    assert res.returncode != 0
    assert (
        "-c git_config=repo:https://x/y.git: a TorchX option txd refuses: txd does not clone "
        "git repositories" in res.stderr
    ), res.stderr
