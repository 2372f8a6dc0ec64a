"""The daemon's umask is private (077) and the commands its backends run for the user's jobs
(sbatch, bsub, ssh: txd.schedulers.hpc.hosts) get the umask it was started with. In a child
process: the umask is the process's."""

from __future__ import annotations

from pathlib import Path

from txd_testing import run_python

_CODE = """
import asyncio, os
from txd.schedulers import jobumask
from txd.schedulers.hpc.hosts import LocalHost

os.umask(0o027)
jobumask.keep_private()
made = "{dir}/made"
open(made, "w").close()
said = asyncio.run(LocalHost().run(["sh", "-c", "umask"])).stdout.decode().strip()
print(said, oct(os.stat(made).st_mode & 0o777))
"""


def test_host_commands_get_the_umask_the_daemon_was_started_with(tmp_path: Path) -> None:
    proc = run_python(_CODE.format(dir=tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0027", "0o600"]
