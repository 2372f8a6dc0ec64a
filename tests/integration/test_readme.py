"""The README's examples run as written, so they cannot rot."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from txd_testing import REPO, run_python


def _python_example() -> str:
    """The code block that follows the README's "**Python:**" paragraph."""
    readme = (REPO / "README.md").read_text()
    after = readme[readme.index("**Python:**") :]
    m = re.search(r"```python\n(.*?)```", after, re.S)
    assert m is not None, "no python block after **Python:**"
    return m.group(1)


def test_readme_python_example(shared_daemon: Any, workdir: Path) -> None:
    proc = run_python(
        _python_example(),
        env=shared_daemon.txctl_env(TXD_SOCKET=str(shared_daemon.socket)),
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stderr
    *states, logs, failed = proc.stdout.splitlines()
    # state names, not numbers: at least the end, and nothing after it
    assert states and states[-1] == "SUCCEEDED", proc.stdout
    assert set(states) <= {"SUBMITTED", "PENDING", "RUNNING", "SUCCEEDED"}, proc.stdout
    assert logs == "w 0 b'hi\\n'"
    assert re.fullmatch(r"\d+ failed", failed)
