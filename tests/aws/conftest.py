"""moto for the AWS tests (helpers in tests/aws/moto_testing.py).

- `moto` (session): one `moto_server` subprocess on 127.0.0.1 whose Batch jobs run as
  containers on the session's Docker engine (`docker_engine`, with host networking); stopped
  by pid at the end.
- `moto_reset`: forgets every moto resource before the test (for tests that count or list).
- `batch_queue`: an UNMANAGED compute environment and a job queue of the test's own
  (moto_testing.Queue; `.name` is the queue's name).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto_testing import Moto, Queue, make_queue
from txd_testing import remove_tree, short_tmpdir


@pytest.fixture(scope="session")
def moto(docker_engine: Any) -> Iterator[Moto]:
    root = short_tmpdir("txd-moto-")
    server = Moto.start_new(docker_engine.host, root / "moto.log")
    try:
        yield server
    finally:
        server.stop()
        remove_tree(root)


@pytest.fixture
def moto_reset(moto: Moto) -> Moto:
    moto.reset()
    return moto


@pytest.fixture
async def batch_queue(moto: Moto) -> Queue:
    return await make_queue(moto)
