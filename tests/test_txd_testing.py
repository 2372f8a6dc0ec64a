"""The tests' own helpers keep their promises to the machine they run on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from txd_testing import clean_env

TESTS = Path(__file__).parent


def test_short_tmpdirs_are_gone_when_the_process_exits() -> None:
    """A folder short_tmpdir made is removed at exit, with anything in it, even if the test
    that made it never cleaned up (the suite left three empty txdt-* folders per run)."""
    code = (
        "import txd_testing\n"
        "empty = txd_testing.short_tmpdir()\n"
        "full = txd_testing.short_tmpdir('txdt-full-')\n"
        "(full / 'sub').mkdir()\n"
        "(full / 'sub' / 'f').write_text('x')\n"
        "print(empty)\nprint(full)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(PYTHONPATH=str(TESTS)),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    made = [Path(line) for line in proc.stdout.split()]
    assert len(made) == 2 and all(p.parent == Path("/tmp") for p in made)
    assert [p for p in made if p.exists()] == []
