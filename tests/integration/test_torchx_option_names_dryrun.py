"""TorchX's option names through a real txd: a slurm dry run given TorchX's dashed mail
options and its `quiet` (issue 20, gap 2). No Slurm is needed: the checks before queueing are
turned off, so the dry run asks nothing of a cluster."""

from __future__ import annotations

from typing import Any


def test_slurm_dry_run_takes_torchx_mail_names_and_says_quiet_is_ignored(
    shared_daemon: Any,
) -> None:
    res = shared_daemon.txctl(
        "run", "-s", "slurm", "--dryrun",
        "-cfg", "mail-user=me@example.org,mail-type=END,quiet=True,precheck=False",
        "utils.echo", "--msg", "hi",
        check=True,
    )  # fmt: skip
    script = res.stdout.splitlines()
    assert "#SBATCH --mail-user=me@example.org" in script, res.stdout
    assert "#SBATCH --mail-type=END" in script, res.stdout
    assert "option 'quiet' is ignored" in res.stderr, res.stderr
    assert "quiet" not in res.stdout, res.stdout
