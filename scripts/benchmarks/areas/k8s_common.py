"""What the kubernetes area's two modules (k8s, k8s_calls) share: the namespace, the bounds,
and the app every kubernetes figure runs."""

from __future__ import annotations

import asyncio

from docker_testing import BUSYBOX
from txd.client import AsyncClient
from txd.v1 import AppDef, Role

from benchmarks.common import until_running

K8S_NS = "default"
K8S_START_TIMEOUT = 900.0  # 100 pods starting on two cores
# A pod's PID 1 that ignores SIGTERM holds its node for the 30 s grace period after a cancel
# (and with it the CPU a next pod requests): the sleepers end on SIGTERM.
K8S_SLEEP = "trap 'exit 0' TERM; sleep {} & wait"


def sleeper(name: str, seconds: int) -> AppDef:
    script = K8S_SLEEP.format(seconds)
    return AppDef(
        name=name, roles=[Role(name="w", image=BUSYBOX, entrypoint="sh", args=["-c", script])]
    )


async def until_running_all(client: AsyncClient, handles: list[str]) -> None:
    """Returns once a Watch of every job has said RUNNING (within K8S_START_TIMEOUT)."""
    async with asyncio.timeout(K8S_START_TIMEOUT):
        await asyncio.gather(*(until_running(client, h) for h in handles))
