"""slurm under a daemon at --log-level DEBUG, text and JSON, on this host and through the SSH
login node: a job's env value and a run option's value reach the sbatch script, never the
daemon's log (docs/security.md). asyncssh logs each command it runs at INFO and each env
variable it sends at DEBUG; the script (its exports included) goes on stdin.

The options are comment (free text Slurm stores with the job, in an #SBATCH line of the script:
what a user might put anything in) and job_dir, a path, which is also in the commands that read
a job's log files: asyncssh logged those at INFO before the daemon held libraries at WARNING."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from txd_testing import (
    LOG_FORMATS,
    Daemon,
    debug_log,
    own_daemon,
    run_with_secrets,
    secret_app,
    sentinel,
)


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_debug_log_holds_no_env_or_option_value(
    fmt: str,
    slurm_daemon_with: Callable[[Sequence[str]], Daemon],
    target: Any,
    jobdir: Path,
    request: pytest.FixtureRequest,
) -> None:
    env_secret, opt_secret, dir_secret = sentinel("env"), sentinel("opt"), sentinel("dir")
    cfg = target(jobdir / dir_secret, comment=opt_secret)
    secrets = [env_secret, opt_secret, dir_secret]
    with own_daemon(slurm_daemon_with(debug_log(fmt)), request) as d:
        await run_with_secrets(d, "slurm", secret_app(env_secret), cfg, secrets, env_secret)
