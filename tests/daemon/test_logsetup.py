"""The daemon's log setup: txd's loggers follow --log-level, every other logger passes at
WARNING and above only, even one whose own level a library set lower (run in a child process:
logsetup configures the root logger)."""

from __future__ import annotations

import json

import pytest
from txd_testing import run_python

EMIT = """
import logging, sys
from txd.daemon import logsetup
logsetup.configure(sys.argv[1], sys.argv[2])
lib = logging.getLogger("somelib.http")
lib.setLevel(logging.DEBUG)  # as a library's own debug switch would
lib.debug("lib-debug"); lib.info("lib-info"); lib.warning("lib-warning")
logging.getLogger("botocore.endpoint").debug("boto-debug")
logging.getLogger("txdx").debug("txdx-debug")  # a name that only starts like txd's
for name in ("txd", "txd.daemon.x"):
    log = logging.getLogger(name)
    log.debug(name + "-debug"); log.info(name + "-info"); log.warning(name + "-warning")
"""


def _messages(level: str, fmt: str) -> list[str]:
    done = run_python(EMIT, level, fmt)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    if fmt == "json":
        return [json.loads(line)["msg"] for line in lines]
    return [line.rsplit(": ", 1)[1] for line in lines]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_only_txd_loggers_follow_the_level(fmt: str) -> None:
    assert _messages("debug", fmt) == [
        "lib-warning",
        "txd-debug",
        "txd-info",
        "txd-warning",
        "txd.daemon.x-debug",
        "txd.daemon.x-info",
        "txd.daemon.x-warning",
    ]
    assert _messages("WARNING", fmt) == ["lib-warning", "txd-warning", "txd.daemon.x-warning"]
