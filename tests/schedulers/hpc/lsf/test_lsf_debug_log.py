"""lsf under a daemon at --log-level DEBUG, text and JSON: a job's env value and a run option's
value reach the submit script, never the daemon's log (docs/security.md). No LSF runs here:
bsub, bhosts and bjobs are stand-ins on the daemon's PATH answering as recorded/ does (bsub
takes the job and runs nothing), so what is checked is txd's own lines about an LSF job; the
SSH transport lsf shares with slurm is checked by test_slurm_debug_log.py.

The option is container_workdir (free text in each job's docker command, in the script's
body)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lsf_fakes import recorded
from txd_testing import (
    LOG_FORMATS,
    Daemon,
    assert_log_keeps,
    debug_log,
    own_daemon,
    secret_app,
    sentinel,
    short_tmpdir,
    submit_with_secrets,
)

STAND_INS = {
    "bsub": 'cat > /dev/null\necho "Job <4101> is submitted to default queue <normal>."',
    "bhosts": "cat {root}/bhosts.txt",
    "bjobs": f"echo '{recorded('bjobs_no_job.stderr').decode().strip()}' >&2\nexit 255",
}


def stand_ins(root: Path) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (root / "bhosts.txt").write_bytes(recorded("bhosts.txt"))
    for name, body in STAND_INS.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body.format(root=root)}\n")
        path.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_debug_log_holds_no_env_or_option_value(
    fmt: str, request: pytest.FixtureRequest
) -> None:
    env_secret, opt_secret = sentinel("env"), sentinel("opt")
    root = short_tmpdir("txdt-lsf-")
    path = f"{stand_ins(root)}:{os.environ['PATH']}"
    app = secret_app(env_secret, image="busybox")
    cfg = {"precheck": False, "container_workdir": f"/work/{opt_secret}"}
    with own_daemon(Daemon(root, env={"PATH": path}, args=debug_log(fmt)), request) as d:
        async with d.client() as c:
            secrets = [env_secret, opt_secret]
            handle = await submit_with_secrets(c, "lsf", app, cfg, secrets)
            await c.status(handle)
        assert_log_keeps(d, secrets)
